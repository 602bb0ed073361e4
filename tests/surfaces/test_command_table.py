"""The command table (commands/) is the one place a command is declared: the CLI parser, the
model's tools, `/chronos` and the HTTP routes are built from it, and a new entry reaches every
surface it names with no other edit."""
from __future__ import annotations

import argparse

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from chronos_git.api.deps import Deps
from chronos_git.api.routes import commands as routes
from chronos_git.cli import main as cli_main
from chronos_git.commands import COMMANDS, Arg, Command, Http, ModelTool, Table
from chronos_git.hermes import slash, tools
from chronos_git.service import results as r


class Pong(r.Result):
    said: str
    times: int


def _pong(svc, ctx, p):
    return Pong(said=f"{p['word']} from {ctx.surface} as {ctx.actor}", times=p["times"])


PING = Command("ping", "answer with the word", _pong, Pong, (
    Arg("word", positional=True, required=True, model="word", model_help="What to say."),
    Arg("times", "int", "how often", default=1, ge=1, le=5, model="times"),
), workspace=None, slash=("ping",), slash_args=("word", "times"),
    model=ModelTool("chronos_ping", "Say a word back."), http=Http("POST", "/ping", body="PingRequest"))


def _subparsers(parser) -> dict:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices


def test_a_new_entry_reaches_every_surface_it_names():
    table = Table([*COMMANDS, PING])
    # the CLI: its parser takes the command and its arguments
    parser = argparse.ArgumentParser()
    cli_main.configure(parser, table)
    args = parser.parse_args(["ping", "hello", "--times", "3", "--json"])
    assert args.chronos_command == "ping" and cli_main._params(table.get("ping"), args) == {"word": "hello",
                                                                                            "times": 3}
    # the model: a tool with the table's names, required and types
    schema = tools.schemas(table)["chronos_ping"]
    assert schema["parameters"]["required"] == ["word"]
    assert schema["parameters"]["properties"]["times"] == {"type": "integer"}
    # /chronos: the words fill the arguments in order, numbers checked
    assert slash.slash_params(PING, ["hi", "2"]) == {"word": "hi", "times": 2}
    with pytest.raises(ValueError, match="at least 1"):
        slash.slash_params(PING, ["hi", "0"])
    # HTTP: a route with a body model of that name, bounds enforced, the answer typed
    app = FastAPI()
    app.include_router(routes.router(Deps(lambda: None), table))
    client = TestClient(app)
    ok = client.post("/ping", json={"word": "hey", "times": 2})
    assert ok.status_code == 200 and ok.json()["said"] == "hey from http as operator (HTTP API)"
    assert client.post("/ping", json={"word": "hey", "times": 9}).status_code == 400
    assert client.post("/ping", json={"word": "hey", "tmies": 2}).status_code == 400      # unknown field
    assert "PingRequest" in app.openapi()["components"]["schemas"]
    assert "POST /ping" in routes.endpoints(table)


def test_the_surfaces_offer_exactly_the_tables_commands():
    sub = _subparsers(cli_main.build_parser())
    assert set(sub) == {*COMMANDS.top_words(), *cli_main.LOCAL}
    journal = _subparsers(sub["journal"])
    assert {c.words[1] for c in COMMANDS.groups()["journal"]} | {"checkpoint"} == set(journal)
    assert set(tools.SCHEMAS) == {c.model.name for c in COMMANDS if c.model}
    doc = FastAPI(routes=routes.router(Deps(lambda: None)).routes).openapi()
    served = {f"{m.upper()} {path}" for path, ops in doc["paths"].items() for m in ops}
    assert served == set(routes.endpoints())


def test_an_operator_act_is_never_a_model_tool():
    for cmd in COMMANDS:
        if cmd.operator_only:
            assert cmd.model is None, cmd.name
    with pytest.raises(ValueError, match="never offered to the model"):
        Command("x", "x", _pong, Pong, operator_only=True, model=ModelTool("chronos_x", "x"))
    assert {c.name for c in COMMANDS if c.operator_only} >= {"journal resolve", "journal recover", "settings",
                                                            "capture", "operator-key", "journal countersign"}
