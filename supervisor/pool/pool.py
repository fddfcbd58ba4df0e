"""The pool of pre-forked children, driven by the parent's own selector loop.

The pool is event-driven and never blocks: the parent loop feeds it readable and
writable fds (``handle_event``), SIGCHLD (``reap``) and the passage of time (``tick`` at
``next_deadline()``), hands it jobs (``dispatch``) and collects what happened
(``take_outcomes``). It is only policy, read top to bottom as a child's life: forking
to the target size, which child gets a job, what a child's news means for it (idle,
retired, killed), when one is stopped, killed, replaced or retired, reaping, and when
forking must stop (a crash loop). Each child's pid, pipes, frames and deadlines are its
``ChildProcess``'s; what its frames meant comes back from ``ChildProcess.read`` as typed
events. Each child holds a small queue of jobs in its pipe (``dispatch(job, depth)``:
an idle child first, else the least loaded child with room), so it never waits for the
parent between two jobs; jobs queued in a child that dies, is recycled or told to stop
come back unstarted (``JobReturned``). Every OS call goes through ``OsCalls`` and time
comes from an injected monotonic clock, so the policy is tested with fakes; nothing
here touches the database.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import selectors
import signal
from collections import Counter, deque
from collections.abc import Callable, Set
from dataclasses import dataclass

from shared import jobs, wire
from shared.exitcodes import CHILD_RECYCLE, describe_child_exit
from supervisor.pool import guards, overruns, recalls
from supervisor.pool.crashloop import CrashLoop, RespawnBackoff, boot_failure_of_code
from supervisor.pool.deadlines import Deadlines
from supervisor.pool.discards import DiscardNotices
from supervisor.pool.memorywatch import MemoryWatch
from supervisor.pool.news import ChildNews, CrossedSkip, Heard, Leaving, Readied
from supervisor.pool.oscalls import OsCalls, monotonic
from supervisor.pool.outcomes import (
    ChildEvent,
    ChildEventKind,
    JobCheckpoint,
    JobDone,
    JobExpired,
    JobFailed,
    JobProgress,
    JobReturned,
    JobStarted,
    NativeJob,
    Outcome,
    PoolHalted,
    ReturnTo,
)
from supervisor.pool.process import ACTIVE_STATES, BOOTING, BUSY, IDLE, ChildProcess, Overdue
from supervisor.pool.report import ChildReport
from supervisor.pool.rooms import Rooms
from supervisor.pool.runtimes import RunTimes, ran_for
from supervisor.pool.settings import PoolSettings
from supervisor.pool.spawn import fork_child
from supervisor.tuning import DEFAULT, Tuning
from workers import nativethreads
from workers.child import child_main

# What ends the job at the head of a child's queue.
_ANSWERS = (JobDone, JobFailed, JobExpired)


@dataclass(frozen=True, slots=True)
class QuietOutlook:
    """What the loop's settle (``Arbiter._settle``) needs of the children: ``seconds``
    before the first of them would run dry, and the ``answers_per_second`` they send."""

    seconds: float
    answers_per_second: float


NO_QUIET = QuietOutlook(0.0, 0.0)


class Pool:
    """N forked children running handlers, each with a small queue of jobs."""

    def __init__(self, settings: PoolSettings, selector: selectors.BaseSelector, *,
                 oscalls: OsCalls | None = None, clock: Callable[[], float] | None = None,
                 log: logging.Logger | None = None, rng: random.Random | None = None,
                 entry: Callable[..., object] = child_main,
                 run_times: RunTimes | None = None, tuning: Tuning = DEFAULT) -> None:
        self.settings = settings
        self._sel = selector
        self._os = oscalls or OsCalls(settings.container)
        self._clock = clock or monotonic
        self._log = log or logging.getLogger("supervisor.pool")
        self._rng = rng or random.Random()
        self._entry = entry  # what a forked child runs (tests may substitute)
        self._children: dict[int, ChildProcess] = {}  # by pid, until reaped
        self._by_fd: dict[int, ChildProcess] = {}
        self._idle: deque[ChildProcess] = deque()
        self._in_flight: dict[int, ChildProcess] = {}  # job id -> child, until answered
        self._pushing: set[ChildProcess] = set()  # busy children with RUN frames to write
        self._outcomes: list[Outcome] = []
        # Children holding jobs, counted once after a change: the loop asks several
        # times a turn (issue 43). None: a child's jobs may have changed since. Only
        # dispatch, a child's frames, a cancel and a reap change what children hold.
        self._busy: int | None = None
        self._crashes = CrashLoop(settings.crash_loop_limit, settings.crash_loop_window)
        self._respawn = RespawnBackoff()
        self._rooms = Rooms()  # busy children by room, for one dispatch round
        self._target = settings.size
        self._stopping = False
        self._halted: str | None = None
        self._halt_raised = False
        self._started = False
        self._parent_pid = 0
        # When each child (and the pool's own forking) must be looked at next.
        self._deadlines: Deadlines[ChildProcess] = Deadlines()
        self._size_dirty = True  # a child left the active states: recount in tick
        # The most children one recount forks (None: every one missing; 0: none for
        # now); the rest are forked by the next ones, which the loop makes at once
        # (issue 48: ``supervisor.pool.forkwaves``).
        self.fork_batch: int | None = None
        self._nap = guards.nap_threshold(settings)
        self._no_procfs = False  # warned once that /proc cannot be read
        # Each child's memory cap, the container's limit and its OOM kills.
        self._memory = MemoryWatch(settings, self._os, self._log, kill=self._kill,
                                   notify=self.notify)
        # How long jobs run here: fed at each answer, read by the recall, the pipe cap
        # and the rebalance here and by the engine's depth and drain notices.
        self.tuning = tuning  # the dispatch path's numbers (supervisor.tuning)
        self.run_times = run_times if run_times is not None else RunTimes(tuning)
        self.recalled = 0  # jobs asked back from behind an overrunning job, ever
        # Jobs discarded after their child was gone, whose on_discard hooks a child runs.
        self._discards = DiscardNotices()

    # -- the pool's life ---------------------------------------------------------

    def start(self) -> None:
        """Fork the children. Call from the main thread once the handler modules are
        imported: ``gc.freeze()`` first keeps the shared heap's pages shared."""
        if self._started:
            return
        self._started = True
        self._parent_pid = self._os.getpid()
        self._memory.start()
        if self.settings.native_threads is not None:
            nativethreads.prepare()  # before the freeze: its module is shared too
        gc.freeze()
        self._maintain_size()

    def stop(self) -> None:
        """Graceful: STOP to every child now; a busy one finishes its running job and
        starts none of its queued ones (they come back when it exits); no replacements
        from now on."""
        self._stopping = True
        now = self._clock()
        for child in list(self._children.values()):
            if child.state in (IDLE, BOOTING):
                self._stop(child, now, "pool stopping")
            elif child.state == BUSY:
                self._retire(child, now, "pool stopping")

    def kill_all(self) -> None:
        """SIGKILL every child's group; no replacements. Jobs still in flight are
        reported as ``shutdown`` (queued ones as returned) when their children are
        reaped."""
        self._stopping = True
        now = self._clock()
        for child in list(self._children.values()):
            self._kill(child, now, jobs.FAIL_SHUTDOWN, "killed at shutdown", signal.SIGKILL)

    def interrupt_all(self, kind: str = jobs.FAIL_SHUTDOWN) -> None:
        """Kill every busy child's group now; each running job is reported as
        ``JobFailed(kind)`` once its child is reaped (unless it answered first), each
        queued one as returned."""
        now = self._clock()
        for child in {id(c): c for c in self._in_flight.values()}.values():
            self._kill(child, now, kind, f"interrupted ({kind}) while running",
                       signal.SIGKILL)

    def recycle_all(self) -> None:
        """Replace every child with a fresh fork: idle ones now, busy ones after their
        running job (SIGHUP); what they hold queued goes to the new ones."""
        now = self._clock()
        for child in list(self._children.values()):
            if child.state == IDLE:
                self._stop(child, now, "recycling all")
            elif child.state == BUSY:
                self._retire(child, now, "recycling all")
            elif child.state == BOOTING:
                # Forked before the reload: it must not serve, even once booted.
                child.retire()
        self._maintain_size()

    def resize(self, n: int) -> None:
        """Change the target size (TTIN/TTOU): grow now; shrink by retiring idle
        children first, then booting ones, then busy ones after their job."""
        self._target = max(0, n)
        self._maintain_size()

    # -- the pool's answers to the loop ------------------------------------------

    @property
    def halted(self) -> str | None:
        """Why the pool stopped forking (a crash loop), or None."""
        return self._halted

    def size(self) -> int:
        """The current target number of children."""
        return self._target

    def alive(self) -> int:
        """Children not reaped yet (the parent's drain waits for 0)."""
        return len(self._children)

    def idle_count(self) -> int:
        """Children ready for a job now."""
        return len(self._idle)

    def quiet_outlook(self) -> QuietOutlook:
        """How long the parent may leave its children unheard with none of them running
        dry, and how many answers a second they send meanwhile, by each queue's typical
        run time (``QuietOutlook``). No quiet while a child is idle, booting or leaving,
        holds no job behind the one it runs, or runs a queue not timed yet."""
        if self._idle or self._stopping or not self._children:
            return NO_QUIET
        typical = self.run_times.typical
        least = float("inf")
        rate = 0.0
        for child in self._children.values():
            held = child.jobs
            if len(held) <= 1:  # nothing queued behind the job it runs
                return NO_QUIET
            run_time = typical.get(held[0].queue)
            if not run_time:
                return NO_QUIET
            least = min(least, (len(held) - 1) * run_time)
            rate += 1.0 / run_time
        return QuietOutlook(least, rate)

    def busy_count(self) -> int:
        """Children holding jobs (running one, with or without more queued)."""
        busy = self._busy
        if busy is None:
            busy = self._busy = sum(1 for child in self._children.values() if child.jobs)
        return busy

    def occupied(self) -> Counter[str]:
        """Children per queue whose pipe holds its jobs (a child runs one queue at a
        time): how many run each queue here, counting those whose START is still on
        its way back."""
        return Counter(child.jobs[0].queue for child in self._children.values()
                       if child.jobs)

    def overrunning(self) -> int:
        """Children whose running job ran past twice its kind's p95: they take no more jobs
        until it ends, so claims for them would only wait (issue 28)."""
        return sum(1 for child in self._children.values()
                   if child.overrun and child.state == BUSY)

    def overrunning_heads(self) -> Counter[str]:
        """The queues of the jobs that overrunning children run (one per such child).
        A claim sized for the children that can take work must not count these jobs
        against their queue either (issue 49: at -n 2 a queue whose one child ran a
        long job counted that job against the one free child and claimed nothing)."""
        return Counter(child.jobs[0].queue for child in self._children.values()
                       if child.overrun and child.state == BUSY and child.jobs)

    def batch_counts(self, queue: str) -> Counter[int | None]:
        """Jobs of ``queue`` in children (running or queued) per batch (None: jobs of no
        batch): which batches of a fair queue this supervisor is serving."""
        return Counter(job.batch_id for child in self._children.values()
                       for job in child.jobs if job.queue == queue)

    def held_count(self) -> int:
        """Jobs in children: running, or queued behind a running one."""
        return len(self._in_flight)

    def running(self) -> list[jobs.ClaimedJob]:
        """Every job held in a child now, running or queued (for lease renewal and
        reconciliation: all of them are leased by this supervisor)."""
        return [job for child in self._children.values() for job in child.jobs]

    def native_jobs(self, now: float) -> list[NativeJob]:
        """The children busy in native code now (silent, CPU time moving), each with
        its job, for the title, the registry row and ``status``."""
        return [NativeJob(child.pid, child.worker_no, head.job.id, head.job.kind,
                          now - head.native_since)
                for child in self._children.values()
                if (head := child.head) is not None and head.native and child.state == BUSY]

    def child_reports(self) -> list[ChildReport]:
        """One ``ChildReport`` per child not reaped yet, by worker number: its job, for
        how long, its memory (one read of /proc per child; asked once per heartbeat)."""
        now = self._clock()
        out = []
        for child in sorted(self._children.values(), key=lambda c: c.worker_no):
            job = child.job
            since = child.job_started
            out.append(ChildReport(
                worker=child.worker_no, pid=child.pid, state=child.state,
                job_id=job.id if job else None, kind=job.kind if job else None,
                queue=job.queue if job else None, attempt=job.attempt if job else None,
                job_seconds=max(now - since, 0.0) if since is not None else None,
                held=len(child.jobs), rss_bytes=self._os.rss(child.pid),
                jobs_done=child.jobs_done, age_seconds=max(now - child.spawned_at, 0.0)))
        return out

    def take_outcomes(self) -> list[Outcome]:
        """Every JobStarted, JobReturned, JobDone, JobFailed, JobProgress and
        ChildEvent since the last call, in order."""
        outcomes = self._outcomes
        if outcomes:
            self._outcomes = []
        return outcomes

    def next_deadline(self) -> float | None:
        """Monotonic time by which ``tick`` must run: the earliest boot, job timeout,
        heartbeat, notice, memory-sample, overrun or kill deadline a child still
        carries (``supervisor.pool.deadlines``), or the pool's next fork."""
        return self._deadlines.next()

    # -- jobs --------------------------------------------------------------------

    def dispatch(self, job: jobs.ClaimedJob, depth: int = 1, *,
                 own_queue: bool = False) -> bool:
        """Queue ``job`` in a child: an idle one if any (never with ``own_queue``),
        else the least loaded child holding fewer than ``depth`` (1: only an idle
        child) and, with ``own_queue``, running a job of that queue. Its deadlines are
        armed at the head of that child's queue and again at its START. False if no
        child has room; args too large for a RUN frame fail at once (kind ``args``).
        Frames for busy children go out at ``push``."""
        now = self._clock()
        cap = self.run_times.pipe_cap(job.kind)
        if cap is not None and cap < depth:
            depth = cap  # a heavy-tailed kind: few jobs may queue behind one of its runs
        if self._idle and not own_queue:
            child = self._idle[0]
            self._busy = None
            if not child.run(job, now, depth):
                self._too_large(child, job)
                return True
            self._idle.popleft()
            # The sooner of its timeout and its first heartbeat.
            self._deadlines.arm(child, child.deadline())
        else:
            roomiest = self._rooms.roomiest(self._children.values(), depth,
                                            job.queue if own_queue else None)
            if roomiest is None:
                return False
            child = roomiest
            self._busy = None
            if not child.run(job, now, depth):
                self._too_large(child, job)
                return True
            self._pushing.add(child)
            self._watch_head(child)
        self._in_flight[job.id] = child
        return True

    def _watch_head(self, child: ChildProcess) -> None:
        """Arm the overrun watch on a child's running head job (``overruns.watch``)."""
        self._deadlines.arm(child, overruns.watch(child, self.run_times,
                                                  alone=len(self._children) <= 1))

    def _release(self, child: ChildProcess, job: jobs.ClaimedJob) -> None:
        """``job`` no longer stays in ``child`` (answered, given back, taken back, or
        its child was reaped): the one place a job's hold in a child ends."""
        if self._in_flight.get(job.id) is child:
            del self._in_flight[job.id]

    def _too_large(self, child: ChildProcess, job: jobs.ClaimedJob) -> None:
        # It fails at once, as if it had started: every job sent is started or returned.
        self._outcomes.append(JobStarted(job))
        self._outcomes.append(child.too_large(job))

    def push(self) -> None:
        """Write the jobs ``dispatch`` queued for busy children, one write per child."""
        self._rooms.forget()
        pushing = self._pushing
        if pushing:
            for child in pushing:
                child.push()
            pushing.clear()

    def cancel(self, job_id: int) -> bool:
        """Stop ``job_id`` here: a running job is sent a stop notice and its child is
        killed ``kill_grace`` later unless it answered first (the job is reported as
        ``cancelled`` either way); a queued one is taken back and never starts
        (reported as returned, not to be run). False if that job is not held here."""
        self._rooms.forget()  # children's rooms change outside a round
        child = self._in_flight.get(job_id)
        if child is None:
            return False
        if child.state != BUSY:
            return False
        self._busy = None
        now = self._clock()
        job = child.skip(job_id, now)
        if job is None:  # it is the running one: told first, killed after the grace
            if child.head is not None and child.head.notice is not None:
                return True  # told already: its notice's deadline stands
            message = "cancelled while running"
            if not self.notify(job_id, "cancel", jobs.FAIL_CANCELLED, message,
                               self.settings.kill_grace):
                self._kill(child, now, jobs.FAIL_CANCELLED, message)
            return True
        self._release(child, job)
        self._outcomes.append(JobReturned(job, "cancelled before it started", ReturnTo.NOWHERE))
        self._idle_if_empty(child)
        return True

    def notify(self, job_id: int, reason: str, kind: str, message: str,
               grace: float | None) -> bool:
        """Send running ``job_id`` a stop notice (issue 28): its handler sees
        ``stopping`` (and ``Stopping`` if it opted in) and may checkpoint and let
        ``Stopping`` out, which ends the job as ``kind``. ``grace``: killed after that
        many seconds unless it answered first (as ``kind``; a drain's or fence's
        ``stopped`` as ``shutdown``); None: no kill of its own. False if the job does
        not run here or was told already."""
        child = self._in_flight.get(job_id)
        if child is None or child.state != BUSY:
            return False
        now = self._clock()
        deadline = None if grace is None else now + grace
        if child.notify(reason, kind, message, deadline) is None:
            return False
        self._deadlines.arm(child, deadline)
        return True

    def tell_discarded(self, told: wire.Discarded) -> None:
        """Have a child run the ``on_discard`` hooks of a job the parent discarded (its
        own child is gone): an idle one if there is one, else a busy one that is not
        leaving (it runs them after its current job), else the next child to be ready
        (``supervisor.pool.discards``)."""
        self._discards.tell(told, self._idle, self._children.values())

    def running_since(self) -> list[tuple[jobs.ClaimedJob, float]]:
        """Each job running now (its START came) and for how many seconds."""
        now = self._clock()
        return [(head.job, now - head.armed_at) for child in self._children.values()
                if child.state == BUSY and (head := child.head) is not None and head.started]

    def checkpoint_written(self, job_id: int, written: bool) -> None:
        """A flushed checkpoint of ``job_id`` was written (or fenced off): its handler,
        waiting on it, goes on."""
        child = self._in_flight.get(job_id)
        if child is not None:
            child.checkpoint_written(job_id, written)

    def take_back(self, queue: str) -> int:
        """Ask children for the jobs of ``queue`` queued unstarted (a paused queue starts
        nothing more; ``recalls.take_back``). Returns how many were asked."""
        self._rooms.forget()  # children's rooms change outside a round
        return recalls.take_back(self._children.values(), queue)

    def _idle_if_empty(self, child: ChildProcess) -> None:
        if not child.jobs:
            child.become_idle()
            self._idle.append(child)

    def rebalance(self, exhausted: Callable[[str], bool]) -> int:
        """At the end of a queue's work an idle child takes the last half of the fullest
        pipe (``recalls.rebalance``; ``exhausted(queue)``: nothing more of it to claim).
        Returns how many jobs were asked back."""
        self._rooms.forget()  # children's rooms change outside a round
        if not self._idle:
            return 0
        asked = recalls.rebalance(self._children.values(), len(self._idle), self.run_times,
                                  exhausted, self._clock(), self.tuning)
        self.recalled += asked
        return asked

    def free_for(self, over: Set[str], wanted: int) -> int:
        """No child is idle and queues below their allotment have jobs waiting: up to
        ``wanted`` children running a queue in ``over`` give back their pipes
        (``recalls.free_for``, issue 44). Returns how many jobs were asked back."""
        self._rooms.forget()  # children's rooms change outside a round
        asked = recalls.free_for(self._children.values(), over, wanted)
        self.recalled += asked
        return asked

    def make_way(self, queue: str, held: Counter[int | None]) -> bool:
        """A newcomer batch of fair ``queue`` waits for a child (``held``: the queue's
        jobs in children per batch): the child that should end first gives back its
        pipe (``recalls.make_way``). True while a way is being made, so the caller
        keeps the newcomer first until that child can take it."""
        self._rooms.forget()  # children's rooms change outside a round
        asked = recalls.make_way(self._children.values(), queue, held)
        self.recalled += asked
        return asked > 0 or recalls.making_way(self._children.values(), queue)

    # -- what the children say ---------------------------------------------------

    def handle_event(self, key: selectors.SelectorKey, mask: int) -> None:
        """Read a child's frames or flush its queued writes."""
        child = self._by_fd.get(key.fd)
        if child is None:
            return
        self._rooms.forget()
        if key.fd == child.read_fd:
            if mask & selectors.EVENT_READ:
                self._busy = None
                now = self._clock()
                news = child.read(now)
                if news:
                    self._heard(child, news, now)
        elif mask & selectors.EVENT_WRITE:
            child.flush()

    def _heard(self, child: ChildProcess, news: list[ChildNews], now: float) -> None:
        """Act on what one read of ``child`` brought. Its job records go on to the
        engine in the order the child said them; what becomes of the child itself is
        decided once, from its state after the whole read (an answer, the START of the
        next job and the one after may all come in one write)."""
        heard = self._gather(child, news)
        if heard.answered:
            self._after_answer(child, now, heard.leaving)
        elif heard.started:
            self._deadlines.arm(child, child.deadline())
        self._watch_head(child)
        if heard.gave_back and child.state == BUSY and not heard.answered:
            self._idle_if_empty(child)
        if heard.crossed is not None:
            self._kill(child, now, None, "started a job it was told to skip",
                       signal.SIGKILL)
        if heard.readied:
            self._on_ready(child, now)
        if heard.broken is not None:
            self._kill(child, now, jobs.FAIL_CRASHED,
                       f"child {child.pid} broke the wire protocol: {heard.broken.why}",
                       signal.SIGKILL)

    def _gather(self, child: ChildProcess, news: list[ChildNews]) -> Heard:
        """Pass the job records of one read on, in order (a job that ended or came back
        is released, an answer's run time is fed), and gather what it said of the
        child itself."""
        outcomes = self._outcomes
        heard = Heard()
        for said in news:
            if isinstance(said, JobStarted):
                heard.started = True
            elif isinstance(said, _ANSWERS):
                self._release(child, said.job)
                heard.answered = True
                if not isinstance(said, JobExpired):
                    self.run_times.ran(said.job.kind, said.job.queue, ran_for(said))
            elif isinstance(said, JobReturned):
                self._release(child, said.job)
                heard.gave_back = True
            elif not isinstance(said, JobProgress | JobCheckpoint):  # news of the child
                if isinstance(said, Leaving):
                    heard.leaving = True
                elif isinstance(said, Readied):
                    heard.readied = True
                elif isinstance(said, CrossedSkip):
                    heard.crossed = said
                else:
                    heard.broken = said
                continue
            outcomes.append(said)
        return heard

    def _after_answer(self, child: ChildProcess, now: float, leaving: bool) -> None:
        """The child answered for its head job: recycle, retire, idle it, or watch
        the next job it holds."""
        if child.state != BUSY:
            return  # being killed or already dead: the answers still count
        if leaving:
            # The child exits right after this answer: never dispatch to it again.
            self._stop(child, now, "recycling: its job or memory limit was reached",
                       told=False)
        elif child.retire_after_job or self._stopping:
            self._retire(child, now, "retiring after its job")
        elif child.max_jobs is not None and child.jobs_done >= child.max_jobs:
            self._retire(child, now, "job limit reached")
        elif guards.peaked(self._os, self.settings, child.pid):
            self._retire(child, now, "recycling: its peak RSS passed the memory limit")
        elif not child.jobs:
            child.become_idle()
            self._idle.append(child)
        else:
            self._deadlines.arm(child, child.deadline())

    def _on_ready(self, child: ChildProcess, now: float) -> None:
        # Once per child: where the CPU of an attempt the parent ends counts from.
        child.killed_usage.ready(self._os.group_sample(child.pid))
        self._crashes.ready()
        self._respawn.ready()
        self._event(child, ChildEventKind.READY, "")
        if child.state != BOOTING:
            return
        if self._stopping or child.retire_after_job:
            self._stop(child, now, "pool stopping" if self._stopping else "recycling all")
            return
        child.become_idle()
        self._idle.append(child)
        self._discards.at_ready(child)

    # -- reaping -----------------------------------------------------------------

    def reap(self) -> None:
        """Collect every exited child (and any other process we inherited), report
        their jobs, and fork replacements."""
        self._rooms.forget()  # children's rooms change outside a round
        while True:
            pid, status, cpu = self._os.wait_any()
            if pid <= 0:
                break
            child = self._children.pop(pid, None)
            if child is None:
                self._log.debug("reaped pid %d (not one of ours): %s", pid,
                                describe_child_exit(status))
                continue
            child.killed_usage.reaped(cpu)
            self._on_exit(child, status)
        if self._size_dirty:
            self._maintain_size()

    def _on_exit(self, child: ChildProcess, status: int) -> None:
        now = self._clock()
        self._size_dirty = True
        self._busy = None
        if child.state == IDLE:
            self._idle.remove(child)
        held = list(child.jobs)
        self._pushing.discard(child)
        how = f"child {child.pid} {describe_child_exit(status)}"
        self._memory.exited(child, status)
        self._outcomes += child.close(now, how)
        self._deadlines.forget(child)
        for job in held:
            self._release(child, job)
        for fd in (child.read_fd, child.write_fd):
            if self._by_fd.get(fd) is child:
                del self._by_fd[fd]
        if not child.ready and not child.expected_exit:
            self._boot_failed(child, status, now)
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == CHILD_RECYCLE:
            self._event(child, ChildEventKind.RECYCLED, how)
        else:
            self._event(child, ChildEventKind.EXITED, how)

    def _boot_failed(self, child: ChildProcess, status: int, now: float) -> None:
        """A child died before it was ready: fork again later if that was not its
        code's fault, else count it toward the crash loop."""
        detail = f"{child.describe()} {describe_child_exit(status)}"
        if child.boot_error:
            detail += f": {child.boot_error}"
        self._event(child, ChildEventKind.BOOT_FAILED, detail)
        self._log.error("%s died before it was ready", detail)
        if not boot_failure_of_code(status, bool(child.boot_error), child.sigkilled):
            self._respawn.died(now)  # not the code's fault: fork again, spaced out
            self._deadlines.arm_pool(self._respawn.due)
        elif self._crashes.failed(now, detail) and not self._halted:
            self._halted = self._crashes.message()
            self._log.critical("%s; no more children will be forked", self._halted)

    # -- size --------------------------------------------------------------------

    def _maintain_size(self) -> None:
        self._size_dirty = False
        if not self._started or self._stopping or self._halted:
            return
        active = [c for c in self._children.values() if c.state in ACTIVE_STATES]
        missing = self._target - len(active)
        if missing > 0 and self._respawn.waiting(self._clock()):
            self._size_dirty = True  # tick forks them once the backoff is over
            self._deadlines.arm_pool(self._respawn.due)
            missing = 0
        batch = missing if self.fork_batch is None else min(missing, self.fork_batch)
        for _ in range(batch):
            if not self._spawn():
                self._size_dirty = True  # try again at the next tick
                break
        else:
            if batch < missing:
                self._size_dirty = True
                if batch:
                    # The loop turns at once for the next batch.
                    self._deadlines.arm_pool(self._clock())
        staying = [c for c in active if not c.retire_after_job]
        excess = len(staying) - self._target
        if excess > 0:
            self._shrink(staying, excess)

    def _shrink(self, staying: list[ChildProcess], excess: int) -> None:
        now = self._clock()
        order = {IDLE: 0, BOOTING: 1, BUSY: 2}
        for child in sorted(staying, key=lambda c: order[c.state])[:excess]:
            if child.state == BUSY:
                self._retire(child, now, "pool shrinking")
            else:
                self._stop(child, now, "pool shrinking")

    def _spawn(self) -> bool:
        taken = {c.worker_no for c in self._children.values() if c.state in ACTIVE_STATES}
        worker_no = 1
        while worker_no in taken:
            worker_no += 1
        max_jobs = self.settings.draw_max_jobs(self._rng)
        if self.settings.native_threads is not None:
            nativethreads.prepare()  # what the child will map: it need not look itself
        try:
            forked = fork_child(self._os, self.settings, worker_no=worker_no,
                                max_jobs=max_jobs, parent_pid=self._parent_pid,
                                entry=self._entry)
        except OSError as exc:
            self._log.error("could not fork worker %d: %s", worker_no, exc)
            return False
        child = ChildProcess(forked.pid, worker_no, forked.read_fd, forked.write_fd,
                             max_jobs=max_jobs, now=self._clock(), settings=self.settings,
                             oscalls=self._os, selector=self._sel, tag=self, log=self._log)
        self._children[child.pid] = child
        self._by_fd[child.read_fd] = self._by_fd[child.write_fd] = child
        self._deadlines.arm(child, child.boot_deadline)
        self._event(child, ChildEventKind.SPAWNED, f"max_jobs={max_jobs}")
        return True

    # -- deadlines ---------------------------------------------------------------

    def tick(self) -> None:
        """Enforce every deadline that has passed and fork replacements. Raises
        ``PoolHalted`` once, at the first tick after children crash-looped at boot;
        later ticks keep enforcing deadlines (kills still escalate) and fork nothing."""
        self.push()
        due = self._deadlines.next()
        if due is not None:
            now = self._clock()
            if now - due > self._nap:
                self._after_nap(now, now - due)
            if now >= due:
                self._enforce_deadlines(now)
        if self._size_dirty:
            self._maintain_size()
        if self._halted and not self._halt_raised:
            self._halt_raised = True
            raise PoolHalted(self._halted)

    def _after_nap(self, now: float, late: float) -> None:
        # The parent did not run for ``late`` seconds past a deadline, so it could not
        # hear its children (or, in a frozen tree, they could not beat): give them the
        # lost time before anything is enforced.
        self._log.warning("the supervisor itself did not run for %.1f s (paused?): "
                          "heartbeat and boot deadlines re-armed", late)
        for child in self._children.values():
            child.after_nap(now, late)

    def _enforce_deadlines(self, now: float) -> None:
        """Act on every child whose deadline has come, earliest first, then watch each
        again for whatever deadline it carries after that."""
        due = self._deadlines.due(now)
        settings = self.settings
        for child in due:
            overdue = child.overdue(now)
            head = child.head
            if overdue is Overdue.JOB and head is not None:
                self._kill(child, now, jobs.FAIL_TIMEOUT, f"ran past its {head.timeout} s timeout")
            elif overdue is Overdue.HEARTBEAT:
                self._check_silent(child, now)
            elif overdue is Overdue.MEMORY:
                self._memory.sample(child, self._children.values(), now)
            elif overdue is Overdue.NOTICE and head is not None and head.notice is not None:
                notice = head.notice
                self._kill(child, now, jobs.FAIL_SHUTDOWN if notice.kind == jobs.FAIL_STOPPED
                           else notice.kind, notice.message or "stopped after its notice",
                           signal.SIGKILL)
            elif overdue is Overdue.OVERRUN:
                self._overran(child, now)
            elif overdue is Overdue.BOOT:
                self._kill(child, now, None, f"not ready within {settings.boot_timeout} s",
                           signal.SIGKILL, boot=True)
            elif overdue is Overdue.EXIT:
                self._log.warning("%s did not exit in time: SIGKILL to its group",
                                  child.describe())
                child.escalate()
        self._deadlines.rearm(due)

    def _check_silent(self, child: ChildProcess, now: float) -> None:
        """No heartbeat within its timeout: hung, or busy in native code that holds the
        GIL (its CPU time moves), which only the job's hard timeout bounds."""
        sample = self._os.group_sample(child.pid)
        child.killed_usage.sampled(sample)
        if sample is None and not self._no_procfs:
            self._no_procfs = True
            self._log.warning("cannot read /proc/%d/stat: a silent child is judged by its "
                              "heartbeat alone", child.pid)
        head = child.head
        if head is None:
            return
        was_native = head.native
        why = child.silent(now, sample)
        if why is not None:
            self._kill(child, now, jobs.FAIL_HUNG, why)
        elif head.native and not was_native:
            detail = (f"job {head.job.id} holds the GIL in native code: no "
                      f"heartbeat for {head.beat_timeout} s, CPU time moving")
            self._log.info("%s is busy: %s", child.describe(), detail)
            self._event(child, ChildEventKind.NATIVE, detail)

    def _overran(self, child: ChildProcess, now: float) -> None:
        """The head job ran past its kind's overrun time: the child takes no more jobs
        (nor claims) until it ends, and what queues behind it is recalled
        (``overruns.overran``)."""
        others = [other for other in self._children.values()
                  if other is not child and other.state in ACTIVE_STATES]
        recall = overruns.overran(child, others, self.run_times, now)
        if recall is not None:
            self.recalled += recall.asked
            self._log.info("%s: %d jobs recalled, %s", child.describe(), recall.asked,
                           recall.why)
            self._event(child, ChildEventKind.RECALLED, f"{recall.asked} jobs {recall.why}")

    # -- stopping and killing ----------------------------------------------------

    def _retire(self, child: ChildProcess, now: float, why: str) -> None:
        """No more jobs for a busy child: STOP now. It finishes its running job (and any
        it takes before reading STOP); what it never started comes back when it exits,
        the one proof (taken back with SKIP here, jobs ran twice in the kill storm)."""
        child.retire()
        if not child.started:
            self._stop(child, now, why, told=False)

    def _stop(self, child: ChildProcess, now: float, why: str, *, told: bool = True) -> None:
        if child.state == IDLE:
            self._idle.remove(child)
        child.stop(now, told=told)
        self._deadlines.arm(child, child.exit_deadline)
        self._size_dirty = True
        self._event(child, ChildEventKind.STOPPING, why)

    def _kill(self, child: ChildProcess, now: float, kind: str | None, message: str,
              sig: int = signal.SIGTERM, *, boot: bool = False) -> None:
        """Signal the child's whole group; with SIGTERM, SIGKILL follows after the
        grace. ``kind`` is what the job in flight, if any, failed of."""
        if not child.can_signal(sig):
            return
        if child.state == IDLE:
            self._idle.remove(child)
        child.kill(sig, now, kind, message, boot=boot)
        self._deadlines.arm(child, child.exit_deadline)
        self._size_dirty = True
        self._event(child, ChildEventKind.KILLED, message)

    def _event(self, child: ChildProcess, what: ChildEventKind, detail: str) -> None:
        self._outcomes.append(ChildEvent(child.pid, child.worker_no, what, detail))
        self._log.debug("%s %s %s", child.describe(), what, detail)

