"""A manifest: the generic way to describe any trainer's cache, and cachedoctor's own record.

One row per cache file, as JSON Lines or CSV with a header. ``source`` and ``cache`` are
required; ``shape`` (``[4,128,128]`` or ``4x128x128``), ``latent_hw``, ``key``, ``xxh3`` (of the
source, ``xxh3_128`` hex), ``size``, ``mtime_ns`` and ``track`` and ``shared`` are optional; ``track: false`` says the source's changes do not make the
entry stale (a caption taken from a file name), ``shared: true`` that several rows may name the
same cache file (an embed named after its caption) without a collision. Relative paths start at the
manifest's folder. With ``xxh3`` the staleness check is exact: a source whose size and mtime
still match the row is taken as unchanged, any other is hashed and compared.

``s3://`` URLs may stand for either column (a SimpleTuner ``aws`` dataset). A remote source's
fingerprint is its ``etag`` column, compared with what one LIST per source bucket shows
(``_manifest_remote.py``: exact, and no GET of any image); a row without one is judged by the
object's LastModified. The cache objects are found by the scan's own LIST of their folders.

A recompute writes the latent under the row's ``key`` (else in the healthy peer's shape) at its
``latent_hw`` or ``shape``, in the peer's container and dtypes, transformed as its ``scaling``
column says: ``raw`` (the VAE's output as it is), ``vae`` (``(z - shift) * factor`` with the VAE
config's factors) or ``FACTOR[,SHIFT]``. A latent row without it is not recomputed: how the
trainer scaled its latents is not something to guess (a 5.5x unscaled latent among scaled ones
trains wrong without a word).
"""

from __future__ import annotations

import csv
import json
import os
import posixpath
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, TextIO

from cachedoctor.layouts import _recompute
from cachedoctor.layouts.interface import DatasetPlan, Expected, Layout, LayoutError, LayoutOptions, SpecOrWhy, Template

REQUIRED = ("source", "cache")
NO_SCALING = (
    "the manifest does not say how its latents are scaled; add a scaling column: raw (the VAE's output as it "
    "is), vae ((z - shift) * factor, the VAE config's factors) or FACTOR[,SHIFT]"
)
_HASH_CHUNK = 1 << 20
#: Threads hashing sources: reads overlap on network file systems; xxh3 itself is far faster.
HASH_WORKERS = min(8, (os.cpu_count() or 1) * 2)


class ManifestLayout(Layout):
    name = "manifest"
    summary = "a manifest (.jsonl or .csv): one row per cache file naming its source"

    def detect(self, targets: list[str], options: LayoutOptions) -> str | None:
        return f"--manifest {options.manifest}" if options.manifest else None

    def plan(self, targets: list[str], options: LayoutOptions) -> DatasetPlan:
        # (here: the object stores' interface is imported by a scan with a manifest only)
        from cachedoctor.layouts._manifest_remote import etag_stale, is_remote, list_sources, outermost

        if not options.manifest:
            raise LayoutError(targets[0] if targets else ".", "the manifest layout needs --manifest FILE")
        manifest = os.path.abspath(options.manifest)
        rows = list(read_rows(manifest))
        base = os.path.dirname(manifest)
        caches = [_abs(base, r["cache"]) for _, r in rows]
        roots = [os.path.abspath(t) for t in targets] or sorted(
            {os.path.dirname(c) for c in caches if not is_remote(c)}
        )
        # s3:// cache folders are always listed (once each): a local target cannot settle them
        roots += outermost(posixpath.dirname(c) for c in caches if is_remote(c))
        plan = DatasetPlan("manifest", roots, source_suffixes=())
        remote = sorted({s for _, r in rows if is_remote(s := _abs(base, r["source"]))})
        listed = list_sources(remote, lambda bucket: options.s3) if remote else {}
        stale = _stale_by_content(base, rows)
        for (line, row), cache, reason in zip(rows, caches, stale, strict=False):
            source = _abs(base, row["source"])
            if is_remote(source):
                info = listed.get(source)
                exists, mtime = info is not None, None if info is None else info.mtime_ns
                if info is not None and row.get("etag"):
                    reason = etag_stale(str(row["etag"]), info)
            else:
                st = _stat(source)
                exists, mtime = st is not None, None if st is None else st.st_mtime_ns
            recorded = row.get("etag") if is_remote(source) else row.get("xxh3")
            plan.items += 1
            plan.add(
                Expected(
                    cache,
                    source,
                    str(row.get("role") or "latent"),
                    None if recorded or not _tracked(row) else mtime,
                    latent_hw=_hw(row.get("latent_hw"), manifest, line),
                    latent_key=row.get("key"),
                    shape=_dims(row.get("shape"), manifest, line, "shape"),
                    stale_reason=reason,
                    source_exists=exists,
                    shared=_flag(row, "shared", False),
                    hints=_scaling_hint(row.get("scaling"), manifest, line),
                )
            )
        return plan

    def recompute_spec(self, path: str, expected: Expected, template: Template | None) -> SpecOrWhy:
        if expected.role == "text":
            return _recompute.text_spec(expected, template, path)
        scaling = dict(expected.hints).get("scaling")
        if scaling is None:
            return None, NO_SCALING
        spec, why = _recompute.generic_latent_spec(expected, template, path)
        if spec is None or scaling == "raw":
            return spec, why
        if scaling == "vae":
            return replace(spec, scaled=True), None
        factor, _, shift = str(scaling).partition(",")
        return replace(spec, scaled=True, scaling=(float(factor), float(shift or 0.0))), None


def _scaling_hint(value: Any, manifest: str, line: int) -> tuple[tuple[str, str], ...]:
    """A row's ``scaling``: ``raw``, ``vae`` or ``FACTOR[,SHIFT]``, as a hint (none: not given)."""
    if value in (None, ""):
        return ()
    text = str(value).strip()
    if text not in ("raw", "vae"):
        try:
            [float(p) for p in text.split(",", 1)]
        except ValueError:
            raise LayoutError(
                manifest, f"line {line}: scaling {text!r} is not raw, vae or FACTOR[,SHIFT]; fix the row"
            ) from None
    return (("scaling", text),)


def read_rows(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` for each row; :class:`LayoutError` naming the line on bad input."""
    try:
        handle = open(path, encoding="utf-8", newline="")  # noqa: SIM115 (closed by the `with` below; open errors get their own message)
    except OSError as exc:
        raise LayoutError(path, f"cannot open the manifest ({exc.strerror or exc}); check the path") from None
    with handle:
        try:
            yield from _rows(handle, path)
        except (UnicodeDecodeError, csv.Error) as exc:
            why = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"not CSV ({exc})"
            raise LayoutError(
                path, f"{why}; a manifest is JSON lines or CSV in UTF-8, as `cachedoctor manifest build` writes it"
            ) from None


def _rows(handle: TextIO, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if path.lower().endswith(".csv"):
        reader = csv.DictReader(handle)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise LayoutError(path, f"line 1: the header has no '{missing[0]}' column; it needs source and cache")
        for n, row in enumerate(reader, start=2):
            yield n, _required(path, n, {k: v for k, v in row.items() if k is not None and v not in (None, "")})
        return
    for n, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LayoutError(path, f"line {n}: not JSON ({exc.msg}); each line must be one JSON object") from None
        except RecursionError:
            raise LayoutError(
                path, f"line {n}: JSON nested too deeply to read; each line must be one JSON object"
            ) from None
        except ValueError as exc:  # e.g. an integer too long to convert
            raise LayoutError(path, f"line {n}: not JSON ({exc}); each line must be one JSON object") from None
        if not isinstance(row, dict):
            raise LayoutError(path, f"line {n}: a JSON {type(row).__name__}, not an object")
        yield n, _required(path, n, row)


def _required(path: str, line: int, row: dict[str, Any]) -> dict[str, Any]:
    for column in REQUIRED:
        if not isinstance(row.get(column), str) or not row[column]:
            raise LayoutError(path, f"line {line}: no '{column}' column; every row needs source and cache")
    return row


def _tracked(row: dict[str, Any]) -> bool:
    return _flag(row, "track", True)


def _flag(row: dict[str, Any], column: str, default: bool) -> bool:
    value = row.get(column)
    if value in (None, ""):
        return default
    return str(value).lower() not in ("false", "0", "no")


def _dims(value: Any, path: str, line: int, column: str) -> tuple[int, ...] | None:
    if value in (None, ""):
        return None
    if isinstance(value, str):
        value = [v for v in value.replace(",", "x").replace(" ", "x").split("x") if v]
    try:
        dims = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise LayoutError(path, f"line {line}: '{column}' is {value!r}, not a list of sizes like 4x128x128") from None
    return dims


def _hw(value: Any, path: str, line: int) -> tuple[int, int] | None:
    """``latent_hw``: exactly two sizes (height and width of the latent)."""
    dims = _dims(value, path, line, "latent_hw")
    if dims is None:
        return None
    if len(dims) != 2:
        raise LayoutError(path, f"line {line}: 'latent_hw' is {value!r}, not two sizes like 128x96")
    return dims[0], dims[1]


def _abs(base: str, path: str) -> str:
    """A row's path: an ``s3://`` URL as it is, a relative local path from the manifest's folder."""
    from cachedoctor.layouts._manifest_remote import is_remote

    if is_remote(path):
        return path
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _stale_by_content(base: str, rows: list[tuple[int, dict[str, Any]]]) -> list[str | None]:
    """Per row, why its source no longer matches the recorded xxh3 (hashing only the changed)."""
    from cachedoctor.layouts._manifest_remote import is_remote

    def judge(row: dict[str, Any]) -> str | None:
        recorded = row.get("xxh3")
        if not recorded:
            return None
        source = _abs(base, row["source"])
        st = None if is_remote(source) else _stat(source)
        if st is None:
            return None  # gone (its entry is an orphan), or remote (judged by its ETag)
        if (
            row.get("size") is not None
            and row.get("mtime_ns") is not None
            and int(row["size"]) == st.st_size
            and int(row["mtime_ns"]) == st.st_mtime_ns
        ):
            return None
        actual = file_xxh3(source)
        if actual is not None and actual != str(recorded).lower():
            return f"the source's content changed since the manifest was written (xxh3 {actual[:12]}..., recorded {str(recorded)[:12]}...)"
        return None

    from concurrent.futures import ThreadPoolExecutor  # (here: a scan without a manifest does not import it)

    with ThreadPoolExecutor(max_workers=HASH_WORKERS) as pool:
        return list(pool.map(judge, (row for _, row in rows)))


def file_xxh3(path: str) -> str | None:
    """xxh3-128 of a file, streamed in 1 MiB blocks (flat memory), or ``None`` if unreadable."""
    import xxhash

    digest = xxhash.xxh3_128()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(_HASH_CHUNK):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()
