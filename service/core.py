"""What every part of the service shares: the settings, the store and its journal.

The store is opened lazily: a read-only command (`log`, `health`) on a store
that does not exist must not create one (`create=False`).
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from ..engine.codec import canonical
from ..engine.store import Store
from ..journal_refs import Journal
from ..settings import Settings
from .jobs import Jobs


class Core:
    def __init__(self, store_dir: Path, settings: Settings, *, create: bool = True,
                 problems: list[str] | None = None):
        self.store_dir = store_dir
        self.settings = settings
        self.create = create
        self.settings_problems = list(problems or [])
        self.given = settings           # as the surface loaded them (the service cache's key)
        self.env_overrides = False      # the standalone tools: CHRONOS_GIT_SETTINGS rules this process
        self.tampered: str | None = None   # what the store audit found at start or verify (the gate closes)
        self.background = False        # a long-lived host (Hermes): watchers, background snapshots
        self._store: Store | None = None
        self._journal: Journal | None = None
        self._lock = threading.Lock()
        self._fingerprint: tuple[Settings, str] | None = None
        self.jobs = Jobs()              # this process's background work (service/jobs.py)

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

    @property
    def settings_fingerprint(self) -> str:
        """Of the settings this process runs under: every intent carries it."""
        if self._fingerprint is None or self._fingerprint[0] is not self.settings:
            digest = hashlib.sha256(canonical(self.settings.model_dump(mode="json")).encode()).hexdigest()[:16]
            self._fingerprint = (self.settings, digest)
        return self._fingerprint[1]

    def apply_settings(self, settings: Settings) -> None:
        """The settings in force changed (service/settings_watch.py): what reads them per call
        sees the new values; an open store takes its new retention and durability at once."""
        self.settings = settings
        store = self._store
        if store is not None:
            store.config = settings.engine_config()

    def store_exists(self) -> bool:
        return self._store is not None or Store.exists_at(self.store_dir)

    def store_problem(self) -> str | None:
        """Why no store can be made where there is none yet (a file, someone's repository)."""
        return None if self.store_exists() else Store.unusable_at(self.store_dir)

    def journal_opened(self) -> Journal | None:
        """The journal if this process opened it (health must not open one to look)."""
        return self._journal
