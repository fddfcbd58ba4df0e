"""The admission room: which claimed job may start now, by what it reserves.

Door: ``Budget`` and ``make_budget`` (this supervisor's CPU and memory budget),
``Admission`` (the book of reservations held by started jobs, the per-kind default
memory, the patience that keeps big jobs from starving) and ``Need``.

Nothing here talks to the database or to children: the engine asks ``Admission`` which
waiting job to give an idle child and tells it when a job ends.
"""

from supervisor.admission.book import Admission, Need
from supervisor.admission.budget import MIN_MEMORY_BUDGET, Budget, make_budget

__all__ = ["MIN_MEMORY_BUDGET", "Admission", "Budget", "Need", "make_budget"]
