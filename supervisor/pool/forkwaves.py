"""When the children are forked at start (issue 48): a child gets its first job as soon
as it is ready, and forking the others costs the first job nothing.

Forking a child and its boot cost CPU (here about 1 ms in the parent and 6 ms in the
child): forking all N before the first claim put every fork and every boot on the first
job's clock, 0.4-0.5 s more CPU before the first job at ``-n 64`` on 2 CPUs
(docs/benchmarks.md, "Many children"). So:

1. the first wave, ``FIRST_WAVE_PER_CPU`` children per CPU the process may use (never
   more than asked for), is forked before the parent connects: they boot while it
   connects and claims, which it mostly spends waiting for the database;
2. the rest are held until the first job is in a child's pipe, or the first claim
   found nothing to run, or ``HOLD_LIMIT`` has passed (a first wave that cannot boot,
   a database that is slow to answer: the pool is never left short for long);
3. then the pool forks them ``FORKS_PER_RECOUNT`` at a time, at each turn of the
   loop, so READYs, answers and claims are served between forks.

The pool's target size is N throughout: the first claim is sized for every child, and
jobs wait in the parent for the children still to come, as they did for children
still booting. Nothing else changes: a drain or stop forks nothing more, a crash loop
halts as before, SIGTTIN/TTOU move the target. The price: in a run of a few dozen short
jobs the children forked later miss its first jobs. After the release every fork (a
replacement, a recycle) stays a few per recount, so no turn of the loop is held by many.
"""

from __future__ import annotations

from supervisor.pool.pool import Pool

# After the hold, the most children one recount of the pool forks: the loop's turn
# recounts once (its tick; the reap only every REAP_NET), and between turns it hears
# READYs and claims. Two: at one, -n 64's last child got its first job 1.45-1.52 s
# into the run, at two 1.06-1.14 s (docs/benchmarks.md, "Many children").
FORKS_PER_RECOUNT = 2
HOLD_LIMIT = 1.0  # seconds after the first wave at most before the rest are forked
# Children per CPU forked before the parent connects. The connect and the first claim
# leave the CPUs mostly idle, and a child forked then is not one of the ramp's late
# children, each of which misses the jobs of its boot. On 2 CPUs (2026-12-07, sleeping
# jobs, medians of 3): at one per CPU, -n 16 ran at 0.932 of the ideal, its first job
# 207 ms after exec (-n 2: 203); at four, 0.940 and 214 ms; at eight (every child of
# -n 16), 0.947 and 228 ms, and -n 64's first job up to 42 ms behind -n 2's, near
# issue 48's 50 ms bar on a fast stretch: four.
FIRST_WAVE_PER_CPU = 4


def first_wave(children: int, cpus: int) -> int:
    """How many children are forked before the parent connects: ``FIRST_WAVE_PER_CPU``
    per CPU it may use (they boot while it connects), never more than asked for."""
    return max(1, min(children, FIRST_WAVE_PER_CPU * cpus))


class ForkWaves:
    """The pool's forks at start: the first wave, then the rest once the first job
    is placed (see the module docstring)."""

    def __init__(self, pool: Pool, cpus: int) -> None:
        self.pool = pool
        self.cpus = cpus
        self.holding = False
        self.hold_ends: float | None = None

    def start(self, now: float) -> None:
        """Start the pool with its first wave; hold the other forks."""
        pool = self.pool
        pool.fork_batch = first_wave(pool.size(), self.cpus)
        pool.start()
        pool.fork_batch = 0
        self.holding = True
        self.hold_ends = now + HOLD_LIMIT

    def next_deadline(self) -> float | None:
        """When the loop must turn for the forks: the hold's end, or at once after a
        release (None: neither)."""
        return self.hold_ends

    def after_tick(self, now: float, *, placed: bool, claiming: bool, waiting: bool) -> None:
        """Once the engine has ticked: end the hold if the first job is placed
        (``placed``: a child holds a job), or the first claim found nothing (no claim
        in flight, nothing ``waiting`` for a child), or the hold's time is up."""
        if not self.holding:
            self.hold_ends = None  # the turn after the release recounted the pool
            return
        if placed or not (claiming or waiting) or (
                self.hold_ends is not None and now >= self.hold_ends):
            self.release(now)

    def release(self, now: float) -> None:
        """Fork the rest from now on, a few per recount: the pool, told its size is
        short while it held, recounts at the next turn, which is due at once."""
        self.holding = False
        self.hold_ends = now
        self.pool.fork_batch = FORKS_PER_RECOUNT
