"""The read-modify-write of a JSON state file under `<store>/chronos/`.

Every such file is named in engine/metadir.py's JSON_FILES, which says the lock its
read-modify-write takes, whether its writes are fsynced and how it is serialised;
`StateFile(meta_dir, name)` refuses any other name.  Reading never raises for a file that
is missing or damaged: `load()` says which it was (some callers report damage as a
finding, most start again from empty), `read(default)` returns `default` for either.
Writing is atomic (readers see the old or the new document), mode 0600.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from . import locking, metadir
from .codec import canonical
from .fsutil import atomic_write

_DUMP: dict[str, Callable[[Any], str]] = {
    "json": json.dumps,
    "sorted": lambda doc: json.dumps(doc, sort_keys=True),
    "canonical": canonical,
}

REMOVE = object()       # returned by an update's function: the file is removed instead of written


@dataclass(frozen=True)
class Loaded:
    """What reading a state file found: `doc` is the parsed document when `state` is "ok"
    (None otherwise); `error` is why it could not be read ("unreadable") or parsed ("damaged")."""
    state: Literal["ok", "missing", "unreadable", "damaged"]
    doc: Any = None
    error: Exception | None = None

    def raise_if_unreadable(self) -> None:
        if self.state == "unreadable" and self.error is not None:
            raise self.error


class StateFile:
    """One JSON state file of one store (`meta_dir`: the store's `chronos/` folder)."""

    def __init__(self, meta_dir: os.PathLike | str, name: str):
        spec = metadir.JSON_FILES.get(name)
        if spec is None:
            raise ValueError(f"no JSON state file {name!r} in engine/metadir.py's JSON_FILES")
        self.meta_dir = Path(meta_dir)
        self.name = name
        self.spec = spec
        self.path = self.meta_dir / name

    def load(self) -> Loaded:
        """The document, or why there is none: missing, unreadable (an OSError other than a
        missing file) or damaged (not JSON)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Loaded("missing")
        except OSError as exc:
            return Loaded("unreadable", error=exc)
        try:
            return Loaded("ok", json.loads(raw))
        except (ValueError, RecursionError) as exc:     # not JSON, not UTF-8, or nested past any use
            return Loaded("damaged", error=exc)

    def read(self, default: Any, *, expect: type | None = None, raise_unreadable: bool = False) -> Any:
        """The document; `default` when the file is missing, unreadable or damaged, or (with
        `expect`) is not an instance of `expect`.  `raise_unreadable`: an unreadable file
        raises its OSError instead."""
        got = self.load()
        if raise_unreadable:
            got.raise_if_unreadable()
        if got.state != "ok" or (expect is not None and not isinstance(got.doc, expect)):
            return default
        return got.doc

    def write(self, doc: Any) -> None:
        """Atomically, mode 0600, fsynced when JSON_FILES says the file is durable."""
        atomic_write(self.path, _DUMP[self.spec.format](doc).encode(), mode=0o600, durable=self.spec.durable)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The file's lock (JSON_FILES), taken in metadir.LOCK_ORDER like every other."""
        if self.spec.lock is None:
            raise ValueError(f"{self.name} has no lock of its own (engine/metadir.py's JSON_FILES)")
        with locking.exclusive(metadir.lock_path(self.meta_dir, self.spec.lock)):
            yield

    def update(self, fn: Callable[[Any], Any], default: Any, *, expect: type | None = None,
               raise_unreadable: bool = False) -> Any:
        """Under the file's lock: `fn(read(default, ...))` is written (REMOVE: the file is
        removed).  Returns what `fn` returned."""
        with self.locked():
            new = fn(self.read(default, expect=expect, raise_unreadable=raise_unreadable))
            if new is REMOVE:
                self.remove()
            else:
                self.write(new)
            return new
