"""Shared fixtures: real stores on disk, real subprocesses for the CLI.  Helpers that
tests import live in tests/support/ (never `from conftest import`)."""
from __future__ import annotations

from pathlib import Path

import pytest

from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.helpers import run_cli


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Stores and services are cached per process; tests want their own."""
    Chronos.forget_instances()
    yield
    Chronos.forget_instances()


@pytest.fixture
def store_dir(tmp_path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def ws(tmp_path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    (d / "a.txt").write_text("alpha\n")
    (d / "src").mkdir()
    (d / "src" / "main.py").write_text("print('hi')\n")
    return d


@pytest.fixture
def svc(store_dir):
    def make(**settings):
        return Chronos.get(store_dir, Settings(**settings))
    return make


@pytest.fixture
def cli(store_dir):
    """Run the real `chronos-git` CLI in a subprocess (as external tests do)."""
    def run(*args, **kw):
        return run_cli(store_dir, *args, **kw)
    return run
