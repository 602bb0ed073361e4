"""Every setting, environment variable and ignore source that changes what is protected is
classified (setting_effects), and the threat model's table says the same."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from chronos_git import setting_effects as fx
from chronos_git.settings import Settings

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "journal_refs", "service", "cli", "api", "hermes", "report")


def test_every_config_key_is_classified_and_nothing_else():
    schema = yaml.safe_load((REPO / "plugin.yaml").read_text())["config_schema"]
    assert set(fx.SETTINGS) == set(schema) == set(Settings.model_fields)


def test_every_environment_variable_the_code_reads_is_classified():
    read = set()
    files = [REPO / "settings.py", REPO / "deployment.py"] + [f for p in PACKAGES for f in (REPO / p).rglob("*.py")]
    for f in files:
        text = f.read_text()
        read |= set(re.findall(r'(?:environ\.get|getenv)\(\s*"([A-Z][A-Z0-9_]+)"', text))
        read |= set(re.findall(r'environ\[\s*"([A-Z][A-Z0-9_]+)"\s*\]', text))
        read |= set(re.findall(r'^[A-Z_]+ = "((?:CHRONOS_GIT|TERMINAL|HERMES)_[A-Z0-9_]+)"', text, re.M))
    read |= set(re.findall(r'"(TERMINAL_[A-Z_]+)"', (REPO / "deployment.py").read_text()))
    missing = read - set(fx.ENVIRONMENT)
    assert not missing, f"classify these in setting_effects.ENVIRONMENT: {sorted(missing)}"


def test_the_threat_model_table_lists_every_classified_name():
    doc = (REPO / "docs" / "threat-model.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+)` \| (weakening[^|]*|neutral|any change weakens[^|]*) \|", doc, re.M))
    for name in list(fx.SETTINGS) + list(fx.HOST) + list(fx.ENVIRONMENT) + list(fx.IGNORE_SOURCES):
        assert name in rows, f"docs/threat-model.md has no row for `{name}`"
        assert rows[name].strip() == fx.describe(fx.SETTINGS.get(name) or fx.HOST.get(name)
                                                 or fx.ENVIRONMENT.get(name) or fx.IGNORE_SOURCES[name]), name


@pytest.mark.parametrize("key,old,new,verdict", [
    ("auto_snapshot", True, False, "weakening"),
    ("auto_snapshot", False, True, "strengthening"),
    ("max_checkpoints", 200, 20, "weakening"),
    ("max_checkpoints", 200, 0, "strengthening"),           # 0 = unlimited
    ("max_checkpoints", 0, 500, "weakening"),
    ("orphan_days", 30, 0, "strengthening"),                # 0 = never pruned
    ("read_only_tools", ["read_file"], ["read_file", "terminal"], "weakening"),
    ("read_only_tools", ["read_file", "terminal"], ["read_file"], "strengthening"),
    ("ignored_patterns", ["node_modules/"], ["node_modules/", "*"], "weakening"),
    ("remote_exclude", [".env*", "*.pem"], [".env*"], "weakening"),
    ("remote_exclude", [".env*"], [".env*", "*.key"], "strengthening"),
    ("gate_mode", "block", "warn", "weakening"),
    ("gate_mode", "warn", "block", "strengthening"),
    ("store_dir", None, "/elsewhere", "weakening"),
    ("push_interval_s", 60, 3600, "weakening"),
    ("anchor_timeout_s", 3600, 60, "strengthening"),
    ("seed_from_git", True, False, "neutral"),
    ("max_file_size_mb", 50, 50, "neutral"),
    ("TERMINAL_ENV", "local", "ssh", "weakening"),
])
def test_a_change_is_classified_by_its_direction(key, old, new, verdict):
    assert fx.classify(key, old, new) == verdict


def test_an_unknown_key_is_an_error_not_neutral():
    with pytest.raises(KeyError):
        fx.classify("no_such_key", 1, 2)


def test_the_keys_taken_only_at_the_next_start_are_settings_and_named_in_the_docs():
    doc = (REPO / "docs" / "threat-model.md").read_text()
    assert fx.NEXT_START <= set(Settings.model_fields)
    section = doc[doc.index("## Settings, environment"):]
    assert all(f"`{k}`" in section.split("| config_schema key")[0] for k in fx.NEXT_START)


@pytest.mark.parametrize("old,new,verdict", [
    (["*.log", "!keep.log"], ["!keep.log", "*.log"], "weakening"),      # the exception no longer wins
    (["*.log", "!keep.log"], ["*.log"], "weakening"),                   # an exception removed
    (["*.log"], ["*.log", "!keep.log"], "strengthening"),               # an exception added
    (["a/", "b/"], ["a/"], "strengthening"),
    (["a/"], ["a/", "c/"], "weakening"),
])
def test_ignore_patterns_are_judged_as_gitignore_reads_them(old, new, verdict):
    assert fx.classify("ignored_patterns", old, new) == verdict
