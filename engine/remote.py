"""Git transports for off-machine copies: push, fetch and list a remote's refs with libgit2.

Knows nothing of the journal or of hosts: it moves refs and objects between the
store and a URL.  Every call is bounded (connect and I/O timeouts), and `job` runs
one in a child process (engine/offload.py) that the caller kills at a total deadline
or a minimum transfer rate: libgit2's timeouts are per read, so a server that trickles
a byte every few seconds would hold a call in this process for ever.  Every call checks SSH
host keys against `known_hosts` and TLS certificates as libgit2 does, and never
lets a credential reach a message: URLs are shown with their user-info removed,
and errors are scrubbed of whatever the caller passed as a secret.

Authentication: SSH with a configured key file (`<key>` and `<key>.pub`) or the
ssh-agent; HTTPS with `CHRONOS_GIT_REMOTE_USER` / `CHRONOS_GIT_REMOTE_TOKEN`
from the environment (never from the URL: a URL is stored in the store's config
and shown by `remote list`).
"""
from __future__ import annotations

import getpass
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pygit2

from .errors import ChronosError
from .fsutil import fsync_dir

CONNECT_TIMEOUT_MS = 10_000
IO_TIMEOUT_MS = 60_000
RATE_WINDOW_S = 60.0             # the minimum transfer rate is measured over this window
TELL_EVERY_S = 0.2               # how often a child reports the bytes it moved
SCHEMES = ("file", "ssh", "git", "https", "http")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_SCP = re.compile(r"(?:(?P<user>[^@/:\s]+)@)?(?P<host>[A-Za-z0-9.\-\[\]]+):(?P<path>[^/].*|/.*)\Z")


class RemoteError(ChronosError):
    code = "remote_error"


def check_name(name: str, what: str = "remote name") -> str:
    if not isinstance(name, str) or not _NAME.match(name) or name.endswith(".lock") or ".." in name:
        raise ValueError(f"{name!r} is not a valid {what}: use letters, digits, '.', '_' and '-' "
                         "(up to 63, starting with a letter or digit)")
    return name


def normalize_url(raw: str) -> str:
    """The URL to store: an absolute local path or one of SCHEMES; never one with a password."""
    if not isinstance(raw, str) or not raw.strip() or any(c in raw for c in "\0\n\r"):
        raise ValueError("the remote URL is empty or holds control characters")
    raw = raw.strip()
    if raw.startswith("/"):
        return os.path.normpath(raw)
    if raw.startswith("~"):
        return os.path.normpath(os.path.expanduser(raw))
    parts = urlsplit(raw)
    if parts.scheme in SCHEMES:
        if parts.password is not None or (parts.scheme in ("https", "http") and parts.username is not None):
            raise ValueError("the remote URL holds a password or token: credentials are never stored with "
                             "a remote (it is shown by `remote list` and journaled). Use an SSH key or the "
                             "ssh-agent, or CHRONOS_GIT_REMOTE_USER / CHRONOS_GIT_REMOTE_TOKEN for HTTPS")
        if (parts.hostname or "").startswith("-") or (parts.username or "").startswith("-"):
            raise ValueError(f"{raw!r}: a host or user name may not start with '-'")
        if parts.scheme == "file":
            if not parts.path.startswith("/"):
                raise ValueError(f"{raw!r}: a file:// URL needs an absolute path (file:///srv/audit.git)")
        elif not parts.hostname:
            raise ValueError(f"{raw!r} names no host")
        return raw
    m = _SCP.match(raw) if "://" not in raw and "::" not in raw else None
    if m and not m.group("host").startswith("-") and not (m.group("user") or "").startswith("-"):
        return raw                                   # scp-like user@host:path (SSH)
    raise ValueError(f"{raw!r} is not a remote: use an absolute path, file://, ssh://, git://, "
                     "https:// or user@host:path")


def local_path(url: str) -> Path | None:
    """The folder of a local remote (a path or file://), else None."""
    if url.startswith("/"):
        return Path(url)
    parts = urlsplit(url)
    return Path(parts.path) if parts.scheme == "file" else None


def display_url(url: str) -> str:
    """`url` without user-info beyond the user name (never a password or token)."""
    parts = urlsplit(url)
    if parts.scheme and parts.password is not None:
        netloc = (parts.username + "@" if parts.username else "") + (parts.hostname or "")
        if parts.port:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url


def ensure_local(url: str) -> bool:
    """A local remote that does not exist yet is created as a bare repository (True if made)."""
    path = local_path(url)
    if path is None or path.exists():
        if path is not None and not (path / "objects").is_dir() and not (path / ".git").is_dir():
            raise ValueError(f"{path} exists but is not a git repository (create one with "
                             f"`git init --bare {path}`, or choose an empty path)")
        return False
    if not path.parent.is_dir():
        raise ValueError(f"{path.parent} does not exist: create it first (a shared drive mounted?)")
    pygit2.init_repository(str(path), bare=True)
    return True


@dataclass
class Auth:
    ssh_key: str | None = None            # private key file; its public key is <key>.pub
    secrets: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, ssh_key: str | None) -> Auth:
        token = os.environ.get("CHRONOS_GIT_REMOTE_TOKEN") or ""
        return cls(ssh_key=ssh_key, secrets=[s for s in (token,) if s])


class _Callbacks(pygit2.RemoteCallbacks):
    def __init__(self, auth: Auth, url: str, say=None):
        super().__init__()
        self.auth, self.url = auth, url
        self.rejected: dict[str, str] = {}
        self.tries = 0
        self.host_key_refused = False
        self.say, self.told = say, 0.0             # say("bytes", moved, 0): what the watchdog measures
        self.received = self.pushed = self.sideband = 0

    def _moved(self) -> None:
        now = time.monotonic()
        if self.say is not None and now - self.told >= TELL_EVERY_S:
            self.told = now
            self.say("bytes", self.received + self.pushed + self.sideband, 0)

    def transfer_progress(self, stats):
        self.received = int(stats.received_bytes)
        self._moved()

    def push_transfer_progress(self, objects_pushed, total_objects, bytes_pushed):
        self.pushed = int(bytes_pushed)
        self._moved()

    def sideband_progress(self, string):
        self.sideband += len(string)
        self._moved()

    def credentials(self, url, username_from_url, allowed_types):
        self.tries += 1
        if self.tries > 3:                       # libgit2 asks again after each refusal
            raise RemoteError("authentication failed")
        user = username_from_url or os.environ.get("CHRONOS_GIT_REMOTE_USER") or getpass.getuser()
        if allowed_types & pygit2.enums.CredentialType.SSH_KEY:
            key = self.auth.ssh_key
            if key:
                key = os.path.expanduser(key)
                if not os.path.isfile(key) or not os.path.isfile(key + ".pub"):
                    raise RemoteError(f"the SSH key {key} (and {key}.pub) is not readable")
                return pygit2.Keypair(user, key + ".pub", key, "")
            return pygit2.KeypairFromAgent(user)
        if allowed_types & pygit2.enums.CredentialType.USERPASS_PLAINTEXT:
            if not (url or "").startswith("https://"):
                raise RemoteError("the remote asks for a password over a connection that is not HTTPS: "
                                  "CHRONOS_GIT_REMOTE_TOKEN is only sent over https://")
            token = os.environ.get("CHRONOS_GIT_REMOTE_TOKEN")
            if not token:
                raise RemoteError("the remote asks for a user name and password: set "
                                  "CHRONOS_GIT_REMOTE_USER and CHRONOS_GIT_REMOTE_TOKEN")
            return pygit2.UserPass(os.environ.get("CHRONOS_GIT_REMOTE_USER") or user, token)
        raise RemoteError("the remote asks for a kind of authentication chronos-git does not offer")

    def certificate_check(self, certificate, valid, host):
        if not valid:
            self.host_key_refused = True
        return bool(valid)

    def push_update_reference(self, refname, message):
        if message:
            self.rejected[refname] = message


def _timeouts() -> None:
    try:
        pygit2.settings.server_connect_timeout = CONNECT_TIMEOUT_MS
        pygit2.settings.server_timeout = IO_TIMEOUT_MS
    except (AttributeError, pygit2.GitError, ValueError):
        pass


def _error(exc: BaseException, url: str, auth: Auth, cb: _Callbacks | None) -> RemoteError:
    text = str(exc) or type(exc).__name__
    for s in auth.secrets:
        text = text.replace(s, "***")
    if cb is not None and cb.host_key_refused:
        text = ("the server's host key is not in known_hosts (or does not match it): add it with "
                f"`ssh-keyscan` after checking its fingerprint ({text})")
    return RemoteError(f"{display_url(url)}: {text}")


def _remote(repo: pygit2.Repository, url: str) -> pygit2.Remote:
    _timeouts()
    return repo.remotes.create_anonymous(url)


def list_refs(repo: pygit2.Repository, url: str, auth: Auth, prefix: str = "", say=None) -> dict[str, str]:
    """{ref name: id} of the remote's refs under `prefix`."""
    cb = _Callbacks(auth, url, say)
    try:
        heads = _remote(repo, url).list_heads(callbacks=cb)
    except (pygit2.GitError, OSError, RemoteError, ValueError) as exc:
        raise _error(exc, url, auth, cb) from None
    return {h.name: str(h.oid) for h in heads
            if h.name is not None and h.name.startswith(prefix) and not h.name.endswith("^{}")}


def fetch(repo: pygit2.Repository, url: str, refspecs: list[str], auth: Auth, say=None) -> int:
    """Fetch `refspecs`; returns the number of objects received."""
    cb = _Callbacks(auth, url, say)
    try:
        stats = _remote(repo, url).fetch(refspecs, callbacks=cb, message="chronos-git fetch")
    except (pygit2.GitError, OSError, RemoteError, ValueError) as exc:
        raise _error(exc, url, auth, cb) from None
    return int(getattr(stats, "received_objects", 0) or 0)


def scratch_for(scratch_parent: Path) -> Path:
    """A new name for a fetch's scratch repository (the caller removes it if the fetch is cut
    off); scratch repositories a killed fetch left over an hour ago are removed."""
    scratch_parent.mkdir(parents=True, exist_ok=True)
    for old in scratch_parent.glob("fetch-*"):
        try:
            if time.time() - old.stat().st_mtime > 3600:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    return scratch_parent / f"fetch-{os.getpid()}-{secrets.token_hex(4)}"


def fetch_refs(store_root: Path, scratch: Path, url: str, auth: Auth, src: str,
               haves: dict[str, str], say=None) -> dict[str, str]:
    """{remote ref: commit id} of the remote refs `src` (one ref, or a prefix ending in '*'), with
    their objects moved into the store at `store_root`.

    The fetch runs in a scratch repository that borrows the store's objects (alternates), and
    `haves` (name -> id of commits the store has) tell the remote what not to send.  Fetching
    into the store itself would let libgit2 rewrite its `shallow` file (the retention cut) and
    update refs while a slow remote trickles in; here nothing in the store changes until every
    object has arrived.  Refs that do not name a commit are left out (a hostile remote).
    `scratch` is the repository's folder (scratch_for)."""
    try:
        tmp = pygit2.init_repository(str(scratch), bare=True)
        (scratch / "objects" / "info" / "alternates").write_text(str(store_root / "objects") + "\n")
        tmp = pygit2.Repository(str(scratch))
        for i, oid in enumerate(sorted(set(haves.values()))):
            try:
                tmp.references.create(f"refs/have/{i}", pygit2.Oid(hex=oid), force=True)
            except (pygit2.GitError, ValueError, KeyError):
                pass
        glob = src.endswith("*")
        fetch(tmp, url, [f"+{src}:refs/incoming/{'*' if glob else 'one'}"], auth, say)
        got = {}
        for name in tmp.references:
            if not name.startswith("refs/incoming/"):
                continue
            rest = name[len("refs/incoming/"):]
            remote_name = src[:-1] + rest if glob else src
            try:
                target = tmp.references[name].target
                if isinstance(tmp[target], pygit2.Commit):
                    got[remote_name] = str(target)
            except (KeyError, ValueError, pygit2.GitError):
                continue
        _adopt(scratch / "objects", store_root / "objects")
        return got
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _adopt(src: Path, dst: Path) -> None:
    """Move fetched packs (index last, so a reader never sees half a pack) and loose objects
    into `dst`, durably."""
    pack_dir = dst / "pack"
    moved = False
    for pack in sorted((src / "pack").glob("*.pack")):
        for suffix in (".pack", ".rev", ".idx"):
            part = pack.with_suffix(suffix)
            if part.exists() and not (pack_dir / part.name).exists():
                fd = os.open(part, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(part, pack_dir / part.name)
                moved = True
    if moved:
        fsync_dir(pack_dir)
    for d in src.iterdir():
        if len(d.name) != 2 or not d.is_dir():
            continue
        for f in d.iterdir():
            target = dst / d.name / f.name
            if not target.exists():
                target.parent.mkdir(exist_ok=True)
                os.replace(f, target)


def push(repo: pygit2.Repository, url: str, refspecs: list[str], auth: Auth, say=None) -> None:
    """Push `refspecs` (never forced unless a spec says `+`); a rejected ref is an error."""
    if not refspecs:
        return
    cb = _Callbacks(auth, url, say)
    try:
        _remote(repo, url).push(refspecs, callbacks=cb)
    except (pygit2.GitError, OSError, RemoteError, ValueError) as exc:
        raise _error(exc, url, auth, cb) from None
    if cb.rejected:
        what = "; ".join(f"{ref}: {msg}" for ref, msg in sorted(cb.rejected.items()))
        raise RemoteError(f"{display_url(url)} refused {what}")


def job(store_root: Path, params: dict, say) -> dict:
    """One call of this module for the store at `store_root`, as offload's job "remote" runs it
    in a child process (or a thread when no child can start); `say` hears the bytes moved.
    A RemoteError is an answer ({"remote_error": message}), not a failure of the job."""
    auth, url, call = Auth.from_env(params.get("ssh_key")), params["url"], params["call"]
    try:
        if call == "list_refs":
            return {"refs": list_refs(pygit2.Repository(str(store_root)), url, auth, params["prefix"], say)}
        if call == "push":
            push(pygit2.Repository(str(store_root)), url, params["refspecs"], auth, say)
            return {}
        if call == "fetch_refs":
            return {"refs": fetch_refs(store_root, Path(params["scratch"]), url, auth, params["src"],
                                       params["haves"], say)}
    except RemoteError as exc:
        return {"remote_error": str(exc)}
    raise ValueError(f"no remote call {call!r}")
