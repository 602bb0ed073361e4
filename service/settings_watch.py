"""The settings in force: as the profile writes them, except weakening changes an operator
has not accepted (issue 32: a prompt-injected agent can edit config.yaml).

The journal holds the record (a `settings` maintenance event; its state carries `in_force`
and `held`), so the record is as tamper-evident as the calls.  At every start and at the next
call of any tool after the profile's config.yaml changed, the settings block (and whether
Hermes loads the plugin) is compared with the record, key by key (setting_effects.classify):

    neutral, strengthening   applied and recorded (a key in NEXT_START: from the next start)
    weakening                recorded as held: the value in force stays until
                             `chronos-git settings accept` (an operator, service/operators.py)

Keys a process takes from its environment (CHRONOS_GIT_SETTINGS) rule that process only; the
fingerprint of the settings a call ran under goes into its intent either way.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from .. import setting_effects as fx
from ..engine.codec import canonical
from ..engine.fsutil import atomic_write, realpath
from ..engine.store import Store
from ..journal_refs import JournalError, events
from ..journal_refs.state import SETTINGS_ACTION
from ..journal_refs.witness import witness_path_for
from ..settings import PLUGIN_KEY, Loaded, Settings, env_overrides, plugin_enabled, profile_store
from . import operators
from .core import Core
from .results import HeldSetting, SettingsRecord

ACCEPT = "chronos-git settings accept"
STORES = "chronos-git-stores.json"      # beside the default store: every store the profile used


def fingerprint(values: dict) -> str:
    """Of a record's values in force (Core.settings_fingerprint: of what a process runs under)."""
    return hashlib.sha256(canonical(values).encode()).hexdigest()[:16]


def _values(s: Settings) -> dict:
    return s.model_dump(mode="json")


class SettingsWatch:
    def __init__(self, core: Core):
        self.core = core
        self.reader: Callable[[], Loaded] | None = None    # the profile's block, set by a surface
        self.config_path: Path | None = None
        self._stamp: tuple | None = None
        self._lock = threading.Lock()
        self.started_with = _values(core.settings)         # NEXT_START keys keep these

    # ---------------------------------------------------------------- the record
    def watch(self, reader: Callable[[], Loaded], config_path: Path | None) -> None:
        """Compare the profile's settings with the record at start and whenever `config_path`
        changes; `reader` returns the block as written (no environment overrides)."""
        self.reader, self.config_path = reader, config_path

    def record(self) -> dict:
        journal = self.core.journal_opened()
        return dict(journal.state.settings) if journal is not None else {}

    def check(self, *, force: bool = False) -> None:
        """At start (`force`) and before every tool call: a changed config file is compared
        with the record; a changed record is journaled, and what is in force is applied."""
        if self.reader is None or not self.core.store_exists():
            return
        stamp = _stamp(self.config_path)
        if not force and stamp == self._stamp:
            return
        with self._lock:
            if not force and stamp == self._stamp:
                return
            journal = self.core.journal
            written = self._written()
            rec = journal.state.settings
            if journal.integrity != "ok":
                # nothing is recorded while the journal is in doubt, yet read-only tools still pass
                # the closed gate
                self._keep(rec, written)
                return
            before = self._other_stores() if not rec else []
            here = str(self.core.store_dir)
            if (before or "store_dir" in (rec.get("held") or {})
                    or (rec.get("in_force") or {}).get("store_dir") == here) and self._elsewhere():
                # the host runs on another store than the profile names (CHRONOS_GIT_STORE in its
                # environment): the move is that store, and it stays held while the host runs there
                written["store_dir"] = here
            in_force, held, changes = _compare(rec, written, journal.state.seq + 1)
            if before:        # a profile that had a store now has another: held as a store_dir change,
                # and, with no record to compare against, whatever is weaker than the defaults
                floor = _floor(written)
                for key in sorted(k for k in _block(written) if written[k] != floor.get(k) and k != "store_dir"):
                    in_force[key] = floor[key]
                    held[key] = {"in_force": floor[key], "written": written[key], "since_seq": journal.state.seq + 1}
                    changes.append({"key": key, "from": floor[key], "to": written[key], "verdict": "weakening",
                                    "status": "held"})
                in_force["store_dir"] = before[0]
                held["store_dir"] = {"in_force": before[0], "written": written.get("store_dir"),
                                     "since_seq": journal.state.seq + 1}
                changes.append({"key": "store_dir", "from": before[0], "to": written.get("store_dir"),
                                "verdict": "weakening", "status": "held"})
            if not rec or in_force != rec.get("in_force") or held != rec.get("held"):
                fields: dict[str, object] = {
                          "operation_id": None, "action": SETTINGS_ACTION, "in_force": in_force, "held": held,
                          "written": written, "changes": changes, "fingerprint": fingerprint(_block(in_force)),
                          "source": str(self.config_path) if self.config_path else None,
                          "first": not rec}
                if before:
                    fields["earlier_stores"] = before
                try:
                    journal.append(events.Maintenance, fields)
                except (JournalError, OSError):
                    self._keep(rec, written)  # not recorded (a full disk, say); the next call tries again
                    return
            self._stamp = stamp
            self._apply(in_force, held)

    def _keep(self, rec: dict, written: dict) -> None:
        """A change that cannot be recorded does not take effect: the record rules, else nothing
        below the defaults."""
        if rec:
            self._apply(rec.get("in_force") or {}, rec.get("held") or {})
        else:
            self._apply(_floor(written), {})

    def _stores_record(self) -> Path | None:
        return self.config_path.parent / "plugin-data" / STORES if self.config_path is not None else None

    def _known_stores(self) -> list[str]:
        record = self._stores_record()
        try:
            return [k for k in json.loads(record.read_text())["stores"] if isinstance(k, str)] if record else []
        except (OSError, ValueError, KeyError, TypeError):
            return []

    def earlier_stores(self, known: list[str] | None = None) -> list[str]:
        """The profile's other stores that still hold a journal (newest first), from the record of
        stores the profile used beside its config (`known`, read when not given), and its default
        location."""
        if self.config_path is None:
            return []
        here = str(self.core.store_dir)
        default = str(self.config_path.parent / "plugin-data" / PLUGIN_KEY)
        known = self._known_stores() if known is None else known
        return [p for p in dict.fromkeys([*reversed(known), default])
                if p != here and Store.exists_at(p) and witness_path_for(Path(p)).exists()]

    def _other_stores(self) -> list[str]:
        """`earlier_stores`, and this store joins the record."""
        known, record = self._known_stores(), self._stores_record()
        found = self.earlier_stores(known)
        if record is None:
            return found
        here = str(self.core.store_dir)
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(record, json.dumps({"stores": [*(k for k in known if k != here), here]}).encode())
        except OSError:
            pass                 # the journal's record of the move stands without it
        return found

    def accept(self, keys: list[str], *, actor: str) -> SettingsRecord:
        """The operator's act: the held changes named in `keys` ("all": every one) take effect.
        Named, so that a change the agent makes between the person's look and the act is not
        accepted with it; refused from the agent's own process tree."""
        who = operators.check(self.core, "settings accept")
        with self._lock:
            journal = self.core.journal
            journal.open()
            rec = journal.state.settings
            held = dict(rec.get("held") or {})
            if not keys:
                raise ValueError("name the held settings you accept (or `all`): "
                                 + (", ".join(sorted(held)) if held else "nothing is held"))
            chosen = sorted(held) if keys == ["all"] else sorted(set(keys))
            unknown = [k for k in chosen if k not in held]
            if unknown:
                raise ValueError(f"not held: {', '.join(unknown)} (held: {', '.join(sorted(held)) or 'nothing'}); "
                                 "`chronos-git settings` shows what is")
            if chosen:
                in_force = dict(rec["in_force"])
                changes = []
                for key in chosen:
                    h = held.pop(key)
                    in_force[key] = h.get("written")
                    changes.append({"key": key, "from": h.get("in_force"), "to": h.get("written"),
                                    "verdict": "weakening", "status": "accepted"})
                signed = operators.authorize(self.core, "settings accept", {
                    "kind": events.Maintenance.kind, "action": SETTINGS_ACTION, "changes": changes})
                journal.append(events.Maintenance, {
                    "operation_id": None, "action": SETTINGS_ACTION, "in_force": in_force, "held": held,
                    "changes": changes, "fingerprint": fingerprint(_block(in_force)), "actor": actor,
                    "operator": who, **signed})
                self._apply(in_force, held)
        return self.describe(accepted=chosen)

    # ---------------------------------------------------------------- in force
    def _elsewhere(self) -> bool:
        """The host runs on another store than the profile names because its environment says
        so (CHRONOS_GIT_STORE): not an edit of config.yaml's store_dir, which is compared as
        written."""
        assert self.reader is not None
        here = realpath(self.core.store_dir)
        env = os.environ.get("CHRONOS_GIT_STORE") or ""
        return bool(env) and realpath(os.path.expanduser(env)) == here and \
            realpath(profile_store(self.reader().settings)) != here

    def _written(self) -> dict:
        assert self.reader is not None
        values = _values(self.reader().settings)
        enabled = plugin_enabled(self.config_path) if self.config_path else None
        if enabled is not None:
            values["plugin_enabled"] = enabled
        return values

    def _apply(self, in_force: dict, held: dict) -> None:
        """What this process runs under: the record's values (a NEXT_START key that is not held:
        as this process started), then the process's own environment overrides."""
        block = _block(in_force)
        for key in fx.NEXT_START:
            if key in self.started_with and key not in held:
                block[key] = self.started_with[key]
        extra, _ = env_overrides() if self.core.env_overrides else ({}, [])
        settings, _problems = Settings.from_mapping({**block, **extra})
        if settings != self.core.settings:
            self.core.apply_settings(settings)

    def held(self) -> list[HeldSetting]:
        return [HeldSetting(key=k, in_force=h.get("in_force"), written=h.get("written"), why=_why(k),
                            since_seq=h.get("since_seq"))
                for k, h in sorted((self.record().get("held") or {}).items())]

    def describe(self, accepted: list[str] | None = None) -> SettingsRecord:
        rec, held = self.record(), self.held()
        return SettingsRecord(recorded=bool(rec), seq=rec.get("seq"), fingerprint=rec.get("fingerprint"),
                              effective_fingerprint=self.core.settings_fingerprint, held=held,
                              accepted=accepted or [], in_force=_values(self.core.settings),
                              accept_command=f"{ACCEPT} {' '.join(h.key for h in held)}" if held else None)


def _block(values: dict) -> dict:
    """The settings keys of a record (without the host's, plugin_enabled)."""
    return {k: v for k, v in values.items() if k in Settings.model_fields}


def _floor(written: dict) -> dict:
    """Without a readable record: each key as written unless that is weaker than its default."""
    defaults = Settings().model_dump(mode="json")
    out = {}
    for key, value in _block(written).items():
        try:
            weaker = fx.classify(key, defaults.get(key), value) == "weakening"
        except (KeyError, TypeError, ValueError):
            weaker = True
        out[key] = defaults.get(key) if weaker else value
    return out


def _why(key: str) -> str:
    effect = fx.SETTINGS.get(key) or fx.HOST.get(key)
    return effect.why if effect else ""


def _compare(rec: dict, written: dict, seq: int) -> tuple[dict, dict, list[dict]]:
    """(in force, held, changes) of the written values against the record (to be event `seq`)."""
    if not rec:
        return dict(written), {}, []           # the first record: what the profile says now
    before, held_before = rec.get("in_force") or {}, rec.get("held") or {}
    in_force, held, changes = dict(before), {}, []
    for key in sorted(set(written) | set(before)):
        if key not in written:
            continue                               # a key this process cannot know (plugin_enabled)
        old, new = before.get(key), written[key]
        if key not in before:                      # a key added by a newer version: its default
            in_force[key] = new
            continue
        if old == new:
            continue
        try:
            verdict = fx.classify(key, old, new)
        except (KeyError, TypeError, ValueError):
            verdict = "weakening"                  # not on the table: not trusted
        if verdict == "weakening":
            prior = held_before.get(key) or {}
            held[key] = {"in_force": old, "written": new,
                         "since_seq": prior.get("since_seq", seq) if prior.get("written") == new else seq}
            if prior.get("written") != new:
                changes.append({"key": key, "from": old, "to": new, "verdict": verdict, "status": "held"})
        else:
            in_force[key] = new
            changes.append({"key": key, "from": old, "to": new, "verdict": verdict,
                            "status": "next_start" if key in fx.NEXT_START else "applied"})
    for key in set(held_before) - set(held):
        if key in written and written[key] == before.get(key):
            changes.append({"key": key, "from": held_before[key].get("written"), "to": written[key],
                            "verdict": "strengthening", "status": "withdrawn"})
    return in_force, held, changes


def _stamp(path: Path | None) -> tuple | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return ("absent",)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
