-- Wake-ups for two events that used to wait for a supervisor's poll:
--  * a job inserted for later (state 'scheduled'): supervisors learn when it is due and
--    wake at that moment, instead of up to one poll interval late;
--  * a queue paused: supervisors give back the jobs of that queue they claimed but have
--    not started, instead of starting them after the pause.
-- Both go on their own channels so the hot 'supervisor_jobs' wake-up stays as it was.

CREATE OR REPLACE FUNCTION supervisor.notify_inserted_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    q text;
BEGIN
    -- Statement-level with a transition table: a 20k-row COPY costs one small loop over
    -- its distinct queues, not 20k function calls.
    FOR q IN SELECT DISTINCT queue FROM new_jobs WHERE state = 'available' LOOP
        PERFORM pg_notify('supervisor_jobs', q);
    END LOOP;
    FOR q IN SELECT DISTINCT queue FROM new_jobs WHERE state = 'scheduled' LOOP
        PERFORM pg_notify('supervisor_scheduled', q);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION supervisor.notify_paused_queue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('supervisor_paused', NEW.name);
    RETURN NULL;
END
$$;

CREATE TRIGGER queues_notify_pause_update
    AFTER UPDATE OF paused ON supervisor.queues
    FOR EACH ROW
    WHEN (NEW.paused AND NOT OLD.paused)
    EXECUTE FUNCTION supervisor.notify_paused_queue();

CREATE TRIGGER queues_notify_pause_insert
    AFTER INSERT ON supervisor.queues
    FOR EACH ROW
    WHEN (NEW.paused)
    EXECUTE FUNCTION supervisor.notify_paused_queue();
