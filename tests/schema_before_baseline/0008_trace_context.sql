-- Issue 15 (the `otel` extra): the W3C trace context a job was enqueued under, so the
-- child that runs it continues the producer's trace. A JSON object of propagation
-- headers, e.g. {"traceparent": "00-<trace id>-<span id>-01", "tracestate": "..."}; NULL
-- when the producer had no span (and always for rows written before this version).
-- A column of its own rather than a general `meta`: its one meaning is part of the
-- contract, plain-SQL producers in other languages can fill it, and jobs without it pay
-- nothing (a NULL costs no bytes in the row).
ALTER TABLE supervisor.jobs ADD COLUMN trace_context jsonb;
-- Only a small object can be a carrier (traceparent is 55 characters, tracestate at most
-- 512): a plain-SQL producer's mistake is refused at its INSERT, never carried into a
-- child's RUN frame. NOT VALID: existing rows (all NULL) are not scanned under the
-- ALTER's lock; every new or updated row is checked.
ALTER TABLE supervisor.jobs ADD CONSTRAINT jobs_trace_context_carrier
    CHECK (trace_context IS NULL OR (jsonb_typeof(trace_context) = 'object'
                                     AND octet_length(trace_context::text) <= 4096))
    NOT VALID;
