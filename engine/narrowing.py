"""Capture that narrows: ignore rules changed since the previous checkpoint, and how many of
its paths they now ignore.

Git keeps what it tracks, so a new `*` rule takes nothing out of later checkpoints at once: it
leaves out every file created after it, silently.  Counting the rule's reach over what was
captured when the rule changes makes that visible.  Found without a walk of its own: a
`.gitignore` among the paths a snapshot refreshed (declared or watched), among the tree's
changes, or passed by the scan's walk of the work tree (`find_omissions`, engine/worktree.py)
and changed (ctime) since the previous checkpoint began; the store's exclude files (settings
`ignored_patterns`, and `<store>/info/exclude`, which libgit2 reads for every workspace) by one
stat each.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .chain import commit_at
from .checkpoint import CheckpointMeta
from .ignore import is_ignored

IGNORE_NAME = ".gitignore"
SAMPLE = 10                 # paths kept in a record (the count is exact)
BUDGET_S = 2.0              # counting stops here (78k paths take ~1 s); the count is then a floor
LARGE_PATHS = 20            # this many captured paths now ignored is a large narrowing ...
LARGE_SHARE = 4             # ... and so is a quarter (1/4) of the checkpoint's paths


def is_large(count: int, files: int) -> bool:
    """A narrowing reported like a weakening setting: at least LARGE_PATHS paths, or at least a
    quarter of what the checkpoint holds (a small workspace emptied by `*` counts too)."""
    return count >= LARGE_PATHS or (count > 0 and count * LARGE_SHARE >= files)


@dataclass
class IgnoreChange:
    sources: list[str]          # ignore files that changed: workspace-relative, or absolute (store's)
    count: int = 0              # paths of the checkpoint the rules now ignore (they stay captured)
    files: int = 0              # paths in the checkpoint
    sample: list[str] = field(default_factory=list)
    complete: bool = True       # False: the budget ran out, `count` is a floor

    @property
    def large(self) -> bool:
        return is_large(self.count, self.files)

    def to_dict(self) -> dict:
        return {"sources": self.sources, "count": self.count, "files": self.files, "sample": self.sample,
                "complete": self.complete, "large": self.large}


def changed_at(path) -> float:
    """When `path` last changed (ctime: no tool can set it back), a symlink and its target alike:
    libgit2 follows a `.gitignore` that is a link, so a rule written into its target counts."""
    t = os.lstat(path).st_ctime
    try:
        return max(t, os.stat(path).st_ctime)
    except OSError:
        return t                     # a dangling link: its own change is all there is


def changed_since(paths: list[bytes], since: float) -> list[bytes]:
    """Those of `paths` whose inode changed at or after `since` (ctime: no tool can set it back)."""
    out = []
    for p in paths:
        try:
            if changed_at(p) >= since:
                out.append(p)
        except OSError:
            pass
    return out


def tree_sources(old_tree, new_tree) -> list[str]:
    """`.gitignore` files among the changes of two trees.  A walk of the two that skips every
    subtree they share: a checkpoint of one declared path reads one tree per level (libgit2's
    tree diff took 24 ms on the kernel tree for a one-file change)."""
    if old_tree is None or new_tree is None or old_tree.id == new_tree.id:
        return []
    out: list[str] = []
    stack = [("", old_tree, new_tree)]
    while stack:
        prefix, a, b = stack.pop()
        left = {e.name: e for e in a} if a is not None else {}
        right = {e.name: e for e in b} if b is not None else {}
        for name in left.keys() | right.keys():
            x, y = left.get(name), right.get(name)
            if x is not None and y is not None and x.id == y.id and (name != IGNORE_NAME or x.filemode == y.filemode):
                continue
            old_sub, new_sub = (e if e is not None and e.type_str == "tree" else None for e in (x, y))
            if name == IGNORE_NAME and any(e is not None and e.type_str != "tree" for e in (x, y)):
                out.append(prefix + name)
            if old_sub is not None or new_sub is not None:
                stack.append((f"{prefix}{name}/", old_sub, new_sub))
    return sorted(out)


def named(rels) -> list[str]:
    """`.gitignore` files among paths a snapshot refreshed."""
    return [r for r in rels or () if os.path.basename(r.rstrip("/")) == IGNORE_NAME]


def scope(source: str) -> str:
    """Where an ignore file's rules reach: its folder ("" for the whole workspace)."""
    if os.path.isabs(source):
        return ""
    d = os.path.dirname(source)
    return d + "/" if d else ""


def reach(repo, paths, sources: list[str], deadline: float | None = None) -> IgnoreChange:
    """How many of `paths` (the index's, sorted) the current rules ignore, under the folders
    the changed `sources` govern.  An ignored folder ignores all below it: one check each."""
    scopes = sorted({scope(s) for s in sources})
    if "" in scopes:
        scopes = [""]
    deadline = deadline if deadline is not None else time.monotonic() + BUDGET_S
    out = IgnoreChange(sources=sorted(set(sources)))
    dirs: dict[str, bool] = {}
    for n, rel in enumerate(paths):
        out.files += 1
        if not any(rel.startswith(s) for s in scopes):
            continue
        if n % 256 == 0 and time.monotonic() > deadline:
            out.complete = False
            continue               # still counting `files`
        if _under_ignored(repo, rel, dirs) or is_ignored(repo, rel):
            out.count += 1
            if len(out.sample) < SAMPLE:
                out.sample.append(rel)
    return out


def _under_ignored(repo, rel: str, dirs: dict[str, bool]) -> bool:
    cut = rel.find("/")
    while cut >= 0:
        d = rel[:cut + 1]
        hit = dirs.get(d)
        if hit is None:
            hit = dirs[d] = is_ignored(repo, d)
        if hit:
            return True
        cut = rel.find("/", cut + 1)
    return False


class RulesWatch:
    """One workspace's side of the above: after each checkpoint, whether its ignore rules changed
    since the one before, and what of the index they now ignore.  It remembers the last change
    counted (a scan that made no checkpoint is not counted twice) and the last checkpoint found
    to have seen every ignore file (a long-lived process walks back a step or two)."""

    def __init__(self, gitdir):
        self.gitdir = gitdir                   # engine/layout.py's GitDir
        self.root_bytes = gitdir.root_bytes
        self.objects = gitdir.store.root / "objects"
        self.store_exclude = os.fsencode(gitdir.store.root / "info" / "exclude")
        self._seen: tuple | None = None        # the last ignore change counted
        self._rules_base: tuple | None = None  # (a tip, the checkpoint that last saw all its ignore files)

    def change(self, repo, index, tip, tree, rels, seen: list[str]) -> IgnoreChange | None:
        """Ignore rules changed since the checkpoint `tip`: what of the index they now ignore;
        None when no ignore file changed (the usual case: a few stats)."""
        sources = named(rels) + tree_sources(tip.tree, repo[tree])
        store_files = [self.store_exclude]
        if self.gitdir.exclude_rewritten():
            store_files.append(os.fsencode(self.gitdir.path / "exclude"))
        candidates = [os.path.join(self.root_bytes, os.fsencode(r)) for r in seen] + store_files
        base = self.looked_at_rules(repo, tip)
        hits = changed_since(candidates, base.commit_time)      # whole seconds: a cheap floor
        if hits:
            hits = changed_since(hits, CheckpointMeta.from_message(base.message).time)
        for h in hits:
            sources.append(os.fsdecode(h) if h in store_files else os.fsdecode(os.path.relpath(h, self.root_bytes)))
        if not sources:
            return None
        seen_key = (str(base.id), str(tree), tuple(sorted((src, self._ctime(src)) for src in set(sources))))
        if seen_key == self._seen:
            return None         # counted already for this tree (a scan that made no checkpoint)
        self._seen = seen_key
        return reach(repo, [e.path for e in index], sources)

    def looked_at_rules(self, repo, tip, limit: int = 256):
        """The newest checkpoint from `tip` back that saw every ignore file: a walk, or a watched
        refresh (a `.gitignore` event makes the watcher walk).  A declared or partial one read
        only some paths, so a self-ignoring `.gitignore` written before it is still news."""
        c, known = tip, self._rules_base
        for _ in range(limit):
            if known is not None and known[0] == str(c.id):
                c = known[1]           # the last answer (a long-lived process walks a step or two)
                break
            kind = next((ln[6:] for ln in c.message.split("\n", 8) if ln.startswith("Kind: ")), "")
            if kind not in ("declared", "partial") or not c.parent_ids:
                break
            parent = commit_at(repo, self.objects, c.parent_ids[0])[0]
            if parent is None:
                break
            c = parent
        self._rules_base = (str(tip.id), c)
        return c

    def _ctime(self, src: str) -> int | None:
        try:
            path = os.path.join(self.root_bytes, os.fsencode(src))
            return max(os.lstat(path).st_ctime_ns, _target_ctime_ns(path))
        except OSError:
            return None


def _target_ctime_ns(path) -> int:
    try:
        return os.stat(path).st_ctime_ns
    except OSError:
        return 0
