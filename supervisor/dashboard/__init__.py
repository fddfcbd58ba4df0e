"""The dashboard room: a web page over the queue's database, in its own process.

Door: ``create_app`` (the Starlette app over a DSN), ``Settings``, ``listen`` and
``serve`` (uvicorn on a bound socket), ``is_loopback``, and the operator token's
``TOKEN_ENV`` and ``token_from_env``: what ``supervisor dashboard`` starts it with.
Importing it needs the ``dashboard`` extra (Starlette, uvicorn, Jinja2). Its queries
come from the admin room (``supervisor.admin``); it imports nothing of the CLI.
"""

from supervisor.dashboard.app import Settings, create_app, is_loopback, listen, serve
from supervisor.dashboard.auth import READ_TOKEN_ENV, TOKEN_ENV, token_from_env

__all__ = ["READ_TOKEN_ENV", "TOKEN_ENV", "Settings", "create_app", "is_loopback", "listen",
           "serve", "token_from_env"]
