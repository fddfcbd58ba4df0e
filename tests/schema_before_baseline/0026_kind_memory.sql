-- 0026: each kind's memory as measured, kept (issue 51).
--
-- The largest peak RSS (its process tree's) that an attempt of a kind reached, killed
-- attempts included (their last sample), as the supervisors learned it: a fresh
-- supervisor, or another one, admits the kind's very first jobs by it, even when the
-- jobs that taught it were pruned or are waiting to retry (the usage column holds only
-- finished jobs' last attempts). Each supervisor writes what raised a kind's size once
-- a minute and when it stops; a peak older than a day is replaced, not raised, so a kind
-- that shrank is not held to an old giant forever. Read with the p95 of the kind's
-- recent usage: under 20 samples the larger of the two is the kind's size.
CREATE TABLE supervisor.kind_memory (
    kind text PRIMARY KEY CHECK (char_length(kind) <= 255),
    peak_bytes bigint NOT NULL CHECK (peak_bytes > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
