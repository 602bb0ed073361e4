"""Helpers every layer's tests share (fixtures live in tests/conftest.py)."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def run_cli(store_dir, *args, cwd=None, env=None, fault=None, settings=None, timeout=120) -> CliResult:
    """The real `chronos-git` CLI in a subprocess (as external tests drive it)."""
    e = dict(os.environ)
    e["CHRONOS_GIT_STORE"] = str(store_dir)
    for k in ("CHRONOS_GIT_FAULT", "CHRONOS_GIT_SETTINGS", "HERMES_HOME"):
        e.pop(k, None)
    if fault:
        e["CHRONOS_GIT_FAULT"] = fault
    if settings:
        e["CHRONOS_GIT_SETTINGS"] = json.dumps(settings)
    if env:
        e.update(env)
    proc = subprocess.run([sys.executable, "-m", "chronos_git.cli", *map(str, args)],
                          cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
    return CliResult(proc)


def tree_fingerprint(path: Path, *, mtimes: bool = False) -> str:
    """Hash of every name, mode and byte below `path` (used for the user's .git); `mtimes`:
    and every mtime (the benchmark's check that the user's .git did not change at all)."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + sorted(dirs):
            p = os.path.join(root, name)
            st = os.lstat(p)
            h.update(os.fsencode(os.path.relpath(p, path)) + b"\0" + str(st.st_mode).encode())
            if mtimes:
                h.update(b" %d" % st.st_mtime_ns)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
    return h.hexdigest()


def git(*args, cwd=None, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=check)


def run_command(svc, workspace, argv, **kw) -> tuple[int | None, dict]:
    """`svc.run_command` as (exit code, the record as its JSON document)."""
    res = svc.run_command(str(workspace), argv, **kw)
    return res.exit_code, res.wire()


def fifo_after_listing(monkeypatch, path: Path) -> None:
    """The first import's listing done, `path` (a listed file) becomes a FIFO before it is read."""
    from chronos_git.engine import bulk
    real = bulk._list_files

    def list_then_swap(*a, **kw):
        entries = real(*a, **kw)
        os.unlink(path)
        os.mkfifo(path)
        return entries
    monkeypatch.setattr(bulk, "_list_files", list_then_swap)
