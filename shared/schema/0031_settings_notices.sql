-- A NOTIFY when a kind's pause or a queue's global limits change (issue 43).
--
-- Running supervisors read supervisor.kind_pauses and supervisor.queue_limits about once
-- a second each, so that a pause or a limit set by hand (or by another supervisor's
-- breaker) reached them within a second: two of an idle supervisor's five statements a
-- second. With this notice a supervisor that LISTENs reads them when told, when a timed
-- pause runs out, and on a slow fallback for a notice missed; one that cannot LISTEN (a
-- pooler in transaction mode) reads them every second as before. Statement-level: one
-- notice per statement however many rows it changed, and PostgreSQL folds identical
-- notices of one transaction into one. The payload is the table's name.
CREATE FUNCTION supervisor.notify_settings() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('supervisor_settings', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER kind_pauses_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON supervisor.kind_pauses FOR EACH STATEMENT EXECUTE FUNCTION supervisor.notify_settings();

CREATE TRIGGER queue_limits_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
    ON supervisor.queue_limits FOR EACH STATEMENT EXECUTE FUNCTION supervisor.notify_settings();
