"""The operator CLI: `chronos-git …` standalone and `hermes chronos-git …` in Hermes.

Both build the same parser with `configure(parser)` and run `dispatch(args)`.
The contract: `chronos-git [--store DIR] <command> ... [--workspace DIR] [--json]`
(options are accepted after any subcommand).  Text for people (cli/render.py);
with --json exactly one JSON document on stdout (a protected command's own
output goes to stderr).  Exit codes: 0 ok, 1 error (`{"status":"error",...}`),
3 the recovery gate is closed, 4 a `run` whose outcome could not be recorded.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from .. import settings as settings_mod
from ..commands import COMMANDS, Context
from ..engine.codec import dumps
from ..service import Chronos
from ..service.errors import EXIT_ERROR, EXIT_NOT_RECORDED, envelope
from ..service.operator_key import at_terminal
from ..service.results import ErrorResult, GitRun, Result, RunResult
from . import deps, render

LOCAL = ("windtunnel", "setup")           # tools around the service, not service commands


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def _common(p: argparse.ArgumentParser) -> None:
    """The options every command takes, after the command too."""
    p.add_argument("--workspace", "-w", default=argparse.SUPPRESS,
                   help="workspace directory (default: the current directory)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON document")


def _add_arg(p: argparse.ArgumentParser, a) -> None:
    """One Arg of the command table as argparse spells it."""
    kw: dict = {"help": a.help or None}
    if a.metavar:
        kw["metavar"] = a.metavar
    if a.kind == "remainder":
        p.add_argument(a.name, nargs=argparse.REMAINDER, **kw)
        return
    if a.kind == "int":
        kw["type"] = _positive if a.ge == 1 else int
    if a.choices:
        kw["choices"] = a.choices
    if a.positional:
        if a.nargs:
            kw["nargs"] = a.nargs
        if a.default is not None:
            kw["default"] = a.default
        p.add_argument(a.name, **kw)
        return
    flags = a.flags or ("--" + a.name.replace("_", "-"),)
    if a.kind == "bool":
        p.add_argument(*flags, dest=a.name, action="store_true", **kw)
    elif a.kind == "names":
        p.add_argument(*flags, dest=a.name, action="append", default=None, **kw)
    else:
        p.add_argument(*flags, dest=a.name, default=a.default, required=a.required, **kw)


def _add_command(sub, cmd, word: str) -> None:
    p = sub.add_parser(word, aliases=list(cmd.cli_aliases), help=cmd.help, description=cmd.description)
    p.set_defaults(chronos_command=cmd.name)
    for a in cmd.args:
        if a.cli:
            _add_arg(p, a)
    if cmd.name != "git":                  # git's arguments are git's own: --json does not apply
        _common(p)


def configure(parser: argparse.ArgumentParser, table=COMMANDS) -> None:
    """The parser, built from the command table (commands/entries.py) plus the local tools."""
    parser.add_argument("--store", default=None,
                        help="store directory (default: $CHRONOS_GIT_STORE, store_dir, or "
                             "<HERMES_HOME>/plugin-data/chronos-git)")
    parser.add_argument("--workspace", "-w", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", default=False, help="print one JSON document")
    if not isinstance(parser, _Parser):          # Hermes' parser (`hermes chronos-git ...`)
        parser.error = _HostParser.error.__get__(parser)   # type: ignore[method-assign]
        parser.parse_known_args = _HostParser.parse_known_args.__get__(parser)   # type: ignore[method-assign]
        parser.print_help = _HostParser.print_help.__get__(parser)   # type: ignore[method-assign]
    sub = parser.add_subparsers(dest="chronos_cmd", metavar="COMMAND",
                                parser_class=_Parser if isinstance(parser, _Parser) else _HostParser)
    groups = table.groups()
    for word in table.top_words():
        if word in groups:
            g = sub.add_parser(word, help=GROUP_HELP.get(word))
            _common(g)
            gs = g.add_subparsers(dest="sub_cmd", metavar="SUBCOMMAND")
            for cmd in groups[word]:
                if cmd.cli:
                    _add_command(gs, cmd, cmd.words[1])
        else:
            _add_command(sub, table.get(word), word)
        if word == "report":               # the local tools, where `--help` has always listed them
            from ..windtunnel import runner as windtunnel
            p = sub.add_parser("windtunnel", help="crash / power-cut / I/O / tamper / concurrency / hostile-input "
                                                  "suites against throwaway stores",
                               description=windtunnel.DESCRIPTION)
            windtunnel.configure(p)
            p = sub.add_parser("setup", help="install chronos-git's dependencies into the Python that runs this")
            deps.configure_setup_parser(p)
            p.add_argument("--workspace", "-w", default=argparse.SUPPRESS, help=argparse.SUPPRESS)   # unused


GROUP_HELP = {"remote": "git remotes that hold this host's journal (and, opt-in, checkpoints)",
              "journal": "the tool-call journal"}


class _ArgumentError(Exception):
    pass


class HelpText(Result):
    """`--help` with `--json`: the usage as one JSON document, as every other answer."""
    command: str
    usage: str


def _print_help(parser: argparse.ArgumentParser, as_json: bool, file) -> None:
    """JSON only where `--json` is this parser's own flag (not `windtunnel`'s output path)."""
    if as_json and parser.get_default("json") in (False, argparse.SUPPRESS):     # a flag of its own
        _emit(HelpText(command=parser.prog, usage=parser.format_help()), True, sys.stdout, sys.stderr, None)
    else:
        argparse.ArgumentParser.print_help(parser, file)


class _Parser(argparse.ArgumentParser):
    json_help = False          # main() sets it for a command line with --json

    def error(self, message):
        raise _ArgumentError(message)

    def print_help(self, file=None):
        _print_help(self, _Parser.json_help, file)


class _HostParser(argparse.ArgumentParser):
    """Our parsers inside Hermes' (which parses the command line itself): with --json a bad
    argument is one JSON document too, as in the standalone tool; without, argparse's usage.
    An argument no parser of ours knows is refused here, not left to Hermes' own parser."""
    said = False            # Hermes parses a failed command line twice: one document, not two

    def error(self, message):
        if "--json" in sys.argv[1:]:
            if not _HostParser.said:
                _HostParser.said = True
                _emit(ErrorResult(error=f"bad arguments: {message}", code="bad_arguments"), True,
                      sys.stdout, sys.stderr, None)
            sys.exit(EXIT_ERROR)
        argparse.ArgumentParser.error(self, message)

    def print_help(self, file=None):
        _print_help(self, "--json" in sys.argv[1:], file)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = argparse.ArgumentParser.parse_known_args(self, args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser(prog: str = render.PROG) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description="chronos-git: reversible, journaled tool calls (shadow git store).")
    configure(p)
    return p


def dispatch(args: argparse.Namespace, *, loaded: settings_mod.Loaded | None = None,
             store: str | None = None, out=None, err=None, prog: str = render.PROG) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    as_json = bool(getattr(args, "json", False))
    command = getattr(args, "chronos_cmd", None)
    if command == "setup":
        return deps.run_setup(args.chronos_yes, args.chronos_json or as_json, out, err)
    if command == "windtunnel":           # throwaway stores of its own; the real one only gets its result
        from ..windtunnel.runner import run_from_args
        return run_from_args(args, store=getattr(args, "store", None) or store)
    stores = [s for s in (getattr(args, "store", None) or store,) if s]
    try:
        if not command:
            raise ValueError("no command given: try snapshot, log, diff, restore, run, write, journal status")
        cmd = _command(args)
        from_env = loaded is None             # the standalone tool: CHRONOS_GIT_SETTINGS rules this process
        loaded = loaded or settings_mod.load()
        if loaded.problems and command != "health":
            raise ValueError("the chronos-git configuration has problems, so nothing was done: "
                             + "; ".join(loaded.problems) + " (fix them; `chronos-git health` shows them too)")
        params = _params(cmd, args)
        reads_only = cmd.reads_only if isinstance(cmd.reads_only, bool) else bool(params.get(cmd.reads_only))
        svc = Chronos.get(args.store or store, loaded.settings, create=cmd.creates_store, reads_only=reads_only,
                          problems=loaded.problems)
        stores = [str(svc.store_dir)]
        svc.watch_profile(env_overrides=from_env)     # weakening edits of config.yaml are held
        given = getattr(args, "workspace", None)
        ctx = Context("cli", actor="operator-cli", user="operator-cli",
                      workspace=_workspace(given) if cmd.workspace else None,
                      progress=_progress(None if as_json else err), steps=_steps(None if as_json else err),
                      output=err if as_json else None, extra={"workspace_named": given is not None})
        with at_terminal():                    # an operator key's passphrase is asked here
            result = cmd.run(svc, ctx, params)
        rc = _exit_code(result)
    except Exception as exc:               # never a traceback for the operator
        result, rc, _ = envelope(exc, *stores)
    _emit(result, as_json, out, err, command, prog)
    return EXIT_ERROR if rc == 0 and result.status == "error" else rc


def _command(args):
    name = getattr(args, "chronos_command", None)
    if name is None:                       # a group word alone: `journal`, `remote`
        raise ValueError(f"{args.chronos_cmd} needs a subcommand: "
                         + ", ".join(c.words[1] for c in COMMANDS.groups()[args.chronos_cmd]))
    return COMMANDS.get(name)


def _params(cmd, args) -> dict:
    """The table's arguments from the parsed command line (a file the operator named is read)."""
    params = {}
    for a in cmd.args:
        if not a.cli:
            continue
        value = getattr(args, a.name, a.default)
        if value is not None and a.cli_read is not None:
            value = a.cli_read(value)
        params[a.name] = value
    return params


def _exit_code(result: Result) -> int:
    """A protected command's own exit code (`run`, `git`); 127 for a command that could not start."""
    if isinstance(result, RunResult):
        if result.exit_code is None:
            return 127
        return EXIT_NOT_RECORDED if result.recorded is False else result.exit_code
    if isinstance(result, GitRun):
        return result.exit_code
    return 0


def _progress(stream):
    def progress(what):
        label, unit = what or ("first snapshot", "files")
        return render.import_progress(stream, label, unit)
    return progress


def _steps(stream):
    return lambda what: render.steps(stream, what)


def _cwd() -> str:
    return settings_mod.current_folder("cd into the workspace or pass --workspace")


def _workspace(given: str | None) -> str:
    """--workspace made absolute; a relative one needs the current folder, which may be gone."""
    if given is None:
        return _cwd()
    if not given.strip():
        raise ValueError("--workspace is empty: name a folder, or leave it out for the current one")
    if os.path.isabs(given):
        return os.path.normpath(given)
    return os.path.normpath(os.path.join(settings_mod.current_folder(
        f"the workspace path {given!r} is relative: give an absolute path"), given))


def _emit(result: Result, as_json: bool, out, err, command: str | None, prog: str = render.PROG) -> None:
    if command == "git" and result.status == "ok":
        return                             # git's own output was the answer
    if as_json:
        out.write(dumps(result.wire()) + "\n")
        out.flush()
        return
    render.show(result, out, err, command=command, prog=prog)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # settings problems are logged for Hermes' log; here every command reports them itself
    # (an error naming them, or `health`), so Python's last-resort handler must not repeat them
    logging.getLogger("chronos_git").addHandler(logging.NullHandler())
    _Parser.json_help = "--json" in argv
    try:
        args = build_parser().parse_args(argv)
    except _ArgumentError as exc:
        _emit(ErrorResult(error=f"bad arguments: {exc}", code="bad_arguments"), "--json" in argv, sys.stdout, sys.stderr, None)
        return EXIT_ERROR
    try:
        return dispatch(args)
    except KeyboardInterrupt:             # Ctrl-C: one line, no traceback (every write is crash-safe)
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:               # `chronos-git log | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
