"""What the parent, the children and producers all import: the wire protocol, the job
model, the schema and its migrations, enqueue, where the database comes from, and exit
codes. Nothing here imports ``supervisor`` or ``workers``."""
