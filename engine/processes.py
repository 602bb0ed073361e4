"""Who runs this process: its ancestry, controlling terminal and uid, read from /proc.

An operator act (resolving an operation, recovering one, changing remotes) must be the
operator's, not the agent's: the agent runs shell commands as the same user, so a uid says
nothing.  What tells them apart is descent: a command the agent ran descends from the process
that dispatched its call (Hermes, or `chronos-git run`), or from a process such a call left
running.  Each process is named by (pid, start time in clock ticks since boot), since pids are
reused.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int          # clock ticks since boot (field 22 of /proc/PID/stat)
    sid: int
    comm: str
    state: str = "R"    # Z (zombie) and X (dead) are not alive

    def key(self) -> tuple[int, int]:
        return self.pid, self.start


def read(pid: int) -> Proc | None:
    """The process `pid`, or None when it is gone (or /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    left, right = raw.find("("), raw.rfind(")")
    rest = raw[right + 2:].split()
    try:
        # rest[0] state (field 3), rest[1] ppid, rest[3] session, rest[19] starttime
        return Proc(pid=pid, ppid=int(rest[1]), start=int(rest[19]), sid=int(rest[3]),
                    comm=raw[left + 1:right], state=rest[0])
    except (IndexError, ValueError):
        return None


def self_pid() -> int:
    """This process's pid as /proc names it.  Not os.getpid(): in a PID namespace of its own
    (`unshare -pf`) a process is pid 1 to itself while /proc still shows the outer tree, where
    pid 1 is init and the real ancestry would be lost."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def own_pid_namespace() -> bool:
    """Whether this process's ancestry cannot be read here: it runs in a PID namespace nested
    below /proc's (its own pid differs from the one /proc gives it: `unshare -pf`), or it is
    pid 1 of one (`unshare -pf --mount-proc`, a container's entry point), where /proc shows
    nothing above it."""
    return os.getpid() != self_pid() or self_pid() == 1


def ancestry(pid: int | None = None, limit: int = 256) -> list[Proc]:
    """`pid` (default this process) and every ancestor up to, not including, pid 0."""
    out: list[Proc] = []
    seen: set[int] = set()
    cur = self_pid() if pid is None else pid
    while cur > 0 and cur not in seen and len(out) < limit:
        seen.add(cur)
        p = read(cur)
        if p is None:
            break
        out.append(p)
        cur = p.ppid
    return out


def alive(pid: int, start: int | None) -> bool:
    p = read(pid)
    return p is not None and p.state not in ("Z", "X") and (start is None or p.start == start)


def controlling_terminal() -> str | None:
    """The terminal of this process's standard streams, else None (no terminal: a pipe, a
    daemon, an agent's tool)."""
    for fd in (0, 1, 2):
        try:
            return os.ttyname(fd)
        except OSError:
            continue
    return None


def left_running(host: int, since: int, *, uid: int | None = None) -> list[Proc]:
    """Processes of `uid` started at or after `since` (clock ticks) that descend from `host`
    or were orphaned on the way (their chain reaches pid 1 through processes that also started
    since then): what a call of `host` that began at `since` left behind.  A process whose chain
    meets anything older than the call (a person's own shell) is not the call's."""
    uid = os.getuid() if uid is None else uid
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
        except OSError:
            continue
        p = read(int(name))
        if p is not None:
            procs[p.pid] = p
    out = []
    for p in procs.values():
        if p.start < since or p.pid == host:
            continue
        cur: Proc | None = p
        ours = False
        for _ in range(256):
            if cur is None:
                break
            if cur.ppid in (host, 1):
                ours = True
                break
            cur = procs.get(cur.ppid)
            if cur is None or cur.start < since:
                break
        if ours:
            out.append(p)
    return sorted(out, key=lambda q: q.start)


def now_ticks() -> int | None:
    """This moment in the clock ticks of a process start time (for `left_running`'s `since`)."""
    try:
        with open("/proc/uptime") as fh:
            return int(float(fh.read().split()[0]) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
