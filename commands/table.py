"""What a command is, for every surface at once.

A `Command` names a service operation once: its arguments (`Arg`), whether only an operator
may run it, whether the model sees it as a tool, its HTTP route, the words `/chronos` knows it
by, and the result type (cli/render.py renders by result type; the API declares it as the
response model).  The surfaces build themselves from the table (commands/entries.py):
cli/main.py its parser and dispatch, hermes/slash.py `/chronos`, hermes/tools.py the model's
tools, api/routes/commands.py the routes.  What differs between surfaces (a default, a name,
who the actor is) is declared here, next to the argument, so no surface re-decides it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Arg:
    """One argument.  `kind`: str | int | bool (default False) | maybe (a bool whose absence,
    None, means "as the settings say") | names (paths in the workspace; `_b64` twins over HTTP)
    | words (a list of plain strings) | json (an object; HTTP only) | remainder (the rest of a
    command line; CLI only)."""
    name: str                              # the key `run` reads, and the JSON field by default
    kind: str = "str"
    help: str = ""
    default: Any = None
    required: bool = False
    positional: bool = False               # CLI: positional (else an option)
    nargs: str | None = None               # CLI positional: "?" or "*"
    flags: tuple[str, ...] = ()            # CLI spellings (default: --name-with-dashes)
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    ge: int | None = None                  # bounds of an int (the CLI: at least `ge`)
    le: int | None = None
    cli: bool = True                       # offered on the command line
    http: str | None = None                # the HTTP field's name, when not `name`; "-": not over HTTP
    http_default: Any = None               # over HTTP, when it differs from `default`
    model: str | None = None               # the model tool's parameter name; None: not offered
    model_help: str | None = None
    model_default: Any = None              # for the model, when it differs from `default`
    model_le: int | None = None            # the model's answers are clamped, not refused
    model_required: bool | None = None     # for the model, when it differs from `required`
    model_also: tuple[str, ...] = ()       # older parameter names the model may still send
    cli_read: Callable[[str], Any] | None = None   # the CLI reads what the operator named (a file)

    def __post_init__(self):
        if self.kind == "bool" and self.default is None:
            object.__setattr__(self, "default", False)

    @property
    def http_name(self) -> str | None:
        return None if self.http == "-" else (self.http or self.name)


@dataclass(frozen=True)
class Http:
    """Its route.  GET takes the arguments as query (or `{name}` path) parameters; POST takes
    a JSON body, the model named `body`.  `conflict`: an answer that is not ok is a 409."""
    method: str
    path: str
    body: str | None = None
    conflict: bool = False
    also_query: tuple[str, ...] = ()       # POST: booleans still taken as query parameters (deprecated)
    summary: str | None = None
    workspace: bool = True                 # False: the route names no workspace though the command takes one
    html: bool = False                     # the answer is an HTML page (`run` returns its text), not JSON


@dataclass(frozen=True)
class ModelTool:
    name: str
    description: str


@dataclass(frozen=True)
class Command:
    name: str                              # "log", "journal verify"
    help: str
    run: Callable[[Any, Context, dict], Any]
    result: Any                            # the result type (or a union), the API's response model
    args: tuple[Arg, ...] = ()
    workspace: str | None = "required"     # "required" | "optional" (health over HTTP) | None
    operator_only: bool = False            # an operator act: never a model tool
    creates_store: bool = True             # False: answers about a store that is not there without making it
    reads_only: bool | str = False         # only reads the journal (a str: when that bool argument is set),
                                           # so a mistyped --store is not answered with a new, empty store
    cli: bool = True
    cli_aliases: tuple[str, ...] = ()      # older spellings of the last word, still taken
    slash: tuple[str, ...] = ()            # the words `/chronos` knows it by
    slash_args: tuple[str, ...] = ()       # `/chronos WORD A B...`: the Args the words fill, in order
                                           # ("evidence*": the rest of the words, joined)
    model: ModelTool | None = None
    http: Http | None = None
    description: str | None = None         # the CLI's longer --help text
    confirm: bool = False                  # changes files: `/chronos` previews it, `/chronos confirm` runs it

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.name.split())

    def __post_init__(self):
        if self.operator_only and self.model is not None:
            raise ValueError(f"{self.name}: an operator act is never offered to the model")


@dataclass
class Context:
    """Who asks, from where.  `actor` is journaled with an operator act; `user` with a
    restore (a person, or the model through the approval prompt)."""
    surface: str                           # "cli" | "slash" | "model" | "http"
    actor: str
    user: str
    workspace: str | None = None
    session_id: str | None = None
    progress: Callable | None = None       # CLI: progress(label, unit) -> a context manager
    steps: Callable | None = None          # CLI: steps(what) -> a context manager
    output: Any = None                     # where a protected command's own output goes
    extra: dict = field(default_factory=dict)


class Table:
    """The commands, found by their words."""

    def __init__(self, commands: list[Command]):
        self.commands = tuple(commands)
        self._by_words = {c.words: c for c in commands}
        if len(self._by_words) != len(commands):
            raise ValueError("two commands with one name")

    def __iter__(self):
        return iter(self.commands)

    def get(self, name: str) -> Command:
        return self._by_words[tuple(name.split())]

    def find(self, words: tuple[str, ...]) -> Command | None:
        return self._by_words.get(tuple(words))

    def groups(self) -> dict[str, list[Command]]:
        """Commands of two words, by their first ("journal", "remote")."""
        out: dict[str, list[Command]] = {}
        for c in self.commands:
            if len(c.words) == 2:
                out.setdefault(c.words[0], []).append(c)
        return out

    def top_words(self) -> list[str]:
        seen: list[str] = []
        for c in self.commands:
            if c.cli and c.words[0] not in seen:
                seen.append(c.words[0])
        return seen
