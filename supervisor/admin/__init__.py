"""The admin room: the operator's queries, shared by ``supervisor status|jobs|queues``
and the dashboard, so the two never disagree and neither imports the other.

Plain functions over an autocommit psycopg connection returning plain data (dicts and
lists, JSON-ready) or small typed records; formatting belongs to ``supervisor.cli`` and
``supervisor.dashboard``. A refusal is ``AdminError`` with a one-line message (``usage``
when the input itself is malformed).

Door:
- ``status`` (queues, supervisors, work nobody serves), ``queue_stats``,
  ``finished_counts`` (within ``FINISHED_COUNT_BUDGET``, as a ``FinishedTally``),
  ``COUNTED`` (the counts a queue shows),
  ``live_supervisors``, ``public_supervisor``, ``stale_supervisors``, ``set_paused``;
- ``list_jobs``, ``get_job``, ``retry_job``, ``retry_jobs`` (a ``BulkRetry``),
  ``cancel_job``, ``cancelled_dependents``,
  ``missing_dependencies``, ``parse_job_id``, ``check_state``,
  ``RETRY_STATES``, ``CANCEL_STATES``;
- ``all_limits``, ``live_slices``, ``set_limits``, ``parse_whole``, ``parse_rate``;
- ``kind_usage``: what each kind cost over recent finished jobs (``status --kinds``);
  ``key_usage``: what each concurrency key's jobs cost over the last day, every
  attempt counted (``status --keys``);
- ``explain``: what each live supervisor's tuning rules decide per queue
  (``status --explain``);
- ``horizon``, ``describe_horizon``: who holds the MVCC horizon back, and its cost;
- ``storage``, ``describe_storage``: the hot table and the finished jobs' archives;
- ``AdminError``, ``check_queue_name``;
- ``pages``: the dashboard's schedules, batches, kinds and limits pages;
- ``history``: the charts' finished jobs and queue depth per bucket of time;
- ``batch_actions``: a batch's actions for the dashboard, counted and confirmed;
- ``bulk``: retry, cancel or delete the jobs matching a filter, counted, capped and
  batched.
"""

from supervisor.admin import batch_actions, bulk, history, pages
from supervisor.admin.explain import explain
from supervisor.admin.horizon import describe_horizon, horizon
from supervisor.admin.jobs import (
    CANCEL_STATES,
    RETRY_STATES,
    BulkRetry,
    cancel_job,
    cancelled_dependents,
    check_state,
    get_job,
    list_jobs,
    missing_dependencies,
    parse_job_id,
    retry_job,
    retry_jobs,
)
from supervisor.admin.limits import all_limits, live_slices, parse_rate, parse_whole, set_limits
from supervisor.admin.refusals import AdminError, check_queue_name
from supervisor.admin.resources import describe as describe_waiting
from supervisor.admin.resources import describe_held as describe_resources_held
from supervisor.admin.resources import waiting_for_resources
from supervisor.admin.status import (
    COUNTED,
    FINISHED_COUNT_BUDGET,
    FINISHED_COUNT_SHARE,
    LIVE_AFTER_SECONDS,
    FinishedTally,
    finished_counts,
    live_supervisors,
    public_supervisor,
    queue_stats,
    set_paused,
    stale_supervisors,
    status,
)
from supervisor.admin.storage import describe_storage, storage
from supervisor.admin.usage import key_usage, kind_usage

__all__ = [
    "CANCEL_STATES",
    "COUNTED",
    "FINISHED_COUNT_BUDGET",
    "FINISHED_COUNT_SHARE",
    "LIVE_AFTER_SECONDS",
    "RETRY_STATES",
    "AdminError",
    "BulkRetry",
    "FinishedTally",
    "all_limits",
    "batch_actions",
    "bulk",
    "cancel_job",
    "cancelled_dependents",
    "check_queue_name",
    "check_state",
    "describe_horizon",
    "describe_resources_held",
    "describe_storage",
    "describe_waiting",
    "explain",
    "finished_counts",
    "get_job",
    "history",
    "horizon",
    "key_usage",
    "kind_usage",
    "list_jobs",
    "live_slices",
    "live_supervisors",
    "missing_dependencies",
    "pages",
    "parse_job_id",
    "parse_rate",
    "parse_whole",
    "public_supervisor",
    "queue_stats",
    "retry_job",
    "retry_jobs",
    "set_limits",
    "set_paused",
    "stale_supervisors",
    "status",
    "storage",
    "waiting_for_resources",
]
