"""chronos-git: a Hermes Agent plugin that makes every tool call reversible,
accountable and recoverable after a crash.

Hermes imports this directory as package `hermes_plugins.chronos_git`; pip
maps the same tree onto `chronos_git`.  Everything heavy is imported lazily
inside `register()` so that loading the plugin costs nothing.
"""

__version__ = "0.1.0"
PLUGIN_KEY = "chronos-git"


def register(ctx):
    """Hermes entry point: cheap, idempotent, no I/O beyond reading config."""
    from .hermes_glue import register as _register
    return _register(ctx)
