"""The ``xmask`` command line: parse -> load config -> call one function -> render.

One module per command (``prepare``, ``train``, ``evaluate``, ``ablate``,
``explain``, ``export``, ``tune``, ``env``, ``presets``, ``runs``, ``cache``), each holding the typer function (argument
wiring and the library call) and ``register(app)``; its human output is one
function in :mod:`xmask_cli.render`. :mod:`xmask_cli.cli.app` holds the app,
the global options and the error handling; :mod:`xmask_cli.cli.options` the
option types every command shares and the option groups (``DataOptions``:
``--data-root --cache-dir --offline``; ``RunOptions``: ``--preset --dataset --set``).

A new command ``xmask foo``: write ``xmask_cli/cli/foo.py`` with the function
(decorate nothing; declare shared options with the types and groups of
:mod:`~xmask_cli.cli.options` and end with
``output_for(ctx, fmt).result(payload, lambda con: render.human(con, ...))``)
and ``register(app)`` (``app.command(epilog=EXIT_HELP)(handle_errors(options(foo)))``),
its renderer in ``xmask_cli/render/foo.py``, and add the module to
:data:`COMMANDS` below, where its place sets its place in ``xmask --help``.
(``tune`` renders through ``xmask_cli.tune.outputs.human_report``, beside the
files that module writes.)
"""
from __future__ import annotations

from xmask_cli.cli import ablate, cache, env, evaluate, explain, export, prepare, presets, runs, train, tune
from xmask_cli.cli.app import app, handle_errors, main

__all__ = ["COMMANDS", "app", "handle_errors", "main"]

#: Every command module, in the order ``xmask --help`` lists them (command groups come after single commands).
COMMANDS = (prepare, train, evaluate, ablate, explain, export, tune, env, presets, runs, cache)

for _module in COMMANDS:
    _module.register(app)
