"""Who owns an operation: pid + process start time + boot id.

A pid alone is not an identity (pids are reused); the start time in clock
ticks since boot and the boot id make it one.  An owner is alive only if all
three still match and the process is not a zombie.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from . import processes


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int | None
    boot_id: str
    host: str = ""

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        me = processes.read(pid)
        return cls(pid=pid, start_time=me.start if me else None, boot_id=_boot_id(), host=socket.gethostname())

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
        p = processes.read(self.pid)
        if p is None:
            if not os.path.exists("/proc/self/stat"):       # no procfs: best effort
                try:
                    os.kill(self.pid, 0)
                    return True
                except ProcessLookupError:
                    return False
                except PermissionError:
                    return True
            return False
        return processes.alive(self.pid, self.start_time)
