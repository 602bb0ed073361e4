"""Ignore rules for every name a filesystem allows, UTF-8 or not.

pygit2's `Repository.path_is_ignored` takes `str` and encodes it strictly, so
a name that is not UTF-8 (`caf\\xe9.txt`) raises instead of answering.
libgit2 itself takes bytes: for such names we call its
`git_ignore_path_is_ignored` through ctypes on the same repository handle
(the shared library pygit2 loaded).  Where that library cannot be found the
answer is "not ignored": the name is then captured, never silently dropped.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re

import pygit2

_fn = None
_looked = False


def _c_fn():
    global _fn, _looked
    if not _looked:
        _looked = True
        here = os.path.dirname(pygit2.__file__)
        for lib in (glob.glob(os.path.join(here, "..", "pygit2.libs", "libgit2*.so*"))
                    + [ctypes.util.find_library("git2") or ""]):
            if not lib:
                continue
            try:
                fn = ctypes.CDLL(lib).git_ignore_path_is_ignored
            except (OSError, AttributeError):
                continue
            fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_char_p]
            fn.restype = ctypes.c_int
            _fn = fn
            break
    return _fn


def is_ignored(repo: pygit2.Repository, rel: str) -> bool:
    """Whether the work-tree path `rel` (a trailing "/" for a directory) is ignored."""
    try:
        return repo.path_is_ignored(rel)
    except UnicodeEncodeError:
        pass
    fn = _c_fn()
    if fn is None:
        return False
    out = ctypes.c_int(0)
    ptr = int(pygit2.ffi.cast("uintptr_t", repo._repo))
    return fn(ctypes.byref(out), ptr, os.fsencode(rel)) == 0 and bool(out.value)


class Candidates:
    """Finds, among work-tree paths, every one a rule of some ignore files could ignore, and
    more: each pattern's last segment that is not only wildcards (`keep` of `keep/*`) matched
    against each component of a path.  What it finds is asked of libgit2 (`is_ignored`), so it only has to
    over-approximate.  A path's directory is matched once for all the files in it."""

    def __init__(self, segments: set[bytes]):
        alt = b"|".join(sorted(segments))
        self._dir = re.compile(rb"(?:^|/)(?:" + alt + rb")(?:/|$)", re.IGNORECASE).search
        self._name = re.compile(rb"(?:" + alt + rb")", re.IGNORECASE).fullmatch

    def could(self, path: bytes) -> bool:
        """Whether a rule could ignore `path` (or a directory above it)."""
        return self._dir(path) is not None

    def among(self, paths) -> list[bytes]:
        dirs: dict[bytes, bool] = {}
        name, search, out = self._name, self._dir, []
        for p in paths:
            d, _, base = p.rpartition(b"/")
            hit = dirs.get(d)
            if hit is None:
                hit = dirs[d] = bool(d) and search(d) is not None
            if hit or name(base) is not None:
                out.append(p)
        return out


def could_ignore(files) -> Candidates | None:
    """The candidates of the rules in these ignore files; None when they hold no rule that can
    ignore anything."""
    parts = segments_of(files)
    return Candidates(parts) if parts else None


def segments_of(files) -> set[bytes]:
    """The last segments (as regexes) of every rule in these ignore files that can ignore."""
    parts = set()
    for path in files:
        try:
            with open(path, "rb") as fh:
                text = fh.read(1 << 22)
        except (OSError, TypeError, ValueError):
            continue
        for line in text.splitlines():
            seg = _last_segment(line)
            if seg is not None:
                parts.add(seg)
    return parts


def _last_segment(line: bytes) -> bytes | None:
    """The regex of one rule's last segment (no `/` crossed), or None for a comment, a blank
    line or a negation (it ignores nothing)."""
    line = line.rstrip(b"\r")
    while line.endswith(b" ") and not line.endswith(b"\\ "):
        line = line[:-1]
    if not line or line.startswith((b"#", b"!")):
        return None
    segs = [s for s in line.strip(b"/").split(b"/") if s]
    while segs and not segs[-1].strip(b"*?"):
        segs.pop()               # `keep/*`, `foo/**`: what they match lies below `keep`, `foo`
    if not segs:
        return rb"[^/]*"
    out, seg, i = [], segs[-1], 0
    while i < len(seg):
        c = seg[i:i + 1]
        if c == b"\\" and i + 1 < len(seg):
            out.append(re.escape(seg[i + 1:i + 2]))
            i += 2
            continue
        if c == b"*":
            out.append(rb"[^/]*")
        elif c == b"?":
            out.append(rb"[^/]")
        elif c == b"[":
            end = seg.find(b"]", i + 2)
            if end < 0:
                out.append(rb"\[")
            else:
                body = seg[i + 1:end]
                body = b"^" + body[1:] if body[:1] in (b"!", b"^") else body
                out.append(b"[" + body.replace(b"\\", b"\\\\").replace(b"/", b"") + b"]")
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return b"".join(out)
