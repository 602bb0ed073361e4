"""The crash-point table of docs/design.md, generated from `faults.POINTS`.

`faults.POINTS` says what is on disk at each point; `NEXT_START` below says what
the next start (or the next operation) makes of it.  `crash_point_table()`
renders both as markdown; `python -m chronos_git.engine.crash_points` rewrites
the section of docs/design.md between the two marker comments (`--check`: only
say whether it is current; exit 1 if not).  tests/test_docs.py fails when a
point is added to `POINTS` without a `NEXT_START` entry or without regenerating.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .faults import POINTS

START = "<!-- crash-points:start -->"
END = "<!-- crash-points:end -->"
DESIGN_MD = Path(__file__).resolve().parents[1] / "docs" / "design.md"
COMMAND = "python -m chronos_git.engine.crash_points"

NEXT_START = {
    "bulk_mid_pack": "nothing refers to the temp pack (the next compaction removes it); the workspace has "
                     "no checkpoint yet, so its first snapshot starts again",
    "bulk_before_idx": "a pack without an index is not read (the next compaction deletes it); the first "
                       "snapshot starts again",
    "bulk_before_index": "extra objects only; the workspace has no checkpoint yet, so its first snapshot "
                         "starts again",
    "adopt_placed": "the copy's temporary name is still there: the adoption did not finish (the index in "
                    "place may hold tracked files it was to leave out), so the next snapshot drops both "
                    "and adopts the git index again",
    "bulk_before_ref": "the stat cache is complete (an adopted git index: every entry's object in the store, "
                       "the paths it did not vouch for left out) and the packs are listed for consolidation: "
                       "the next snapshot walks the tree against that cache and commits the checkpoint",
    "mid_snapshot": "the next snapshot redoes it; nothing refers to the orphans",
    "snapshot_index_written": "nothing refers to the new trees; the next snapshot starts from the written "
                              "stat cache and commits what is on disk then",
    "snapshot_after_commit": "the checkpoint counts (its ref is the workspace's tip); HEAD names the one "
                             "before until the next commit moves it, and compaction keeps both",
    "watcher_handoff": "the watcher dies with the process: the next process's first snapshot walks the "
                       "whole workspace",
    "after_intent": "file op: all paths at pre-image, settled `not_applied` (replayable once); other: "
                    "pending until an operator resolves",
    "after_dispatch": "file op: all paths at post-image, settled `completed` (never written again); other: "
                      "pending",
    "mid_append": "the event never happened; nothing was written",
    "after_witness": "the ref is at the witness's base: the carried objects are written back and the ref "
                     "moved forward (healed)",
    "mid_publish": "the same: objects already written are kept, the rest written back, the ref moved "
                   "forward (healed)",
    "witness_half_written": "the previous record is read: the event never happened; the next append "
                            "rewrites the slot",
    "witness_temp_written": "the old file is untouched; the temp file (beside the store) is removed at the "
                            "next open",
    "journal_sync_mid_pack": "nothing refers to the temp pack: the next compaction sweeps it; the next sync "
                             "packs them again",
    "journal_sync_before_idx": "a pack without an index is not read; the next sync writes another, the next "
                               "compaction deletes this one",
    "journal_sync_packed": "objects in the pack; the witness stops carrying them at the next sync (which "
                           "packs them once more)",
    "merge_target_written": "no operation was journaled, no path touched and no safety checkpoint made: the "
                            "merged target commit and the scan's trees are unreferenced objects (the next "
                            "compaction prunes them)",
    "restore_after_safety": "no operation was journaled and no path touched; the safety checkpoint stays "
                            "on the chain as an ordinary checkpoint",
    "inflight_manifest_written": "the call (a restore, a replay or `write`) is journaled with every path at "
                                 "its pre-image: settled `not_applied`, as at `after_intent`; the manifest's "
                                 "owner is dead, so the next start removes it",
    "mid_restore": "the restore is a journaled file op: partial, so `uncertain` with per-path evidence; "
                   "`journal recover OP --rollback` restores its safety checkpoint",
    "mid_restore_file": "as `mid_restore`; the inode vanishes with the process: no temp name in the "
                        "workspace",
    "file_before_rename": "the path still holds its old content; the next start removes the temp name "
                          "(its manifest's owner is dead); the call settles by evidence: `not_applied` "
                          "if no other path was written yet, else as at `mid_restore`",
    "after_restore_files": "all paths at their post-image: settled `completed` at the next start",
    "after_timeop_files": "as `after_restore_files`: settled `completed` at the next start; no checkpoint "
                          "after it exists (the next snapshot takes the workspace as the operation left "
                          "it)",
    "settle_before_append": "nothing was journaled: the next start reads the evidence again and settles "
                            "the call then",
    "replay_after_marker": "the original call is no longer replayable; the replay is a protected call of "
                           "its own with every path at its pre-image: settled `not_applied` (replayable "
                           "once)",
    "replay_mid_write": "the replay's own call is partial: `uncertain` with per-path evidence, as at "
                        "`mid_restore`",
    "compact_decided": "nothing was cut: the checkpoints the journaled decision names are still there "
                       "until a later compaction decides again and cuts",
    "retention_after_shallow": "the cut stands (git and libgit2 treat the oldest kept checkpoint as a "
                               "root; `fsck` stays clean); the dropped checkpoints' objects stay until a "
                               "later compaction",
    "compact_pack_before_idx": "a pack without an index is not read; the next compaction deletes it (or, "
                               "same name, gives it its index)",
    "mid_compact": "extra objects only; the next compaction finishes",
    "compact_mid_delete": "the new pack was durable and listed before the first deletion: extra objects "
                          "only; the next compaction deletes the rest",
    "consolidate_mid_copy": "pending packs still listed: the next consolidation redoes it; a half-written "
                            "temp pack is swept",
    "consolidate_before_delete": "objects twice; the next consolidation deletes the pending packs",
    "consolidate_mid_delete": "each pack goes `.idx` first, so libgit2 never sees a pack without its "
                              "data; the list is shortened only after deletion; the rest is redone",
}

_MISSING = "not described yet: add it to `NEXT_START` in `engine/crash_points.py`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def crash_point_table() -> str:
    """The generated part of docs/design.md's "Crash points" section, markdown, ending in a newline."""
    lines = [
        f"<!-- generated from engine/faults.py (POINTS) and engine/crash_points.py (NEXT_START) by "
        f"`{COMMAND}`; edit those, not this table -->",
        f"All {len(POINTS)} points of `engine/faults.POINTS`, in its order:",
        "",
        "| point | state left | next start |",
        "|---|---|---|",
    ]
    for name, state in POINTS.items():
        lines.append(f"| `{name}` | {_cell(state)} | {_cell(NEXT_START.get(name, _MISSING))} |")
    return "\n".join(lines) + "\n"


def section(text: str) -> str:
    """What `text` holds between the markers (the marker lines excluded)."""
    head, start, rest = text.partition(START + "\n")
    body, end, _ = rest.partition(END)
    if not start or not end:
        raise ValueError(f"the markers {START} and {END} (each on a line of its own) are missing")
    return body


def render(text: str) -> str:
    """`text` with the section between the markers replaced by the current table."""
    old = section(text)
    head = text[:text.index(START + "\n") + len(START) + 1]
    return head + crash_point_table() + text[len(head) + len(old):]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    path = Path(args[0]) if args else DESIGN_MD
    text = path.read_text(encoding="utf-8")
    new = render(text)
    if check:
        if new != text:
            print(f"{path}: the crash-point table is out of date; run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if new != text:
        path.write_text(new, encoding="utf-8")
        print(f"{path}: crash-point table rewritten ({len(POINTS)} points)")
    else:
        print(f"{path}: crash-point table already current ({len(POINTS)} points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
