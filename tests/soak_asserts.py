"""What every short kill storm in the suite must show (``scripts/chaos/soak.py``): each
job final, none run twice without a reason the checks accept, the kills it asked for
made, and no violation. Runs that began while their start was still unwritten when their
supervisor was SIGKILLed go back uncharged by design (scripts/chaos/check.py): only those,
begun within half a second of the kill, in its children, are exempt."""

from __future__ import annotations

from scripts.chaos.soak import SoakReport, SoakSettings, summary


def assert_storm_held(report: SoakReport, settings: SoakSettings, *,
                      min_child_kills: int) -> None:
    """Fail with the run's summary unless the storm held every guarantee."""
    text = summary(report, settings)
    check = report.check
    assert check is not None, text
    assert set(check.states) <= {"completed", "discarded"}, text
    assert check.jobs == settings.jobs, text
    assert report.child_kills >= min_child_kills, text
    assert report.supervisor_kills == settings.supervisor_kills, text
    assert report.db_restarts == settings.db_restarts, text
    assert check.unexplained_reruns == 0, text
    assert not report.violations, text
    assert report.passed, text
