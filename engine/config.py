"""Engine settings (plain data; the plugin's pydantic settings map onto this)."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_IGNORED = (
    "node_modules/", "__pycache__/", "*.pyc", ".venv/", "venv/", ".tox/",
    ".mypy_cache/", ".pytest_cache/", ".ruff_cache/",
)


@dataclass(frozen=True)
class EngineConfig:
    max_file_size_mb: float = 50.0          # 0 = no limit
    ignored_patterns: tuple[str, ...] = DEFAULT_IGNORED
    max_checkpoints: int = 200              # per workspace, 0 = unlimited
    size_budget_mb: float = 2048.0          # per workspace, bytes new in kept checkpoints
    store_budget_mb: float = 10240.0        # all workspaces together, bytes new in kept checkpoints
    orphan_days: float = 30.0               # a workspace folder gone this long is pruned (0 = never)
    compact_grace_s: float = 3600.0         # loose objects younger than this survive compaction
    durable_snapshots: bool = False         # fsync every snapshot object (slow on big trees)
    seed_from_git: bool = True              # first import trusts the user's git index (usergit)

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_size_mb * 1024 * 1024) if self.max_file_size_mb > 0 else 0
