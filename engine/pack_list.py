"""The packs a compaction keeps as they are, listed in `chronos/packs.json`.

Packing is geometric: a pack an earlier compaction wrote (or a delta pack adopted from the
user's git), at least KEEP_BYTES big or one of the parts a big packing is split into, and
still mostly reachable, is kept as it is, so a routine compaction packs only what is new
and a retention cut does not rewrite the whole store.  The list is written before anything
is deleted; a damaged one keeps nothing (the packs are packed again).
"""
from __future__ import annotations

import os
from pathlib import Path

import pygit2

from .state_file import StateFile
from .usergit import Unusable, read_idx

KEEP_BYTES = 16 << 20        # smaller packs are merged into the next one,
PART_KEEP_BYTES = 1 << 20    # unless one of the parts of a big packing (and not a crumb)
KEEP_REACHABLE = 0.8         # below this share of reachable objects a pack is rewritten


def _packs_file(store) -> StateFile:
    """`chronos/packs.json`: {"compacted": [stems], "parts": [stems]}."""
    return StateFile(store.meta_dir, "packs.json")


def packs_list_path(store) -> Path:
    return _packs_file(store).path


def _listed(store, key: str) -> set[str]:
    names = _packs_file(store).read({}, expect=dict).get(key, [])   # missing or damaged: none
    if not isinstance(names, list):
        return set()                # a damaged list keeps nothing: the packs are packed again
    return {n for n in names if isinstance(n, str) and n.startswith("pack-") and "/" not in n}


SMALL_PACKS_DUE = 50         # like git's gc.autoPackLimit: this many small packs call for a compaction


def small_packs(store) -> int:
    """Packs under PART_KEEP_BYTES that no compaction wrote (the journal's syncs write one
    every few calls): each is one more index every object lookup may search."""
    pack_dir = store.root / "objects" / "pack"
    listed, n = compacted_packs(store), 0
    for pack in pack_dir.glob("pack-*.pack") if pack_dir.is_dir() else ():
        try:
            n += pack.stem not in listed and pack.stat().st_size < PART_KEEP_BYTES
        except FileNotFoundError:
            pass
    return n


def compacted_packs(store) -> set[str]:
    """Packs written by a compaction (or adopted delta packs): candidates to keep."""
    return _listed(store, "compacted")


def note_compacted_packs(store, stems: set[str], *, only: bool = False,
                         parts: set[str] | frozenset[str] = frozenset()) -> None:
    """Record packs as compacted (`only`: the list becomes exactly these).  `parts`: packs
    written as the parts of one big packing, kept later down to PART_KEEP_BYTES."""
    names = set(stems) if only else compacted_packs(store) | set(stems)
    pack_dir = store.root / "objects" / "pack"
    names = {n for n in names if (pack_dir / f"{n}.idx").exists()}
    doc = {"compacted": sorted(names), "parts": sorted((_listed(store, "parts") | set(parts)) & names)}
    _packs_file(store).write(doc)          # the caller holds the compact lock


def packs_to_keep(store, old_packs: list[Path], reachable: list[pygit2.Oid]) -> tuple[set[str], set[bytes]]:
    """(stems, their object ids) of the old packs this compaction leaves as they are."""
    listed, parts = compacted_packs(store), _listed(store, "parts")
    candidates = []
    for pack in old_packs:
        try:
            size = pack.stat().st_size
            if pack.stem in listed and (size >= KEEP_BYTES or pack.stem in parts and size >= PART_KEEP_BYTES):
                candidates.append(pack)
        except FileNotFoundError:
            pass
    if not candidates:
        return set(), set()
    reach = {o.raw for o in reachable}
    keep, ids = set(), set()
    for pack in candidates:
        try:
            held = read_idx(os.fsencode(pack.with_suffix(".idx")))
        except (OSError, Unusable):
            continue
        if held and len(held & reach) >= KEEP_REACHABLE * len(held):
            keep.add(pack.stem)
            ids |= held
    return keep, ids

