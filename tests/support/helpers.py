"""Helpers every layer's tests share (fixtures live in tests/conftest.py)."""
from __future__ import annotations

import gc
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
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


# Variables that only a new process can honour: libgit2 reads HOME (its global config) once
# per process, and a fault that SIGKILLs would kill the test runner.
_PROCESS_ONLY_ENV = {"HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "LD_PRELOAD"}
_in_process = threading.Lock()


def run_cli(store_dir, *args, cwd=None, env=None, fault=None, settings=None, timeout=120,
            process: bool | None = None) -> CliResult:
    """The `chronos-git` CLI as a person runs it.  In this process (the fast lane: the console
    entry point called with argv, fds 1 and 2 captured, a fresh service) unless the case needs a
    new one: `process=True`, a fault that kills, or a variable in _PROCESS_ONLY_ENV.
    CHRONOS_TEST_CLI=process runs every call in a subprocess (to check the two agree)."""
    if process is None:
        process = (os.environ.get("CHRONOS_TEST_CLI") == "process"
                   or bool(env and _PROCESS_ONLY_ENV & set(env))
                   or bool(fault and faults_action(fault) == "kill"))
    e = dict(os.environ)
    e["CHRONOS_GIT_STORE"] = str(store_dir)
    for k in ("CHRONOS_GIT_FAULT", "CHRONOS_GIT_SETTINGS", "HERMES_HOME", "CHRONOS_TEST_CLI"):
        e.pop(k, None)
    if fault:
        e["CHRONOS_GIT_FAULT"] = fault
    if settings:
        e["CHRONOS_GIT_SETTINGS"] = json.dumps(settings)
    if env:
        e.update(env)
    argv = [str(a) for a in args]
    if process:
        proc = subprocess.run([sys.executable, "-m", "chronos_git.cli", *argv],
                              cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
        return CliResult(proc)
    return CliResult(_cli_in_process(argv, cwd, e, fault))


def faults_action(spec: str) -> str:
    return spec.partition(":")[2] or "kill"


def _cli_in_process(argv: list[str], cwd, env: dict, fault: str | None) -> subprocess.CompletedProcess:
    """`chronos-git ARGV` in this process, as a new process would see it: the environment and
    current folder it would have, no cached service, a fault armed as at import, and fds 1 and
    2 redirected (the output of a command `run` starts lands there too).  One call at a time."""
    from chronos_git.cli.main import main
    from chronos_git.engine import faults
    from chronos_git.engine.store import Store
    from chronos_git.service import Chronos

    with _in_process:
        saved_env = dict(os.environ)
        try:
            saved_cwd = os.getcwd()
        except FileNotFoundError:
            saved_cwd = str(REPO)
        saved_fault = (faults._ARMED, faults._hits)
        saved_caches = (Chronos._instances, Store._instances)    # the test's own services stay
        saved_streams = (sys.stdout, sys.stderr)
        out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        for s in saved_streams:
            s.flush()
        saved_fds = os.dup(1), os.dup(2)
        rc: int | None = None
        try:
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            faults._ARMED, faults._hits = faults._parse(fault), 0
            Chronos._instances, Store._instances = {}, {}
            os.dup2(out_f.fileno(), 1)
            os.dup2(err_f.fileno(), 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                          errors="surrogateescape", write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                          errors="backslashreplace", write_through=True)
            try:
                rc = main(argv)
            except SystemExit as exc:           # argparse's --help
                rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            for s in (sys.stdout, sys.stderr):
                if s not in saved_streams:
                    s.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            Chronos._instances, Store._instances = saved_caches
            gc.collect()              # the call's repositories close their files, as at a process's exit
            faults._ARMED, faults._hits = saved_fault
            os.environ.clear()
            os.environ.update(saved_env)
            os.chdir(saved_cwd)
        captured = []
        for f in (out_f, err_f):
            f.seek(0)
            captured.append(f.read().decode())       # as subprocess.run(text=True) decodes
            f.close()
    return subprocess.CompletedProcess(["chronos-git", *argv], rc if rc is not None else 1, *captured)


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


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.01, message="") -> object:
    """Poll `predicate()` until it returns something true, and return that; after `timeout`
    seconds (generous: CI may be loaded) fail with `message` (a string, or a callable giving
    one: the state to show).  For waiting on another thread or process instead of sleeping."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            said = message() if callable(message) else message
            raise AssertionError(f"not within {timeout:g} s: {said or predicate}")
        time.sleep(interval)


@contextmanager
def held_by_another_thread(lock):
    """`lock()` held by another thread until the block ends: a busy workspace, as a background
    job holds it.  Held by the test's own thread instead, the store's locks the block takes
    would come after it, against engine/metadir.py's lock order (a LockOrderError)."""
    taken, release = threading.Event(), threading.Event()

    def hold():
        with lock():
            taken.set()
            release.wait(300)
    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert taken.wait(60), "the lock was never taken"
    try:
        yield
    finally:
        release.set()
        t.join(60)
