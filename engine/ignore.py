"""Ignore rules for every name a filesystem allows, UTF-8 or not.

pygit2's `Repository.path_is_ignored` takes `str` and encodes it strictly, so
a name that is not UTF-8 (`caf\\xe9.txt`) raises instead of answering, and it
holds the GIL while libgit2 reads `.gitignore` files.  libgit2 itself takes bytes:
we call its `git_ignore_path_is_ignored` through ctypes on the same repository
handle (the shared library pygit2 loaded).  Where that library cannot be found,
pygit2 answers, and a name it cannot encode is "not ignored": it is then captured,
never silently dropped.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import stat

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
    """Whether the work-tree path `rel` (a trailing "/" for a directory) is ignored.

    Asked of libgit2 through ctypes, which lets go of the GIL while it runs: libgit2 opens
    each `.gitignore` on the way with a plain open(2), and one that is a FIFO blocks it until
    a writer comes.  pygit2's `path_is_ignored` holds the GIL meanwhile, so the whole process
    stopped, the guard that opens such a FIFO for writing (engine/fifo_guard.py) included."""
    fn = _c_fn()
    if fn is None:
        try:
            return repo.path_is_ignored(rel)
        except UnicodeEncodeError:
            return False
    out = ctypes.c_int(0)
    ptr = int(pygit2.ffi.cast("uintptr_t", repo._repo))
    return fn(ctypes.byref(out), ptr, os.fsencode(rel)) == 0 and bool(out.value)


class Candidates:
    """Finds, among work-tree paths, every one a rule could ignore, and more.  A rule is taken
    as its last segment that is not only wildcards (`keep` of `keep/*`), matched against each
    component of a path below the folder of the file that holds it (a `.gitignore` rules
    its own folder only; the exclude files, `b""`, the whole tree).  What it finds is asked
    of libgit2 (`is_ignored`), so it only has to over-approximate.  Each folder's rules are
    one small regex, and a path's folder is judged once for all the files in it."""

    def __init__(self):
        self._rules: dict[bytes, tuple] = {}        # folder -> (search a path below, match a name)
        self._dirs: dict[bytes, tuple] = {}         # folder -> (a rule matches it, its name matchers)

    def add(self, folder: bytes, files) -> None:
        """The rules of these ignore files, for `folder` (b"": the whole tree) and below."""
        segs = segments_of(files)
        if not segs:
            return
        old = self._rules.get(folder)
        segs = segs | (old[2] if old else set())
        try:
            alt = b"|".join(sorted(segs))
            rule = (re.compile(rb"(?:^|/)(?:" + alt + rb")(?:/|$)", re.IGNORECASE).search,
                    re.compile(rb"(?:" + alt + rb")", re.IGNORECASE).fullmatch, segs)
        except (re.error, RecursionError, OverflowError):
            rule = (re.compile(rb".", re.DOTALL).search, re.compile(rb".*", re.DOTALL).fullmatch, segs)   # anything
        self._rules[folder] = rule
        self._dirs.clear()

    def __bool__(self) -> bool:
        return bool(self._rules)

    def _folder(self, d: bytes) -> tuple:
        """(whether a rule could ignore folder `d` itself or one above it, the name matchers of
        the rules that reach the files in it).  Built from its parent's: a rule above reaches
        `d` through `d`'s own name, so each folder costs its rules, not its depth."""
        got = self._dirs.get(d)
        if got is not None:
            return got
        todo = [d]                                   # d and its ancestors not judged yet
        while todo[-1]:
            got = self._dirs.get(todo[-1].rpartition(b"/")[0])
            if got is not None:
                break
            todo.append(todo[-1].rpartition(b"/")[0])
        if got is None:                              # up to the top, which rules the whole tree
            rule = self._rules.get(todo.pop())
            got = self._dirs[b""] = (False, (rule[1],) if rule else ())
        for cur in reversed(todo):
            hit, names = got
            name = cur.rpartition(b"/")[2]
            hit = hit or any(match(name) is not None for match in names)
            rule = self._rules.get(cur)
            got = self._dirs[cur] = (hit, (names + (rule[1],)) if rule else names)
        return got

    def could(self, path: bytes) -> bool:
        """Whether a rule could ignore folder `path` (or one above it)."""
        return self._folder(path)[0]

    def among(self, paths) -> list[bytes]:
        out: list[bytes] = []
        folder, append = self._folder, out.append
        for p in paths:
            d, _, base = p.rpartition(b"/")
            hit, names = folder(d)
            if hit:
                append(p)
                continue
            for name in names:
                if name(base) is not None:
                    append(p)
                    break
        return out


ANY = rb"[^/]*"                       # the segment of a rule that could ignore any name
_CLASS_ACROSS_SLASH = re.compile(rb"\[[^\]]*/")
_WS = b" \t\v\f\r"
MAX_RULES_BYTES = 1 << 26


def segments_of(files) -> set[bytes]:
    """The last segments (as regexes) of every rule in these ignore files that can ignore.  A
    file that is not a regular one (a FIFO is never opened to wait) is passed over, as is one
    that cannot be read; one too large to read whole could ignore anything."""
    parts = set()
    for path in files:
        text = _read_rules(path)
        if text is None:
            continue
        if len(text) >= MAX_RULES_BYTES:
            parts.add(ANY)
            continue
        if text.startswith(b"\xef\xbb\xbf"):
            text = text[3:] + b"\n" + text        # a byte-order mark: the first rule both ways
        for line in text.splitlines():
            for variant in {line, line.split(b"\0", 1)[0]}:
                seg = _last_segment(variant)
                if seg is not None:
                    parts.add(seg)
    return parts


def _read_rules(path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, TypeError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size < MAX_RULES_BYTES and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _last_segment(line: bytes) -> bytes | None:
    """The regex of one rule's last segment (no `/` crossed), or None for a comment, a blank
    line or a negation (it ignores nothing).  Over-approximated where git's syntax is subtle:
    a bracket expression matches any one character (one that spans a `/` could match any name),
    and a segment of more than two `*` is its longest literal run anywhere in a name (and no regex of ours
    backtracks for long); trailing whitespace may or may not belong to the rule."""
    line = line.rstrip(_WS)
    if line.endswith(b"\\"):
        line += b" "                       # an escaped trailing space stays
    if not line or line.startswith((b"#", b"!")):
        return None
    segs = [s for s in line.strip(b"/").split(b"/") if s]
    while segs and not segs[-1].strip(b"*?"):
        segs.pop()               # `keep/*`, `foo/**`: what they match lies below `keep`, `foo`
    if not segs:
        return ANY
    seg = segs[-1]
    if _CLASS_ACROSS_SLASH.search(line):
        return ANY
    if seg.count(b"*") > 2:                     # `*.c.[012]*.*`: a name it matches holds `.c.`
        run = max(re.split(rb"[*?\[\]\\]", seg), key=len)
        return ANY + re.escape(run) + ANY if run else ANY
    out, i = [], 0
    while i < len(seg):
        c = seg[i:i + 1]
        if c == b"\\" and i + 1 < len(seg):
            out.append(re.escape(seg[i + 1:i + 2]))
            i += 2
            continue
        if c == b"[":                           # a bracket expression: any one character
            j = i + 2 if seg[i + 1:i + 2] in (b"!", b"^") else i + 1
            end = seg.find(b"]", j)
            if seg[j:j + 1] in (b"]", b"[") or (end > 0 and b"[" in seg[j:end]):
                return ANY                      # `[]a]`, `[!]]`, `[[:alpha:]]`: not worth reading
            out.append(rb"[^/]")                # (an unclosed `[` is itself: one character too)
            i = end + 1 if end > 0 else i + 1
            continue
        if c == b"*":
            if not out or out[-1] != ANY:
                out.append(ANY)
        elif c == b"?":
            out.append(rb"[^/]")
        else:
            out.append(re.escape(c))
        i += 1
    return b"".join(out) + rb"[ \t\v\f\r]*"
