"""The operator key: operator acts signed with a key the agent cannot use.

Process ancestry (service/operators.py) tells most of the agent's commands from the person's,
but not a process the agent handed to a scheduler.  A signature does: once the person
registers an SSH key (`chronos-git operator-key set PATH`, one time, from their terminal), every
operator act (resolve, recover --replay/--rollback, settings accept, remote add/remove, a key
change, a countersignature) is signed with it, `ssh-keygen` asking for its passphrase on the
person's terminal.  A process without the passphrase (the agent's) cannot make the act; an act
written into the journal by other means carries no valid signature, and the check below finds
it at the next start or verify: the gate closes, `health` names the event.  Once registered the
key can be replaced only with a change signed by it.

What is checked, walking the journal oldest first (journal_refs/acts.py has the format):
- every operator act after the registration carries a signature by the key in force, over this
  journal's id, the event and a nonce used once;
- a settings record that is not an act (chronos-git's own, when the profile changes) never puts
  a weaker value in force after the registration;
- a registration holds a proof by the new key (and, replacing one, the old key's signature).
An operator clears a finding for an act that was theirs with `journal countersign SEQ`.
The walk is incremental from a marker (`operator-acts.json`); a full verify walks everything.
"""
from __future__ import annotations

import secrets
import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import setting_effects
from ..engine import sshsig
from ..engine.errors import ChronosError
from ..engine.state_file import StateFile
from ..engine.store_audit import Finding
from ..journal_refs import acts, events
from ..journal_refs.state import SETTINGS_ACTION
from .core import Core

MARKER = "operator-acts.json"
SCHEMA = 1
COUNTERSIGNED = "countersigned"


_here = threading.local()


@contextmanager
def at_terminal():
    """Acts made inside are a command the person typed (the CLIs): ssh-keygen may ask for the
    key's passphrase on the terminal.  Elsewhere (the dashboard, a slash command inside the
    chat's screen, the API) it never asks, so only a key without a passphrase signs there."""
    before = getattr(_here, "terminal", False)
    _here.terminal = True
    try:
        yield
    finally:
        _here.terminal = before


class OperatorKeyError(ChronosError):
    """An operator act that needed the operator key's signature and could not get it."""
    code = "operator_signature"


@dataclass
class Key:
    public_key: str
    fingerprint: str
    key_file: str
    seq: int


@dataclass
class Walk:
    head: str | None = None
    key: Key | None = None
    open: list[dict] = field(default_factory=list)   # acts without a valid signature, not countersigned
    in_force: dict | None = None                     # the settings of the last settings record
    nonces: set[str] = field(default_factory=set)

    def to_marker(self) -> dict:
        return {"schema": SCHEMA, "head": self.head, "key": asdict(self.key) if self.key else None,
                "open": self.open, "in_force": self.in_force, "nonces": sorted(self.nonces)}

    @classmethod
    def from_marker(cls, d: dict) -> Walk:
        key = d.get("key")
        return cls(head=d.get("head"), key=Key(**key) if isinstance(key, dict) else None,
                   open=list(d.get("open") or []), in_force=d.get("in_force"),
                   nonces={str(n) for n in d.get("nonces") or ()})


class OperatorKey:
    def __init__(self, core: Core):
        self.core = core

    # ------------------------------------------------------------------ checks
    def walk(self, *, full: bool = False) -> Walk:
        """The operator acts checked from the marker on (everything when `full` or unmarked)."""
        journal = self.core.journal
        journal.open()
        marker = {} if full else self._read_marker()
        got = journal.payloads_since(marker["head"]) if marker.get("head") else None
        w = Walk.from_marker(marker) if got is not None else Walk()
        if got is None:
            got = journal.payloads_since(None)
        head, payloads = got or (None, [])
        jid = journal.state.journal_id
        for ev in payloads:
            try:
                self._feed(w, ev, jid)
            except Exception as exc:     # a forged event must not blind the check: it is a finding
                w.open.append(_problem(ev, f"an event the operator-act check cannot read "
                                           f"({type(exc).__name__}: {str(exc)[:200]})"))
        w.head = head
        if payloads or full:
            try:
                self._marker().write(w.to_marker())      # not synced (metadir.JSON_FILES)
            except OSError:
                pass                 # a read-only store: the next walk starts from further back
        return w

    def check(self, *, full: bool = False) -> tuple[Key | None, list[Finding]]:
        """The key in force and the acts without a valid signature by it, from one walk."""
        if not self.core.store_exists():
            return None, []
        w = self.walk(full=full)
        return w.key, [Finding("signature", f"journal event {p['seq']}", p["what"], p["why"],
                        f"if it was yours: `chronos-git journal countersign {p['seq']}` from your terminal; "
                        "otherwise it was not an operator's act (`chronos-git journal log` shows what it did)")
                       for p in w.open]

    def findings(self, *, full: bool = False) -> list[Finding]:
        return self.check(full=full)[1]

    def _feed(self, w: Walk, ev: dict, jid: str | None) -> None:
        prev = w.in_force
        settings = (ev.get("kind") == "maintenance" and ev.get("action") == SETTINGS_ACTION
                    and isinstance(ev.get("in_force"), dict))
        if settings:
            w.in_force = ev["in_force"]
        allowed: dict = {}            # the weaker values this event may put in force: a signed accept's
        if acts.is_act(ev):
            registering = ev.get("action") == acts.OPERATOR_KEY and ev.get("kind") == "maintenance"
            if w.key is None:         # before any key: acts are told apart by ancestry only
                if registering:
                    self._take_key(w, ev, jid)
                return
            why = self._signature_problem(ev, w.key, jid, w.nonces)
            if why:
                w.open.append(_problem(ev, why))
                return
            if registering:
                self._take_key(w, ev, jid)
            elif ev.get("action") == COUNTERSIGNED:
                w.open = [p for p in w.open if p.get("id") != ev.get("event")]
            allowed = acts.accepted_keys(ev) if settings else {}
        if w.key is not None and settings and prev is not None:
            weaker = [k for k in _weakened(prev, w.in_force or {})
                      if k not in allowed or allowed[k] != (w.in_force or {}).get(k)]
            if weaker:
                w.open.append(_problem(ev, f"a settings record puts weaker values in force ({', '.join(weaker)}) "
                                           "that no signed `settings accept` names"))

    def _take_key(self, w: Walk, ev: dict, jid: str | None) -> None:
        """A registration holds with its new key's proof; without one it is a finding."""
        why = self._proof_problem(ev, jid)
        if why:
            w.open.append(_problem(ev, why))
        else:
            w.key = _key_of(ev)

    def _proof_problem(self, ev: dict, jid: str | None) -> str | None:
        pub = ev.get("public_key")
        if not acts.valid_pubkey(pub):
            return "an operator key registration without a well-formed public key"
        key = Key(str(pub), str(ev.get("fingerprint")), str(ev.get("key_file")), int(ev.get("seq") or 0))
        return self._signature_problem(ev, key, jid, None, slot="proof", what="a valid proof by the key it registers")

    @staticmethod
    def _signature_problem(ev: dict, key: Key, jid: str | None, nonces: set[str] | None, *,
                           slot: str = "signature", what: str = "") -> str | None:
        sig = ev.get(slot)
        what = what or f"a valid signature by the operator key {key.fingerprint}"
        if not isinstance(sig, dict) or not isinstance(sig.get("nonce"), str) or not isinstance(sig.get("sig"), str):
            return f"an operator act without {what}"
        if nonces is not None:
            if sig["nonce"] in nonces:
                return "an operator act whose signature was used before (a copy of an earlier act)"
            nonces.add(sig["nonce"])
        try:
            ok = sshsig.verify(key.public_key, acts.message(jid, ev, sig["nonce"]), sig["sig"])
        except sshsig.SshSigError as exc:
            return f"an operator act whose signature cannot be checked here ({exc})"
        return None if ok else f"an operator act without {what}"

    # ------------------------------------------------------------------ acts
    def key(self) -> Key | None:
        """The key in force (the newest registration that holds)."""
        if not self.core.store_exists():
            return None
        return self.walk().key

    def signature(self, payload: dict) -> dict | None:
        """The operator key's signature over the act `payload` ({"kind": ..., fields}: enough of
        it for its claim), or None when no key is registered.  Raises OperatorKeyError when it
        cannot be made: the act must not happen."""
        key = self.key()
        if key is None:
            return None
        nonce = secrets.token_hex(16)
        msg = acts.message(self.core.journal.state.journal_id, payload, nonce)
        try:
            sig = sshsig.sign(Path(key.key_file), msg, terminal=getattr(_here, "terminal", False))
        except sshsig.SshSigError as exc:
            raise OperatorKeyError(
                f"this operator act must be signed with the operator key {key.fingerprint} ({key.key_file}) "
                f"and it could not be: {exc}. Run it from your own terminal, where ssh-keygen can ask for the "
                "key's passphrase (an agent's command, the dashboard or a slash command cannot)") from None
        return {"key": key.fingerprint, "nonce": nonce, "sig": sig}

    def register(self, key_file: Path, who: dict, *, actor: str) -> dict:
        """Register `key_file` (a private key with its .pub beside it) as the operator key; replacing
        a registered one is signed by that one.  Returns the key's record and whether it changed."""
        key_file = Path(key_file).expanduser().absolute()
        try:
            pub = sshsig.public_key(key_file)
            if not acts.valid_pubkey(pub):
                raise sshsig.SshSigError(f"{key_file}.pub does not hold a one-line SSH public key")
            fp = sshsig.fingerprint(pub)
        except sshsig.SshSigError as exc:
            raise ValueError(str(exc)) from None
        if not key_file.is_file():
            raise ValueError(f"{key_file} is not there: name the private key (its .pub beside it)")
        old = self.key()
        if old is not None and old.fingerprint == fp:
            return {"fingerprint": fp, "key_file": old.key_file, "changed": False, "replaced": None}
        fields = {"operation_id": None, "action": acts.OPERATOR_KEY, "public_key": pub, "fingerprint": fp,
                  "key_file": str(key_file), "actor": actor, "operator": who}
        nonce = secrets.token_hex(16)
        msg = acts.message(self.core.journal.state.journal_id, {"kind": events.Maintenance.kind, **fields}, nonce)
        try:
            fields["proof"] = {"key": fp, "nonce": nonce,
                               "sig": sshsig.sign(key_file, msg, terminal=getattr(_here, "terminal", False))}
            if old is not None:    # the old key's signature, with its own nonce (one use each)
                fields["signature"] = self.signature({"kind": events.Maintenance.kind, **fields})
        except sshsig.SshSigError as exc:
            raise OperatorKeyError(f"the operator key could not be registered: {exc}"
                                   + (f" (replacing {old.fingerprint} needs its signature)" if old else "")) from None
        ev = self.core.journal.append(events.Maintenance, fields)
        return {"fingerprint": fp, "key_file": str(key_file), "changed": True,
                "replaced": old.fingerprint if old else None, "event": ev["seq"]}

    def countersign_fields(self, seq: int, who: dict, *, actor: str) -> dict:
        """The countersignature of the unsigned act at journal `seq` (the operator's: it was theirs)."""
        w = self.walk()
        hit = next((p for p in w.open if p.get("seq") == seq), None)
        if hit is None:
            raise ValueError(f"journal event {seq} is not an operator act awaiting a countersignature"
                             + (f" (those that are: {', '.join(str(p['seq']) for p in w.open)})" if w.open else ""))
        return {"operation_id": None, "action": COUNTERSIGNED, "event": hit["id"], "event_seq": seq,
                "what": hit["what"], "actor": actor, "operator": who}

    def _marker(self) -> StateFile:
        return StateFile(self.core.store.meta_dir, MARKER)

    def _read_marker(self) -> dict:
        """Where the last walk ended; {} when missing, damaged or of another schema (a full walk)."""
        d = self._marker().read({}, expect=dict)
        if d.get("schema") != SCHEMA or not isinstance(d.get("head"), str):
            return {}
        try:
            Walk.from_marker(d)
        except TypeError:
            return {}
        return d


def _key_of(ev: dict) -> Key:
    return Key(ev["public_key"], str(ev.get("fingerprint")), str(ev.get("key_file")), int(ev.get("seq") or 0))


def _problem(ev: dict, why: str) -> dict:
    return {"id": ev.get("id"), "seq": ev.get("seq"), "what": _describe(ev), "why": why}


def _describe(ev: dict) -> str:
    kind, action = ev.get("kind"), ev.get("action")
    op = str(ev.get("operation_id") or "")[:12]
    if kind == "resolved":
        return f"resolve of {op} as {ev.get('outcome')}"
    if kind == "replayed":
        return f"replay of {op}"
    if action == SETTINGS_ACTION:
        return "settings record" + (" (accept)" if "operator" in ev else "")
    if action in ("remote_added", "remote_removed"):
        return f"{action.replace('_', ' ')} {ev.get('remote')!r} ({ev.get('url')})"
    if action == acts.OPERATOR_KEY:
        return f"operator key registration {ev.get('fingerprint')}"
    return str(action or kind)


def _kind(v) -> str:
    return "bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else type(v).__name__


def _weakened(old: dict, new: dict) -> list[str]:
    """The keys whose value in `new` is weaker than in `old`.  A value of another type (`"yes"`
    for true, `"0"` for 0) is weaker too: the settings refuse it and fall back to the defaults."""
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) == new.get(k):
            continue
        if old.get(k) is not None and new.get(k) is not None and _kind(old[k]) != _kind(new[k]):
            out.append(k)
            continue
        try:
            if setting_effects.classify(k, old.get(k), new.get(k)) == "weakening":
                out.append(k)
        except (KeyError, TypeError, ValueError):
            out.append(k)        # a key no effect is written down for, or a value off its scale: not trusted
    return out
