"""What a change of each setting does to protection: weakening, strengthening or neutral.

A prompt-injected agent that can edit the profile's config.yaml (or the environment of a
process it starts) can switch protection down without touching the store.  Every key of
`config_schema`, every environment variable chronos-git reads and every source of ignore
rules is classified here, once, by which change of it weakens protection; docs/threat-model.md
shows the same table and tests/service/test_setting_effects.py keeps the three in step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["weakening", "strengthening", "neutral"]
# which change weakens: a lower or higher number, a flag turned off or on, entries added to or
# removed from a list, a value later in `order` (strongest first), any change at all, or none
# (the key does not change what is protected)
Weakens = Literal["lower", "higher", "off", "on", "add", "remove", "order", "any", "none"]


@dataclass(frozen=True)
class Effect:
    weakens: Weakens
    why: str
    zero_is_unlimited: bool = False
    order: tuple[str, ...] = ()
    patterns: bool = False        # gitignore-style: order and `!` negations matter too


SETTINGS: dict[str, Effect] = {
    "auto_snapshot": Effect("off", "no checkpoint before a call: nothing to roll back to"),
    "max_checkpoints": Effect("lower", "fewer checkpoints kept: older states are pruned", True),
    "size_budget_mb": Effect("lower", "fewer new bytes kept per workspace: older checkpoints are pruned", True),
    "store_budget_mb": Effect("lower", "the same across workspaces", True),
    "orphan_days": Effect("lower", "a moved or deleted workspace's history is pruned sooner (0: never)", True),
    "max_file_size_mb": Effect("lower", "more files skipped by every checkpoint", True),
    "ignored_patterns": Effect("add", "a new pattern takes paths out of every later checkpoint (so does a "
                               "reordered list or a `!` exception removed)", patterns=True),
    "clean_untracked_on_rollback": Effect("off", "a rollback leaves files the agent created"),
    "read_only_tools": Effect("add", "a tool listed here runs unjournaled, without a checkpoint, through a closed gate"),
    "strict_errors": Effect("off", "error results no longer count as uncertain"),
    "gate_mode": Effect("order", "`warn` lets protected calls through a closed gate", order=("block", "warn")),
    "snapshot_budget_s": Effect("lower", "more pre-call checkpoints are partial"),
    "store_args": Effect("on", "raw arguments in the journal: more evidence, and more secrets kept and pushed"),
    "duplicate_guard": Effect("none", "answers a repeated call from the journal; what is recorded is unchanged"),
    "compact_grace_s": Effect("lower", "unreferenced objects are pruned sooner"),
    "durable_snapshots": Effect("off", "checkpoint objects are no longer fsynced (the journal always is)"),
    "seed_from_git": Effect("none", "how the first snapshot is built, not what it holds"),
    "store_dir": Effect("any", "a new store starts with no history and no witness to compare against"),
    "host_id": Effect("any", "this machine's history on remotes continues under another name"),
    "push_interval_s": Effect("higher", "the off-machine anchor lags further behind"),
    "require_anchor": Effect("off", "a remote that keeps failing no longer closes the gate"),
    "anchor_timeout_s": Effect("higher", "a failing remote is tolerated longer"),
    "remote_deadline_s": Effect("any", "raised: a hanging remote holds the pusher longer; lowered: pushes are cut "
                                "off before they can finish (the anchor stops)"),
    "remote_min_rate_bps": Effect("any", "lowered: a trickling remote holds the pusher up to remote_deadline_s; "
                                  "raised: slow links are cut off (the anchor stops)"),
    "remote_exclude": Effect("remove", "files that match no pattern any more (keys, .env) are pushed off the machine"),
    "remote_ssh_key": Effect("any", "which key authenticates pushes: a wrong one makes every push fail"),
}

# environment variables chronos-git reads, and the ignore sources that decide what is captured
ENVIRONMENT: dict[str, Effect] = {
    "CHRONOS_GIT_STORE": Effect("any", "as store_dir"),
    "HERMES_HOME": Effect("any", "another profile: another store and settings"),
    "CHRONOS_GIT_SETTINGS": Effect("any", "overrides settings keys (each as its row above)"),
    "CHRONOS_GIT_HOST_ID": Effect("any", "as host_id"),
    "CHRONOS_GIT_FAULT": Effect("any", "a test hook: SIGKILLs the process or fails a write at a named point"),
    "CHRONOS_GIT_FAULT_LOG": Effect("none", "where the test hook notes that it fired"),
    "CHRONOS_GIT_LOCK_ORDER": Effect("none", "`strict`: a lock taken against engine/metadir.py's order raises (the tests)"),
    "CHRONOS_GIT_LOCK_TRACE": Effect("none", "a file that records which locks are taken inside which (to derive the order)"),
    "CHRONOS_GIT_SESSION": Effect("none", "the session id recorded for CLI calls"),
    "CHRONOS_GIT_REMOTE_USER": Effect("none", "HTTPS user name for pushes"),
    "CHRONOS_GIT_REMOTE_TOKEN": Effect("none", "HTTPS token for pushes"),
    "CHRONOS_GIT_API_TOKEN": Effect("any", "who may call the standalone HTTP API"),
    "CHRONOS_GIT_ALLOW_PLUGIN_EDITS": Effect("on", "file tools may write the plugin's own files (a developer's checkout)"),
    "CHRONOS_GIT_ALLOWED_HOSTS": Effect("add", "more Host names the standalone HTTP API answers"),
    "TERMINAL_ENV": Effect("any", "Hermes' terminal backend: on a remote one the agent's edits are not checkpointed"),
    "TERMINAL_DOCKER_MOUNT_CWD_TO_WORKSPACE": Effect("off", "docker: the workspace is no longer where edits land"),
    "TERMINAL_DOCKER_VOLUMES": Effect("add", "docker: a volume may put the store in the agent's reach"),
    "TERMINAL_SSH_HOST": Effect("none", "which machine the ssh backend edits (shown by health)"),
    "TERMINAL_CWD": Effect("none", "the folder Hermes' tools start in"),
    "HOME": Effect("any", "where `~` in store_dir and the global excludes file are found"),
    "XDG_CONFIG_HOME": Effect("any", "where the global excludes file is found"),
    "NO_COLOR": Effect("none", "text without colour"),
    "HERMES_YOLO_MODE": Effect("none", "only what a model's rollback records as its approval (approved with no "
                                       "prompt); Hermes' own prompt decides whether it runs"),
}
IGNORE_SOURCES: dict[str, Effect] = {
    "workspace .gitignore files": Effect("add", "a new rule (`*`) takes paths out of every later checkpoint"),
    ".git/info/exclude": Effect("add", "the same, for a git work tree"),
    "global excludes (core.excludesFile, ~/.config/git/ignore)": Effect("add", "the same, for every workspace"),
}


# what the host decides, recorded beside the settings block
HOST: dict[str, Effect] = {
    "plugin_enabled": Effect("off", "Hermes no longer loads chronos-git at its next start: no call is protected"),
}
# the keys a running process takes only at its next start (how checkpoints are built, where the
# store is, the name remotes know); every other key reloads live
NEXT_START = frozenset({"ignored_patterns", "max_file_size_mb", "seed_from_git", "store_dir", "host_id"})


def classify(key: str, old, new) -> Verdict:
    """What changing setting `key` from `old` to `new` does to protection."""
    effect = SETTINGS.get(key) or ENVIRONMENT.get(key) or HOST.get(key)
    if effect is None:
        raise KeyError(f"no effect is written down for {key!r}")
    if old == new or effect.weakens == "none":
        return "neutral"
    if effect.weakens == "any":
        return "weakening"
    if effect.weakens in ("off", "on"):
        weaker = (bool(old) and not new) if effect.weakens == "off" else (not old and bool(new))
        return "weakening" if weaker else "strengthening"
    if effect.weakens == "order":
        rank = {v: i for i, v in enumerate(effect.order)}
        if old not in rank or new not in rank:
            return "weakening"             # a value off the known scale is not trusted
        return "weakening" if rank[new] > rank[old] else "strengthening"
    if effect.weakens in ("add", "remove"):
        before, after = set(old or ()), set(new or ())
        taken = after - before if effect.weakens == "add" else before - after
        if effect.patterns:     # an added exception (`!...`) narrows; a removed one or a reorder widens
            kept = [p for p in (old or ()) if p in after]
            taken = ({p for p in taken if not str(p).startswith("!")}
                     | {p for p in before - after if str(p).startswith("!")}
                     | ({"order"} if kept != [p for p in (new or ()) if p in before] else set()))
        return "weakening" if taken else "strengthening"
    a, b = (_number(v, effect.zero_is_unlimited) for v in (old, new))
    if effect.weakens == "lower":
        return "weakening" if b < a else "strengthening"
    return "weakening" if b > a else "strengthening"


_WORDS = {"lower": "weakening when lowered", "higher": "weakening when raised", "off": "weakening when turned off",
          "on": "weakening when turned on", "add": "weakening when entries are added",
          "remove": "weakening when entries are removed", "any": "any change weakens", "none": "neutral"}


def describe(effect: Effect) -> str:
    """The table's wording of an effect (docs/threat-model.md)."""
    if effect.weakens == "order":
        return "weakening from " + " to ".join(effect.order)
    text = _WORDS[effect.weakens]
    return text + " (0 = unlimited)" if effect.zero_is_unlimited else text


def _number(v, zero_is_unlimited: bool) -> float:
    x = float(v or 0)
    return math.inf if zero_is_unlimited and x == 0 else x
