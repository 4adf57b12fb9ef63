"""``cachedoctor explain [KIND]``: the texts of one finding kind, or the list of all of them.

Reads the checks' texts through :mod:`cachedoctor.explain`, which never imports the checks (they
pull in every format reader): explaining a kind must stay instant.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cachedoctor.cli.completion import complete_kind
from cachedoctor.cli.environment import current
from cachedoctor.cli.options import ColorChoice, ColorOption
from cachedoctor.errors import UsageError
from cachedoctor.exit_status import ExitStatus


def explain(
    kind: Annotated[
        str | None,
        typer.Argument(
            help="A finding kind (batch-leak or batch_leak); none lists them all.",
            show_default=False,
            metavar="KIND",
            autocompletion=complete_kind,
        ),
    ] = None,
    color: ColorOption = ColorChoice.AUTO,
) -> int:
    """What a finding kind means, why it breaks training, what repair does and how to find it."""
    from cachedoctor.explain import UnknownKind, listing
    from cachedoctor.explain import explain as render

    env = current()
    env.configure(color=color)
    if kind is None:
        print(listing(env.width), file=env.stdout)
        return ExitStatus.CLEAN
    try:
        text = render(kind, env.width)
    except UnknownKind as exc:
        raise UsageError(str(exc)) from None
    print(text, file=env.stdout)
    return ExitStatus.CLEAN


__all__ = ["explain"]
