"""The ``cachedoctor`` command line: :data:`app` (Typer) and :func:`run` (the testable entry).

One module per command (``scan``, ``repair``, ``recover``, ``quarantine``, ``explain``,
``manifest``, ``settings``), the shared options in ``options`` and the runs of them several
commands take in ``option_groups``, the injected terminal in ``environment``; ``app`` wires them
together and ``lazy`` imports a command's module only when it runs. The package parses, resolves the settings once and
calls the core (``cachedoctor.api``, ``cachedoctor.repair``); it decides nothing itself.
"""

from cachedoctor.cli.app import app, run

__all__ = ["app", "run"]
