"""The store is examined, never obeyed: the store audit for `health` and `journal
verify`, and `chronos-git git …`, the one documented way to read the store with
stock git.

The audit itself is engine/store_audit.py (an allowlist of what chronos-git
writes into the store's config, refs and a few files); this module gives it the
remotes chronos-git's own record expects and turns its findings into results.

The pass-through refuses a store with any finding (stock git would honour a
`core.pager`, a hook, a replace ref ... that the agent planted) and otherwise runs
`git --git-dir STORE --no-pager --no-replace-objects` with every `GIT_*` variable
of the caller dropped, no global or system config, no terminal prompt, and `-c`
overrides for the settings that name programs (pager, fsmonitor, hooks, the
global attributes file), and no network transport (it reads the store).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from ..engine import store_audit
from ..engine.wording import plural
from ..journal_refs import events
from .core import Core
from .remotes import Remotes
from .results import GitRun, TamperFinding

# `git -c` overrides: command-line config wins over the store's config.
GIT_OVERRIDES = (
    "core.pager=cat",
    "core.fsmonitor=false",
    "core.commitGraph=false",
    "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null",
    "core.sshCommand=false",
    "credential.helper=",
    "protocol.allow=never",
    "core.editor=false",
    "gpg.program=false",             # a signed commit planted in the store must not run gpg, ...
    "gpg.ssh.program=false",         # ... ssh-keygen or gpgsm (`log --show-signature`, `%G?`)
    "gpg.x509.program=false",
)
GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_OPTIONAL_LOCKS": "0",
}


def findings(core: Core, remotes: Remotes) -> list[store_audit.Finding]:
    """Everything the store holds that chronos-git did not write ([] without a store)."""
    if not core.store_exists():
        return []
    return store_audit.audit(core.store.root, remotes.recorded_config())


def record_findings(core: Core, remotes: Remotes) -> list[store_audit.Finding]:
    """Each remote's URL in chronos-git's record (remotes.json) against the one its newest
    `remote_added` event journaled: an edited record would redirect pushes as surely as the
    config did.  Reads every maintenance event (for `journal verify`, which reads them all)."""
    if not core.store_exists():
        return []
    recorded = remotes.recorded_config()
    if not recorded:
        return []
    journaled: dict[str, str] = {}
    for ev in core.journal.events(None, kinds={events.Maintenance}):     # newest first
        if ev.get("action") == "remote_added" and isinstance(ev.get("remote"), str):
            journaled.setdefault(ev["remote"], str(ev.get("url")))
    out = []
    path = core.store.meta_dir / "remotes.json"
    for name, rec in sorted(recorded.items()):
        if name in journaled and journaled[name] != rec["url"]:
            out.append(store_audit.Finding(
                "record", str(path), f"remote {name!r}: url {rec['url']}",
                f"`remote add` journaled {journaled[name]} for it: pushes would go elsewhere than recorded",
                f"`chronos-git remote remove {name}`, then add it again with the right URL"))
    return out


def as_results(found: list[store_audit.Finding]) -> list[TamperFinding] | None:
    return [TamperFinding(**f.to_dict()) for f in found] or None


def summary(found: list[store_audit.Finding], *, detail: bool = True) -> str:
    if not detail:                       # health lists each finding with its fix below its reason
        return (f"the store holds {plural(len(found), 'thing')} chronos-git never writes ("
                + ", ".join(f.what for f in found[:3]) + (", ..." if len(found) > 3 else "")
                + "): reported as tampering, never honoured")
    head = "; ".join(f.line() for f in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return (f"the store holds {plural(len(found), 'thing')} chronos-git never writes, reported as tampering and "
            f"never honoured: {head}{more}")


def git_command(store_root, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The git command line and environment the pass-through runs."""
    cmd = ["git", "--no-pager", "--no-replace-objects", "--git-dir", os.fspath(store_root)]
    for kv in GIT_OVERRIDES:
        cmd += ["-c", kv]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") and k not in ("PAGER", "LESSOPEN", "EDITOR", "VISUAL", "BROWSER")}
    env.update(GIT_ENV)
    return cmd + list(argv), env


# git commands that only read a repository; `reflog` and `config` only in their reading forms
READING = frozenset({
    "log", "show", "cat-file", "rev-parse", "rev-list", "ls-tree", "diff", "diff-tree", "fsck",
    "for-each-ref", "show-ref", "count-objects", "verify-pack", "blame", "shortlog", "describe", "name-rev",
    "merge-base", "whatchanged", "show-branch", "reflog", "config", "version"})
# not grep (-O runs a program), help (-w starts a browser), verify-commit or verify-tag (a
# signature check runs a program: overridden to `false` below, and refused here besides)
# options that write a file or read one outside the store (a FIFO there would hang): refused
# with any abbreviation git accepts (`--lost` is `--lost-found`)
_FILE_OPTIONS = ("output", "lost-found", "orderfile", "ignore-revs-file", "contents", "no-index")
# `git config` reads: one action and its NAME [PATTERN] (positional counts), how values are shown
_CONFIG_ACTIONS = {"--get": (1, 2), "--get-all": (1, 2), "--get-regexp": (1, 2), "--get-urlmatch": (2, 2),
                   "--list": (0, 0), "-l": (0, 0)}
_CONFIG_SHOWING = frozenset({"--null", "-z", "--name-only", "--show-origin", "--show-scope", "--bool", "--int",
                             "--bool-or-int", "--path", "--expiry-date", "--no-includes"})


def _config_refusal(rest: list[str]) -> str | None:
    """Why `git config REST` is not a plain read of the store's own config (None: it is).
    Anything else (another file, --global, --edit, a NAME VALUE pair) could write."""
    actions = [a for a in rest if a in _CONFIG_ACTIONS]
    if len(actions) != 1:
        return "`git config` only with one of --get, --get-all, --get-regexp, --get-urlmatch or --list"
    names = []
    for a in rest:
        if a in _CONFIG_ACTIONS or a in _CONFIG_SHOWING or a.startswith(("--type=", "--default=")):
            continue
        if a.startswith("-"):
            return f"`git config {a}` is not one of its reading options"
        names.append(a)
    least, most = _CONFIG_ACTIONS[actions[0]]
    if not least <= len(names) <= most:
        return f"`git config {actions[0]}` takes " + ("no name" if not most else "NAME [PATTERN]")
    return None


def refuse_writing(argv: list[str]) -> None:
    """ValueError unless `argv` is a git command that only reads the store: the pass-through
    is for reading it, and a write through it (a hook path in its config, a ref) would be
    tampering of chronos-git's own making."""
    if not argv:
        raise ValueError("give git's arguments, e.g. `chronos-git git log --oneline refs/chronos/journal`")
    cmd, rest = argv[0], argv[1:]
    why = None
    if cmd.startswith("-"):
        why = f"options before the git command ({cmd}) are not passed through"
    elif cmd not in READING:
        why = f"`git {cmd}` is not one of the commands that only read ({', '.join(sorted(READING))})"
    elif cmd == "config":
        why = _config_refusal(rest)
    elif cmd == "reflog" and rest and rest[0] not in ("show", "exists") and not rest[0].startswith("-"):
        why = f"`git reflog {rest[0]}` writes"
    for a in rest:
        if why:
            break
        name = a[2:].split("=", 1)[0] if a.startswith("--") else None
        if name and any(full.startswith(name) for full in _FILE_OPTIONS) or a.startswith("-O"):
            why = f"{a.split('=', 1)[0]} names a file to write or to read outside the store"
        elif name and "show-signature".startswith(name) or "%G" in a:
            why = "signature checks run a program"
    if why:
        raise ValueError(f"refused: `chronos-git git` only reads the store: {why}. To change the store, use "
                         "chronos-git's own commands (a change by hand is reported as tampering)")


def git_passthrough(core: Core, remotes: Remotes, argv: list[str]) -> GitRun:
    """Stock git over the store, once the audit finds nothing and `argv` only reads; git's
    output goes to this process's stdout and stderr, its exit code is the result's."""
    refuse_writing(argv)
    if not core.store_exists():
        raise ValueError(f"there is no chronos-git store at {core.store_dir}")
    found = findings(core, remotes)
    if found:
        raise store_audit.StoreTampered("`chronos-git git`", found)
    if shutil.which("git") is None:
        raise ValueError("git is not installed (or not on PATH): `chronos-git git` runs stock git")
    cmd, env = git_command(core.store.root, argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    rc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, check=False).returncode
    return GitRun(exit_code=rc, argv=list(argv))
