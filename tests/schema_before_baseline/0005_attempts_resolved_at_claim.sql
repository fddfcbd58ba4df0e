-- A job's max_attempts comes from, in order: its own row, its handler's @job(...), the
-- supervisor's config, the built-in default (DESIGN, "Settings"). A producer that leaves
-- the column out (plain SQL, `supervisor enqueue`, `supervisor.enqueue()`) now stores
-- NULL instead of 20, and the claim fills in the handler's value. Rows already stored
-- keep their number.
ALTER TABLE supervisor.jobs ALTER COLUMN max_attempts DROP DEFAULT;
ALTER TABLE supervisor.jobs ALTER COLUMN max_attempts DROP NOT NULL;
