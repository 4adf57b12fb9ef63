"""Entry point of the console script and ``python -m cachedoctor``.

Kept tiny on purpose: Ctrl-C while the CLI's modules are still importing gets the same one
line and exit code 130 as Ctrl-C during a scan, never a traceback. A reader that stops early
(``cachedoctor scan ... | head``) closes the pipe: that is the reader's choice, not an error, so
the rest of the output goes nowhere, quietly, as ``cat`` and ``grep`` do.
"""

import os
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
    try:
        code = run()
        sys.stdout.flush()  # inside the try: a closed pipe shows up here at the latest
    except BrokenPipeError:
        _silence_stdout()
        code = 1  # the run was cut short; the reader has what it wanted
    sys.exit(code)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again (Python's
    documented recipe for SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


if __name__ == "__main__":
    main()
