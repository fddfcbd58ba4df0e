"""The DISCARDED frame (parent to child, issue 45): a job the parent discarded, for the
``@on_discard`` hooks of a child that did not run it.

A job discarded by its own child's answer (``Discard``, args that do not fit, a last
attempt that raised) has its hooks run there, before the answer. A job the parent
discards was in a child that is gone: it crashed, hung, ran past its timeout or its
memory cap on its last attempt, or its crash made it poison. Its hooks run in another
child of the same supervisor (the handler modules are the same there), told with this
frame: the job as the child sees it in ``current_job()``, and the errors entries of its
last attempt (its failure with the attempt's ``usage``, then ``poison`` if that was the
reason).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from shared.frames import DISCARDED, Frame, ProtocolError, encode


@dataclass(slots=True)
class Discarded:
    """Job ``id`` was discarded by the parent; ``errors`` are its last attempt's entries
    (``errors[-1]["kind"]`` is the reason: ``crashed``, ``hung``, ``timeout``, ``memory``
    or ``poison``). ``args_json``: the args as the table holds them (JSON text)."""

    TYPE: ClassVar[int] = DISCARDED
    id: int
    kind: str
    queue: str
    attempt: int
    max_attempts: int
    args_json: str = "{}"
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def reason(self) -> str:
        """Why it was discarded: the last entry's kind."""
        return str(self.errors[-1]["kind"]) if self.errors else "discarded"

    def args(self) -> Any:
        """The args decoded (None if they cannot be: they never reached a handler)."""
        try:
            return orjson.loads(self.args_json)
        except orjson.JSONDecodeError:
            return None

    def encode(self) -> bytes:
        """This message as one frame."""
        return encode(DISCARDED, {"id": self.id, "kind": self.kind, "queue": self.queue,
                                  "attempt": self.attempt, "max_attempts": self.max_attempts,
                                  "args": self.args_json, "errors": self.errors})

    @classmethod
    def decode(cls, frame: Frame) -> Discarded:
        """The message a DISCARDED frame carries."""
        try:
            body = orjson.loads(frame.body)
            return cls(int(body["id"]), str(body["kind"]), str(body["queue"]),
                       int(body["attempt"]), int(body["max_attempts"]), str(body["args"]),
                       list(body["errors"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ProtocolError("DISCARDED body is not the job and its errors") from None
