-- Each kind's recent memory samples kept beside its peak (issue 40).
--
-- A kind's default memory reservation was the p95 of max_rss_bytes over its last 200
-- finished jobs, read from supervisor.jobs once a minute by every supervisor with a
-- memory budget (a container's limit gives one by default). That read named a state
-- (retryable) outside the finished index's predicate, so it scanned the whole hot table
-- once per kind: under a held MVCC horizon, 270 MB a minute into a hold, on the loop's
-- own connection. Read through the index instead it walks the rows already moved to the
-- archives, which a hold keeps as dead entries, and for a rare kind every job of the
-- day. The samples now come to this table from the supervisors that measure them:
-- each adds the peaks of the attempts it ran since its last write (at most 200 a kind),
-- newest first, and the row keeps the newest 200 of the past day. The read is one row
-- a kind by primary key, whatever the jobs table looks like.
--
-- Rows written before this keep their peak and start with no samples: until 20 arrive a
-- kind's size is that peak, the larger figure, as it was for a kind with few samples.
ALTER TABLE supervisor.kind_memory
    ADD COLUMN recent_rss bigint[] NOT NULL DEFAULT '{}'
        CONSTRAINT kind_memory_recent_rss_check CHECK (cardinality(recent_rss) <= 200);
