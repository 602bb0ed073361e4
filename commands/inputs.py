"""Files an operator names on the command line, read carefully: a device, a FIFO or a huge
file is refused with a clear error (`/dev/zero` had been read until memory ran out, and a
FIFO blocked forever)."""
from __future__ import annotations

import json
import os
import stat

HEAD_MAX_BYTES = 1 << 20      # an exported journal head is a few hundred bytes


def content_of(path: str, limit_mb: float) -> bytes:
    """What `write --from` writes, at most max_file_size_mb (a checkpoint would skip a larger
    file)."""
    limit = int(limit_mb * 1024 * 1024) if limit_mb else None
    with open(path, "rb") as fh:
        if stat.S_ISCHR(os.fstat(fh.fileno()).st_mode) or stat.S_ISBLK(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{path} is a device, not a file or a pipe: nothing was written")
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise ValueError(f"{path} holds more than max_file_size_mb ({limit_mb:g} MB), above which checkpoints "
                         "skip a file: nothing was written (raise max_file_size_mb to write it)")
    return data


def _head_bytes(path: str) -> bytes:
    """The bytes of `path`, a regular file of at most HEAD_MAX_BYTES.  Checked before opening
    (opening a device can have effects of its own) and again on the open descriptor (the name
    may be swapped meanwhile); O_NONBLOCK so that even then a FIFO cannot block the open."""
    what = (f"cannot read the journal head {path}: it is not a regular file (a device, a FIFO, a socket or "
            "a folder); give the file `journal export --json` wrote")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ValueError(what)
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ValueError(what)
            data = fh.read(HEAD_MAX_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read the journal head {path}: {exc.strerror or exc}") from None
    if len(data) > HEAD_MAX_BYTES:
        raise ValueError(f"cannot read the journal head {path}: it holds more than {HEAD_MAX_BYTES // 1024} KiB, "
                         "so it is not one (`journal export --json` writes a few hundred bytes)")
    return data


def exported_head(path: str) -> dict:
    """The journal head `journal export --json` wrote to `path` (its whole output, or the head)."""
    data = _head_bytes(path)
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"{path} is not a JSON journal head: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("checkpoint"), dict):
        doc = doc["checkpoint"]            # the whole `journal export --json` output
    if not isinstance(doc, dict):
        raise ValueError(f"{path} does not hold a journal head object")
    return doc
