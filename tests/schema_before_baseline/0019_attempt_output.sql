-- 0019: what a job's last attempt printed (issue 29): the last bytes of its stdout and
-- stderr (the setting output_capture, 64 KiB by default), NULL when it printed nothing.
-- Failed attempts also keep theirs in their errors entry ("output"). Text, not jsonb:
-- it is shown as written and never queried into; TOAST keeps it out of the row's page.
ALTER TABLE supervisor.jobs ADD COLUMN output text;
