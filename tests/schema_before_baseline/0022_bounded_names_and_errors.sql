-- 0022: bounded names and keys, bounded error text (issue 50).
--
-- A name or key that is part of an index entry can stop everyone: a B-tree refuses an
-- entry over 2,704 bytes, so a 3,000-character concurrency key failed every claim of
-- its queue (jobs_running_key_idx), a 10,000-character kind failed every history
-- roll-up (job_minutes' key) and every breaker write (kind_crashes, kind_pauses). And
-- the errors of one job that failed often with long messages outgrew the text-search
-- index of 0013 (a tsvector holds at most 1 MB), so the write of its failure was
-- refused, again and again.
--
-- The limits, in characters (shared/validation.py says the same; four bytes a character
-- still fit an index entry): kind, queue and concurrency key 255, unique key 512.
-- The CHECKs are NOT VALID: adding them reads no row and holds the table's lock for a
-- moment; every row written from now on is checked, rows already stored are left alone.

-- A CHECK holds for every later update of a row, NOT VALID or not: so live jobs stored
-- before it that break it would fail their claim, outcome or rescue. Their keys are
-- shortened here (first 200 characters, '~', md5: jobs that shared a key still share
-- it, and it fits), and a live job of a kind too long to be allowed (no handler can
-- have such a name in practice) is discarded with the reason. The states are spelled
-- as the partial indexes of 0001 say them, so this reads the live jobs through those
-- indexes, not the whole history (measured: docs/benchmarks.md, issue 50).
UPDATE supervisor.jobs
SET concurrency_key = CASE WHEN char_length(concurrency_key) > 255
                           THEN left(concurrency_key, 200) || '~' || md5(concurrency_key)
                           ELSE concurrency_key END,
    unique_key = CASE WHEN char_length(unique_key) > 512
                      THEN left(unique_key, 200) || '~' || md5(unique_key)
                      ELSE unique_key END,
    state = CASE WHEN char_length(kind) > 255 THEN 'discarded' ELSE state END,
    finished_at = CASE WHEN char_length(kind) > 255 THEN now() ELSE finished_at END,
    lease_owner = CASE WHEN char_length(kind) > 255 THEN NULL ELSE lease_owner END,
    lease_expires_at = CASE WHEN char_length(kind) > 255 THEN NULL
                            ELSE lease_expires_at END,
    errors = CASE WHEN char_length(kind) > 255 THEN errors || jsonb_build_array(
        jsonb_build_object(
        'attempt', attempt, 'kind', 'args',
        'message', 'discarded by schema 0022: its kind is ' || char_length(kind)
                   || ' characters long, more than the 255 allowed',
        'traceback', NULL, 'at', now(), 'supervisor', NULL)) ELSE errors END
WHERE (char_length(concurrency_key) > 255 OR char_length(unique_key) > 512
       OR char_length(kind) > 255)
  AND (state = 'available' OR state IN ('scheduled', 'retryable') OR state = 'running');

ALTER TABLE supervisor.jobs
    ADD CONSTRAINT jobs_kind_length CHECK (char_length(kind) <= 255) NOT VALID,
    ADD CONSTRAINT jobs_concurrency_key_length
        CHECK (char_length(concurrency_key) <= 255) NOT VALID,
    ADD CONSTRAINT jobs_unique_key_length
        CHECK (char_length(unique_key) <= 512) NOT VALID;

ALTER TABLE supervisor.batches
    ADD CONSTRAINT batches_callback_kind_length
        CHECK (char_length(callback_kind) <= 255) NOT VALID;

ALTER TABLE supervisor.schedules
    ADD CONSTRAINT schedules_kind_length CHECK (char_length(kind) <= 255) NOT VALID;

-- A name as the history and the breaker key it: unchanged up to 255 characters, else its
-- first 200, '~' and its md5 (a row stored before the CHECKs above may hold a longer
-- kind; its history and crashes are kept under this name). Python's twin is
-- shared.validation.short_name.
CREATE OR REPLACE FUNCTION supervisor.short_name(name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN char_length(name) <= 255 THEN name
                ELSE left(name, 200) || '~' || md5(name) END
$$;

-- One errors entry with its message cut to message_room characters and its traceback
-- to text_room (none below 200), each cut marked; unchanged when it fits.
CREATE OR REPLACE FUNCTION supervisor.cut_entry(entry jsonb, message_room integer,
                                                text_room integer) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(entry) <> 'object' THEN entry
        WHEN coalesce(char_length(entry ->> 'message'), 0) <= message_room
             AND coalesce(char_length(entry ->> 'traceback'), 0) <= text_room
             AND coalesce(char_length(entry ->> 'output'), 0) <= text_room
        THEN entry
        ELSE entry
             || jsonb_build_object('trimmed', true)
             || CASE WHEN char_length(entry ->> 'message') > message_room
                     THEN jsonb_build_object('message',
                          left(entry ->> 'message', greatest(message_room - 40, 16))
                          || ' [... ' || char_length(entry ->> 'message')
                          || ' characters, cut]')
                     ELSE '{}'::jsonb END
             || CASE WHEN char_length(entry ->> 'traceback') > text_room
                     THEN jsonb_build_object('traceback', CASE WHEN text_room < 200 THEN NULL
                          ELSE '[... cut] ' || right(entry ->> 'traceback', text_room - 20) END)
                     ELSE '{}'::jsonb END
             || CASE WHEN char_length(entry ->> 'output') > text_room
                     THEN jsonb_build_object('output', CASE WHEN text_room < 200 THEN NULL
                          ELSE '[... cut] ' || right(entry ->> 'output', text_room - 20) END)
                     ELSE '{}'::jsonb END
    END
$$;

-- A job's errors with their text bounded: messages (what the search index reads) at
-- most 98,304 characters in all, tracebacks and printed output at most 262,144. The
-- first and the last entries keep their text (up to 16,384 characters of message, as a
-- supervisor writes them); the entries between share what is left, each cut with a
-- note, their output dropped; past 600 of them the oldest are replaced by one entry
-- saying how many went. A tsvector takes at most about 6 bytes a character of text,
-- so 98,304 characters stay well under its 1 MB limit. Unchanged (and cheap) when
-- within bounds, which is nearly always.
CREATE OR REPLACE FUNCTION supervisor.capped_errors(errors jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    message_budget constant integer := 98304;
    text_budget constant integer := 262144;
    entry_message constant integer := 16384;
    most_between constant integer := 600;
    n integer := jsonb_array_length(errors);
    messages bigint;
    texts bigint;
    first_entry jsonb;
    last_entry jsonb;
    middle jsonb;
    dropped integer := 0;
    m integer;
    message_room integer;
    text_room integer;
BEGIN
    -- The usual case, cheaply: a value no bigger than the budget in all (not compressed,
    -- as the result of an append is) holds fewer characters than that of any text.
    IF pg_column_compression(errors) IS NULL AND pg_column_size(errors) <= message_budget
    THEN
        RETURN errors;
    END IF;
    SELECT coalesce(sum(char_length(e ->> 'message')), 0),
           coalesce(sum(coalesce(char_length(e ->> 'traceback'), 0)
                        + coalesce(char_length(e ->> 'output'), 0)), 0)
    INTO messages, texts
    FROM jsonb_array_elements(errors) AS e;
    IF messages <= message_budget AND texts <= text_budget THEN
        RETURN errors;
    END IF;
    first_entry := supervisor.cut_entry(errors -> 0, entry_message, 65536);
    IF n = 1 THEN
        RETURN jsonb_build_array(first_entry);
    END IF;
    last_entry := supervisor.cut_entry(errors -> (n - 1), entry_message, 65536);
    m := n - 2;
    IF m > most_between THEN
        dropped := m - most_between;
        m := most_between;
    END IF;
    message_room := greatest((message_budget - char_length(first_entry ->> 'message')
                              - char_length(last_entry ->> 'message')) / greatest(m + 1, 1),
                             64);
    text_room := (text_budget - coalesce(char_length(first_entry ->> 'traceback'), 0)
                  - coalesce(char_length(last_entry ->> 'traceback'), 0)
                  - coalesce(char_length(first_entry ->> 'output'), 0)
                  - coalesce(char_length(last_entry ->> 'output'), 0)) / greatest(m, 1);
    SELECT coalesce(jsonb_agg(supervisor.cut_entry(e, message_room, text_room) - 'output'
                              ORDER BY i), '[]'::jsonb)
    INTO middle
    FROM jsonb_array_elements(errors) WITH ORDINALITY AS t(e, i)
    WHERE i > 1 + dropped AND i < n;
    IF dropped > 0 THEN
        middle := jsonb_build_array(jsonb_build_object(
            'attempt', errors -> 1 -> 'attempt', 'kind', 'trimmed',
            'message', 'the errors of ' || dropped || ' earlier attempts were dropped to '
                       || 'keep the stored error text bounded',
            'traceback', NULL, 'at', errors -> 1 -> 'at')) || middle;
    END IF;
    RETURN jsonb_build_array(first_entry) || middle || jsonb_build_array(last_entry);
END
$$;
