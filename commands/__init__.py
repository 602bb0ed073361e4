"""The command table: every command once, with its arguments and the surfaces it is on.
cli/, hermes/ and api/ build themselves from it (commands/table.py says how)."""
from .entries import COMMANDS
from .table import Arg, Command, Context, Http, ModelTool, Table

__all__ = ["COMMANDS", "Arg", "Command", "Context", "Http", "ModelTool", "Table"]
