"""Named fault points at every durability boundary, for the wind tunnel and the tests.

`CHRONOS_GIT_FAULT=<point>[@<n>][:<action>]` arms one point: at its n-th hit
(default the first) the process is SIGKILLed (`kill`, the default) or the
code there gets `OSError(ENOSPC)` (`enospc`) or `OSError(EIO)` (`eio`), as a
full or failing disk would give it.  The variable is read once at import: an
unarmed point costs one comparison.  `POINTS` says what is on disk at each
point; `chronos-git windtunnel` crashes every one of them.
"""
from __future__ import annotations

import errno
import os
import signal
import threading
import traceback

POINTS = {
    # the first snapshot of a workspace (engine/bulk.py, engine/workspace.py)
    "bulk_mid_pack": "a pack of the first snapshot half written (temp name), no .idx",
    "bulk_before_idx": "a pack of the first snapshot complete and named, its .idx not written",
    "bulk_before_index": "every pack of the first snapshot written (or the user's linked and their loose "
                         "objects copied, for an adopted git index), the index file not",
    "adopt_placed": "an adopted git index put in place early as git wrote it (every object it names in "
                    "the store), its copy's temporary name kept until what the diff and the walk find "
                    "after is written into it",
    "bulk_before_ref": "the first snapshot's index written, no checkpoint commit yet",
    # every later snapshot
    "mid_snapshot": "tree objects written, the index file not",
    "snapshot_index_written": "the index file written, the checkpoint commit not",
    "snapshot_after_commit": "the checkpoint ref moved, the workspace HEAD not",
    "watcher_handoff": "the watcher's dirty set taken, the snapshot not done",
    # protected calls (service/transaction.py)
    "after_intent": "the intent durable, the call not dispatched",
    "after_dispatch": "the call ran, its outcome not recorded",
    # the journal (journal_refs/journal.py)
    "mid_append": "an event's objects made (an intent's in memory only, others written), the witness not",
    "after_witness": "the witness written (the event is durable), its objects not written, the journal "
                     "ref not moved",
    "mid_publish": "a durable event's objects written (journal_refs/publish.py), the journal ref not moved",
    "witness_half_written": "half of the new witness record written over its standby slot (a torn write)",
    "witness_temp_written": "the witness rewritten whole (its first record, or one that outgrew its slot) "
                            "under a temp name, not renamed",
    "journal_sync_mid_pack": "the objects the witness carries half written into a pack (temp name), "
                             "the witness still carrying them",
    "journal_sync_before_idx": "that pack complete and named, its .idx not written",
    "journal_sync_packed": "that pack and .idx durable and the loose copies deleted, the witness still "
                           "carrying them",
    # restores and the time machine's other operations (engine/restore.py, engine/confine.py,
    # engine/inflight.py, service/timemachine.py)
    "merge_target_written": "a merging time-machine operation's target (agent-only restore, revert, undo, "
                            "redo) written off every chain and its plan approved, the safety checkpoint "
                            "not committed",
    "restore_after_safety": "the safety checkpoint committed, the intent not journaled",
    "inflight_manifest_written": "the temp-name manifest written, no file touched",
    "mid_restore": "some paths of a restore written or deleted",
    "mid_restore_file": "one file's bytes in an unnamed O_TMPFILE inode, not linked",
    "file_before_rename": "one file linked under its temp name, not renamed into place",
    "after_restore_files": "every path of a restore written, its outcome not recorded",
    "after_timeop_files": "every path of a time-machine operation written and read back, its checkpoint "
                          "after not taken, its outcome not recorded",
    # recovery (service/reconcile.py)
    "settle_before_append": "a crashed call's evidence read, the settlement not journaled",
    "replay_after_marker": "a replay journaled (replayed + started), no file written",
    "replay_mid_write": "some files of a multi-path replay written",
    # retention and compaction (engine/retention.py, engine/compaction.py)
    "compact_decided": "retention decided and journaled, nothing cut",
    "retention_after_shallow": "the retention cut (shallow) written, nothing packed",
    "compact_pack_before_idx": "a new pack (one part of a big one) renamed into place, its .idx not",
    "mid_compact": "the new pack written, old packs and loose objects not deleted",
    "compact_mid_delete": "some redundant loose objects deleted, old packs not",
    # consolidating a first import (engine/consolidate.py)
    "consolidate_mid_copy": "what the refs reach copied out (its pack maybe half written), nothing deleted",
    "consolidate_before_delete": "the compressed copy durable and named, the pending packs not deleted",
    "consolidate_mid_delete": "one pending pack deleted, the others not",
}

_ACTIONS = {"kill", "enospc", "eio"}


def _parse(spec: str | None):
    if not spec:
        return None
    point, _, action = spec.partition(":")
    point, _, nth = point.partition("@")
    return point, int(nth or 1), action or "kill"


_ARMED = _parse(os.environ.get("CHRONOS_GIT_FAULT"))
_hits = 0
_guard = threading.Lock()


def armed() -> str | None:
    """The point armed in this process (the wind tunnel, the tests), if any."""
    return _ARMED[0] if _ARMED is not None else None


def _where() -> str:
    """The calls that led to the hit, innermost first, on one line (a breach's first clue)."""
    frames = traceback.extract_stack()[:-2]     # without _where and hit
    return " < ".join(f"{f.name}@{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(frames[-12:]))


def hit(point: str) -> None:
    global _hits
    if _ARMED is None or _ARMED[0] != point:
        return
    with _guard:
        _hits += 1
        if _hits != _ARMED[1]:
            return
    action = _ARMED[2]
    log = os.environ.get("CHRONOS_GIT_FAULT_LOG")
    if log:                       # the wind tunnel's proof that the point was reached, and from where
        try:
            thread = threading.current_thread().name.replace(" ", "_")
            with open(log, "a") as f:
                f.write(f"{point} {action} {os.getpid()} {thread} {_where()}\n")
        except OSError:
            pass
    if action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device (injected at {point})")
    if action == "eio":
        raise OSError(errno.EIO, f"Input/output error (injected at {point})")
    os.kill(os.getpid(), signal.SIGKILL)
