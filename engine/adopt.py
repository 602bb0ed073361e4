"""The first snapshot of a git work tree, taken by adopting the user's index as the stat cache.

A clone of a million files has an index that already names every tracked file with its
blob id and the stat data it had when git last looked.  Reading it into Python and
stat'ing each path costs seconds per hundred thousand files; libgit2 does the same
comparison in C (`git status`'s rule, racy-timestamp guard included).  So the user's
index bytes are copied (their mtime kept: that is what the racy guard compares with),
libgit2 diffs that copy against the work tree while Python parses the same bytes beside it
(engine/usergit.py: what it vouches for, what converts content, which packs hold it),
and what the diff reports changed, new or gone is handed back to the ordinary scan of
named paths (engine/scan.py `update_paths`) once the copy is the store's index.

The invariant a crash relies on: when the copy is put in place (`bulk_before_index` just
before), every blob it names and every tree its cache tree names is in the store (the
user's packs linked, objects they hold loose copied and checked); entries that cannot
meet it are left out and read from disk.  A crash after that leaves a stat cache the next
scan can trust; before it, only linked packs and copied objects (consolidation drops them).

The snapshot holds what the bulk import's (engine/bulk.py, still the way for everything
else: no git, git unusable, many files changed since git looked) would: a file git tracks
that an ignore rule matches (settings `ignored_patterns`, a `.gitignore`) is left out, as
libgit2 answers for each candidate path.  One difference: permission bits other than git's
644/755 are noted only for the files read here, not for those git vouched for.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import DiffOption
from pygit2.errors import check_error
from pygit2.ffi import C, ffi

from . import faults, usergit
from .ignore import could_ignore, is_ignored
from .scan import DIFF_FLAGS, Scanner, ScanReport, diff_index, find_omissions, update_paths

TMP_NAME = "index.chronos-adopt"
MAX_CHANGES = 2000        # more files to read than this: the bulk import packs them, in parallel
MODE_LINK = 0o120000


@dataclass
class Adopted:
    """An index in place; `changed` (decoded paths) is what the scan must bring up to date."""
    changed: list[str]
    entries: int
    bytes: int
    linked: list[str]
    seeded: int
    copied: int
    specials: ScanReport
    seconds: dict = field(default_factory=dict)


def run(repo: pygit2.Repository, gitdir: Path, root: bytes, objects_dir: str, *, cap: int,
        durable: bool, say=lambda *a: None) -> Adopted | str:
    """Adopt the user's index as `gitdir`'s (`objects_dir`: the store's); the reason (text)
    when it cannot be, with nothing of it left in place."""
    t0 = time.monotonic()
    try:
        raw = usergit.read_index(root)
    except usergit.Unusable as exc:
        return str(exc)
    tmp = os.path.join(str(gitdir), TMP_NAME)
    try:
        done = _adopt(repo, raw, tmp, gitdir, root, objects_dir, cap, durable, say, t0)
    except (OSError, pygit2.GitError, ValueError) as exc:
        done = f"the index could not be adopted ({type(exc).__name__}: {exc})"
    if isinstance(done, str):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return done


def _adopt(repo, raw: usergit.RawIndex, tmp: str, gitdir: Path, root: bytes, objects_dir: str, cap: int,
           durable: bool, say, t0: float) -> Adopted | str:
    with open(tmp, "wb") as fh:
        fh.write(raw.data)
    os.utime(tmp, ns=(raw.mtime_ns, raw.mtime_ns))      # libgit2's racy guard compares with it
    index = _open_index(tmp)
    if index.conflicts is not None:
        return "the repository's index holds unresolved conflicts"
    t_open = time.monotonic()
    say("listing", 0, len(index))
    specials = ScanReport()

    def beside():
        # while libgit2 compares the index with the work tree (GIL released): the same bytes
        # parsed, and the walk for what libgit2's leaves out (its own handle)
        try:
            known = usergit.known_from(raw, root)
        except usergit.Unusable as exc:
            return str(exc)
        finally:
            raw.data = b""                     # parsed and copied: its memory back (100+ MB at 1M files)
        handle = pygit2.Repository(repo.path)
        find_omissions(handle, root, specials)
        rules = [gitdir / "exclude", gitdir / "info" / "exclude",
                 *(os.path.join(root, os.fsencode(p)) for p in specials.ignore_files)]
        return known, _ignored(handle, known.entries, rules)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="chronos-git-adopt") as one:
        helper = one.submit(beside)
        diff = diff_index(repo, index, DIFF_FLAGS | DiffOption.IGNORE_SUBMODULES)
        known = helper.result()
    t_diff = time.monotonic()
    if isinstance(known, str):
        return known
    known, ignored = known
    odd = sorted({why for why in known.odd.values() if why != "gitlink"})
    if odd:
        return f"the repository's index holds entries git marks {', '.join(odd)}"
    if len(diff) > MAX_CHANGES:
        return f"{len(diff):,} paths differ from the repository's index"
    changed = [os.fsdecode(d.old_file.raw_path if d.status == pygit2.enums.DeltaStatus.DELETED
                           else d.new_file.raw_path).rstrip("/") for d in diff.deltas]
    for path in ignored:                       # tracked by git, ignored here: as the bulk import
        index.remove(path)
        del known.entries[path]
    if ignored:
        out = {os.fsdecode(p) for p in ignored}
        changed = [p for p in changed if p not in out]
    for path in known.odd:                     # gitlinks: the scan reports the nested repository
        index.remove(path)
        changed.append(os.fsdecode(path))
    entries = known.entries
    if cap:
        changed += [os.fsdecode(p) for p, (_s, mode, key) in entries.items() if key[5] > cap and mode != MODE_LINK]
    say("reading the git index", 0, len(index))
    shas = {item[0] for item in entries.values()}
    nodes = {item[1] for item in known.trees.values()}
    packs = usergit.link_packs(known, shas, os.path.join(objects_dir, "pack"), durable)
    held = set().union(*packs.values()) if packs else set()
    lacking = (shas | nodes) - held
    copied = usergit.copy_loose(known, lacking, objects_dir) if lacking else set()
    lacking -= copied
    lacking |= _not_trees(repo.odb, nodes - lacking)
    if lacking:
        # what the store cannot hold as git has it: the files are read, the trees rebuilt
        for p, (sha, _m, _k) in entries.items():
            if sha in lacking:
                changed.append(os.fsdecode(p))
        for d, (_c, sha, _kids) in known.trees.items():
            if sha in lacking:
                under = next((p for p in entries if p.startswith(d + b"/")), None) if d else next(iter(entries), None)
                if under is not None:
                    changed.append(os.fsdecode(under))
        if len(changed) > MAX_CHANGES:
            return f"{len(lacking):,} objects of the repository's index are in none of its packs"
    for rel in changed:                      # out of the cache: read from disk by the scan
        path = os.fsencode(rel)
        if path in index:
            index.remove(path)   # type: ignore[arg-type]  # pygit2 takes bytes paths (os.fsencode); its hints say str
    t_seed = time.monotonic()
    index.write()
    if durable:
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    faults.hit("bulk_before_index")
    os.replace(tmp, gitdir / "index")
    t_index = time.monotonic()
    nbytes = sum(key[5] for _s, _m, key in entries.values())
    return Adopted(changed=sorted(set(changed)), entries=len(index), bytes=nbytes, linked=sorted(packs),
                   seeded=len(index), copied=len(copied), specials=specials,
                   seconds={"open": round(t_open - t0, 3), "list": round(t_diff - t_open, 3),
                            "git_index": round(t_seed - t_diff, 3), "index": round(t_index - t_seed, 3)})


def read_changed(repo: pygit2.Repository, scanner: Scanner, got: Adopted) -> tuple[dict, dict]:
    """With the adopted index in place: the paths it could not vouch for read as a file call's
    are, and what the walk beside it found folded into the report; (phase times, seed facts)."""
    t0 = time.monotonic()
    update_paths(repo, repo.index, scanner, got.changed)
    report = scanner.report
    for item in got.specials.skipped:
        report.skip(item["path"], item["reason"], item.get("size"))
    report.added_bytes += got.bytes
    return ({**got.seconds, "changed": round(time.monotonic() - t0, 3)},
            {"seeded_files": got.seeded, "linked_packs": len(got.linked), "note": None, "adopted": True,
             "changed_files": len(got.changed), "loose_copied": got.copied})


def _ignored(handle, entries: dict, rules) -> list[bytes]:
    """The tracked paths an ignore rule of the store's or the work tree's ignores: candidates
    by pattern (ignore.could_ignore), each answered by libgit2."""
    rx = could_ignore(rules)
    if rx is None:
        return []
    search = rx.search
    return [p for p in entries if search(p) and is_ignored(handle, os.fsdecode(p))]


def _not_trees(odb, ids: set[bytes]) -> set[bytes]:
    """Of the cache tree's ids, those the store does not hold as trees (an index can name
    anything there; libgit2's write_tree takes a valid node as it is)."""
    out = set()
    for sha in ids:
        try:
            if odb.read_header(pygit2.Oid(raw=sha))[0] != pygit2.enums.ObjectType.TREE:
                out.add(sha)
        except (KeyError, ValueError, pygit2.GitError):
            out.add(sha)
    return out


def _open_index(path: str) -> pygit2.Index:
    """pygit2.Index(path), minus its noise: an index libgit2 refuses leaves no half-made
    object whose finaliser fails."""
    out = ffi.new("git_index **")
    check_error(C.git_index_open(out, os.fsencode(path)))
    return pygit2.Index.from_c(None, out)
