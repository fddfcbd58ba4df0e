"""Issue 31: short jobs' completions ride on claims of half a window, in a real
``supervisor run`` on real PostgreSQL.

A trigger of the test's own records, for every row of ``supervisor.jobs`` that changes
state, the transaction that changed it. Before, every completion 20 ms old forced a claim
for the one or two places it freed, so 30 ms jobs on two children were completed in
about one transaction per two jobs; now a claim goes out once half the window is
free and carries what finished meanwhile (``outbox.CLAIM_CARRY_WAIT``); and the depth
no longer jumps to its maximum when the parent reads a job's start and end in one turn
(``reporting._ran_for``). What must hold
as before: each job runs once, its attempt charged once, every completion fenced and
written.
"""

from __future__ import annotations

import psycopg
from e2e import run_burst

from shared.enqueue import enqueue_many

JOBS = 80

TRIGGER = """
CREATE TABLE public.state_changes (job_id bigint, old_state text, new_state text,
                                   txid bigint DEFAULT txid_current());
CREATE FUNCTION public.note_state_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state IS DISTINCT FROM NEW.state THEN
        INSERT INTO public.state_changes (job_id, old_state, new_state)
        VALUES (NEW.id, OLD.state, NEW.state);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER note_state_change AFTER UPDATE ON supervisor.jobs
    FOR EACH ROW EXECUTE FUNCTION public.note_state_change();
"""


def test_short_jobs_completions_ride_on_claims_of_several_jobs(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TRIGGER)
    enqueue_many("e2e_sleep", [{"seconds": 0.03}] * JOBS, dsn=dsn)
    run_burst(dsn, "-n", "2", timeout=120)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT state, attempt, count(*) FROM supervisor.jobs "
                            "GROUP BY 1, 2").fetchall()
        errors = conn.execute("SELECT count(*) FROM supervisor.jobs "
                              "WHERE errors <> '[]'").fetchone()[0]
        claimed_twice = conn.execute(
            "SELECT count(*) FROM (SELECT job_id FROM public.state_changes WHERE new_state "
            "= 'running' GROUP BY job_id HAVING count(*) > 1) t").fetchone()[0]
        writes = conn.execute(
            "SELECT count(*) FILTER (WHERE completes > 0), "
            "count(*) FILTER (WHERE completes > 0 AND claims > 0) FROM ("
            " SELECT txid, count(*) FILTER (WHERE new_state = 'completed') AS completes,"
            " count(*) FILTER (WHERE new_state = 'running') AS claims"
            " FROM public.state_changes GROUP BY txid) t").fetchone()
    # Every job ran once: completed on its first attempt, claimed once, no errors entry.
    assert rows == [("completed", 1, JOBS)]
    assert errors == 0 and claimed_twice == 0
    completing, carried = writes
    # Measured on 2 loaded cores: 21-26 writes completed the 80 jobs, 19-23 of them
    # claims; before, 40-41 (one claim of 512 jobs early on made all but one of them
    # writes of their own in one run of three).
    assert completing <= JOBS * 2 // 5, (completing, carried)
    # ... and most of those writes are claims that carry them.
    assert carried >= completing // 2, (completing, carried)
