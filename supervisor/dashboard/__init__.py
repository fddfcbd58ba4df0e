"""The dashboard room: a web page over the queue's database, in its own process.

Door: ``create_app`` (the Starlette app over a DSN), ``Settings``, ``listen`` and
``serve`` (uvicorn on a bound socket), used by ``supervisor dashboard``. Importing it
needs the ``dashboard`` extra (Starlette, uvicorn, Jinja2).
"""

from supervisor.dashboard.app import Settings, create_app, is_loopback, listen, serve

__all__ = ["Settings", "create_app", "is_loopback", "listen", "serve"]
