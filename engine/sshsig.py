"""SSH signatures (`ssh-keygen -Y sign|verify`), the format git's own SSH commit signing uses.

An operator key is an ordinary SSH key: with a passphrase, `ssh-keygen` asks for it on the
terminal the person typed the command at, so a process without the passphrase cannot sign.
Nothing here knows what is signed; the message is bytes and the namespace separates these
signatures from any other use of the same key.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

NAMESPACE = "chronos-git"
SIGNER = "chronos-git-operator"
TIMEOUT_S = 300                 # a person typing a passphrase; not a hang forever


class SshSigError(Exception):
    """Signing or reading a key failed; the message says why, in words."""


def available() -> bool:
    return shutil.which("ssh-keygen") is not None


def _need() -> str:
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise SshSigError("ssh-keygen is not installed (Debian: `apt-get install openssh-client`)")
    return exe


def _last_line(text: bytes) -> str:
    lines = [ln.strip() for ln in text.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def public_key(key_file: Path) -> str:
    """The one-line public key of `key_file` (a private key with its `.pub` beside it, or a
    `.pub` itself): `TYPE BASE64`, without the comment."""
    key_file = Path(key_file)
    pub = key_file if key_file.suffix == ".pub" else key_file.with_name(key_file.name + ".pub")
    try:
        text = pub.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise SshSigError(f"{pub} does not exist: the operator key is a private key with its .pub "
                          "beside it (`ssh-keygen -t ed25519 -f PATH` makes both)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SshSigError(f"{pub} cannot be read as a public key: {exc}") from None
    parts = text.split()
    if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")):
        raise SshSigError(f"{pub} does not hold an SSH public key")
    return f"{parts[0]} {parts[1]}"


def fingerprint(pubkey: str) -> str:
    """`SHA256:...` of a one-line public key."""
    exe = _need()
    with tempfile.TemporaryDirectory(prefix="chronos-sshsig-") as d:
        path = Path(d, "key.pub")
        path.write_text(pubkey + "\n", encoding="ascii")
        run = subprocess.run([exe, "-l", "-E", "sha256", "-f", str(path)], capture_output=True,
                             stdin=subprocess.DEVNULL, timeout=30)
    if run.returncode != 0:
        raise SshSigError(f"not a usable public key: {_last_line(run.stderr)}")
    return run.stdout.decode().split()[1]


def sign(key_file: Path, message: bytes, *, terminal: bool = False) -> str:
    """The armored signature of `message` by `key_file`.  With `terminal` (a command the person
    typed) a passphrase is asked on this process's terminal; otherwise ssh-keygen runs without
    one (a new session, stdin empty), so only a key without a passphrase signs."""
    exe = _need()
    if not Path(key_file).is_file():
        raise SshSigError(f"the operator key {key_file} is not there")
    with tempfile.TemporaryDirectory(prefix="chronos-sshsig-") as d:
        data = Path(d, "act")
        data.write_bytes(message)
        try:
            run = subprocess.run([exe, "-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(key_file), str(data)],
                                 stdin=None if terminal else subprocess.DEVNULL, capture_output=True,
                                 timeout=TIMEOUT_S, env=_sign_env(), start_new_session=not terminal)
        except subprocess.TimeoutExpired:
            raise SshSigError(f"ssh-keygen did not sign within {TIMEOUT_S} s") from None
        sig = Path(d, "act.sig")
        if run.returncode != 0 or not sig.exists():
            raise SshSigError(f"ssh-keygen could not sign with {key_file}: {_last_line(run.stderr)}")
        return sig.read_text(encoding="ascii")


# No agent socket: the operator key is the file's, never one an ssh-agent lends to any process
# of this user.  No askpass program or display: a process the agent started could make one pop
# up and ask the person for the passphrase; the passphrase is typed at a terminal or not at all.
_DROPPED = ("SSH_AUTH_SOCK", "SSH_ASKPASS", "SSH_ASKPASS_REQUIRE", "DISPLAY", "WAYLAND_DISPLAY")


def _sign_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _DROPPED}


def verify(pubkey: str, message: bytes, signature: str) -> bool:
    """Whether `signature` is `pubkey`'s over `message` in our namespace."""
    exe = _need()
    if not isinstance(signature, str) or "BEGIN SSH SIGNATURE" not in signature:
        return False
    with tempfile.TemporaryDirectory(prefix="chronos-sshsig-") as d:
        allowed, sig = Path(d, "allowed"), Path(d, "sig")
        allowed.write_text(f'{SIGNER} namespaces="{NAMESPACE}" {pubkey}\n', encoding="ascii")
        sig.write_text(signature, encoding="ascii")
        try:
            run = subprocess.run([exe, "-Y", "verify", "-f", str(allowed), "-I", SIGNER, "-n", NAMESPACE,
                                  "-s", str(sig)], input=message, capture_output=True, timeout=30)
        except (subprocess.TimeoutExpired, OSError):
            return False
    return run.returncode == 0
