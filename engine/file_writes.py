"""Files written into a workspace on a caller's behalf (the service's `write_file` semantics):
confined (engine/confine.py), each path replaced whole or removed, its folder recorded as
in flight while it is written (engine/inflight.py)."""
from __future__ import annotations

import os
import stat

from . import faults, inflight, perms
from .confine import Confined


def write_files(store, root_bytes: bytes, rels: list[tuple[str, bytes | None]], *,
                fault: str | None = None) -> None:
    """Write `rels` (workspace-relative path, bytes or None) under `root_bytes`: parents
    created, each path replaced whole (bytes) or removed (None).  A file keeps its
    permission bits; a new one gets the default ones.  `fault` is hit before every path
    but the first (some paths written, the rest not)."""
    dirs = {os.path.dirname(rel) for rel, _ in rels}
    with inflight.writing(store, root_bytes, dirs), Confined(root_bytes, token=inflight.TOKEN) as disk:
        for i, (rel, data) in enumerate(rels):
            if i and fault:
                faults.hit(fault)          # some paths written, the rest not
            if data is None:
                disk.unlink(rel)
                continue
            now = disk.entry(rel)
            bits = stat.S_IMODE(now.st.st_mode) if now.kind == "file" else 0o666 & ~perms.umask()
            disk.write(rel, data, bits, dir_perm=lambda _rel: 0o777 & ~perms.umask())
