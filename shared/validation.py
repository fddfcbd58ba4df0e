"""Names that reach a terminal: refuse control characters on the way in, escape them on
the way out.

A queue or kind is printed by ``status``, ``jobs list``, ``queues list`` and the logs. A
name holding ESC would be a live terminal escape there (colours, cursor moves, a forged
line); a newline or tab would break every column and every ``grep``. So the enqueue
path refuses them (``check_name``), and every printer passes text it did not write
itself through ``printable``, because rows inserted by plain SQL bypass the first
guard: the schema has no CHECK for this (adding one is a migration, not done here).

Lengths are bounded too (``MAX_KIND`` and its siblings, ``check_length``), and there the
schema does check (0022): a name or key is part of an index entry (the claim's, the
history's, the breaker's), and a B-tree refuses an entry past 2,704 bytes, so one long
key used to stop its queue at every claim. The limits hold four bytes a character.

A control character is one of Unicode category Cc (C0, DEL, C1) or one of the
bidirectional overrides and isolates (which reorder what a terminal shows, as in
"Trojan Source"). Other format characters (zero-width joiners in emoji) are allowed.
"""

from __future__ import annotations

import re
import unicodedata

# Bidi embeddings, overrides and isolates: U+202A..U+202E, U+2066..U+2069.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# Longest names and keys, in characters (the CHECKs of schema 0022 and 0001 say the same).
MAX_KIND = 255
MAX_QUEUE = 255
MAX_CONCURRENCY_KEY = 255
MAX_UNIQUE_KEY = 512
MAX_SCHEDULE_NAME = 200
_PREVIEW = 40  # characters of a refused value shown in its error


def check_length(what: str, value: str, limit: int) -> str:
    """``value`` unchanged when it has at most ``limit`` characters; else ``ValueError``
    in one line naming ``what``, the length and the limit, with the start of the value."""
    if len(value) > limit:
        start = printable(value[:_PREVIEW])
        raise ValueError(f"{what} is {len(value)} characters long, more than the {limit} "
                         f"allowed: '{start}...'")
    return value


def short_name(name: str) -> str:
    """``name`` as the history and the breaker key it (schema 0022's
    ``supervisor.short_name``): unchanged up to ``MAX_KIND`` characters, else its first
    200, ``~`` and its md5, so a name stored before the limit still fits their index."""
    if len(name) <= MAX_KIND:
        return name
    import hashlib  # off the start path: only an over-long name gets here

    return name[:200] + "~" + hashlib.md5(name.encode("utf-8"), usedforsecurity=False).hexdigest()


def is_control(char: str) -> bool:
    """Whether ``char`` (one character) must not appear raw on a terminal."""
    return unicodedata.category(char) == "Cc" or char in _BIDI


def check_name(what: str, value: str) -> str:
    """``value`` unchanged when it holds no control character; else ``ValueError``
    naming ``what`` (``"queue"``, ``"job kind"``) and the first offending character, with
    the value shown escaped."""
    for position, char in enumerate(value):
        if is_control(char):
            raise ValueError(
                f"{what} '{printable(value)}' contains the control character "
                f"U+{ord(char):04X} at position {position}; names may not hold control "
                "characters (newline, tab, ESC, ...)")
    return value


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character written as a visible escape (``\\e``,
    ``\\n``, ``\\t``, ``\\x07``, ``\\u202e``), so printing it cannot drive the terminal.
    ``keep_newlines`` leaves ``\\n`` alone, for multi-line text such as a traceback."""
    pattern = _UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE
    return pattern.sub(_escape, text)
