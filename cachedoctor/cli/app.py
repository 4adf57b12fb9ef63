"""The ``cachedoctor`` command line (Typer): the app, and :func:`run`, its testable entry point.

``run(argv, env)`` returns the exit code instead of exiting and takes an :class:`Environment`, so
tests can fake terminals. It is also the one place that turns a problem into "one line on stderr,
exit 2": a :class:`PathError` (``<path>: <message>``) or :class:`UsageError` raised by any command,
a usage error from click, and a failure to write that nothing caught closer to it (an
``OSError`` or SQLite error, see ``faults.py``), never a traceback and exit 1.

Each command's module is imported only when that command runs (or ``--help`` or a completion
names it: ``cli/lazy.py``), so ``--version`` imports a handful of modules. The command modules in
turn import only light things at module level; readers, layouts, the scan and rich are imported
inside the commands that need them, so ``explain``, ``quarantine list`` and ``settings show``
start fast too (tests hold both to it).
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # the same class, vendored by typer >= 0.2x; click's own for older typers
    from click import ClickException
else:
    try:
        from typer._click.exceptions import ClickException
    except ImportError:  # pragma: no cover - depends on the installed typer
        from click import ClickException

from cachedoctor import __version__
from cachedoctor.cli import environment
from cachedoctor.cli.coercion import fast_coercion
from cachedoctor.cli.environment import Environment
from cachedoctor.cli.help import plain
from cachedoctor.cli.lazy import LazyCommand, LazyGroup
from cachedoctor.cli.usage import sentence
from cachedoctor.errors import PathError, RankStopped, UsageError
from cachedoctor.exit_status import ExitStatus


class _Commands(LazyGroup):
    """The root group: every command, in the order ``cachedoctor --help`` lists them."""

    lazy = (
        LazyCommand(
            "scan",
            "cachedoctor.cli.scan",
            "scan",
            summary="Find broken, leaked, device-tagged, unsafe, missing, orphaned, stale and inconsistent cache files.",
        ),
        LazyCommand(
            "repair",
            "cachedoctor.cli.repair",
            "repair",
            summary="Fix what scan finds: lossless rewrites, quarantine, and recompute through an encoder.",
        ),
        LazyCommand(
            "recover",
            "cachedoctor.cli.recover",
            "recover",
            summary="After a crash: find temp files, damaged recent writes, held locks and interrupted repairs.",
        ),
        LazyCommand(
            "merge",
            "cachedoctor.cli.merge",
            "merge",
            summary="Join the parts of a scan split with --shard K/N into the one report a whole scan gives.",
        ),
        LazyCommand(
            "explain",
            "cachedoctor.cli.explain",
            "explain",
            summary="What a finding kind means, why it breaks training, what repair does and how to find it.",
        ),
        LazyCommand(
            "manifest",
            "cachedoctor.cli.manifest",
            "manifest_app",
            summary="Build a manifest of a dataset: per item its size, mtime, xxh3 and cache path(s).",
        ),
        LazyCommand(
            "quarantine",
            "cachedoctor.cli.quarantine",
            "quarantine_app",
            summary="List, restore or purge what repair moved aside.",
        ),
        LazyCommand(
            "settings",
            "cachedoctor.cli.settings",
            "settings_app",
            summary="cachedoctor's own settings: command line, CACHEDOCTOR_* variables, [tool.cachedoctor].",
        ),
        LazyCommand("config", "cachedoctor.cli.settings", "config_app", hidden=True),  # the old name of settings
    )


app = typer.Typer(
    cls=_Commands,
    name="cachedoctor",
    help="Audit and repair the on-disk latent and text-embed caches of diffusion-model trainers.",
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"cachedoctor {__version__}", file=environment.current().stdout)
        raise typer.Exit(ExitStatus.CLEAN)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Audit and repair the on-disk latent and text-embed caches of diffusion-model trainers."""


def run(argv: list[str] | None = None, env: Environment | None = None) -> int:
    """Run the CLI and return its exit code (an :class:`ExitStatus` value, 0, 1, 2 or 130, as a plain int)."""
    return int(_run(list(sys.argv[1:] if argv is None else argv), env or Environment()))


def _run(argv: list[str], env: Environment) -> int:
    token = environment.use(env)
    command = fast_coercion(plain(typer.main.get_command(app)))  # its own options: no pydantic either
    try:
        with contextlib.redirect_stdout(env.stdout):  # --help and --show-completion: click writes to sys.stdout
            rv = command.main(args=argv, prog_name="cachedoctor", standalone_mode=False)
        code = int(rv) if isinstance(rv, int) else ExitStatus.CLEAN
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        code = ExitStatus.INTERRUPTED
    except PathError as exc:
        env.error(f"{exc.path}: {exc.message}")
        return ExitStatus.ERROR
    except UsageError as exc:
        env.error(str(exc))
        return ExitStatus.ERROR
    except RankStopped as exc:  # one rank of a split job prints the line, every rank exits 2
        if exc.line:
            env.error(exc.line)
        return ExitStatus.ERROR
    except ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `cachedoctor`: show the help
            print(exc.format_message(), file=env.stdout)
            return ExitStatus.CLEAN
        env.error(sentence(exc, argv, command))
        return ExitStatus.ERROR
    except SystemExit as exc:  # shell completion (its script, a completion, --install-completion) ends so
        code = exc.code if isinstance(exc.code, int) else ExitStatus.CLEAN if exc.code is None else ExitStatus.ERROR
    except KeyboardInterrupt:
        code = ExitStatus.INTERRUPTED
    except BrokenPipeError:  # the reader of stdout went away (`| head`): __main__ ends quietly
        raise
    except Exception as exc:  # the safety net of the fault model (faults.py): OSError, SQLite
        from cachedoctor.faults import last_resort
        from cachedoctor.lifetime import caused_by_interrupt

        line = last_resort(exc)
        if caused_by_interrupt(exc):
            code = ExitStatus.INTERRUPTED
        elif line is None:
            raise  # a bug: the traceback is what a report needs
        else:
            env.error(line)
            return ExitStatus.ERROR
    finally:
        environment.release(token)
    if code == ExitStatus.INTERRUPTED:  # typer hands Ctrl-C back as 130, returned or raised
        env.error(env.interrupted)
    return code


__all__ = ["app", "run"]
