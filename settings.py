"""Plugin settings: `plugins.entries.chronos-git.settings` in Hermes' config.yaml.

Every key here is also declared in plugin.yaml's `config_schema`
(tests/test_settings.py keeps the two in step).
"""
from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .engine.config import DEFAULT_IGNORED, EngineConfig

log = logging.getLogger("chronos_git")

INSPECTION_TOOLS = ("chronos_list_checkpoints", "chronos_diff", "chronos_status", "chronos_verify",
                    "chronos_snapshot")


class Settings(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    auto_snapshot: bool = Field(True, description="Snapshot before every modifying tool call.")
    max_checkpoints: int = Field(200, ge=0, description="Checkpoints kept per workspace (0 = unlimited).")
    size_budget_mb: float = Field(2048, ge=0, description="New bytes kept per workspace across checkpoints (0 = unlimited).")
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
    durable_snapshots: bool = Field(False, description="fsync snapshot objects too (the journal is always fsynced).")
    store_dir: str | None = Field(None, description="Store location (default <HERMES_HOME>/plugin-data/chronos-git).")

    @classmethod
    def from_mapping(cls, data: dict | None) -> "Settings":
        """Lenient: a bad value is reported and replaced by its default, never fatal."""
        data = dict(data or {})
        try:
            return cls(**data)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e.get("loc")}
            for key in bad:
                log.warning("chronos-git: ignoring invalid setting %s=%r (%s)", key, data.get(key),
                            "; ".join(e["msg"] for e in exc.errors() if e.get("loc") and e["loc"][0] == key))
                data.pop(key, None)
            return cls(**data)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(max_file_size_mb=self.max_file_size_mb,
                            ignored_patterns=tuple(self.ignored_patterns),
                            max_checkpoints=self.max_checkpoints,
                            size_budget_mb=self.size_budget_mb,
                            compact_grace_s=self.compact_grace_s,
                            durable_snapshots=self.durable_snapshots)

    def is_read_only(self, tool: str) -> bool:
        return tool in self.read_only_tools or tool in INSPECTION_TOOLS
