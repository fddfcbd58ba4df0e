"""The read side: every page and its JSON twin under ``/api/``.

Each view asks ``queries`` for plain data once and hands the same data either to a
template or to the JSON response, so a script reading ``/api/jobs`` sees what the page
shows. Errors (bad filters, unknown job, database away) are raised and turned into
responses by the app's handlers.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shared.costs import batch_cost
from shared.jobs import STATES
from supervisor import admin
from supervisor.admin import CANCEL_STATES, RETRY_STATES, batch_actions, parse_job_id
from supervisor.dashboard import charts, detail, queries
from supervisor.dashboard.render import JSONResponse, page

REFRESH_HEADER = "x-dashboard-refresh"


def _db(request: Request):
    return request.app.state.db


async def _finished(request: Request) -> tuple[admin.FinishedTally, float]:
    return await request.app.state.finished.get(_db(request))


async def _overview(request: Request) -> dict[str, Any]:
    finished, age = await _finished(request)
    data = await _db(request).run(queries.overview, finished)
    return data | {"finished_age": age}


async def _jobs(request: Request) -> tuple[dict[str, Any], dict[str, Any]]:
    filters = queries.parse_filters(dict(request.query_params))
    return filters, await _db(request).run(queries.jobs, filters)


async def _job(request: Request) -> dict[str, Any]:
    job_id = parse_job_id(request.path_params["job_id"])
    return await _db(request).run(queries.job, job_id)


async def queues_page(request: Request) -> Response:
    """``/``: every queue with counts by state, rate, oldest waiting job, paused; jobs
    finished per minute over the last hour and per hour over the last day."""
    db = _db(request)
    hour = await db.run(admin.history.finished, *admin.history.HOUR)
    # The day's chart sits outside the part a live refresh replaces: drawn once per
    # page load, so an open tab's refresh does not read a day of history each time.
    day_chart = None
    if REFRESH_HEADER not in request.headers:
        day = await db.run(admin.history.finished, *admin.history.DAY)
        day_chart = charts.line_chart("Jobs finished per hour, last day", day)
    return page(request, "queues.html", title="Queues", states=admin.COUNTED,
                hour_chart=charts.line_chart("Jobs finished per minute, last hour", hour),
                day_chart=day_chart, **await _overview(request))


async def jobs_page(request: Request) -> Response:
    """``/jobs?queue=&kind=&state=&q=``: jobs newest first, filtered, paged by id."""
    filters, found = await _jobs(request)
    # The filter form sits outside the part a refresh replaces: a refresh (which says
    # so in a header) skips the pass over the table that lists the queue names.
    names: list[str] = []
    if REFRESH_HEADER not in request.headers:
        names = await _db(request).run(queries.queue_names)
    bulk_params = {k: request.query_params.get(k) for k in
                   ("state", "queue", "kind", "created_after", "created_before")}
    # Past QUEUE_CHOICES names a list would be a page of its own: a text box instead.
    too_many = len(names) > queries.QUEUE_CHOICES
    return page(request, "jobs.html", title="Jobs", states=STATES,
                queue_names=[] if too_many else names, queue_box=too_many,
                queue_choices=queries.QUEUE_CHOICES,
                filters=filters, bulk_params=bulk_params, **found)


async def job_page(request: Request) -> Response:
    """``/jobs/<id>``: one job's args, result, progress and every error's traceback."""
    job = await _job(request)
    return page(request, "job.html", title=f"Job {job['id']}", job=job,
                can_retry=job["state"] in RETRY_STATES,
                can_cancel=job["state"] in CANCEL_STATES)


async def supervisors_page(request: Request) -> Response:
    """``/supervisors``: live supervisors with host, pid, busy children and beat."""
    return page(request, "supervisors.html", title="Supervisors",
                **await _db(request).run(queries.supervisors))


async def bulk_page(request: Request) -> Response:
    """``/jobs/bulk/<action>?<filters>``: how many jobs the action would touch, and a
    button to confirm exactly that many (none when nothing matches)."""
    from supervisor.dashboard.actions import bulk_filter

    action = request.path_params["action"]
    admin.bulk.check_action(action)
    params = {k: v for k, v in request.query_params.items() if k not in ("expect", "done")}
    filters, flt = bulk_filter(params)
    matching = await _db(request).run(admin.bulk.count, action, flt)
    expect = min(matching, admin.bulk.CAP)
    return page(request, "bulk.html", title=f"Bulk {action}", action=action,
                filters=filters, params=params, matching=matching, cap=admin.bulk.CAP,
                states=admin.bulk.ACTIONS[action],
                target=f"/jobs/bulk/{action}?" + urlencode({**params, "expect": expect}))


async def schedules_page(request: Request) -> Response:
    """``/schedules``: every schedule, its next and last fire, pause/resume/run now."""
    return page(request, "schedules.html", title="Schedules",
                schedules=await _db(request).run(admin.pages.schedules))


async def batches_page(request: Request) -> Response:
    """``/batches``: the newest batches, members by state, progress, callback, ETA."""
    return page(request, "batches.html", title="Batches", states=STATES,
                batches=await _db(request).run(admin.pages.batches))


async def kinds_page(request: Request) -> Response:
    """``/kinds``: per kind, jobs in flight, the last day's finished ones, failure
    rate, run time, CPU and peak memory percentiles."""
    return page(request, "kinds.html", title="Kinds", states=STATES,
                hours=admin.pages.KIND_WINDOW_HOURS,
                kinds=await _db(request).run(admin.pages.kinds))


async def limits_page(request: Request) -> Response:
    """``/limits``: every queue's global limits and each supervisor's slice."""
    return page(request, "limits.html", title="Global limits",
                limits=await _db(request).run(admin.pages.limits))


def _finished_charts(history: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    # Throughput and failures, then wait and run time, over the hour and the day.
    return {
        "finished_hour": charts.line_chart("Jobs finished per minute, last hour",
                                           history["hour"]),
        "finished_day": charts.line_chart("Jobs finished per hour, last day",
                                          history["day"]),
        "times_hour": charts.line_chart(
            "Wait and run time per minute, last hour", history["hour"],
            ("run_mean", "run_p95", "wait_mean"), fmt=charts.seconds, summary="max"),
        "times_day": charts.line_chart(
            "Wait and run time per hour, last day", history["day"],
            ("run_mean", "run_p95", "wait_mean"), fmt=charts.seconds, summary="max"),
        # The finished jobs' CPU time added up per bucket (their last attempts' usage).
        "cpu_hour": charts.line_chart("CPU seconds per minute, last hour", history["hour"],
                                      ("cpu_seconds",), fmt=charts.seconds),
        "cpu_day": charts.line_chart("CPU seconds per hour, last day", history["day"],
                                     ("cpu_seconds",), fmt=charts.seconds),
    }


async def _queue_detail(request: Request) -> dict[str, Any]:
    finished, _age = await _finished(request)
    return await _db(request).run(detail.queue, request.path_params["name"], finished)


async def queue_page(request: Request) -> Response:
    """``/queues/<name>``: one queue's figures, its drain forecast, the last day's
    kinds, and charts of throughput, failures, wait and run time, depth and oldest
    wait over the last hour and day."""
    data = await _queue_detail(request)
    depth = data["depth"]
    return page(request, "queue.html", title=f"Queue {data['queue']['name']}",
                states=admin.COUNTED, **data, **_finished_charts(data["history"]),
                depth_hour=charts.line_chart("Jobs available and running, last hour",
                                             depth["hour"], ("available", "running"),
                                             summary="max"),
                depth_day=charts.line_chart("Jobs available and running, last day",
                                            depth["day"], ("available", "running"),
                                            summary="max"),
                oldest_hour=charts.line_chart("Oldest wait, last hour", depth["hour"],
                                              ("oldest_wait",), fmt=charts.seconds,
                                              summary="max"),
                oldest_day=charts.line_chart("Oldest wait, last day", depth["day"],
                                             ("oldest_wait",), fmt=charts.seconds,
                                             summary="max"))


async def kind_page(request: Request) -> Response:
    """``/kinds/<name>``: one kind's jobs in flight, the last day's totals per queue,
    CPU and peak memory percentiles, and charts of throughput, failures, wait and run
    time and CPU seconds over the last hour and day."""
    data = await _db(request).run(detail.kind, request.path_params["name"])
    return page(request, "kind.html", title=f"Kind {data['kind']}", states=STATES,
                **data, **_finished_charts(data["history"]))


async def api_queue(request: Request) -> Response:
    """``/api/queues/<name>``: the queue page's data."""
    return JSONResponse(await _queue_detail(request))


async def api_kind(request: Request) -> Response:
    """``/api/kinds/<name>``: the kind page's data."""
    return JSONResponse(await _db(request).run(detail.kind, request.path_params["name"]))


async def api_schedules(request: Request) -> Response:
    """``/api/schedules``: the schedules page's data."""
    return JSONResponse({"schedules": await _db(request).run(admin.pages.schedules)})


async def _batch(request: Request) -> dict[str, Any]:
    batch_id = batch_actions.parse_batch_id(request.path_params["batch_id"])
    found = await _db(request).run(admin.pages.batches, 1, batch_id)
    if not found:
        raise batch_actions.UnknownBatch(f"batch {batch_id} does not exist")
    spent = await _db(request).run(batch_cost, batch_id)
    return found[0] | {"cost": spent.as_dict(), "cost_text": spent.describe()}


async def batch_page(request: Request) -> Response:
    """``/batches/<id>``: one batch, members by state, and its actions (cancel, retry
    the failed, pause, resume, priority), each counted and confirmed on a page of its
    own."""
    batch = await _batch(request)
    return page(request, "batch.html", title=f"Batch {batch['id']}", states=STATES,
                batch=batch, actions=batch_actions.ACTION_STATES)


async def batch_confirm_page(request: Request) -> Response:
    """``/batches/<id>/<action>[?priority=N]``: how many members the action would
    touch, and a button to do it."""
    batch = await _batch(request)
    action = batch_actions.check_action(request.path_params["action"])
    priority = None
    if action == "priority":
        priority = batch_actions.parse_priority(request.query_params.get("priority"))
    matching = await _db(request).run(batch_actions.count, batch["id"], action)
    target = f"/batches/{batch['id']}/{action}"
    if priority is not None:
        target += "?" + urlencode({"priority": priority})
    return page(request, "batch_confirm.html", title=f"Batch {batch['id']}: {action}",
                batch=batch, action=action, priority=priority, matching=matching,
                states=batch_actions.ACTION_STATES[action], target=target)


async def api_batch(request: Request) -> Response:
    """``/api/batches/<id>``: one batch, as the batches page shows it."""
    return JSONResponse(await _batch(request))


async def api_batches(request: Request) -> Response:
    """``/api/batches``: the batches page's data."""
    return JSONResponse({"batches": await _db(request).run(admin.pages.batches)})


async def api_kinds(request: Request) -> Response:
    """``/api/kinds``: the kinds page's data."""
    return JSONResponse({"hours": admin.pages.KIND_WINDOW_HOURS,
                         "kinds": await _db(request).run(admin.pages.kinds)})


async def api_limits(request: Request) -> Response:
    """``/api/limits``: the global limits page's data."""
    return JSONResponse({"limits": await _db(request).run(admin.pages.limits)})


async def api_history(request: Request) -> Response:
    """``/api/history?minutes=60``: finished jobs per minute (completed, failed,
    retried, mean run and wait time) over the last ``minutes`` (1 to 1440)."""
    text = request.query_params.get("minutes", "60")
    if not text.isdigit() or not 1 <= int(text) <= 1440:
        raise admin.AdminError(f"minutes is an integer from 1 to 1440; got {text[:20]!r}",
                               usage=True)
    return JSONResponse({"minutes": await _db(request).run(admin.history.finished,
                                                            int(text), "minute")})


async def api_overview(request: Request) -> Response:
    """``/api/status``: what ``supervisor status --json`` prints, plus totals."""
    return JSONResponse(await _overview(request))


async def api_queues(request: Request) -> Response:
    """``/api/queues``: the queues page's data."""
    finished, age = await _finished(request)
    return JSONResponse({"queues": await _db(request).run(queries.queues, finished),
                         "finished_age": age})


async def api_jobs(request: Request) -> Response:
    """``/api/jobs``: the jobs page's data, same filters; ``next_before`` pages on."""
    filters, found = await _jobs(request)
    return JSONResponse({"filters": filters, **found})


async def api_job(request: Request) -> Response:
    """``/api/jobs/<id>``: every column of one job."""
    return JSONResponse(await _job(request))


async def api_supervisors(request: Request) -> Response:
    """``/api/supervisors``: live supervisors and the count of stale ones."""
    return JSONResponse(await _db(request).run(queries.supervisors))


ROUTES = [
    Route("/", queues_page, name="queues"),
    Route("/jobs", jobs_page, name="jobs"),
    Route("/jobs/bulk/{action}", bulk_page, name="bulk"),
    Route("/jobs/{job_id}", job_page, name="job"),
    Route("/supervisors", supervisors_page, name="supervisors"),
    Route("/schedules", schedules_page, name="schedules"),
    Route("/batches", batches_page, name="batches"),
    Route("/batches/{batch_id}", batch_page, name="batch"),
    Route("/batches/{batch_id}/{action}", batch_confirm_page, methods=["GET"]),
    Route("/kinds", kinds_page, name="kinds"),
    Route("/limits", limits_page, name="limits"),
    Route("/queues/{name:path}", queue_page, name="queue"),
    Route("/kinds/{name:path}", kind_page, name="kind"),
    Route("/api/queues/{name:path}", api_queue),
    Route("/api/kinds/{name:path}", api_kind),
    Route("/api/schedules", api_schedules),
    Route("/api/history", api_history),
    Route("/api/batches", api_batches),
    Route("/api/batches/{batch_id}", api_batch),
    Route("/api/kinds", api_kinds),
    Route("/api/limits", api_limits),
    Route("/api/status", api_overview),
    Route("/api/queues", api_queues),
    Route("/api/jobs", api_jobs),
    Route("/api/jobs/{job_id}", api_job),
    Route("/api/supervisors", api_supervisors),
]
