"""``cachedoctor quarantine list|restore|purge s3://bucket/prefix``: the quarantine of a remote
cache (``repair/remote_quarantine.py``), printed as ``quarantine.py`` prints a local one."""

from __future__ import annotations

from cachedoctor.cli.environment import current
from cachedoctor.errors import PathError
from cachedoctor.exit_status import ExitStatus
from cachedoctor.repair.run_ids import resolve_run
from cachedoctor.report.text import human_size
from cachedoctor.stores.interface import Location, Store
from cachedoctor.stores.s3 import S3Settings


def _open(url: str, s3: S3Settings) -> tuple[Store, Location]:
    from cachedoctor.repair.remote_flow import one_prefix, where
    from cachedoctor.stores.connect import store_for

    store = store_for(one_prefix([url]), s3)
    return store, where(store, url)[0]


def remote_list(url: str, s3: S3Settings, run: str | None = None, every: bool = False) -> int:
    """A summary per run, or with ``run`` (an id, a unique prefix, ``latest``) or ``every`` one line per file."""
    from cachedoctor.repair.remote_quarantine import list_remote_runs
    from cachedoctor.report.quarantine_text import MORE, write_runs

    env = current()
    store, location = _open(url, s3)
    runs = list_remote_runs(store, location)
    if run is not None:
        run_id = resolve_run(run, (r.run.run_id for r in runs), location.url)
        runs, every = [r for r in runs if r.run.run_id == run_id], True
    if not runs:
        print(f"no quarantine at or below {location.url}", file=env.stdout)
        return ExitStatus.CLEAN
    write_runs([found.run for found in runs], "", every, env.width, env.stdout)
    if not every:
        print(env.wrap(MORE), file=env.stdout)
    return ExitStatus.CLEAN


def _found(store: Store, location: Location, given: str):  # type: ignore[no-untyped-def]
    """The run ``given`` names (an id, a unique prefix, ``latest``: ``run_ids.py``, as locally)."""
    from cachedoctor.repair.remote_quarantine import list_remote_runs

    runs = list_remote_runs(store, location)
    run_id = resolve_run(given, (r.run.run_id for r in runs), location.url)
    found = next((r for r in runs if r.run.run_id == run_id), None)
    if found is None:
        raise PathError(location.url, f"no quarantine run {run_id!r} here; see `cachedoctor quarantine list`")
    return found


def remote_restore(url: str, run_id: str, force: bool, yes: bool, s3: S3Settings) -> int:
    from cachedoctor.cli.consent import agreed, require_someone_to_ask
    from cachedoctor.repair.journal import new_run_id
    from cachedoctor.repair.remote_restore import restore_remote

    env = current()
    store, location = _open(url, s3)
    found = _found(store, location, run_id)
    run_id = found.run.run_id  # the id a prefix or `latest` named
    require_someone_to_ask(env, yes, "restoring", f"{run_id} in {location.url}", "add --yes to restore")
    question = f"Put {len(found.run.files)} file(s) back (what is there now is quarantined first)? [y/N] "
    if not agreed(env, yes, question):
        raise PathError(location.url, "not restored; pass --yes to restore without asking")
    aside = f"restore-{new_run_id()}"
    done, replaced = restore_remote(store, location, found, aside, force)
    line = f"restored {len(done)} file(s) from {run_id} in {location.url}"
    if replaced:
        line += f"; the objects they replaced are in quarantine run {aside}"
    print(env.wrap(line), file=env.stdout)
    return ExitStatus.CLEAN


def remote_purge(url: str, run_id: str, yes: bool, s3: S3Settings) -> int:
    from cachedoctor.cli.consent import agreed, require_someone_to_ask
    from cachedoctor.repair.remote_restore import purge_remote

    env = current()
    store, location = _open(url, s3)
    found = _found(store, location, run_id)
    run_id = found.run.run_id  # the id a prefix or `latest` named
    require_someone_to_ask(env, yes, "purging", f"{run_id} in {location.url}", "add --yes to delete it for good")
    files, size = len(found.run.files), found.run.size
    if not agreed(env, yes, f"Delete {files} file(s), {human_size(size)}, for good? [y/N] "):
        raise PathError(found.run.folder, "not purged; pass --yes to delete it without asking")
    freed = purge_remote(store, location, found)
    print(f"purged {run_id}: {human_size(freed)} freed", file=env.stdout)
    return ExitStatus.CLEAN


__all__ = ["remote_list", "remote_purge", "remote_restore"]
