"""The dispatch path's numbers live in one table (issue 41): ``supervisor.tuning``.

Read from the source (``ast``), nothing imported but the table: a numeric literal in a
dispatch-path module fails here unless it is 0, 1 or -1, or this file's allow-list names
it with its reason (constants of the wire format, SQL and text limits, float tolerances,
and the engine's polling and housekeeping, which are not the dispatch path). So a new
inline number shows in review as an edit to this list or as a field of the table.
"""

from __future__ import annotations

import ast
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path

import pytest

from supervisor.tuning import DEFAULT, Tuning

ROOT = Path(__file__).resolve().parent.parent

# Where the rules of how much is claimed, when, into which pipe and when it is taken
# back are applied.
DISPATCH_PATH = (
    "supervisor/engine/depth.py",
    "supervisor/engine/planner.py",
    "supervisor/engine/allotment.py",
    "supervisor/engine/claims.py",
    "supervisor/engine/admitted.py",
    "supervisor/engine/outbox.py",
    "supervisor/engine/engine.py",
    "supervisor/engine/dispatcher.py",
    "supervisor/engine/fencing.py",
    "supervisor/engine/polling.py",
    "supervisor/engine/housekeeping.py",
    "supervisor/engine/draining.py",
    "supervisor/engine/reads.py",
    "supervisor/pool/runtimes.py",
    "supervisor/pool/recalls.py",
    "supervisor/pool/pool.py",
    "supervisor/pool/head.py",
    "supervisor/pool/overruns.py",
    "supervisor/pool/discards.py",
    "supervisor/pool/memorywatch.py",
    "supervisor/pool/news.py",
    "supervisor/pool/rooms.py",
)

ALWAYS = {0, 1, -1}

# (module, module-level name) -> why its number is not a dispatch rule.
NAMED: dict[tuple[str, str], str] = {
    ("supervisor/engine/allotment.py", "_EPS"): "a float's rounding error",
    ("supervisor/pool/runtimes.py", "_ROUNDING"): "a float's rounding error",
    ("supervisor/pool/head.py", "BUSY_CPU_SHARE"):
        "liveness: the CPU share that tells a silent child busy from hung, not a dispatch rule",
    ("supervisor/engine/outbox.py", "REDUCED_MESSAGE"):
        "bytes of a refused failure's message written again: a storage limit",
    ("supervisor/engine/outbox.py", "REDUCED_TRACEBACK"):
        "bytes of a refused failure's traceback written again: a storage limit",
    ("supervisor/engine/housekeeping.py", "BURST_CHECK_INTERVAL"): "housekeeping: --burst's end",
    ("supervisor/engine/housekeeping.py", "KIND_MEMORY_EVERY"): "housekeeping: kind memory",
    ("supervisor/engine/housekeeping.py", "UNHANDLED_KINDS_SHOWN"):
        "a log line names the first ten unhandled kinds",
    ("supervisor/engine/polling.py", "PROMOTE_AGAIN"): "polling: promotion of due jobs",
    ("supervisor/engine/polling.py", "MIN_POLL_GAP"): "polling: event-driven polls",
    ("supervisor/engine/polling.py", "POLL_JITTER_LOW"): "polling: jitter",
    ("supervisor/engine/polling.py", "POLL_JITTER_HIGH"): "polling: jitter",
    ("supervisor/engine/fencing.py", "RENEWALS_PER_LEASE"):
        "lease keeping: renewed three times per lease (shared.defaults' rule)",
}

# (module, value, a fragment of its line) -> why the inline number is not a rule.
INLINE: dict[tuple[str, float, str], str] = {
    ("supervisor/engine/outbox.py", 2, "half = (limit - len(_CUT)) // 2"):
        "a cut text keeps both its ends: the start and the end halves",
    ("supervisor/pool/pool.py", 2, "order = {IDLE: 0, BOOTING: 1, BUSY: 2}"):
        "an order of child states, not an amount",
}


@dataclass(frozen=True)
class Literal:
    """A numeric literal found in a module."""

    module: str
    line: int
    value: float
    text: str  # its source line
    name: str | None  # the module-level name it is assigned to, if any


def literals(module: str, source: str) -> list[Literal]:
    """Every int or float literal of ``source`` (booleans aside)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    named: dict[int, str] = {}
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        for target in targets:
            if isinstance(target, ast.Name):
                for node in ast.walk(stmt):
                    named[id(node)] = target.id
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, int | float)
                and not isinstance(node.value, bool)):
            found.append(Literal(module, node.lineno, node.value,
                                 lines[node.lineno - 1], named.get(id(node))))
    return found


def unlisted(found: list[Literal]) -> list[Literal]:
    """The literals neither always allowed nor on the allow-list."""
    bad = []
    for lit in found:
        if lit.value in ALWAYS or (lit.module, lit.name) in NAMED:
            continue
        if any(module == lit.module and value == lit.value and fragment in lit.text
               for module, value, fragment in INLINE):
            continue
        bad.append(lit)
    return bad


def test_the_dispatch_path_has_no_number_outside_the_table():
    bad = []
    for module in DISPATCH_PATH:
        bad += unlisted(literals(module, (ROOT / module).read_text()))
    assert not bad, "numbers outside supervisor/tuning.py:\n" + "\n".join(
        f"{lit.module}:{lit.line}: {lit.value!r}: {lit.text.strip()}" for lit in bad)


def test_a_new_inline_number_is_found():
    source = "def depth(run_time):\n    return max(2, round(0.1 / run_time))\n"
    found = unlisted(literals("supervisor/engine/depth.py", source))
    assert [(lit.line, lit.value) for lit in found] == [(2, 2), (2, 0.1)]
    source = "LONG_JOB = 0.1  # seconds\n"
    assert [lit.name for lit in unlisted(literals("supervisor/engine/depth.py", source))] == [
        "LONG_JOB"]


def test_every_allowance_still_matches_a_line():
    """An allow-list entry whose number went away goes too: the list stays short."""
    found = [lit for module in DISPATCH_PATH
             for lit in literals(module, (ROOT / module).read_text())]
    for module, name in NAMED:
        assert any(lit.module == module and lit.name == name for lit in found), name
    for module, value, fragment in INLINE:
        assert any(lit.module == module and lit.value == value and fragment in lit.text
                   for lit in found), fragment


def test_every_field_has_a_reason_and_a_benchmark_that_exists():
    rules = list(DEFAULT.rules())
    assert len(rules) >= 30
    for rule in rules:
        assert rule.reason and len(rule.reason) > 20, rule.name
        assert rule.bench.startswith("scripts/bench/"), rule.name
        assert (ROOT / rule.bench).is_file(), (rule.name, rule.bench)
        assert isinstance(rule.value, int | float) and rule.value > 0, rule.name


def test_the_table_is_frozen_and_a_test_may_vary_it():
    with pytest.raises(FrozenInstanceError):
        DEFAULT.long_job = 1.0  # type: ignore[misc]
    varied = Tuning(long_job=0.2)
    assert varied.long_job == 0.2 and DEFAULT.long_job == 0.1
