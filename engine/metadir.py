"""Everything chronos-git keeps under `<store>/chronos/`, by name, and the order its locks are
taken in.

Locks are flock files here (engine/locking.py).  A thread that holds one lock and takes
another takes them in LOCK_ORDER (outermost first); two threads or processes that did it the
other way round could wait for each other forever (the wind tunnel once found such a
deadlock).  locking.py checks every acquisition against this order when
CHRONOS_GIT_LOCK_ORDER=strict (the tests set it) and raises LockOrderError on a breach.

The JSON state files among FILES are read and written only through engine/state_file.py
(StateFile): JSON_FILES says, for each, the lock its read-modify-write takes, whether its
writes are fsynced and how it is serialised.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# outermost first: a thread holding a lock may take only locks after it in this list
LOCK_ORDER = (
    "init",               # making the store
    "compact",            # one compaction at a time (engine/compaction.py)
    "push",               # one per remote: a push or its removal under way (service/remote_push.py)
    "maintenance",        # read-write: object writers shared, compaction alone (Store.writing)
    "ws",                 # one per workspace: its index, stat cache and checkpoint ref
    "unconsolidated",     # the first import's list of loose packs (engine/consolidate.py)
    "remotes",            # remotes.json's read-modify-write
    "anchor",             # the anchor chain pushed to remotes (journal_refs/anchor.py)
    "journal",            # the journal's append, heal and verify
    "alerts",             # pending-alerts.json (service/reconcile.py)
    "protected-changes",  # protected-changes.json (service/self_protection.py)
)
_RANK = {kind: i for i, kind in enumerate(LOCK_ORDER)}

# the files, with the module that writes each
FILES = {
    "boot.json": "engine/powercut.py: the boot this store's power-cut check last ran in",
    "power-cut-refused.json": "engine/powercut.py: a repair refused on the same boot",
    "quarantine/": "engine/powercut.py: damaged objects moved aside",
    "inflight/": "engine/inflight.py: temp names of restores under way",
    "tmp/": "scratch (fetches, first imports)",
    "ws/": "one lock per workspace",
    "watch/": "service/watch_limit.py: each host process's watchers degraded by the inotify watch limit",
    "unconsolidated.json": "engine/consolidate.py",
    "compact.wanted": "engine/compaction.py: a writer waiting for the compaction to yield",
    "retention.log": "engine/compaction.py",
    "packs.json": "engine/pack_list.py",
    "missing.json": "engine/retention.py: workspaces whose folder is gone, since when",
    "compacted": "engine/store.py: a token changed by every compaction",
    "journal-alarm.json": "journal_refs/verify.py",
    "journal-verified.json": "journal_refs/verify.py",
    "checkpoints-verified.json": "journal_refs/checkpoints.py",
    "operator-acts.json": "service/operator_key.py",
    "pending-alerts.json": "service/reconcile.py",
    "protected-changes.json": "service/self_protection.py",
    "remotes.json": "service/remote_record.py",
    "host-id": "service/remotes.py",
    "windtunnel-last.json": "windtunnel/runner.py",
}


@dataclass(frozen=True)
class JsonFile:
    """How a JSON state file under `<store>/chronos/` is kept (engine/state_file.py)."""
    lock: str | None   # the lock of its read-modify-write (None: one writer, or its caller holds one)
    durable: bool      # fsynced (False: a lost write only makes the next run do more)
    format: str        # "json" (json.dumps), "sorted" (sort_keys) or "canonical" (engine/codec.py)


JSON_FILES = {
    "boot.json": JsonFile(None, True, "json"),                      # under maintenance, exclusive
    "power-cut-refused.json": JsonFile(None, True, "json"),         # under maintenance, exclusive
    "unconsolidated.json": JsonFile("unconsolidated", True, "json"),
    "packs.json": JsonFile(None, True, "json"),                     # under the compact lock
    "missing.json": JsonFile(None, False, "json"),                  # lost: the clock restarts (later, safer)
    "journal-alarm.json": JsonFile(None, True, "canonical"),        # the journal's verify
    "journal-verified.json": JsonFile(None, False, "canonical"),
    "checkpoints-verified.json": JsonFile(None, False, "canonical"),
    "operator-acts.json": JsonFile(None, False, "canonical"),
    "pending-alerts.json": JsonFile("alerts", True, "canonical"),
    "protected-changes.json": JsonFile("protected-changes", True, "canonical"),
    "remotes.json": JsonFile("remotes", True, "sorted"),
}


class LockOrderError(RuntimeError):
    """A lock taken against LOCK_ORDER: a deadlock waiting for the right interleaving."""


def lock_path(meta_dir: Path, kind: str, instance: str | None = None) -> Path:
    """The lock file of `kind` (`instance`: a workspace id, a remote's name)."""
    if kind not in _RANK:
        raise ValueError(f"no lock {kind!r} in the lock order (engine/metadir.py)")
    if kind == "ws":
        return meta_dir / "ws" / f"{instance}.lock"
    return meta_dir / (f"{kind}-{instance}.lock" if instance else f"{kind}.lock")


def kind_of(path: os.PathLike | str) -> str | None:
    """The lock kind of a lock file's path; None for a lock outside a store's folder."""
    p = Path(path)
    if p.suffix != ".lock":
        return None
    if p.parent.name == "ws" and p.parent.parent.name == "chronos":
        return "ws"
    if p.parent.name != "chronos":
        return None
    stem = p.stem
    if stem.startswith("push-"):
        return "push"
    return stem if stem in _RANK else None


def rank(path: os.PathLike | str) -> int | None:
    kind = kind_of(path)
    return None if kind is None else _RANK[kind]
