"""Reading a history file's bytes and JSON bounded and guarded, so a corrupt or hostile file
costs one linear pass and one ``ValueError`` naming it, never more: the size bound checked
before reading (:func:`read_bounded`), the nesting depth before parsing (:func:`_nesting_depth`,
over the linear ``_JSON_STRING`` pattern), integers' length and objects' unique keys while
parsing (:func:`parse_json`), and values worded for messages without recursing
(:func:`brief`)."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from itertools import accumulate

# A number in a history file has at most this many characters: counts are int64 (19 digits
# and a sign). A longer one is corrupt or hostile, refused before it becomes an int.
_MAX_INT_CHARS = 20
# A history file nests three levels (document, records, record). One nested deeper than this is
# refused before ``json`` parses it: ``json`` recurses per level, and deep recursion in the
# caller's thread is what a hostile file must never cause.
_MAX_JSON_DEPTH = 64
# A string literal, or an unclosed one running to the end of the text. Unrolled, and unable to
# fail once it has seen a quote: one linear pass even over a hostile run of quotes and
# backslashes (a pattern that can fail is retried from every quote, which is quadratic).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def read_bounded(path: str, max_bytes: int) -> bytes:
    """The bytes of the file at ``path``: refused unread when its size is over ``max_bytes``
    (the bound), and never more than the bound plus one byte read (a file growing
    meanwhile)."""
    # O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever (no effect on a
    # regular file's reads).
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"history file {path!r} is not a regular file (it is "
                             f"{_file_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise ValueError(f"history file {path!r} is over {max_bytes} bytes "
                             f"({st.st_size}), the most a history file may hold; not read")
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"history file {path!r} is over {max_bytes} bytes, "
                         "the most a history file may hold")
    if not raw.strip():
        raise ValueError(f"history file {path!r} is empty")
    return raw


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a plain file"


class _Refused(ValueError):
    """What a JSON parsing hook refused (raised through ``json.loads``)."""


def _parse_int(text: str) -> int:
    # Refused before int() sees it: converting a long digit string costs time quadratic in
    # its length (why Python 3.11 refuses over 4,300 digits, with advice not meant for a
    # file's reader), and no count in a history file needs more than 20 characters.
    if len(text) > _MAX_INT_CHARS:
        raise _Refused(f"holds a number of {len(text.lstrip('-'))} digits "
                       f"({text[:12]}...), longer than any value of a history file")
    return int(text)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # A repeated key is read by parsers differently (first or last wins): refused, so the file
    # means one thing. (The writer never repeats one.)
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"repeats the key {brief(key)} in one JSON object")
            seen.add(key)
    return obj


def _nesting_depth(text: str) -> int:
    """The deepest nesting of JSON arrays and objects in ``text``, found without recursing:
    strings blanked, everything but brackets dropped, then a running sum (all in C loops)."""
    brackets = _NOT_A_BRACKET.sub("", _JSON_STRING.sub('""', text))
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def parse_json(path: str, raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"history file {path!r} is not UTF-8 text (byte "
                         f"{raw[exc.start]:#04x} at offset {exc.start}): corrupt, or not a "
                         "history file") from None
    if _nesting_depth(text) > _MAX_JSON_DEPTH:
        raise ValueError(f"history file {path!r} nests JSON arrays or objects too deeply "
                         f"(more than {_MAX_JSON_DEPTH} levels: corrupt, or not a history "
                         "file)")
    try:
        return json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except _Refused as exc:
        raise ValueError(f"history file {path!r} {exc}") from None
    except RecursionError:
        # (json recurses per nesting level; a history file nests three levels)
        raise ValueError(f"history file {path!r} nests JSON arrays or objects too deeply "
                         "(corrupt, or not a history file)") from None
    except ValueError as exc:  # json.JSONDecodeError: says where
        raise ValueError(f"history file {path!r} is not valid JSON (truncated or corrupt): "
                         f"{exc}") from None


def brief(value: object) -> str:
    """``value`` for a message: short, and never recursing into nested containers (a hostile
    file's nesting must not raise ``RecursionError`` while its error is being worded)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} characters)"
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        bits = value.bit_length()
        return repr(value) if bits <= 64 else f"an integer of {bits} bits"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return f"an object of {len(value)} key{'s' if len(value) != 1 else ''}"
    return f"a {type(value).__name__}"
