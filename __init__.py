"""chronos-git: a Hermes Agent plugin that makes every tool call reversible,
accountable and recoverable after a crash.

Hermes imports this directory as package `hermes_plugins.chronos_git`; pip
maps the same tree onto `chronos_git`.  Everything heavy is imported lazily
inside `register()` so that loading the plugin costs nothing.
"""

import logging

__version__ = "0.1.0"
PLUGIN_KEY = "chronos-git"

# The registrations that make up protection (and that the OFF shell would also make).
_STAGED = frozenset({"register_tool", "register_hook", "register_middleware", "register_command",
                     "register_cli_command"})


class _Staged:
    """Holds back the full plugin's registrations until its register() has returned.

    If it raises halfway (an ImportError deep inside, say), nothing of it is live
    and the OFF shell is registered alone, instead of half a plugin that looks on.
    Every other attribute (and everything after commit) goes straight to the host.
    Should the host itself refuse a replayed registration, those before it stay
    live and the shell is added on top: the user is still told protection is OFF.
    """

    def __init__(self, ctx):
        self._ctx, self._calls, self._live = ctx, [], False

    def __getattr__(self, name):
        attr = getattr(self._ctx, name)
        if name in _STAGED and not self._live and callable(attr):
            return lambda *a, **k: self._calls.append((attr, a, k))
        return attr

    def commit(self) -> None:
        self._live = True
        for fn, a, k in self._calls:
            fn(*a, **k)


def register(ctx):
    """Hermes entry point.  Never raises, never silently off: either full protection
    registers, or a stdlib shell that tells the user and the model it is OFF, why,
    and that `hermes chronos-git setup` fixes it.  Cheap: no subprocess, no network."""
    log = logging.getLogger("chronos_git")
    try:
        from .hermes import shell
        reason, fix = shell.protection_problem(), shell.SETUP_COMMAND
        if reason is None and (reason := shell.host_problem(ctx)):
            fix = shell.UPDATE_HERMES
    except Exception as exc:  # stdlib only; should not happen, but register() must not raise
        log.warning("chronos-git: dependency check failed: %r", exc)
        return None
    if reason is None:
        staged = _Staged(ctx)
        try:
            from .hermes.plugin import register as _register
            result = _register(staged)
            staged.commit()
            return result
        except Exception as exc:
            log.warning("chronos-git: the full plugin failed to register; protection is OFF", exc_info=True)
            reason = f"the full plugin failed to load ({type(exc).__name__}: {exc}; see errors.log)"
            fix = shell.UPDATE_PLUGIN
    try:
        shell.register_shell(ctx, reason, fix)
    except Exception as exc:
        log.warning("chronos-git: could not register the OFF shell: %r", exc)
    return None
