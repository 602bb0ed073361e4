"""One bounded exchange with a remote: a child process per transport call, cut off by the
deadline or a minimum rate, so that no remote can hold a caller (or the background pusher).
"""
from __future__ import annotations

import os
import shutil
import threading
import time

from ..engine import offload, remote as transport
from .core import Core


class Link:
    """One exchange with remote `name` (a push, a fetch, a check).  Each transport call runs in
    a child process (engine/offload.py) killed when the exchange passes remote_deadline_s in
    all, or moves fewer than remote_min_rate_bps bytes a second over transport.RATE_WINDOW_S:
    libgit2 stops only at its per-read timeout, which a server trickling a byte every few
    seconds never trips.  When no child can start, the call runs on a thread left behind at
    the deadline.  Either way the caller (the background pusher too) is free by the deadline,
    and nothing of the store changed: a push only reads it, a fetch writes into a scratch
    repository, removed here, until every object has arrived."""

    def __init__(self, core: Core, name: str, url: str, auth: transport.Auth):
        self.core, self.name, self.url, self.auth = core, name, url, auth
        self.deadline_s = core.settings.remote_deadline_s
        self.min_rate_bps = core.settings.remote_min_rate_bps
        self.until = time.monotonic() + self.deadline_s

    def list_refs(self, prefix: str) -> dict[str, str]:
        return self._run("list_refs", prefix=prefix)["refs"]

    def push(self, refspecs: list[str]) -> None:
        if refspecs:
            self._run("push", refspecs=refspecs)

    def fetch_refs(self, src: str, haves: dict[str, str]) -> dict[str, str]:
        scratch = transport.scratch_for(self.core.store.meta_dir / "tmp")
        try:
            return self._run("fetch_refs", scratch=os.fsdecode(scratch), src=src, haves=haves)["refs"]
        finally:
            shutil.rmtree(scratch, ignore_errors=True)      # what a fetch cut off had received

    def _run(self, call: str, **params) -> dict:
        left = self.until - time.monotonic()
        if left <= 0:
            raise self._cut("deadline")
        params.update(call=call, url=self.url, ssh_key=self.auth.ssh_key)
        limits = offload.Limits(left, self.min_rate_bps, transport.RATE_WINDOW_S)
        try:
            res = offload.run("remote", self.core.store_dir, self.core.store.config, params, limits=limits)
        except offload.CutOff as exc:
            raise self._cut(exc.limit, str(exc)) from None
        except offload.Unavailable:                     # in what is left of the deadline
            res = self._on_thread(params, self.until - time.monotonic())
        except offload.Failed as exc:
            raise self._error(str(exc)) from None
        if "remote_error" in res:
            raise transport.RemoteError(res["remote_error"])
        return res

    def _on_thread(self, params: dict, left: float) -> dict:
        box: dict = {}

        def call() -> None:
            try:
                box["res"] = transport.job(self.core.store.root, params, None)
            except Exception as exc:
                box["err"] = f"{type(exc).__name__}: {exc}"
        t = threading.Thread(target=call, name="chronos-git-remote", daemon=True)
        t.start()
        t.join(max(left, 0))
        if t.is_alive():
            raise self._cut("deadline")
        if "err" in box:
            raise self._error(box["err"])
        return box["res"]

    def _error(self, text: str) -> transport.RemoteError:
        for secret in self.auth.secrets:
            text = text.replace(secret, "***")
        return transport.RemoteError(f"{transport.display_url(self.url)}: {text}")

    def _cut(self, limit: str, detail: str = "") -> transport.RemoteError:
        """The error of an exchange cut off: the remote, the limit hit and its setting."""
        if limit == "deadline":
            detail, setting = f"not finished within {self.deadline_s:g} s", f"remote_deadline_s = {self.deadline_s:g}"
        else:
            setting = f"remote_min_rate_bps = {self.min_rate_bps}"
        return transport.RemoteError(f"remote {self.name!r} ({transport.display_url(self.url)}) was cut off: "
                                     f"{detail} (setting {setting})")
