"""The git CLI as a shadow-git plugin drives it, plus small git helpers.

Every invocation runs with the user's and the system's git config
neutralised, as Hermes does: GIT_CONFIG_GLOBAL=GIT_CONFIG_SYSTEM=/dev/null,
GIT_CONFIG_NOSYSTEM=1, and no inherited GIT_* variables.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path


class GitCLIError(RuntimeError):
    pass


def git_env(git_dir: Path | str, work_tree: Path | str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(git_dir), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_SYSTEM=os.devnull,
               GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def git(args: list[str], env: dict, *, cwd: Path | str | None = None, input: bytes | None = None,
        check: bool = True) -> str:
    p = subprocess.run(["git", *args], env=env, cwd=cwd, input=input, capture_output=True)
    if check and p.returncode != 0:
        raise GitCLIError(f"git {' '.join(args[:4])} failed ({p.returncode}): "
                          f"{p.stderr.decode(errors='replace').strip()[-800:]}")
    return p.stdout.decode(errors="surrogateescape")


def init_shadow(git_dir: Path) -> None:
    """A bare shadow repository the way shadow-git plugins set one up."""
    env = git_env(git_dir)
    env.pop("GIT_DIR")
    git(["-c", "init.defaultBranch=main", "init", "-q", "--bare", str(git_dir)], env)
    env = git_env(git_dir)
    for k, v in (("user.name", "shadow"), ("user.email", "shadow@localhost"),
                 ("commit.gpgsign", "false"), ("core.autocrlf", "false"), ("gc.auto", "0")):
        git(["config", k, v], env)


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def dir_bytes(path: Path | str, sub: str | None = None) -> int:
    """Apparent size (sum of st_size) of every file under path[/sub]."""
    root = os.path.join(path, sub) if sub else str(path)
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except FileNotFoundError:
                pass
    return total
