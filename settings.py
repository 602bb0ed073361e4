"""Plugin settings and the store location: the one resolver every surface uses.

Settings live in `plugins.entries.chronos-git.settings` of the profile's
`config.yaml` (newer hosts also hand them over through `ctx.get_config`);
the standalone tools read the same file and let `CHRONOS_GIT_SETTINGS` (JSON)
override keys.  The store is `--store` / `CHRONOS_GIT_STORE`, else
`store_dir`, else `<HERMES_HOME>/plugin-data/chronos-git`, with `~` and
environment variables expanded everywhere, so one configuration gives one
store in Hermes, both CLIs and the API.

Nothing is silently ignored: a config file that cannot be read (no YAML
parser, invalid YAML, a block of the wrong type) or a key with a bad value is
a *problem* naming the file and the key.  The key falls back to its default
and the problem is shown by `health`, `/chronos status` and the model's first
turn; the operator CLI refuses to act on a configuration with problems.

Every key here is also declared in plugin.yaml's `config_schema`
(tests keep the two in step).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .engine.config import DEFAULT_IGNORED, EngineConfig

log = logging.getLogger("chronos_git")

PLUGIN_KEY = "chronos-git"
BLOCK = f"plugins.entries.{PLUGIN_KEY}.settings"
INSPECTION_TOOLS = ("chronos_list_checkpoints", "chronos_diff", "chronos_status", "chronos_verify",
                    "chronos_snapshot")


HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")


def default_host_id(store_dir: Path) -> str:
    """Stable per machine and profile: the host name and a hash of the machine id and the store."""
    machine = ""
    for f in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            machine = Path(f).read_text().strip()
            break
        except OSError:
            continue
    name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname() or "host").strip("-")[:40] or "host"
    digest = hashlib.sha256(f"{machine or socket.gethostname()}\0{store_dir}".encode()).hexdigest()[:8]
    return f"{name}-{digest}"


def _expanded(raw: str) -> str:
    """`~`, `~user` and `$VAR` expanded; an unset variable is an error (it had made a folder
    literally named `$NOPE`)."""
    out = os.path.expandvars(os.path.expanduser(raw))
    unset = re.search(r"\$(\w+|\{[^}]*\})", out)
    if unset:
        raise ValueError(f"{raw!r} names the environment variable {unset.group(0)}, which is not set")
    return out


def expand(raw: str) -> Path:
    """`~`, `~user` and `$VAR` expanded; relative paths are refused (relative to what?)."""
    p = Path(_expanded(raw))
    if not p.is_absolute():
        raise ValueError(f"{raw!r} is not an absolute path (use /..., ~/... or $VAR/...)")
    return p


class Settings(BaseModel):
    # strict: `true` is not the number 1, "5" is not 5; forbid: a misspelt key is a problem
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, allow_inf_nan=False)

    auto_snapshot: bool = Field(True, description="Snapshot before every modifying tool call.")
    max_checkpoints: int = Field(200, ge=0, description="Checkpoints kept per workspace (0 = unlimited).")
    size_budget_mb: float = Field(2048, ge=0, le=1e9, description="New bytes kept per workspace across checkpoints (0 = unlimited).")
    store_budget_mb: float = Field(10240, ge=0, le=1e9, description="New bytes kept across all workspaces of the profile; the oldest checkpoints go first (0 = unlimited).")
    orphan_days: float = Field(30, ge=0, le=36500, description="A workspace whose folder has been gone this many days is pruned at compaction (0 = never).")
    max_file_size_mb: float = Field(50, ge=0, description="Files above this are skipped and listed (0 = no limit).")
    ignored_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORED),
                                        description="gitignore-style patterns never snapshotted, on top of .gitignore files.")
    clean_untracked_on_rollback: bool = Field(True, description="Rollback removes non-ignored files absent from the checkpoint.")
    read_only_tools: list[str] = Field(default_factory=lambda: ["read_file", "search_files"],
                                       description="Tools that pass the recovery gate and are not journaled.")
    strict_errors: bool = Field(False, description="Treat error results as uncertain (closes the gate).")
    gate_mode: Literal["block", "warn"] = Field("block", description="block: refuse protected calls while an outcome is unknown; warn: only alert.")
    snapshot_budget_s: float = Field(8.0, gt=0, le=25, description="Longest a pre-call snapshot may take before a partial checkpoint is recorded.")
    store_args: bool = Field(False, description="Keep raw arguments of non-file tools in the journal (default: hashes only).")
    duplicate_guard: bool = Field(False, description="Answer an identical completed call of this session from the journal instead of running it again.")
    compact_grace_s: float = Field(3600, ge=0, description="Unreferenced objects younger than this survive compaction.")
    durable_snapshots: bool = Field(False, description="fsync snapshot objects too (the journal is always durable).")
    seed_from_git: bool = Field(True, description="A first snapshot of a git work tree takes the blob ids its index vouches for and links its packs (read-only).")
    store_dir: str | None = Field(None, description="Store location (default <HERMES_HOME>/plugin-data/chronos-git); ~ and $VAR are expanded.")
    host_id: str | None = Field(None, description="This machine's name on remotes (default: derived from the machine id and the profile).")
    push_interval_s: float = Field(60, ge=1, le=86400, description="Background pushes to remotes run after a turn, at most this often.")
    require_anchor: bool = Field(False, description="Close the gate when no remote has taken the journal for longer than anchor_timeout_s.")
    anchor_timeout_s: float = Field(3600, gt=0, le=30 * 86400, description="How long a remote may refuse or be unreachable before require_anchor closes the gate.")
    remote_deadline_s: float = Field(600, gt=0, le=86400, description="Longest a push, fetch or remote check may take in all; one still running then is cut off and recorded as failing.")
    remote_min_rate_bps: int = Field(1024, ge=0, le=1 << 30, description="A push or fetch moving fewer bytes a second than this over 60 s is cut off and recorded as failing (0 = no minimum).")
    remote_exclude: list[str] = Field(default_factory=lambda: [".env*", "*.pem", "*.key", "id_*"],
                                      description="File name patterns a snapshot push refuses to send (remote --snapshots).")
    remote_ssh_key: str | None = Field(None, description="Private key file for SSH remotes (its public key beside it as .pub); default: the ssh-agent.")

    @field_validator("store_dir", "remote_ssh_key")
    @classmethod
    def _absolute_store(cls, v: str | None) -> str | None:
        if v is not None:
            expand(v)
        return v

    @field_validator("host_id")
    @classmethod
    def _ref_safe_host(cls, v: str | None) -> str | None:
        if v is not None and not HOST_ID.match(v):
            raise ValueError("a host id is 1-63 letters, digits, '_' or '-', starting with a letter "
                             "or digit (it names refs on remotes)")
        return v

    @classmethod
    def from_mapping(cls, data: dict | None, *, where: str = BLOCK) -> tuple["Settings", list[str]]:
        """(settings, problems): a bad value is a problem naming `where` and the key, and
        that key keeps its default."""
        data = dict(data or {})
        problems: list[str] = []
        try:
            return cls(**data), problems
        except ValidationError as exc:
            bad: dict[str, list[str]] = {}
            for e in exc.errors():
                key = str(e["loc"][0]) if e.get("loc") else "?"
                bad.setdefault(key, []).append(e["msg"])
            for key, msgs in bad.items():
                if key not in cls.model_fields:
                    problems.append(f"{where}.{key} is not a chronos-git setting (misspelt?); it is "
                                    f"ignored. The settings are: {', '.join(cls.model_fields)}")
                else:
                    problems.append(f"{where}.{key} = {data.get(key)!r} is invalid ({'; '.join(msgs)}); "
                                    "using the default")
                data.pop(key, None)
            return cls(**data), problems

    def engine_config(self) -> EngineConfig:
        return EngineConfig(max_file_size_mb=self.max_file_size_mb,
                            ignored_patterns=tuple(self.ignored_patterns),
                            max_checkpoints=self.max_checkpoints,
                            size_budget_mb=self.size_budget_mb,
                            store_budget_mb=self.store_budget_mb,
                            orphan_days=self.orphan_days,
                            compact_grace_s=self.compact_grace_s,
                            durable_snapshots=self.durable_snapshots,
                            seed_from_git=self.seed_from_git)

    def is_read_only(self, tool: str) -> bool:
        return tool in self.read_only_tools or tool in INSPECTION_TOOLS


@dataclass
class Loaded:
    """Settings as resolved, with where they came from and what was wrong."""
    settings: Settings
    problems: list[str] = field(default_factory=list)
    source: str | None = None       # the config file read, if any


def hermes_home() -> Path:
    """The profile's home: Hermes' own resolver when importable (profile-aware), else the same rule."""
    try:
        from hermes_constants import get_hermes_home
        return Path(get_hermes_home())
    except Exception:
        raw = os.environ.get("HERMES_HOME", "").strip()
        return Path(raw) if raw else Path.home() / ".hermes"


def load(ctx=None, *, env: bool = True) -> Loaded:
    """Settings from `ctx.get_config` (newer hosts) or the profile's config.yaml, then
    `CHRONOS_GIT_SETTINGS` when `env` (the standalone tools)."""
    data, problems, source = _from_host(ctx)
    if data is None:
        data, problems, source = _from_file(hermes_home() / "config.yaml")
    if env:
        extra, bad_env = env_overrides()
        data.update(extra)
        problems += bad_env
    settings, bad = Settings.from_mapping(data, where=f"{source}: {BLOCK}" if source else BLOCK)
    problems += bad
    for p in problems:
        log.warning("chronos-git: %s", p)
    return Loaded(settings, problems, source)


def env_overrides() -> tuple[dict, list[str]]:
    """(keys, problems) the standalone tools take from `CHRONOS_GIT_SETTINGS` and
    `CHRONOS_GIT_HOST_ID`: they rule one process, never the profile's record of its settings."""
    data: dict = {}
    problems: list[str] = []
    raw = os.environ.get("CHRONOS_GIT_SETTINGS")
    if raw:
        try:
            extra = json.loads(raw)
            if not isinstance(extra, dict):
                raise ValueError("not a JSON object")
            data.update(extra)
        except ValueError as exc:
            problems.append(f"CHRONOS_GIT_SETTINGS is not a JSON object of settings ({exc}); ignored")
    if os.environ.get("CHRONOS_GIT_HOST_ID"):
        data["host_id"] = os.environ["CHRONOS_GIT_HOST_ID"]
    return data, problems


def plugin_enabled(path: Path | None = None) -> bool | None:
    """Whether the profile's config.yaml lets Hermes load chronos-git (its key in
    `plugins.enabled` and not in `plugins.disabled`); None when the file cannot tell (absent,
    unreadable, no YAML parser): a process without a profile knows nothing of enablement."""
    path = path or hermes_home() / "config.yaml"
    try:
        import yaml
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except Exception:
        return None
    plugins = doc.get("plugins") if isinstance(doc, dict) else None
    if not isinstance(plugins, dict):
        return False                     # no plugins.enabled: Hermes loads no plugin at all
    enabled, disabled = plugins.get("enabled"), plugins.get("disabled")
    listed = isinstance(enabled, list) and PLUGIN_KEY in enabled
    return listed and not (isinstance(disabled, list) and PLUGIN_KEY in disabled)


def _from_host(ctx) -> tuple[dict | None, list[str], str | None]:
    get_config = getattr(ctx, "get_config", None)
    if not callable(get_config):
        return None, [], None
    data = {}
    for key in Settings.model_fields:
        try:
            value = get_config(key, None)
        except Exception:
            value = None
        if value is not None:
            data[key] = value
    return (data, [], "ctx.get_config") if data else (None, [], None)


def _from_file(path: Path) -> tuple[dict, list[str], str | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, [], None
    except (OSError, UnicodeError) as exc:
        return {}, [f"cannot read {path}: {exc}; chronos-git settings use their defaults"], str(path)
    try:
        import yaml
    except ImportError:
        return {}, [f"cannot read {path}: no YAML parser (PyYAML) in {os.sys.executable}; "
                    "chronos-git settings use their defaults"], str(path)
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        return {}, [f"{path} is not valid YAML ({exc}); chronos-git settings use their defaults"], str(path)
    node, where = doc, []
    for key in ("plugins", "entries", PLUGIN_KEY, "settings"):
        where.append(key)
        if node is None:
            return {}, [], str(path)
        if not isinstance(node, dict):
            return {}, [f"{path}: {'.'.join(where[:-1]) or 'the document'} must be a mapping, "
                        f"not {type(node).__name__}; chronos-git settings use their defaults"], str(path)
        # Hermes' own lookup falls back to the older `config` block: read what the host reads
        node = node.get(key) if key != "settings" or "settings" in node else node.get("config")
    if node is None:
        return {}, [], str(path)
    if not isinstance(node, dict):
        return {}, [f"{path}: {BLOCK} must be a mapping, not {type(node).__name__}; "
                    "chronos-git settings use their defaults"], str(path)
    return dict(node), [], str(path)


def current_folder(then: str) -> str:
    """os.getcwd(), or a clear error ending in `then` (what to do) when the folder was deleted."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise ValueError(f"the current folder no longer exists (it was deleted or moved): {then}") from None


def profile_store(settings: Settings) -> Path:
    """The profile's own store: `store_dir`, or the default (no command-line or environment override)."""
    return Path(os.path.abspath(expand(settings.store_dir))) if settings.store_dir else \
        Path(os.path.abspath(hermes_home() / "plugin-data" / PLUGIN_KEY))


def store_location(settings: Settings, override: str | os.PathLike | None = None) -> Path:
    """Where the store is: `override` (--store, CHRONOS_GIT_STORE), `store_dir`, or the default."""
    for given in (override, os.environ.get("CHRONOS_GIT_STORE")):
        if given:              # a command-line or environment value may be relative to the cwd
            where = _expanded(os.fspath(given))
            if not os.path.isabs(where):
                where = os.path.join(current_folder(f"the store path {os.fspath(given)!r} is relative: "
                                                    "give an absolute path"), where)
            return Path(os.path.normpath(where))
    if settings.store_dir:
        return expand(settings.store_dir)
    return hermes_home() / "plugin-data" / PLUGIN_KEY
