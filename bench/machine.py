"""What the numbers were measured on."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError):
        pass
    return None


def filesystem_of(path: Path) -> dict:
    """Mount point, type and options of the filesystem holding `path` (from /proc/mounts)."""
    real = os.path.realpath(path)
    best = None
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype, opts = line.split()[:4]
            mnt = mnt.replace("\\040", " ")
            if real == mnt or real.startswith(mnt.rstrip("/") + "/") or mnt == "/":
                if best is None or len(mnt) >= len(best[1]):
                    best = (dev, mnt, fstype, opts)
    except OSError:
        pass
    if best is None:
        return {"path": real}
    out = {"path": real, "device": best[0], "mount": best[1], "type": best[2], "options": best[3]}
    try:
        st = os.statvfs(real)
        out["free_gib"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
    except OSError:
        pass
    return out


def _cmd(args: list[str]) -> str | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:   # noqa: BLE001 - not installed is a fine answer
        return None


def fsync_latency_ms(directory: Path, n: int = 9) -> float | None:
    """Median of n x (create a file, write 200 B, fsync it, fsync the directory): the unit of
    every durable small write.  This VM's disk latency is very uneven, so it is probed at
    the start and at the end of a run."""
    import statistics
    import time
    ts = []
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for i in range(n):
            path = os.path.join(directory, f".fsync-probe-{os.getpid()}-{i}")
            t = time.perf_counter()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, b"x" * 200)
            os.fsync(fd)
            os.close(fd)
            os.fsync(dfd)
            ts.append((time.perf_counter() - t) * 1000)
            os.unlink(path)
    except OSError:
        return None
    finally:
        os.close(dfd)
    return round(statistics.median(ts), 2)


def info(bench_dir: Path, repo: Path) -> dict:
    try:
        import pygit2
        pygit2_v, libgit2_v = pygit2.__version__, pygit2.LIBGIT2_VERSION
    except ImportError:
        pygit2_v = libgit2_v = None
    head = _cmd(["git", "-C", str(repo), "rev-parse", "HEAD"])
    dirty = _cmd(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": _mem_total_gib(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "bench_dir_filesystem": filesystem_of(bench_dir),
        "durable_write_median_ms_at_start": fsync_latency_ms(bench_dir),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "pygit2": pygit2_v,
        "libgit2": libgit2_v,
        "git": _cmd(["git", "--version"]),
        "hermes_agent": _dist_version("hermes-agent"),
        "chronos_git": _dist_version("chronos-git"),
        "chronos_git_commit": head,
        "chronos_git_tree_dirty": bool(dirty),
    }
