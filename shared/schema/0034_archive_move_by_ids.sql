-- The move of finished jobs into their archives (0032) reaches the rows it deletes by
-- their ids (issue 40).
--
-- It deleted them through a join with the rows it picked ("USING picked p WHERE j.id =
-- p.id"). Under a held MVCC horizon a VACUUM of the hot table counts its few live rows
-- among a million dead versions and leaves its row estimate at about one; until the next
-- ANALYZE the planner made that join a sequential scan of the whole hot table: 3.6 s
-- for a move of 5,000 rows from a 160 MB heap held that way, past the round's 3 s
-- deadline (0.1 s in this form; 0.3-0.5 s either way with a healthy estimate, all of it
-- the first scan of the finished index from its head). "id = ANY(ARRAY(...))" is the claim's own form: an index
-- condition on the primary key that reads the picked rows' entries and nothing else,
-- whatever the estimate. The function is otherwise 0032's.
CREATE OR REPLACE FUNCTION supervisor.archive_finished(p_done_span double precision,
                                            p_failed_span double precision, p_max integer,
                                            p_settle double precision)
    RETURNS TABLE (family text, moved integer, archive text)
    LANGUAGE plpgsql
    AS $$
DECLARE
    fam text;
    span double precision;
    target text;
    floor_at timestamptz;
    n integer;
BEGIN
    FOREACH fam IN ARRAY ARRAY['done', 'failed'] LOOP
        span := CASE fam WHEN 'done' THEN p_done_span ELSE p_failed_span END;
        target := CASE WHEN span IS NULL THEN NULL
                       ELSE supervisor.open_job_archive(fam, span, p_settle) END;
        n := 0;
        IF target IS NOT NULL THEN
            SELECT a.scan_from INTO floor_at FROM supervisor.job_archives a
            WHERE a.name = target;
            EXECUTE format($q$
                WITH picked AS (
                    SELECT j.id FROM ONLY supervisor.jobs j
                    WHERE j.state = ANY ($1) AND j.finished_at >= $2
                    LIMIT $3
                    FOR UPDATE SKIP LOCKED),
                gone AS (
                    DELETE FROM ONLY supervisor.jobs j
                    WHERE j.id = ANY (ARRAY(SELECT p.id FROM picked p))
                    RETURNING j.*)
                INSERT INTO supervisor.%I SELECT * FROM gone$q$, target)
            USING supervisor.archive_states(fam), floor_at, p_max;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n < p_max THEN
                -- Saw every row at or above the floor: the next scan starts near now,
                -- with a margin for a statement that stamped finished_at before this
                -- one began and committed after it. Each second of margin is a second
                -- of moved rows' dead entries read again by every round under a held
                -- horizon (60 s: 13 entries per job at 1,000 jobs/s). A row stamped
                -- below it waits for the next archive's first move, which starts from
                -- the index's head.
                UPDATE supervisor.job_archives SET scan_from = now() - interval '5 seconds'
                WHERE name = target;
            END IF;
        END IF;
        family := fam;
        moved := n;
        archive := target;
        RETURN NEXT;
    END LOOP;
END
$$;
