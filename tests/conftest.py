"""Shared fixtures: real stores on disk; the CLI in this process unless a case needs a new
one (tests/support/helpers.run_cli).  Helpers that tests import live in tests/support/
(never `from conftest import`).

Markers say what a test needs beyond this process (pyproject.toml lists them); the fast lane
(`bash scripts/test.sh --fast`) runs the tests that carry none of them.  Unless a test is
marked `fsync`, fsync is skipped in this process: a SIGKILL loses nothing the page cache
holds, and power cuts are simulated by damaging files, so only the fsync tests need it."""
from __future__ import annotations

import gc
import os
import subprocess
from pathlib import Path

import pytest

from chronos_git.service import Chronos
from chronos_git.settings import Settings
from support.helpers import run_cli


@pytest.fixture(autouse=True)
def _no_fsync(request, monkeypatch):
    """Stores on disk without fsync (os.fsync, os.fdatasync and libgit2's switch), except for
    tests marked `fsync`; subprocesses the test starts sync as in production."""
    if request.node.get_closest_marker("fsync"):
        yield
        return
    import pygit2
    monkeypatch.setattr(os, "fsync", _skip_sync)
    monkeypatch.setattr(os, "fdatasync", _skip_sync)
    monkeypatch.setattr(type(pygit2.settings), "enable_fsync_gitdir", _skip_sync)
    yield


def _skip_sync(*_args) -> None:
    return None


def pytest_collection_finish(session):
    """What collection imported lives to the end: out of the collector's way (gc.freeze), so
    the full collection each in-process CLI call ends with (support.helpers.run_cli) walks
    only what the tests made, not every module and test item."""
    gc.collect()
    gc.freeze()


# every test, and every process a test starts, takes locks in engine/metadir.py's order or fails
os.environ.setdefault("CHRONOS_GIT_LOCK_ORDER", "strict")


_LANE_MARKS = ("process", "slow", "hermes", "browser")


@pytest.fixture(autouse=True)
def _fast_lane_stays_in_process(request, monkeypatch):
    """A test that starts a chronos-git interpreter of its own (0.6 s each) must say so with a
    marker, so the fast lane stays fast; the CLI runs in this process otherwise (run_cli)."""
    if any(request.node.get_closest_marker(m) for m in _LANE_MARKS):
        yield
        return
    real = subprocess.Popen.__init__

    def guarded(self, args, *a, **kw):
        argv = [args] if isinstance(args, (str, bytes)) else list(args)
        if any(os.fsdecode(x) in ("chronos_git.cli", "chronos_git.windtunnel.workload", "chronos_git.api")
               for x in argv if isinstance(x, (str, bytes, os.PathLike))):
            raise AssertionError(f"{request.node.nodeid} starts {argv[:4]} in a new process: use run_cli "
                                 "(in this process), or mark the test `process` if a new process is its point")
        real(self, args, *a, **kw)
    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
    yield


@pytest.fixture(autouse=True)
def _own_hermes_home(tmp_path_factory, monkeypatch):
    """Every test has a profile of its own: nothing reads or writes the machine's ~/.hermes
    (the settings record keeps a list of the profile's stores beside its config)."""
    if "HERMES_HOME" not in os.environ:
        monkeypatch.setenv("HERMES_HOME", str(tmp_path_factory.mktemp("hermes-home")))


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
    """The `chronos-git` CLI against `store_dir` (support.helpers.run_cli: in this process
    unless the case needs a new one)."""
    def run(*args, **kw):
        return run_cli(store_dir, *args, **kw)
    return run
