"""A workspace's checkpoint chain: `refs/chronos/snapshots/<id>`, a first-parent chain whose
newest commit the workspace HEAD is detached at (docs/design.md, the store's layout).

Reading it never trusts the ref blindly: a torn or symbolic ref, or one naming an object that
is missing, damaged or not a commit, is reported and the HEAD (detached at the newest
checkpoint too) serves instead; a damaged loose object is never handed to libgit2.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import pygit2
from pygit2 import GitError
from pygit2.enums import ReferenceType

from . import faults
from .checkpoint import Checkpoint, CheckpointMeta, message_of, signature, write_commit
from .errors import CheckpointNotFound
from .powercut import loose_object_ok

MIN_PREFIX = 7


def id_like(spec: str) -> bool:
    """Whether `spec` can name a checkpoint by its id (a full one, or a prefix long enough)."""
    low = spec.lower()
    return len(low) >= MIN_PREFIX and all(ch in "0123456789abcdef" for ch in low)


_OBJECT_ID = re.compile(r"[0-9a-f]{40}")


class Tip(NamedTuple):
    commit: pygit2.Commit | None     # the newest checkpoint that can serve
    problem: str | None              # why the ref names none (then `commit` is HEAD's, or None)
    target: object                   # what the ref named (compared before it is moved)


def commit_at(repo, objects: Path, oid) -> tuple[pygit2.Commit | None, str | None]:
    """(the commit `oid`, None), or (None, why it cannot serve as a checkpoint).  A damaged
    loose object is never handed to libgit2 (it loops inflating a truncated one)."""
    hexid = str(oid)
    if not _OBJECT_ID.fullmatch(hexid):
        return None, f"{hexid[:60]!r} is not an object id"
    if not loose_object_ok(os.path.join(objects, hexid[:2], hexid[2:])):
        return None, f"object {hexid[:12]} is damaged (a torn or altered file)"
    try:
        obj = repo[hexid]
    except KeyError:
        return None, f"object {hexid[:12]} is not in the store"
    except (GitError, ValueError) as exc:
        return None, f"object {hexid[:12]} cannot be read ({exc})"
    if not isinstance(obj, pygit2.Commit):
        return None, f"{hexid[:12]} is a {obj.type_str}, not a checkpoint"
    return obj, None


def _count_up(rest: list[tuple]) -> list[tuple]:
    """Number a chain's newest checkpoints that have none: from the first numbered one below
    them, else from the oldest (1)."""
    base = 0
    for i, (_c, cp) in enumerate(rest):
        if cp.number is not None:
            base = cp.number + i
            break
    else:
        base = len(rest)
    above = base + 1
    for _c, cp in rest:
        cp.number = cp.number if cp.number is not None else max(above - 1, 1)
        above = cp.number
    return rest


class Chain:
    """The checkpoints of one workspace (`root`), newest first, and the move of its ref."""

    def __init__(self, store, root: Path, ref: str, gitdir: Path):
        self.store = store
        self.root = root
        self.ref = ref
        self.gitdir = gitdir
        self.objects = store.root / "objects"

    def commit_at(self, repo, oid) -> tuple[pygit2.Commit | None, str | None]:
        return commit_at(repo, self.objects, oid)

    def tip(self, repo) -> Tip:
        """The newest checkpoint, and what is wrong with the ref when it names none that can
        serve.  Then the tip is the gitdir's HEAD (detached at the newest checkpoint too), or
        None: the next snapshot starts a fresh chain, and replaces the ref either way."""
        try:
            ref = repo.references.get(self.ref)
        except GitError as exc:            # torn by a power cut or edited
            return Tip(self.head_checkpoint(repo), f"the checkpoint ref {self.ref} is damaged ({exc})", None)
        if ref is None:
            return Tip(None, None, None)
        if ref.type != ReferenceType.DIRECT:
            return Tip(self.head_checkpoint(repo), f"the checkpoint ref {self.ref} is symbolic "
                                                   f"(it names {str(ref.target)[:80]!r})", ref.target)
        c, why = self.commit_at(repo, ref.target)
        if c is None:
            return Tip(self.head_checkpoint(repo), f"the checkpoint ref {self.ref} names no readable "
                                                   f"checkpoint: {why}", ref.target)
        return Tip(c, None, ref.target)

    def head_checkpoint(self, repo) -> pygit2.Commit | None:
        try:
            text = (self.gitdir / "HEAD").read_text("ascii", "replace").strip()
        except OSError:
            return None
        return self.commit_at(repo, text)[0]

    def advance(self, repo, tree, meta: CheckpointMeta, state: Tip) -> pygit2.Oid:
        """Commit on the tip (a fresh chain when the ref names nothing that can serve: the
        HEAD's checkpoint, else none) and move the ref, only from the value `state` read.
        The commit gets the next number (the tip's plus one)."""
        meta.number = self._next_number(state.commit)
        sig = signature(meta.time)
        parents = [state.commit.id] if state.commit is not None else []
        # not create_commit: it freshens the tree's pack (write_commit says why)
        cid = write_commit(self.objects, tree, parents, sig, meta.to_message())
        try:
            ref = repo.references.get(self.ref)
            if ref is None:
                repo.references.create(self.ref, cid, force=False)
            elif state.target is None or str(ref.target) != str(state.target):
                raise GitError(f"the checkpoint ref {self.ref} moved underneath the workspace lock")
            elif state.problem:                 # symbolic, or naming no checkpoint: replaced whole
                repo.references.create(self.ref, cid, force=True)
            else:
                ref.set_target(cid)          # compare-and-swap against the value just read
        except GitError as exc:
            if "corrupted" not in str(exc):
                raise
            # a torn ref file (its tip came from HEAD, see tip()): replace it whole
            (self.store.root / self.ref).unlink(missing_ok=True)
            repo.references.create(self.ref, cid, force=True)
        faults.hit("snapshot_after_commit")
        repo.set_head(cid)             # detached at the newest checkpoint: restore baseline, fsck-clean
        return cid

    def _next_number(self, tip: pygit2.Commit | None) -> int:
        if tip is None:
            return 1
        n = Checkpoint.from_commit(tip).number
        if n is None:                      # a chain written before numbers: numbered once, oldest first
            n = next(self.numbered())[1].number or 0
        return n + 1

    def numbered(self, damage: list[dict] | None = None):
        """(commit, Checkpoint) newest first, every one with its number: its own, or for a
        checkpoint written before numbers (or whose metadata lost it) the one below its newer
        neighbour's; a chain whose newest ones have none counts them from the oldest (that
        is the upgrade's numbering: 1 = the oldest kept, and the next checkpoint continues it)."""
        above: int | None = None
        it = self.iter_commits(damage)
        for c in it:
            cp = Checkpoint.from_commit(c)
            if cp.number is None and above is None:
                rest = [(c, cp), *((x, Checkpoint.from_commit(x)) for x in it)]
                yield from _count_up(rest)
                return
            if cp.number is None and above is not None:
                cp.number = max(above - 1, 1)
            above = cp.number
            yield c, cp

    def has_checkpoint(self) -> bool:
        """Whether a baseline exists (one ref lookup; newest() also parses the metadata)."""
        repo = self.store.repo()
        try:
            return repo.references.get(self.ref) is not None
        except GitError:           # a torn or edited ref: as tip(), the HEAD says (the snapshot mends it)
            return self.head_checkpoint(repo) is not None

    def newest(self) -> Checkpoint | None:
        return next((cp for _c, cp in self.numbered()), None)

    def iter_commits(self, damage: list[dict] | None = None):
        """The checkpoint chain, newest first.  It ends where a commit cannot be read (or
        below a retention cut); `damage` hears why, and about a ref that names none."""
        repo = self.store.repo()
        tip = self.tip(repo)
        if tip.problem and damage is not None:
            damage.append({"ref": self.ref, "id": str(tip.target) if tip.target else None, "reason": tip.problem})
        c = tip.commit
        while c is not None:
            yield c
            if not c.parent_ids:
                return
            parent, why = self.commit_at(repo, c.parent_ids[0])
            if why is not None and damage is not None and not (
                    why.endswith("not in the store") and str(c.id) in self._cuts()):
                damage.append({"id": str(c.parent_ids[0]), "reason": f"the parent of {str(c.id)[:12]}: {why}"})
            c = parent

    def _cuts(self) -> set[str]:
        """The commits retention made roots (its `shallow` file), read now: a handle opened
        before a compaction in another process still sees their parents."""
        try:
            return set((self.store.root / "shallow").read_text().split())
        except OSError:
            return set()

    def damage(self) -> list[dict]:
        """What in this workspace's history cannot serve, and why: its ref, commits that
        cannot be read, checkpoints whose metadata is damaged (still listed and restorable)."""
        out: list[dict] = []
        for c in self.iter_commits(out):
            cp = Checkpoint.from_commit(c)
            if cp.damage:
                out.append({"id": cp.id, "reason": cp.damage})
        return out

    def checkpoints(self, limit: int | None = None, damage: list[dict] | None = None) -> list[Checkpoint]:
        out = []
        for _c, cp in self.numbered(damage):
            out.append(cp)
            if limit is not None and len(out) >= limit:
                break
        return out

    def resolve(self, spec: str) -> Checkpoint:
        """A full id, a unique prefix (>= 7 hex digits), `@N` (its number), a 1-based index (1 =
        newest) or `latest`."""
        spec = (spec or "").strip()
        if not spec:
            raise CheckpointNotFound("no checkpoint given")
        low = spec.lower()
        if low in ("latest", "head", "newest"):
            tip = self.newest()
            if tip is None:
                raise CheckpointNotFound(f"workspace {self.root} has no checkpoints yet")
            return tip
        if spec.startswith("@"):
            return self._by_number(spec)
        if spec.isdigit() and len(spec) < MIN_PREFIX:
            n = int(spec)
            if n < 1:
                raise CheckpointNotFound("checkpoint indexes start at 1 (1 = newest)")
            for i, (_c, cp) in enumerate(self.numbered(), 1):
                if i == n:
                    return cp
            raise CheckpointNotFound(f"there is no checkpoint {n} (1 = newest; the workspace has fewer)")
        if not all(ch in "0123456789abcdef" for ch in low):
            raise CheckpointNotFound(
                f"{spec!r} is not a checkpoint: use a full id, a prefix of at least {MIN_PREFIX} hex "
                "digits, @N (its number), an index (1 = newest) or 'latest'")
        if len(low) < MIN_PREFIX:
            raise CheckpointNotFound(f"checkpoint prefix {spec!r} is too short (need {MIN_PREFIX}+ hex digits)")
        matches = [cp for c, cp in self.numbered() if str(c.id).startswith(low)]
        if not matches:
            return self._off_chain(spec, low)
        if len(matches) > 1:
            raise CheckpointNotFound(f"checkpoint prefix {spec!r} is ambiguous ({len(matches)} matches)")
        return matches[0]

    def _by_number(self, spec: str) -> Checkpoint:
        """`@N`: the checkpoint numbered N (numbers never change; 1 = the oldest ever)."""
        text = spec[1:]
        if not text.isdigit() or int(text) < 1:
            raise CheckpointNotFound(f"{spec!r} is not a checkpoint number: @ and a number from 1, e.g. @12")
        n = int(text)
        for _c, cp in self.numbered():
            if cp.number == n:
                return cp
            if cp.number is not None and cp.number < n:
                break
        raise CheckpointNotFound(f"there is no checkpoint @{n} in workspace {self.root} (dropped by retention, "
                                 "or not made yet)")

    def _off_chain(self, spec: str, low: str) -> Checkpoint:
        """A checkpoint of this workspace that fell off the chain (e.g. referenced by the journal)."""
        try:
            repo = self.store.repo()
            obj = self.commit_at(repo, low)[0] if len(low) == 40 else repo.revparse_single(low)
            if isinstance(obj, pygit2.Commit) and message_of(obj).startswith("chronos checkpoint:"):
                owner = self._other_owner(obj.id)
                if owner is not None:     # restoring it here would swap in another project's files
                    raise CheckpointNotFound(
                        f"checkpoint {spec!r} belongs to workspace {owner}, not {self.root}")
                if obj.tree_id not in repo.odb:
                    raise CheckpointNotFound(f"checkpoint {spec!r} was dropped by retention: its "
                                             "files are no longer in the store")
                found = Checkpoint.from_commit(obj)
                if found.meta.kind == "merge":      # a revert's, undo's or redo's plan (a dry run's too)
                    raise CheckpointNotFound(
                        f"{spec!r} is what a revert, undo or redo puts in place, not a checkpoint of "
                        f"{self.root}: the operation's own result is its checkpoint after (`log`)")
                return found
        except (KeyError, ValueError, GitError):
            pass
        raise CheckpointNotFound(f"no checkpoint {spec!r} in workspace {self.root}")

    def _other_owner(self, oid: pygit2.Oid) -> str | None:
        """The root of another workspace whose checkpoint chain holds `oid`, if any."""
        repo = self.store.repo()
        for other in self.store.workspaces():
            if other.ref == self.ref:
                continue
            try:
                ref = repo.references.get(other.ref)
                if ref is None:
                    continue
                if ref.target == oid or repo.descendant_of(ref.target, oid):
                    return os.fsdecode(other.root_bytes)
            except (GitError, KeyError, ValueError):
                continue
        return None

    def lookup_commit(self, checkpoint_id: str) -> pygit2.Commit:
        try:
            obj = self.store.repo()[checkpoint_id]
        except (KeyError, ValueError):
            raise CheckpointNotFound(
                f"checkpoint {checkpoint_id} is not in the store (dropped by retention?)") from None
        if not isinstance(obj, pygit2.Commit):
            raise CheckpointNotFound(f"{checkpoint_id} is not a checkpoint")
        return obj
