"""Text encodings that must not lose a byte: canonical JSON and file names.

Linux file names are bytes.  Python carries the ones that are not UTF-8 as
`str` with lone surrogates (`os.fsdecode`, surrogateescape), and so do the
index and tree paths pygit2 hands out.  Such strings cannot be encoded as
UTF-8, so two rules keep them exact everywhere:

* `canonical()` (the hashed form of journal events, journal state and
  checkpoint metadata) writes every surrogate as a `\\uXXXX` escape: the text
  is plain UTF-8, and `json.loads` gives the same surrogate string back.
* `jsonable()` (what leaves the process: CLI `--json`, HTTP, model tools)
  turns a string field `K` holding such a name into a display string (U+FFFD
  for each undecodable byte) and adds `K_b64`, the exact bytes in base64; a
  list field gets a `K_b64` list with one entry per element.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def canonical(obj) -> str:
    """Sorted keys, no whitespace, no NaN, surrogates escaped: the bytes that get hashed."""
    text = _CANONICAL.encode(obj)
    # an ASCII text has no surrogates: the search costs a third of the encoding (a whole file
    # in a write_file call's arguments), isascii() next to nothing
    return text if text.isascii() else _SURROGATE.sub(_escape, text)


def _default(o):
    if isinstance(o, (bytes, bytearray)):
        return {"$bytes_sha256": hashlib.sha256(o).hexdigest()}
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=repr)
    if isinstance(o, tuple):
        return list(o)
    return repr(o)


# one encoder for every call: json.dumps with these options builds a new one each time
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False, default=_default)


def is_exact(text: str) -> bool:
    """True when `text` is valid Unicode (a UTF-8 name), i.e. needs no `_b64` twin."""
    return _SURROGATE.search(text) is None


def display(text: str) -> str:
    """A name as people and UTF-8-only programs can take it (U+FFFD for bad bytes)."""
    if is_exact(text):
        return text
    return os.fsencode(text).decode("utf-8", "replace") if _fs_encodable(text) else \
        _SURROGATE.sub("\ufffd", text)


def human(text: str) -> str:
    """A name for a terminal: undecodable bytes shown as `\\xNN`, as people can read them."""
    if is_exact(text):
        return text
    if _fs_encodable(text):
        return os.fsencode(text).decode("utf-8", "backslashreplace")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def shown(name: str) -> str:
    """A name on one terminal line: `human`, with control and bidi characters escaped too
    (a name holding a newline or an ANSI escape must not forge the lines around it)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", human(name))


def _fs_encodable(text: str) -> bool:
    try:
        os.fsencode(text)
        return True
    except UnicodeEncodeError:          # a surrogate that surrogateescape did not make
        return False


def to_b64(text: str) -> str:
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return base64.b64encode(raw).decode("ascii")


def from_b64(value: str) -> str:
    """The exact name a client sent as base64, as the str the engine uses."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError(f"{value!r} is not valid base64") from None
    return os.fsdecode(raw)


def jsonable(obj):
    """A copy of `obj` that encodes as strict UTF-8 JSON without losing a name."""
    if isinstance(obj, dict):
        out: dict = {}
        for key, value in obj.items():
            key = display(key) if isinstance(key, str) else key
            if isinstance(value, str) and not is_exact(value):
                out[key] = display(value)
                out[f"{key}_b64"] = to_b64(value)
            elif isinstance(value, list) and any(isinstance(v, str) and not is_exact(v) for v in value):
                out[key] = [jsonable(v) if not isinstance(v, str) else display(v) for v in value]
                out[f"{key}_b64"] = [to_b64(v) if isinstance(v, str) else None for v in value]
            else:
                out[key] = jsonable(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, str) and not is_exact(obj):
        return display(obj)
    return obj


def dumps(obj, **kwargs) -> str:
    """`json.dumps` of `jsonable(obj)`: what every surface prints or sends."""
    kwargs.setdefault("ensure_ascii", False)
    kwargs.setdefault("default", str)
    return json.dumps(jsonable(obj), **kwargs)
