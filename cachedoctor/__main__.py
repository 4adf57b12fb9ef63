"""Entry point of the console script and ``python -m cachedoctor``.

Kept tiny on purpose: Ctrl-C while the CLI's modules are still importing gets the same one
line and exit code 130 as Ctrl-C during a scan, never a traceback.
"""

import sys

_INTERRUPTED = "cachedoctor: error: interrupted; nothing was changed"


def main() -> None:
    try:
        from cachedoctor.cli import run
    except BaseException as exc:  # Ctrl-C, bare or wrapped by an import (see lifetime.reraise_interrupt)
        from cachedoctor.lifetime import caused_by_interrupt

        if not caused_by_interrupt(exc):
            raise
        from cachedoctor.exit_status import ExitStatus

        print(_INTERRUPTED, file=sys.stderr)
        sys.exit(ExitStatus.INTERRUPTED)
    sys.exit(run())


if __name__ == "__main__":
    main()
