"""What every part of the service shares: the settings, the store and its journal.

The store is opened lazily: a read-only command (`log`, `health`) on a store
that does not exist must not create one (`create=False`).
"""
from __future__ import annotations

import threading
from pathlib import Path

from ..engine.store import Store
from ..journal_refs import Journal
from ..settings import Settings


class Core:
    def __init__(self, store_dir: Path, settings: Settings, *, create: bool = True,
                 problems: list[str] | None = None):
        self.store_dir = store_dir
        self.settings = settings
        self.create = create
        self.settings_problems = list(problems or [])
        self.background = False        # a long-lived host (Hermes): watchers, background snapshots
        self._store: Store | None = None
        self._journal: Journal | None = None
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                self._store = Store.open(self.store_dir, self.settings.engine_config(), create=self.create)
            return self._store

    @property
    def journal(self) -> Journal:
        store = self.store
        with self._lock:
            if self._journal is None:
                self._journal = Journal(store)
            return self._journal

    def store_exists(self) -> bool:
        return self._store is not None or Store.exists_at(self.store_dir)

    def journal_opened(self) -> Journal | None:
        """The journal if this process opened it (health must not open one to look)."""
        return self._journal
