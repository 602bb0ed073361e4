"""Where the agent's edits happen, read from Hermes' terminal backend settings.

chronos-git checkpoints the folder on this machine and journals every call.  What that
protects depends on where Hermes runs the agent's commands and file tools (its terminal
backend): on this machine as this user (`local`), in a container that may or may not mount
the workspace (`docker`, `singularity`), or on another machine (`ssh`, `modal`, `daytona`),
where nothing chronos-git checkpoints is what the agent changes.  `health` shows the answer
so that nobody believes in protection that cannot be there (docs/threat-model.md).

Hermes' own precedence: a `terminal` mapping in the profile's config.yaml wins for the keys
it has; otherwise the TERMINAL_* variables; otherwise `local`.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

_KEYS = {"backend": "TERMINAL_ENV",
         "docker_mount_cwd_to_workspace": "TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE",
         "docker_volumes": "TERMINAL_DOCKER_VOLUMES",
         "ssh_host": "TERMINAL_SSH_HOST"}
REMOTE = {"ssh", "modal", "daytona", "managed_modal"}
THREAT_MODEL = "docs/threat-model.md"


class Deployment(BaseModel):
    backend: str
    edits_here: bool | None        # the agent's edits land in the folder chronos-git checkpoints
    store_in_reach: bool | None    # the agent's commands can write the store (None: cannot tell)
    summary: str


def describe(store: Path, environ: Mapping[str, str] | None = None,
             config: Mapping | None = None) -> Deployment:
    """The deployment for `store`, from Hermes' terminal settings (`config`: the profile's
    parsed config.yaml; `environ`: the process environment)."""
    env = os.environ if environ is None else environ
    terminal = config.get("terminal") if isinstance(config, Mapping) else None
    terminal = terminal if isinstance(terminal, Mapping) else {}

    def value(key: str):
        if key in terminal:
            return terminal[key]
        return env.get(_KEYS[key])

    backend = str(value("backend") or "local").strip().lower() or "local"
    if backend == "local":
        return Deployment(backend=backend, edits_here=True, store_in_reach=True, summary=(
            "commands and file tools run on this machine as you: every call is checkpointed and journaled; "
            "the agent can reach the store, so what it does to the record is detected and attributed, "
            f"not prevented ({THREAT_MODEL})"))
    if backend == "docker":
        mounted = _truthy(value("docker_mount_cwd_to_workspace"))
        reach = _mounts(store, value("docker_volumes"))
        where = ("the workspace is mounted into the container: edits land in this folder and are checkpointed"
                 if mounted else
                 "the workspace is not mounted: commands and file tools change the container's own files, which "
                 "chronos-git journals but cannot checkpoint or restore")
        store_note = ("a docker volume mounts the store: the agent can reach it" if reach
                      else "the store is out of the container's reach")
        return Deployment(backend=backend, edits_here=mounted, store_in_reach=reach,
                          summary=f"docker: {where}; {store_note}")
    if backend == "singularity":
        return Deployment(backend=backend, edits_here=True, store_in_reach=True, summary=(
            "singularity binds your home folder and the current folder by default: edits land on this "
            "machine and the agent can reach the store, as with the local backend"))
    if backend in REMOTE:
        host = value("ssh_host") if backend == "ssh" else None
        there = f"{backend} ({host})" if host else backend
        return Deployment(backend=backend, edits_here=False, store_in_reach=False, summary=(
            f"commands and file tools run on another machine, {there}: chronos-git journals each call (what "
            "was asked, when, the outcome) but its checkpoints hold this machine's folder, not the one the "
            "agent changes, so it cannot restore those edits or settle a crashed call by evidence"))
    return Deployment(backend=backend, edits_here=None, store_in_reach=None, summary=(
        f"unknown terminal backend {backend!r}: chronos-git cannot tell where the agent's edits happen"))


def _truthy(v) -> bool:
    if isinstance(v, bool):
        return v
    return str(v or "").strip().lower() in {"1", "true", "yes", "on"}


def _mounts(store: Path, volumes) -> bool:
    """Whether a docker volume spec ("HOST:CONTAINER[:MODE]", a list or its JSON) mounts the store,
    a folder that holds it, or a folder inside it."""
    if isinstance(volumes, str):
        try:
            volumes = json.loads(volumes) if volumes.strip() else []
        except ValueError:
            volumes = [volumes]
    if not isinstance(volumes, list):
        return False
    store = Path(os.path.realpath(store))
    for spec in volumes:
        host = str(spec).split(":", 1)[0]
        if not host.startswith(("/", "~")):
            continue                       # a named volume: not a host folder
        host_path = Path(os.path.realpath(os.path.expanduser(host)))
        if store == host_path or host_path in store.parents or store in host_path.parents:
            return True
    return False


def for_profile(store: Path) -> Deployment:
    """The deployment as Hermes would see it: the profile's config.yaml and this environment."""
    from .settings import hermes_home
    config = None
    try:
        import yaml  # type: ignore[import-untyped]  # PyYAML ships no hints; Hermes brings it
        config = yaml.safe_load((hermes_home() / "config.yaml").read_text(encoding="utf-8"))
    except Exception:                      # no file, no parser, bad YAML: settings say so already
        config = None
    return describe(store, config=config if isinstance(config, Mapping) else None)
