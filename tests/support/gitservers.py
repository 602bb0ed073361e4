"""Real git servers on 127.0.0.1 for the remote tests: `git daemon` and an OpenSSH `sshd`
started on a free port with its own host key and one authorized test key."""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port}")


def _kill_group(proc: subprocess.Popen | None) -> None:
    if proc and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


class GitDaemon:
    """`git daemon --enable=receive-pack` serving every repository below `base`."""

    def __init__(self, base: Path):
        self.base = base
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> "GitDaemon":
        self.proc = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", f"--base-path={self.base}", "--export-all",
             "--enable=receive-pack", "--listen=127.0.0.1", f"--port={self.port}", str(self.base)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        _wait_port(self.port, self.proc, "git daemon")
        return self

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def kill(self) -> None:
        """SIGKILL the daemon and every connection it forked (the remote goes away)."""
        _kill_group(self.proc)


class Sshd:
    """OpenSSH on a free loopback port: its own host key, one authorized ed25519 key."""

    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        self.host_key = root / "host_ed25519"
        self.client_key = root / "client_ed25519"
        for key in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        auth = root / "authorized_keys"
        auth.write_text(self.client_key.with_suffix(".pub").read_text())
        auth.chmod(0o600)
        self.config = root / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"PidFile {root / 'sshd.pid'}\nAuthorizedKeysFile {auth}\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\nLogLevel ERROR\n")

    def known_hosts_line(self) -> str:
        kind, key = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {key}\n"

    def start(self) -> "Sshd":
        Path("/run/sshd").mkdir(exist_ok=True)       # privilege separation directory
        self.log = (self.root / "sshd.log").open("w")       # a pipe nobody reads could fill up
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=self.log, start_new_session=True)
        _wait_port(self.port, self.proc, "sshd")
        return self

    def url(self, path: Path) -> str:
        return f"ssh://{pwd.getpwuid(os.getuid()).pw_name}@127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        _kill_group(self.proc)


def sshd_available() -> str | None:
    """None when a test sshd can run here, else why not."""
    if not os.path.exists(SSHD):
        return "OpenSSH server (Debian openssh-server) is not installed"
    if not shutil.which("ssh-keygen"):
        return "ssh-keygen is not installed"
    if os.geteuid() != 0:
        return "sshd needs root for its privilege separation here"
    return None
