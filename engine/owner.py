"""Who owns an operation: pid + process start time + boot id.

A pid alone is not an identity (pids are reused); the start time in clock
ticks since boot and the boot id make it one.  An owner is alive only if all
three still match and the process is not a zombie.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = raw[raw.rfind(")") + 2:].split()
    return rest          # rest[0] = state (field 3), rest[19] = starttime (field 22)


def _start_time(pid: int) -> int | None:
    f = _stat_fields(pid)
    return int(f[19]) if f and len(f) > 19 else None


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int | None
    boot_id: str
    host: str = ""

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(pid=pid, start_time=_start_time(pid), boot_id=_boot_id(), host=socket.gethostname())

    def to_dict(self) -> dict:
        return {"pid": self.pid, "start_time": self.start_time, "boot_id": self.boot_id, "host": self.host}

    @classmethod
    def from_dict(cls, d: dict | None) -> ProcessIdentity | None:
        if not d:
            return None
        return cls(pid=int(d.get("pid", 0)), start_time=d.get("start_time"),
                   boot_id=d.get("boot_id", ""), host=d.get("host", ""))

    def alive(self) -> bool:
        if self.host and self.host != socket.gethostname():
            return True        # another machine: we cannot tell, so never call it dead
        if self.boot_id != _boot_id():
            return False
        f = _stat_fields(self.pid)
        if f is None:
            if not os.path.exists("/proc/self/stat"):       # no procfs: best effort
                try:
                    os.kill(self.pid, 0)
                    return True
                except ProcessLookupError:
                    return False
                except PermissionError:
                    return True
            return False
        if f[0] in ("Z", "X"):
            return False
        return self.start_time is None or int(f[19]) == self.start_time
