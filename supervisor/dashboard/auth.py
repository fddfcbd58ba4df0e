"""Who may act: the operator token from ``SUPERVISOR_DASHBOARD_TOKEN``.

Reading is open to whoever can reach the port (it binds loopback unless told
otherwise). Actions (retry, cancel, pause, resume) need the token, sent either as
``Authorization: Bearer <token>`` (scripts) or as the ``token`` field of the posted
form (the pages). Without the variable set, every action is refused: the dashboard is
read-only.

Why a form field is CSRF-safe here: the dashboard sets no cookie and never puts the
token in a page, so a form posted from another site cannot carry it. The pages keep
the token the operator typed in the tab's ``sessionStorage`` and copy it into the form
when it is submitted; the browser never sends it on its own.
"""

from __future__ import annotations

import hmac
import os

TOKEN_ENV = "SUPERVISOR_DASHBOARD_TOKEN"


class Refused(Exception):
    """An action asked without the right token (or on a read-only dashboard)."""


def token_from_env(environ: dict[str, str] | None = None) -> str | None:
    """The configured token, or None (read-only) when the variable is unset or blank."""
    value = (environ if environ is not None else os.environ).get(TOKEN_ENV, "").strip()
    return value or None


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check(expected: str | None, offered: str | None) -> None:
    """Return quietly when ``offered`` is the configured token; else ``Refused`` with a
    one-line reason. Compared in constant time."""
    if expected is None:
        raise Refused(f"this dashboard is read-only: {TOKEN_ENV} is not set where it runs")
    if not offered:
        raise Refused("this action needs the dashboard token "
                      "(Authorization: Bearer <token>, or the token field of the page)")
    if not hmac.compare_digest(offered.encode(), expected.encode()):
        raise Refused("wrong dashboard token")
