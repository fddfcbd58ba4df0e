"""The handlers of the README and of docs/producers.md and docs/batches.md, as written
there (bodies the docs leave as ``...`` filled in), for tests/test_doc_examples.py."""

from __future__ import annotations

from workers import Discard, Snooze, SoftTimeout, current_job, job

UPSTREAM_READY: set[int] = set()
CLEANED: list[int] = []


# README, "Example"
@job(queue="images", max_attempts=5, timeout=120)
def resize(path: str, width: int) -> dict:
    if not path.endswith(".png"):
        raise Discard("not a png")           # no retry
    current_job().progress(1, 3, "decoding")
    ...                                       # CPU-heavy work, in a child process
    return {"ok": True, "width": width}       # stored as the job's result


# README, "Fan out, fan in" and docs/batches.md
@job(queue="tiles")
def render(x: int, y: int) -> dict:
    return {"x": x, "y": y, "pixels": x * y}


@job(queue="tiles")
def assemble(path: str) -> str:
    batch = current_job().batch               # the batch this callback closes
    total = 0
    for member in batch.results():            # .id .state .result .errors, streamed
        total += member.result["pixels"]
    return f"{path}: {total}"


@job
def publish(day: str) -> str:
    return f"published {day}"


# README, "Per supervisor or global"
@job(queue="reports")
def build_report(month: str) -> str:
    return f"report {month} for {current_job().args['month']}"


# README, "Soft timeouts and snoozing"
def build(report_id):
    return report_id


def remove_partial_files(report_id):
    CLEANED.append(report_id)


def upstream_ready(order_id):
    return order_id in UPSTREAM_READY


@job(timeout=30, soft_timeout=25)       # SoftTimeout at 25 s, hard kill at 30 s
def export(report_id):
    try:
        build(report_id)
    except SoftTimeout:
        remove_partial_files(report_id)  # clean up, then let the attempt fail
        raise


@job
def wait_for_upstream(order_id):
    if not upstream_ready(order_id):
        raise Snooze(60)                 # run again in 60 s; the attempt is not spent


# README, "Periodic jobs"
@job(queue="reports", cron="0 3 * * *", timezone="Europe/Berlin")  # or 6 fields, seconds first
def nightly() -> None: ...


@job(every=30)
def poll_feed() -> None: ...


# docs/producers.md
@job
def send_mail(to: str) -> str:
    return f"sent to {to}"
