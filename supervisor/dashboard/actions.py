"""The write side: retry, cancel, pause, resume. Each needs the operator token (see
``supervisor.dashboard.auth``).

One handler serves a page's form and a script alike. A request under ``/api/``, or one
that sends ``Authorization``, or one whose body is not a form, gets JSON back; a form
posted by a page gets a 303 back to the page it came from, naming what was done with a
fixed ``?done=`` word.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from supervisor import admin
from supervisor.admin import AdminError, batch_actions, parse_job_id
from supervisor.dashboard import auth, queries, search
from supervisor.dashboard.render import JSONResponse

FORM_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_BYTES = 16 * 1024  # a token and nothing else is posted


def wants_json(request: Request) -> bool:
    """True when the answer (or refusal) should be JSON rather than a page: a Bearer
    token or the token header marks a script (a proxy's Basic authentication does not:
    the browser sends that with every page's form)."""
    if request.url.path.startswith("/api/") or auth.TOKEN_HEADER in request.headers:
        return True
    if auth.bearer(request.headers.get("authorization")) is not None:
        return True
    return request.method == "POST" and not _is_form(request)


def _is_form(request: Request) -> bool:
    return request.headers.get("content-type", "").split(";")[0].strip().lower() == FORM_TYPE


async def _offered_token(request: Request) -> str | None:
    """The token an action offers: the ``X-Supervisor-Token`` header, a Bearer token, or
    the form's ``token`` field. An ``Authorization`` header of another scheme (a
    reverse proxy's Basic authentication, which the browser adds to every request) does
    not hide the field: behind such a proxy every button answered 403 (issue 50)."""
    header = request.headers.get(auth.TOKEN_HEADER)
    if header is not None:
        return header.strip() or None
    offered = auth.bearer(request.headers.get("authorization"))
    if offered is not None:
        return offered
    if not _is_form(request):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise AdminError("the posted form is too large", usage=True)
    values = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
    tokens = values.get("token")
    return tokens[0] if tokens else None


async def _act(request: Request, func: Callable[..., Any], *args: Any) -> Any:
    auth.check(request.app.state.settings.token, await _offered_token(request))
    try:
        return await request.app.state.db.run(func, *args)
    finally:
        request.app.state.finished.expire()


async def retry_job(request: Request) -> Response:
    """``POST /jobs/<id>/retry``: a discarded, cancelled or retryable job runs again."""
    job_id = parse_job_id(request.path_params["job_id"])
    was = await _act(request, queries.retry, job_id)
    return _done(request, {"id": job_id, "action": "retry", "was": was, "state": "available"},
                 f"/jobs/{job_id}?done=retried")


async def cancel_job(request: Request) -> Response:
    """``POST /jobs/<id>/cancel``: an unfinished job ends as cancelled."""
    job_id = parse_job_id(request.path_params["job_id"])
    was = await _act(request, queries.cancel, job_id)
    return _done(request, {"id": job_id, "action": "cancel", "was": was, "state": "cancelled"},
                 f"/jobs/{job_id}?done=cancelled")


async def pause_queue(request: Request) -> Response:
    """``POST /queues/<name>/pause``: supervisors stop claiming from the queue; with
    ``?stop_running=1`` its running jobs are also told to stop and go back unspent (as
    ``supervisor queues pause --stop-running``)."""
    flag = request.query_params.get("stop_running", "0")
    if flag not in ("0", "1", "false", "true"):
        raise AdminError(f"stop_running is 1 or 0, not {flag!r}", usage=True)
    return await _switch(request, paused=True, stop_running=flag in ("1", "true"))


async def resume_queue(request: Request) -> Response:
    """``POST /queues/<name>/resume``: supervisors claim from the queue again."""
    return await _switch(request, paused=False)


async def _switch(request: Request, *, paused: bool, stop_running: bool = False) -> Response:
    name = request.path_params["name"]
    done = await _act(request, queries.set_paused, name, paused, stop_running)
    word = "paused" if paused else "resumed"
    return _done(request, {"action": "pause" if paused else "resume", **done},
                 f"/?done={word}#queue-{quote(name, safe='')}")


async def schedule_action(request: Request) -> Response:
    """``POST /schedules/<name>/pause|resume|run``: stop firing a schedule, fire it
    again from its next slot, or enqueue its job now."""
    name, action = request.path_params["name"], request.path_params["action"]
    if action not in ("pause", "resume", "run"):
        raise AdminError(f"unknown schedule action {action!r}", usage=True)
    done = await _act(request, admin.pages.schedule_action, name, action)
    word = {"pause": "schedule-paused", "resume": "schedule-resumed", "run": "schedule-run"}
    return _done(request, done, f"/schedules?done={word[action]}")


async def batch_action(request: Request) -> Response:
    """``POST /batches/<id>/<action>[?priority=N]``: cancel, retry (the failed members),
    pause, resume or priority, on the whole batch, in chunks
    (``supervisor.admin.batch_actions``): ``{batch_id, action, changed, seconds}``; a
    form gets a 303 back to the batch's page. An unknown batch is a 404; a finished
    one, or an action that does not apply, a 409 with nothing changed."""
    batch_id = batch_actions.parse_batch_id(request.path_params["batch_id"])
    action = batch_actions.check_action(request.path_params["action"])
    priority = None
    if action == "priority":
        priority = batch_actions.parse_priority(request.query_params.get("priority"))
    done = await _act(request, batch_actions.act, batch_id, action, priority)
    return _done(request, done, f"/batches/{batch_id}?done=batch-{action}")


def bulk_filter(params: dict[str, str]) -> tuple[dict[str, Any], admin.bulk.BulkFilter]:
    """The job list's filters (as ``/jobs`` reads them) and the bulk action's filter
    made of them; ``AdminError`` (usage) when a search is given: a bulk action takes
    state, queue, kind and the created range only, so it does what the count said."""
    filters = search.parse_filters(params)
    if filters["q"] is not None:
        raise AdminError("a bulk action takes state, queue, kind and the created range; "
                         "clear the search (q) first", usage=True)
    return filters, admin.bulk.BulkFilter(
        state=filters["state"], queue=filters["queue"], kind=filters["kind"],
        created_after=filters["created_after"], created_before=filters["created_before"])


def _bulk_params(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if k not in ("expect", "done")}


async def bulk_count(request: Request) -> Response:
    """``GET /api/jobs/bulk/<action>?<filters>``: how many jobs the action would touch:
    ``{action, filters, matching, cap}``; ``matching`` above ``cap`` means more than one
    request can do."""
    action = request.path_params["action"]
    admin.bulk.check_action(action)
    filters, flt = bulk_filter(_bulk_params(request))
    matching = await request.app.state.db.run(admin.bulk.count, action, flt)
    return JSONResponse({"action": action, "filters": filters, "matching": matching,
                         "cap": admin.bulk.CAP})


async def bulk_act(request: Request) -> Response:
    """``POST /jobs/bulk/<action>?<filters>&expect=N``: retry, cancel or delete at most
    N of the jobs matching the filters (N: the count the operator confirmed), in
    batches. ``{action, changed, skipped}``; a form gets a 303 back to the job list."""
    action = request.path_params["action"]
    admin.bulk.check_action(action)
    _filters, flt = bulk_filter(_bulk_params(request))
    expect = request.query_params.get("expect", "")
    if not expect.isdigit() or not 0 < int(expect) <= admin.bulk.CAP:
        raise AdminError(f"expect is the number of jobs confirmed, 1 to {admin.bulk.CAP} "
                         f"(GET /api/jobs/bulk/{action} counts them); got {expect!r}",
                         usage=True)
    result = await _act(request, admin.bulk.run, action, flt, int(expect))
    back = urlencode({**_bulk_params(request), "done": "bulk", "bulk": action,
                      "changed": result.changed, "skipped": result.skipped})
    return _done(request, result._asdict(), f"/jobs?{back}")


def _done(request: Request, data: dict[str, Any], page: str) -> Response:
    if wants_json(request):
        return JSONResponse(data)
    return RedirectResponse(page, status_code=303)


ROUTES = [
    # Before /jobs/<id>/retry, which would otherwise take "bulk" for a job id.
    Route("/api/jobs/bulk/{action}", bulk_count, methods=["GET"]),
] + [
    Route(f"{prefix}/jobs/bulk/{{action}}", bulk_act, methods=["POST"])
    for prefix in ("", "/api")
] + [
    Route(f"{prefix}/jobs/{{job_id}}/retry", retry_job, methods=["POST"])
    for prefix in ("", "/api")
] + [
    Route(f"{prefix}/jobs/{{job_id}}/cancel", cancel_job, methods=["POST"])
    for prefix in ("", "/api")
] + [
    Route(f"{prefix}/queues/{{name:path}}/pause", pause_queue, methods=["POST"])
    for prefix in ("", "/api")
] + [
    Route(f"{prefix}/queues/{{name:path}}/resume", resume_queue, methods=["POST"])
    for prefix in ("", "/api")
] + [
    Route(f"{prefix}/schedules/{{name:path}}/{{action}}", schedule_action, methods=["POST"])
    for prefix in ("", "/api")
] + [
    Route(f"{prefix}/batches/{{batch_id}}/{{action}}", batch_action, methods=["POST"])
    for prefix in ("", "/api")
]
