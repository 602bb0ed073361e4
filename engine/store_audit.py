"""The store is examined, never obeyed.

The agent that chronos-git records runs shell commands as the user who owns the
store, so anything in the store that git or libgit2 would *act on* is a way for
it to redirect the off-machine anchor (`url.*.insteadOf`), falsify the audit
view (`refs/replace/*`, grafts, alternates) or plant code that runs when a
person reads the store with stock git (`core.pager`, hooks, textconv drivers).

chronos-git therefore keeps an allowlist of what it writes into the store's
config, its per-workspace `config.worktree` files and its refs; `audit()` reads
those few small files (no object is read) and reports everything else as a
`Finding`: what, where, why it matters and how to remove it.  `health` and
`journal verify` report findings as tampering; pushes, fetches and the
`chronos-git git` pass-through refuse to run while any exists.

Knows nothing of the journal, remotes.json or Hermes: the caller passes the
remote configuration chronos-git's own record expects (`expected_remotes`).
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import pygit2

from .errors import ChronosError
from .fsutil import realpath
from .store import ATTRIBUTES, BASE_CONFIG

# Exactly what chronos-git writes into the store's `config` (engine/store.py BASE_CONFIG;
# the names lower-cased as libgit2 reports them).  A value that differs is a finding too.
BASE_KEYS: dict[str, str] = {k.lower(): v for k, v in BASE_CONFIG.items()}

# What a remote chronos-git added has in the config: `remote add` writes these three.
REMOTE_KEYS = ("url", "fetch", "chronossnapshots")

_WS_ID = re.compile(r"[0-9a-f]{16}\Z")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_HEX40 = re.compile(r"[0-9a-f]{40}\Z")

# Why a foreign config key matters, by prefix (the first match wins; the names are lower-case).
_WHY = (
    ("url.", "rewrites remote URLs: libgit2 and git would push the journal's anchor to, and fetch "
             "from, another place than the one chronos-git recorded"),
    ("remote.", "a remote chronos-git did not record (or a setting it never writes on one of its "
                "remotes): pushes and fetches take remotes from chronos-git's own record only"),
    ("include", "pulls in another config file, whose settings git and libgit2 would honour"),
    ("core.pager", "a program stock git runs when a person reads the store"),
    ("pager.", "a program stock git runs when a person reads the store"),
    ("core.fsmonitor", "a program stock git runs on every command in the store"),
    ("core.hookspath", "hooks stock git runs from another folder"),
    ("core.sshcommand", "a program git runs to reach a remote"),
    ("core.editor", "a program stock git runs"),
    ("core.askpass", "a program stock git runs"),
    ("core.worktree", "points git at another work tree"),
    ("core.attributesfile", "attributes that name diff, text conversion and filter drivers"),
    ("core.gitproxy", "a program git runs to reach a remote"),
    ("core.alternaterefscommand", "a program git runs"),
    ("core.", "a core setting chronos-git does not write"),
    ("diff.", "a diff or text-conversion driver: a program stock git runs when it shows a change"),
    ("filter.", "a content filter: a program git runs on file contents"),
    ("merge.", "a merge driver: a program git runs"),
    ("credential", "a credential helper: a program git runs and hands secrets to"),
    ("extensions.", "a repository extension chronos-git does not set: it changes how git and libgit2 "
                    "read the store"),
    ("http.", "changes how git and libgit2 reach an HTTPS remote (proxy, certificate checks)"),
    ("gpg.", "a program git runs to check signatures when showing the log"),
    ("alias.", "an alias: `git <name>` in the store would run something else"),
    ("sequence.", "a program stock git runs"),
    ("protocol.", "changes which transports git may use"),
    ("ssh.", "changes how git reaches an SSH remote"),
    ("uploadpack.", "a program git runs when serving the store"),
    ("receive.", "changes what git accepts into the store"),
    ("transfer.", "changes what git sends and accepts"),
    ("gc.", "a housekeeping setting chronos-git does not write (git gc could drop checkpoints)"),
    ("safe.", "changes which repositories git trusts"),
)


@dataclass(frozen=True)
class Finding:
    """One thing in the store that chronos-git did not write and does not honour."""
    kind: str      # config, worktree_config, ref, grafts, alternates, hook, file
    where: str     # the file (or ref) it is in
    what: str      # the line, ref or file name
    why: str       # what git or libgit2 would do with it
    fix: str       # how to remove it

    def line(self) -> str:
        return f"{self.what} in {self.where}: {self.why} (fix: {self.fix})"

    def to_dict(self) -> dict:
        return asdict(self)


def _why(key: str) -> str:
    for prefix, why in _WHY:
        if key.startswith(prefix):
            return why
    return "a setting chronos-git does not write"


def _key(name: str) -> str:
    """A config name as git compares it: section and variable lower-case, a subsection as is."""
    section, _, rest = name.partition(".")
    sub, dot, var = rest.rpartition(".")
    return f"{section.lower()}.{sub}{dot}{var.lower()}" if rest else section.lower()


def _entries(path: Path) -> list[tuple[str, str]] | str:
    """(name, value) of every entry libgit2 reads from `path` (includes resolved, as libgit2
    would when opening the store), or why the file cannot be read."""
    try:
        cfg = pygit2.Config(str(path))
        return [(_key(e.name or ""), e.value or "") for e in cfg]
    except (pygit2.GitError, OSError, ValueError, UnicodeError) as exc:
        return str(exc) or type(exc).__name__


def _unset(path: Path, key: str) -> str:
    return f"remove the setting `{key}` from {path} (`git config --file {path} --unset-all {key}`)"


def _audit_config(root: Path, expected_remotes: dict[str, dict[str, str]]) -> list[Finding]:
    path = root / "config"
    out: list[Finding] = []
    entries = _entries(path)
    if isinstance(entries, str):
        return [Finding("config", str(path), "the file", f"libgit2 cannot read it ({entries})",
                        f"restore {path} from a backup, or remove what is not chronos-git's")]
    for key, value in entries:
        want = BASE_KEYS.get(key)
        if want is not None:
            if value.strip().lower() != want.lower():
                out.append(Finding("config", str(path), f"{key} = {value}",
                                   f"chronos-git writes {key} = {want}; a changed value changes how git and "
                                   "libgit2 read and write the store", f"set it back: `git config --file "
                                   f"{path} {key} {want}`"))
            continue
        parts = key.split(".")
        if parts[0] == "remote" and len(parts) >= 3:
            name, sub = ".".join(parts[1:-1]), parts[-1]
            rec = expected_remotes.get(name)
            if rec is not None and sub in REMOTE_KEYS and value == rec.get(sub):
                continue
            if rec is not None and sub in REMOTE_KEYS:
                why = (f"differs from chronos-git's own record of remote {name!r} ({sub} = {rec.get(sub)}): "
                       "pushes use the record, and stock git would use this")
                out.append(Finding("config", str(path), f"{key} = {value}", why, _unset(path, key)))
                continue
        out.append(Finding("config", str(path), f"{key} = {value}", _why(key), _unset(path, key)))
    return out


def _audit_worktree_configs(root: Path) -> list[Finding]:
    out: list[Finding] = []
    main = root / "config.worktree"
    if main.exists() or main.is_symlink():
        out.append(Finding("config", str(main), "the file",
                           "git and libgit2 read it as the store's own per-worktree config (chronos-git "
                           "writes none there)", f"delete {main}"))
    wt = root / "worktrees"
    try:
        dirs = sorted(wt.iterdir())
    except OSError:
        return out
    for d in dirs:
        cfg = d / "config.worktree"
        if not cfg.exists() and not cfg.is_symlink():
            continue
        entries = _entries(cfg)
        if isinstance(entries, str):
            out.append(Finding("worktree_config", str(cfg), "the file", f"libgit2 cannot read it ({entries})",
                               f"delete {d} (its workspace's next snapshot walks again)"))
            continue
        for key, value in entries:
            if key == "core.excludesfile" and (value == str(d / "exclude") or realpath(value)
                                               == realpath(d / "exclude")):
                continue        # the one setting chronos-git writes there (engine/workspace.py)
            why = ("chronos-git writes only core.excludesFile (its own exclude file) here: " + _why(key)
                   if key != "core.excludesfile" else
                   "chronos-git sets it to the workspace's own exclude file; another file changes what "
                   "snapshots leave out")
            out.append(Finding("worktree_config", str(cfg), f"{key} = {value}", why, _unset(cfg, key)))
        common = d / "commondir"
        try:
            if common.read_bytes() != b"../..\n":
                out.append(Finding("worktree_config", str(common), "commondir",
                                   "points this workspace's gitdir at another repository's objects and refs",
                                   f"write `../..` into {common}"))
        except OSError:
            pass
    return out


def allowed_ref(name: str) -> bool:
    """A ref chronos-git writes into the store (see the callers of `references.create`)."""
    if name in ("refs/chronos/journal", "refs/chronos/anchor/journal", "refs/chronos/anchor/manifest"):
        return True
    parts = name.split("/")
    if name.startswith("refs/chronos/snapshots/"):
        return len(parts) == 4 and bool(_WS_ID.match(parts[3]))
    if name.startswith("refs/chronos/outbox/"):          # service/remote_record.py: OUTBOX/<remote>/<ws id>
        return len(parts) == 5 and bool(_NAME.match(parts[3])) and bool(_WS_ID.match(parts[4]))
    if name.startswith("refs/chronos/remotes/"):         # TRACKING/<remote>/hosts/<host>/...
        return len(parts) >= 7 and bool(_NAME.match(parts[3])) and parts[4] == "hosts"
    return False


def _ref_names(root: Path) -> list[str]:
    """Every ref on disk (loose and packed), read as files: a ref libgit2 would skip (a bad
    name) is still listed."""
    names: set[str] = set()
    refs = root / "refs"
    for top, _dirs, files in os.walk(refs):
        for f in files:
            if f.endswith(".lock"):
                continue
            rel = os.path.relpath(os.path.join(top, f), root)
            names.add(rel.replace(os.sep, "/"))
    try:
        packed = (root / "packed-refs").read_bytes()
    except OSError:
        packed = b""
    for line in packed.splitlines():
        if not line or line.startswith((b"#", b"^")):
            continue
        _, _, ref = line.partition(b" ")
        names.add(os.fsdecode(ref.strip()))
    return sorted(names)


def _audit_refs(root: Path) -> list[Finding]:
    out = []
    for name in _ref_names(root):
        if allowed_ref(name):
            continue
        if name.startswith("refs/replace/"):
            why = ("a replace ref: stock git shows the object it names instead of the real one, so "
                   "`git log` over the store would show a forged history (libgit2 and fsck ignore it)")
        elif name.startswith("refs/chronos/"):
            why = "a ref in chronos-git's namespace that chronos-git never writes"
        else:
            why = "a ref chronos-git does not write: stock git would list and follow it"
        out.append(Finding("ref", str(root), name, why,
                           f"delete it: `git --git-dir {root} update-ref -d {name}`"))
    head = root / "HEAD"
    try:
        text = head.read_bytes()
    except OSError:
        text = b""
    if text and not (text.startswith(b"ref: refs/heads/") and b"\n" not in text.rstrip(b"\n")):
        out.append(Finding("ref", str(head), "HEAD = " + os.fsdecode(text.strip()[:100]),
                           "the store's HEAD is always an unborn branch; this makes `git log` show something else",
                           f"write `ref: refs/heads/master` into {head}"))
    return out


def _audit_info_exclude(root: Path) -> list[Finding]:
    """`info/exclude` holds only the comments `git init` writes: a rule in it would leave files
    of every workspace out of every checkpoint (libgit2 reads it for each one)."""
    p = root / "info" / "exclude"
    try:
        with open(p, "rb") as fh:
            data = fh.read(65536)
    except OSError:
        return []
    rules = [ln for ln in data.splitlines() if ln.strip() and not ln.lstrip().startswith(b"#")]
    if not rules:
        return []
    shown = rules[0].decode("utf-8", "backslashreplace")[:80]
    return [Finding("file", str(p), f"info/exclude rule {shown!r}" + (f" (and {len(rules) - 1} more)" if len(rules) > 1
                                                                       else ""),
                    "an ignore rule for every workspace: files it matches are left out of every checkpoint "
                    "(chronos-git writes none there)", f"delete the rules from {p}")]


def _audit_files(root: Path) -> list[Finding]:
    out = []

    def present(p: Path) -> bool:
        return p.exists() or p.is_symlink()

    for rel, kind, why in (
        ("info/grafts", "grafts", "grafts rewrite commits' parents in stock git's view of the history"),
        ("objects/info/alternates", "alternates",
         "borrows objects from another repository: a checkpoint or journal object could come from there"),
        ("objects/info/http-alternates", "alternates", "borrows objects from another place"),
        ("commondir", "file", "points git at another repository's objects and refs"),
        ("objects/info/commit-graph", "file",
         "a commit-graph: stock git reads commits' parents from it (a forged one hides checkpoints)"),
        ("objects/info/commit-graphs", "file", "commit-graph files: as objects/info/commit-graph"),
    ):
        p = root / rel
        if present(p):
            out.append(Finding(kind, str(p), rel, why, f"delete {p}"))
    for top, dirs, files in os.walk(root / "refs"):     # chronos-git writes no symlink there; git follows them
        for n in dirs + files:
            p = Path(top) / n
            if p.is_symlink():
                rel = os.path.relpath(p, root)
                out.append(Finding("ref", str(p), rel, "a symlink among the refs: stock git follows it to refs "
                                   "this audit cannot vouch for (a replace ref, a forged branch)", f"delete {p}"))
    out += _audit_info_exclude(root)
    hooks = root / "hooks"
    try:
        names = sorted(os.listdir(hooks))
    except OSError:
        names = []
    for n in names:
        if n.endswith(".sample"):
            continue
        p = hooks / n
        out.append(Finding("hook", str(p), f"hooks/{n}",
                           "a hook: a program stock git runs in the store (chronos-git writes no hook)",
                           f"delete {p}"))
    for legacy in ("branches", "remotes"):           # git's old remote definitions
        d = root / legacy
        try:
            files = sorted(os.listdir(d))
        except OSError:
            continue
        for n in files:
            out.append(Finding("file", str(d / n), f"{legacy}/{n}",
                               "an old-style remote definition stock git still honours",
                               f"delete {d / n}"))
    shallow = root / "shallow"
    try:
        lines = shallow.read_text().splitlines()
    except (OSError, UnicodeError):
        lines = []
    bad = [x for x in lines if x.strip() and not _HEX40.match(x.strip())]
    if bad:
        out.append(Finding("file", str(shallow), f"shallow: {bad[0][:60]!r}",
                           "chronos-git writes only commit ids there (its retention cut)",
                           f"remove the line from {shallow}"))
    attrs = root / "info" / "attributes"
    try:
        got = attrs.read_bytes() if present(attrs) else None
    except OSError:
        got = b"?"
    if got is not None and got != ATTRIBUTES:
        out.append(Finding("file", str(attrs), "info/attributes",
                           "chronos-git writes `* -text -ident -filter` there; other attributes can name "
                           "diff, text-conversion and filter drivers stock git runs",
                           f"write `* -text -ident -filter` into {attrs}"))
    return out


def audit(root: os.PathLike | str, expected_remotes: dict[str, dict[str, str]] | None = None) -> list[Finding]:
    """Everything in the store at `root` that chronos-git did not write.

    `expected_remotes`: {name: {"url": ..., "fetch": ..., "chronossnapshots": "true"|"false"}}
    from chronos-git's own record; a `remote.*` key not matching it is a finding.  Reads the
    config files, the ref names, a few small files and the hooks folder: a few ms."""
    root = Path(root)
    out = _audit_config(root, expected_remotes or {})
    out += _audit_worktree_configs(root)
    out += _audit_refs(root)
    out += _audit_files(root)
    return out


def has_url_rewrite(findings: list[Finding]) -> bool:
    return any(f.kind == "config" and f.what.startswith("url.") for f in findings)


class StoreTampered(ChronosError):
    """The store holds something chronos-git did not write (see `audit`): refused."""
    code = "store_tampered"

    def __init__(self, doing: str, findings: list[Finding]):
        lines = "; ".join(f.line() for f in findings[:8])
        more = f" (and {len(findings) - 8} more: `chronos-git health` lists them)" if len(findings) > 8 else ""
        super().__init__(f"{doing} refused: the store holds what chronos-git never writes, and it is never "
                         f"honoured: {lines}{more}. Remove it, then run `chronos-git journal verify`",
                         findings=[f.to_dict() for f in findings])
        self.findings = findings


def transport_findings(findings: list[Finding]) -> list[Finding]:
    """The findings that would change where a push or fetch goes or what it sends and takes:
    any foreign setting in the store's config or its `config.worktree` (url.*, remote.*,
    include*, http.*, credential helpers, ...) and borrowed objects."""
    return [f for f in findings if f.kind in ("config", "alternates")]
