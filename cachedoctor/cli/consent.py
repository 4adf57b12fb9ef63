"""Whether a command that changes files may go ahead: the one rule ``repair``, ``recover
--apply``, ``quarantine restore`` and ``quarantine purge`` (local and s3://) share.

``--yes`` is consent. Without it, a person is asked on a terminal. Without a terminal on stdin
(a cron job, a SLURM script, ``</dev/null``) there is nobody to ask, and silence is not consent:
the command stops before it changes anything (before it scans, takes a lock or writes the state
database) with one line naming what to add, exit 2. It used to go ahead: ``repair CACHE
</dev/null`` quarantined and rewrote files nobody had agreed to.
"""

from __future__ import annotations

from typing import Any

from cachedoctor.cli.environment import Environment
from cachedoctor.errors import UsageError


def require_someone_to_ask(env: Environment, yes: bool, doing: str, where: str, how: str) -> None:
    """Raise :class:`UsageError` (one line, exit 2) when neither ``--yes`` nor a terminal on stdin
    can say yes: ``not {doing} {where}: no terminal to ask on; {how}``. Call it before any work."""
    if yes or env.stdin_isatty:
        return
    raise UsageError(f"not {doing} {where}: no terminal to ask on; {how}")


def described(settings: Any, targets: list[str]) -> str:
    """What ``repair`` or ``recover`` was given, for the refusal: the targets, else the dataset's file."""
    given = settings.config.value or settings.kohya_config.value or settings.manifest.value
    return " ".join(targets) or f"the caches of {given}"


def agreed(env: Environment, yes: bool, question: str) -> bool:
    """``--yes``, or a yes to ``question`` on the terminal (no terminal, or anything else: no)."""
    return yes or (bool(env.stdin_isatty) and env.ask(question))


__all__ = ["agreed", "described", "require_someone_to_ask"]
