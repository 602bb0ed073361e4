"""Temp names a killed restore may leave in a workspace, and their sweep.

Before a restore (or a replay, or `write`) writes, it records in
`<store>/chronos/inflight/` which workspace directories may get its temp
names and which process owns them.  At the next start, the manifests of dead
owners are read and their temp names removed; a live owner's are left alone.
Temp names are also in every workspace's exclude file, so a snapshot taken
meanwhile never captures one.
"""
from __future__ import annotations

import json
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

from . import faults
from .codec import canonical
from .confine import Confined
from .fsutil import atomic_write
from .owner import ProcessIdentity

TOKEN = f"{os.getpid()}x{secrets.token_hex(4)}"     # this process's temp-name prefix


def _dir(store) -> Path:
    return store.meta_dir / "inflight"


@contextmanager
def writing(store, root: bytes, dirs):
    """Record where this process may leave temp names for the duration of the block."""
    d = _dir(store)
    d.mkdir(exist_ok=True)
    path = d / f"{TOKEN}-{secrets.token_hex(4)}.json"
    atomic_write(path, canonical({"owner": ProcessIdentity.current().to_dict(), "token": TOKEN,
                                  "workspace": os.fsdecode(root), "dirs": sorted(set(dirs))}).encode(),
                 durable=False)
    try:
        faults.hit("inflight_manifest_written")
        yield
    finally:
        path.unlink(missing_ok=True)


def sweep(store) -> int:
    """Remove the temp names of owners that are gone; returns how many."""
    d = _dir(store)
    try:
        manifests = list(d.iterdir())
    except FileNotFoundError:
        return 0
    removed = 0
    for m in manifests:
        try:
            data = json.loads(m.read_bytes())
            owner = ProcessIdentity.from_dict(data.get("owner"))
            if owner is not None and owner.alive():
                continue
            root = os.fsencode(data["workspace"])
            with Confined(root) as c:
                for rel in data.get("dirs") or ():
                    removed += c.sweep(rel, data["token"])
        except (OSError, ValueError, KeyError, TypeError):
            pass                      # the workspace is gone, or the manifest is damaged
        m.unlink(missing_ok=True)
    return removed
