"""Chaos and soak runs: mixed jobs under killed children, killed supervisors and a
restarted database, then checks that every job ended for its own reason and none ran
twice without an interruption to explain it.

Modules: ``handlers`` (the job kinds, each run recorded to a run log), ``runlog`` (reading
that log), ``procs`` (the private PostgreSQL and the supervisor processes), ``check`` (the
end checks), ``soak`` (the driver and its command line), ``badinput`` (the bad-input run).
"""
