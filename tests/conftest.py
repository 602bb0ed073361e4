"""Shared fixtures: real stores on disk, real subprocesses for the CLI."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chronos_git.engine.store import Store
from chronos_git.service import Chronos
from chronos_git.settings import Settings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Stores and services are cached per process; tests want their own."""
    Store._instances.clear()
    Chronos._instances.clear()
    yield
    Store._instances.clear()
    Chronos._instances.clear()


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


class CliResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.proc = proc
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def json(self) -> dict:
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise AssertionError(f"stdout is not one JSON document:\n{self.stdout}\nstderr:\n{self.stderr}")


@pytest.fixture
def cli(store_dir):
    """Run the real `chronos-git` CLI in a subprocess (as external tests do)."""
    def run(*args, cwd=None, env=None, fault=None, settings=None, timeout=120) -> CliResult:
        e = dict(os.environ)
        e["CHRONOS_GIT_STORE"] = str(store_dir)
        e.pop("CHRONOS_GIT_FAULT", None)
        e.pop("CHRONOS_GIT_SETTINGS", None)
        e.pop("HERMES_HOME", None)
        if fault:
            e["CHRONOS_GIT_FAULT"] = fault
        if settings:
            e["CHRONOS_GIT_SETTINGS"] = json.dumps(settings)
        if env:
            e.update(env)
        proc = subprocess.run([sys.executable, "-m", "chronos_git.cli", *map(str, args)],
                              cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
        return CliResult(proc)
    return run


def tree_fingerprint(path: Path) -> str:
    """Hash of every name, mode and byte below `path` (used for the user's .git)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + sorted(dirs):
            p = os.path.join(root, name)
            st = os.lstat(p)
            h.update(os.fsencode(os.path.relpath(p, path)) + b"\0" + str(st.st_mode).encode())
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def git(*args, cwd=None, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=check)
