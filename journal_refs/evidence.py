"""Evidence: what a declared path holds now, compared with its images.

The service settles operations cut off by a crash with it (service.reconcile).
For a file operation the journal holds, per declared path, the content before
(pre-image) and the content the call was about to produce (post-image).
Comparing each path now with both tells what happened:

    every path at its post-image   -> completed   (nothing is written again)
    every path at its pre-image    -> not applied (may be replayed once)
    anything else                  -> uncertain, with the per-path evidence

Operations without declared paths (shell commands, external APIs) cannot be
settled this way and wait for an operator.
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import TypeGuard

import pygit2

from ..engine import loose
from ..engine.fsutil import O_READ, read_all
from ..engine.paths import same

ABSENT = None          # a pre/post image of "no file"
UNKNOWN = "unknown"    # post-image not computable before the call (e.g. fuzzy patch)


def content_id(path: str | bytes, store_in: pygit2.Repository | None = None) -> str | None:
    """Blob id of what is at `path` now: file bytes, or the link text of a symlink.

    With `store_in`, the blob is also written there (a pre-image to keep).  A
    FIFO or device is never opened for reading (it could block forever)."""
    p = os.fsencode(path)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(p)
        return _blob(target, store_in)
    if not stat.S_ISREG(st.st_mode):
        return "special:" + ("dir" if stat.S_ISDIR(st.st_mode) else "other")
    try:
        fd = os.open(p, O_READ)
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        if exc.errno == errno.ELOOP:        # became a link meanwhile
            return content_id(path, store_in)
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "special:other"
        data = read_all(fd)
    finally:
        os.close(fd)
    return _blob(data, store_in)


def _blob(data: bytes, store_in: pygit2.Repository | None) -> str:
    if store_in is None:
        return str(pygit2.hash(data))
    if not store_in.is_bare:                  # a workspace's handle: its objects live elsewhere
        return str(store_in.create_blob(data))
    return loose.blob(Path(store_in.path) / "objects", data, repo=store_in)


def is_blob_id(value) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) == 40


def evidence(declared: list[dict]) -> tuple[str, list[dict]]:
    """(verdict, per-path evidence); verdict is completed | not_applied | partial."""
    items = []
    all_post = True
    all_pre = True
    for d in declared:
        now = content_id(d["path"])
        post = d.get("post", UNKNOWN)
        at_pre = same(now, d.get("pre"))
        at_post = post != UNKNOWN and same(now, post)
        all_post &= at_post
        all_pre &= at_pre
        items.append({"path": d["path"], "now": now, "pre": d.get("pre"), "post": post,
                      "at_pre": at_pre, "at_post": at_post})
    if declared and all_post:
        return "completed", items
    if declared and all_pre:
        return "not_applied", items
    return "partial", items


def describe(items: list[dict]) -> str:
    parts = []
    for it in items:
        where = ("at post-image" if it["at_post"] else "at pre-image" if it["at_pre"]
                 else "neither pre- nor post-image")
        parts.append(f"{it['path']}: {where}")
    return "; ".join(parts)
