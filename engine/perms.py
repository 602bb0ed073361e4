"""Permission bits beyond git's 644/755, kept with each checkpoint.

git stores a file as 100644 or 100755 and a directory not at all, so a
deleted `secret.env` (0600) or `private/` (0700) would come back as 0644 /
0755.  Each checkpoint's metadata (the JSON line of its commit message,
readable with `git show -s`) therefore lists the paths whose bits differ from
git's defaults, grouped by mode: `{"600": ["secret.env"], "700": ["private/"]}`
(directories end in "/").  A snapshot only looks at what it visits, so the
record is carried forward from the previous checkpoint and updated with what
changed.  A checkpoint without a record (made before this existed) restores
new paths with restrictive bits.

The record is applied as written only for a checkpoint of the workspace's own
chain.  A foreign one (fetched from another host, or off every chain here) is
someone else's say: its bits are masked by the process umask (`mask`), so a
record of 0666 / 0777 cannot hand out group or world write under umask 022.
Set-id and sticky bits are never restored, whoever made the record.
"""
from __future__ import annotations

import os
import stat

FILE, EXEC, DIR = 0o644, 0o755, 0o755
LEGACY_FILE, LEGACY_EXEC, LEGACY_DIR = 0o600, 0o700, 0o700
_UMASK_AT_IMPORT = os.umask(0o22)
os.umask(_UMASK_AT_IMPORT)


def umask() -> int:
    """The process umask, read without changing it (os.umask would race other threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return _UMASK_AT_IMPORT


def _default(path: str, perm: int) -> int:
    if path.endswith("/"):
        return DIR
    return EXEC if perm & stat.S_IXUSR else FILE


def expand(modes: dict | None) -> dict[str, int] | None:
    """{path: bits} from the grouped record; None when there is no record."""
    if modes is None:
        return None
    out = {}
    for octal, paths in modes.items():
        try:
            bits = int(octal, 8) & 0o7777
        except (TypeError, ValueError):
            continue
        for p in paths if isinstance(paths, list) else ():
            if isinstance(p, str):
                out[p] = bits
    return out


def carried(tip, index, root: bytes) -> dict[str, int]:
    """The record of the previous checkpoint (`tip`, a commit), or one read off the disk."""
    if tip is None:
        return {}
    from .checkpoint import CheckpointMeta, message_of
    prior = expand(CheckpointMeta.from_message(message_of(tip)).modes)
    if prior is not None:
        return prior
    seen: dict[str, int] = {}                   # an older checkpoint: look at every file once
    from .scan import ScanReport, note_perms
    report = ScanReport(perms=seen)
    for entry in index:
        if entry.mode not in (0o100644, 0o100755):
            continue
        try:
            note_perms(report, root, entry.path, os.lstat(os.path.join(root, os.fsencode(entry.path))))
        except OSError:
            continue
    return seen


def record(base: dict[str, int], seen: dict[str, int], index, tree,
           touched: list[str] | None = None) -> dict[str, list[str]]:
    """The grouped record for a new checkpoint: `base` updated with `seen`, only what exists.
    `touched`: the only paths this snapshot refreshed (None: all of them).  An entry of `base`
    outside them is as present as it was: not looked up again (every file the agent creates
    with 0600 is in the record, and a per-call snapshot must not cost one lookup per entry)."""
    merged = dict(base)
    merged.update(seen)
    near = None if touched is None else _near(touched)
    out: dict[str, list[str]] = {}
    for path, perm in merged.items():
        if perm == _default(path, perm):
            continue
        if (near is None or path in seen or _is_near(path, near)) and not _present(path, index, tree):
            continue
        out.setdefault(f"{perm:o}", []).append(path)
    for paths in out.values():
        paths.sort()
    return out


def _near(touched: list[str]) -> set[str]:
    """Every touched path and each of its directories ("d/")."""
    out = set()
    for t in touched:
        t = t.rstrip("/")
        out.add(t)
        cut = t.rfind("/")
        while cut > 0:
            d = t[:cut + 1]
            if d in out:
                break
            out.add(d)
            cut = t.rfind("/", 0, cut)
    return out


def _is_near(path: str, near: set[str]) -> bool:
    """Whether a refresh of `near` could have added or removed `path`: it, a directory
    holding it, or (for a directory) something inside it was touched."""
    bare = path.rstrip("/")
    if bare in near or path in near:
        return True
    cut = bare.rfind("/")
    while cut > 0:
        if bare[:cut] in near:
            return True
        cut = bare.rfind("/", 0, cut)
    return False


def _present(path: str, index, tree) -> bool:
    if not path.endswith("/"):
        return path in index
    try:
        return tree[path[:-1]].type_str == "tree"
    except (KeyError, ValueError, TypeError):
        return False


def file_perm(record: dict[str, int] | None, path: str, executable: bool,
              now: int | None = None, *, mask: int = 0) -> int:
    """The bits a restored file gets: as recorded (never set-id), less `mask` (a foreign
    record's umask), and never wider than the file on disk now (`now`) when there is one.
    The tree decides the executable bit, after the mask: a script stays runnable by whoever
    may read it."""
    bits = LEGACY_FILE if record is None else record.get(path, FILE) & 0o666
    if now is not None:
        bits &= now
    bits &= 0o666 & ~mask
    return bits | ((bits & 0o444) >> 2) if executable else bits


def dir_perm(record: dict[str, int] | None, path: str, now: int | None = None, *, mask: int = 0) -> int:
    """The bits a restored directory gets: as recorded, never set-id or sticky, less `mask`
    (a foreign record's umask), and never wider than the directory on disk now (`now`)."""
    bits = LEGACY_DIR if record is None else record.get(path.rstrip("/") + "/", DIR)
    if now is not None:
        bits &= now
    return bits & 0o777 & ~mask
