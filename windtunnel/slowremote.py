"""The io suite's slow remotes: a git server on 127.0.0.1 that never finishes answering.

A server that trickles a byte every second never trips libgit2's per-read timeout, and
while it trickles the HTTP answer's header libgit2 calls no progress callback at all:
only a child process killed at `remote_deadline_s` (service/remote_link.py: Link) ends
the push.  The invariant: the background pusher's push is cut off within the deadline
plus SLACK_S, recorded as failing (naming the remote, the limit and its setting), seen
by `require_anchor`, a later push runs, and the store's refs are as they were.
"""
from __future__ import annotations

import json
import socket
import threading
import time

from .scenario import Findings, Scenario

DEADLINE_S = 3.0
SLACK_S = 15.0                   # a child's start, a loaded machine
KINDS = ("trickle", "hang")


class TrickleServer:
    """Accepts HTTP connections on 127.0.0.1 and answers each with one byte of a header that
    never ends every `every` seconds (`hang`: with nothing at all)."""

    def __init__(self, every: float = 1.0, hang: bool = False):
        self.every, self.hang = every, hang
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stopped = threading.Event()
        self.conns: list[socket.socket] = []
        self.sent = 0

    def start(self) -> TrickleServer:
        threading.Thread(target=self._accept, name="trickle-accept", daemon=True).start()
        return self

    def url(self, path: str = "audit.git") -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), name="trickle", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        head, i = b"HTTP/1.1 200 OK\r\nX-Slow: ", 0
        try:
            while not self.stopped.wait(self.every):
                if not self.hang:
                    conn.sendall(head[i:i + 1] if i < len(head) else b"a")
                    i += 1
                    self.sent += 1
        except OSError:
            pass                                   # the client was cut off
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped.set()
        self.sock.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _refs(svc) -> dict[str, str]:
    repo = svc.core.store.repo()
    return {name: str(repo.references[name].target) for name in repo.references}


def _record(svc) -> dict:
    """The remote's entry in remotes.json: the record `require_anchor` reads."""
    try:
        return json.loads((svc.core.store.meta_dir / "remotes.json").read_bytes()).get("slow") or {}
    except (OSError, ValueError):
        return {}


def _failed_after(svc, since: float, within: float) -> dict | None:
    """The record of a failed attempt that ended after `since` (wall clock), once there is one."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        rec = _record(svc)
        if (rec.get("last_attempt") or 0) > since and rec.get("last_error"):
            return rec
        time.sleep(0.05)
    return None


def run(s: Scenario, kind: str) -> Findings:
    from ..service import Chronos
    from ..service.remote_anchor import gate_reason
    from ..settings import Settings
    out = Findings()
    s.child(ops=2, first=["write"])                          # a journal worth anchoring
    server = TrickleServer(hang=kind == "hang").start()
    try:
        Chronos.forget_instances()
        svc = Chronos.get(s.store, Settings(remote_deadline_s=DEADLINE_S, push_interval_s=1,
                                            require_anchor=True, anchor_timeout_s=0.001))
        svc.start()
        svc.remote_add("slow", server.url())
        before = {k: v for k, v in _refs(svc).items() if not k.startswith("refs/chronos/anchor/")}
        after_first: dict[str, str] = {}
        # the background pusher, twice: the first push is cut off, and it never holds the pusher
        for attempt in (1, 2):
            since = time.time()
            svc.remotes.kick()
            rec = _failed_after(svc, since, DEADLINE_S + SLACK_S + 60)
            if rec is None:
                out.breach("hangs", f"push {attempt} to a {kind} server was not cut off and recorded "
                                    f"within {DEADLINE_S + SLACK_S + 60:.0f} s")
                return out
            took = rec["last_attempt"] - since
            if took > DEADLINE_S + SLACK_S + (1 if attempt == 2 else 0):      # + push_interval_s
                out.breach("hangs", f"push {attempt} was cut off after {took:.1f} s (deadline {DEADLINE_S} s)")
            err = rec["last_error"]
            if not ("'slow'" in err and "remote_deadline_s" in err and "cut off" in err):
                out.breach("unclear_errors", f"the failure does not name the remote, limit and setting: {err}")
            if not rec.get("failing_since"):
                out.breach("unclear_errors", "the cut-off push was not recorded as failing")
            elif "require_anchor" not in (gate_reason(svc.core) or ""):
                out.breach("unclear_errors", "require_anchor does not count the cut-off push")
            if attempt == 1:
                after_first = _refs(svc)
        if _refs(svc) != after_first or {k: v for k, v in after_first.items()
                                         if not k.startswith("refs/chronos/anchor/")} != before:
            out.breach("integrity", "a push that was cut off changed the store's refs")
        # a fetch is bounded the same way, and leaves no half-fetched scratch repository
        fetched: list = []
        t = threading.Thread(target=lambda: fetched.append(_try(svc.fetch, "slow")), daemon=True)
        t.start()
        t.join(DEADLINE_S + SLACK_S + 60)
        if t.is_alive():
            out.breach("hangs", f"a fetch from a {kind} server was not cut off")
        elif "remote_deadline_s" not in str(fetched[0]):
            out.breach("unclear_errors", f"the fetch's failure does not name its limit: {fetched[0]}")
        if list((svc.core.store.meta_dir / "tmp").glob("fetch-*")):
            out.breach("litter", "a fetch cut off left its scratch repository")
        svc.remote_remove("slow")
        out.reached = bool(server.conns) and (kind == "hang" or server.sent > 0)   # it was reached, and trickled
        out.note = f"{kind}: two pushes and a fetch cut off at {DEADLINE_S:g} s; {err[:120]}"
    finally:
        server.stop()
    out.merge(s.check(s.next_start()))
    return out


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:
        return exc
