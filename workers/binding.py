"""Does a job's args object fit its handler's signature? Checked before the call, so
that a mismatch is a terminal ``binding`` failure and not a ``TypeError`` mistaken for
the handler's own.

``inspect.Signature.bind`` answers that but costs ~15 µs for five parameters, a third
of a no-op job's round trip; the common shapes (keyword-passable parameters, with or
without ``**kwargs``) reduce to two set comparisons, and anything else falls back to
``bind``, which also words the error.
"""

from __future__ import annotations

import inspect
from typing import Any

_KEYWORDABLE = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class ArgsChecker:
    """A compiled check of keyword args against one signature."""

    __slots__ = ("_any_extra", "_fast", "_fits", "_names", "_required", "_signature")

    def __init__(self, signature: inspect.Signature) -> None:
        self._signature = signature
        self._fits: set[tuple[str, ...]] = set()  # key tuples already seen to fit
        names, required = set(), set()
        self._any_extra = False
        self._fast = True
        for param in signature.parameters.values():
            if param.kind in _KEYWORDABLE:
                names.add(param.name)
                if param.default is inspect.Parameter.empty:
                    required.add(param.name)
            elif param.kind == inspect.Parameter.VAR_KEYWORD:
                self._any_extra = True
            elif param.kind == inspect.Parameter.POSITIONAL_ONLY:
                self._fast = False  # a keyword may land in **kwargs instead: let bind say
        self._names = frozenset(names)
        self._required = frozenset(required)

    def check(self, args: dict[str, Any]) -> None:
        """Raise ``TypeError`` (bind's own message) if ``args`` do not fit."""
        shape = tuple(args)
        if shape in self._fits:
            return
        if self._fast:
            keys = args.keys()
            if not (self._required <= keys and (self._any_extra or keys <= self._names)):
                self._signature.bind(**args)  # raises, in bind's words
        else:
            self._signature.bind(**args)
        if len(self._fits) < 64:  # a kind is usually called with one or two shapes
            self._fits.add(shape)
