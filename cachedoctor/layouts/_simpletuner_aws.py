"""SimpleTuner's ``aws`` datasets: images and captions in an S3 bucket, caches in the bucket too.

Facts from SimpleTuner (bc8e6ab), which this plan follows so that an ``aws`` dataset gets the
same :class:`DatasetPlan` as a local one, with ``s3://bucket/key`` URLs for paths:

- The client: ``boto3.client("s3", key, secret, token, endpoint_url or region_name)``
  (``data_backend/aws.py:86-99``). SimpleTuner refuses a dataset without ``aws_bucket_name``,
  ``aws_endpoint_url`` and both keys (``data_backend/builders/aws.py:53-74``); cachedoctor needs
  the bucket and the endpoint (which server it was), and takes the keys from the config when
  given, else from the standard AWS chain (shared configs often have their keys removed).
- The items: ``S3DataBackend.list_files`` pages through the **whole bucket**, whatever
  ``aws_data_prefix`` says (``aws.py:254``: no ``Prefix``), keeping keys with an image
  extension; so does this plan (one paginated LIST per bucket, which also lists the captions,
  the bucket metadata and a cache kept in the same bucket: no other request per object).
- The VAE cache: with no ``image_embeds`` link the cache backend is the dataset's own bucket
  (``factory.py:3051-3058``, ``_configure_vae_cache``: ``cache_data_backend``), and
  ``cache_dir_vae`` stays a key prefix (``caching/vae.py:170-176`` makes only local ones
  absolute); missing, it is ``<output_dir>/cache/vae/<model_family>/<id>``
  (``factory.py:1460-1468``, ``4539-4541``). An entry's key is
  ``join(cache_dir_vae, dirname(key).replace(aws_data_prefix, "").lstrip("/"), sha256(stem).pt)``
  (``caching/vae.py:678-703``; ``hash_filenames`` is always on, ``factory.py:4224``).
- Bucket metadata: ``<aws_data_prefix>/aspect_ratio_bucket_metadata_<cache_file_suffix or id>.json``
  in the bucket (``factory.py:3126-3159``, written through the S3 backend), keyed by image key.
- Captions (``textfile``): ``splitext(key)[0] + ".txt"`` read from the bucket
  (``prompts.py:397-430``), split on newlines like a local one; ``filename``: the stem.
- An ``aws`` text_embeds dataset keeps its embeds under ``aws_data_prefix`` (else
  ``cache_dir``) in its own bucket (``factory.py:2466-2472``), named as local ones.

Staleness compares an item's ``LastModified`` with the cache entry's time, as mtimes locally.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from cachedoctor.layouts._images import is_image, stem
from cachedoctor.layouts._simpletuner_buckets import Bucket, sizes_from_metadata
from cachedoctor.layouts._simpletuner_names import embed_path, latent_name
from cachedoctor.layouts.interface import DatasetPlan, Expected, LayoutError

if TYPE_CHECKING:
    from cachedoctor.layouts._simpletuner_config import Backend
    from cachedoctor.stores.interface import ObjectInfo, Store
    from cachedoctor.stores.s3 import S3Settings

_CAPTION_LIMIT = 1 << 20  # a caption object larger than this is not a caption
_METADATA_LIMIT = 256 << 20  # bucket metadata of a few million images
_READERS = 16  # caption GETs in flight (I/O-bound: threads)


def settings_for(backend: Backend) -> S3Settings:
    """Where and as whom, from the dataset's config: its endpoint and region, its keys when it
    names them (``None`` fields: the standard AWS chain decides)."""
    from cachedoctor.stores.s3 import S3Settings

    raw = backend.raw

    def text(name: str) -> str | None:
        value = raw.get(name)
        return value if isinstance(value, str) and value else None

    region = text("aws_region_name")
    return S3Settings(
        endpoint_url=text("aws_endpoint_url"),
        region=None if region == "auto" else region,
        key=text("aws_access_key_id"),
        secret=text("aws_secret_access_key"),
        token=text("aws_session_token"),
    )


def bucket_url(backend: Backend, key: str = "") -> str:
    """``s3://<aws_bucket_name>/<key>`` (SimpleTuner's keys are used as they are: a leading ``/``
    stays part of the key)."""
    bucket = str(backend.raw.get("aws_bucket_name"))
    return f"s3://{bucket}/{key}" if key else f"s3://{bucket}"


def store_of(backend: Backend) -> Store:
    from cachedoctor.stores.connect import store_for

    return store_for(bucket_url(backend), settings_for(backend))


def text_home(backend: Backend) -> str | None:
    """Where a text_embeds dataset keeps its embeds: a local folder, or ``s3://`` for ``aws``."""
    if backend.kind != "aws":
        return backend.cache_dir
    return bucket_url(backend, backend.cache_dir) if backend.cache_dir else None


def list_bucket(backend: Backend) -> list[ObjectInfo]:
    """Every object in the dataset's bucket (one paginated LIST), or a one-line error naming it."""
    from cachedoctor.stores.interface import RemoteError, TransientError

    store = store_of(backend)
    url = bucket_url(backend)
    try:
        from cachedoctor.stores.interface import Location

        return list(store.list(Location.parse(url)))
    except RemoteError as exc:
        raise RemoteError(exc.path, f"dataset {backend.id!r}: {exc.message}") from None
    except TransientError as exc:
        raise LayoutError(url, f"dataset {backend.id!r}: listing the bucket kept failing ({exc}); try again") from None


def vae_prefix(backend: Backend, output_dir: str | None, family: str | None) -> str | None:
    """The VAE cache's key prefix in the bucket, SimpleTuner's default when the config has none."""
    if backend.cache_dir_vae:
        return backend.cache_dir_vae
    if output_dir and family:
        return os.path.join(output_dir, "cache", "vae", family, backend.id)
    return None


def expect_aws_backend(
    plan: DatasetPlan,
    backend: Backend,
    text_dir: str | None,
    family: str | None,
    output_dir: str | None,
) -> None:
    """Add the expected entries of one ``aws`` image dataset to ``plan``."""
    objects = list_bucket(backend)
    by_key = {info.key: info for info in objects}
    prefix = backend.instance_data_dir or ""
    vae = _vae_home(plan, backend, output_dir, family)
    sizes = _bucket_metadata(plan, backend, by_key)
    strategy = str(backend.raw.get("caption_strategy") or "filename")
    if text_dir and strategy not in ("textfile", "filename", "instanceprompt"):
        plan.notes.append(f"dataset {backend.id!r}: caption_strategy {strategy!r} is not compared")
    images = [info for info in objects if is_image(info.key)]
    outside = sum(1 for info in images if not info.key.startswith(prefix))
    if outside:
        plan.notes.append(
            f"dataset {backend.id!r}: {outside} image(s) in {bucket_url(backend)} lie outside aws_data_prefix "
            f"{prefix!r}; SimpleTuner lists the whole bucket, so they are part of this dataset"
        )
    captions = _captions(backend, by_key, images, strategy) if text_dir and family else {}
    instance = backend.raw.get("instance_prompt") if backend.raw.get("prepend_instance_prompt") else None
    no_caption = 0
    for info in images:
        plan.items += 1
        plan.remote_sources[info.url] = info
        image_stem = stem(info.key)
        if vae is not None:
            subfolders = posixpath.dirname(info.key).replace(prefix, "").lstrip("/")
            folder = posixpath.join(vae, subfolders) if subfolders else vae
            name = latent_name(image_stem)
            legacy = image_stem + ".pt"
            if _key(folder, legacy) in by_key and _key(folder, name) not in by_key:
                name = legacy
            hw, crop, pre_resize = sizes.get(info.key, (None, None, None))
            plan.add(
                Expected(
                    posixpath.join(folder, name),
                    info.url,
                    "latent",
                    info.mtime_ns,
                    latent_hw=hw,
                    crop=crop,
                    pre_resize=pre_resize,
                    # as listed: manifest build needs no LIST more; (z - shift) * factor, SimpleTuner's VAE cache
                    hints=(("etag", info.etag), ("size", info.size), ("scaling", "vae")),
                ),
                folder,
            )
        if text_dir is None or family is None:
            continue
        found = captions.get(info.key)
        if found is None:
            no_caption += 1
            continue
        texts, source, mtime = found
        for caption in texts:
            if instance:
                caption = f"{instance} {caption}"
            plan.add(Expected(embed_path(text_dir, caption, family), source, "text", mtime, shared=True, text=caption))
    if no_caption:
        plan.notes.append(
            f"dataset {backend.id!r}: {no_caption} image(s) have no caption object; their text embeds were not compared"
        )


def _key(folder_url: str, name: str) -> str:
    """The key of ``name`` in the cache folder ``s3://bucket/<prefix>`` (for the listing)."""
    return posixpath.join(folder_url.split("/", 3)[3] if folder_url.count("/") >= 3 else "", name)


def _vae_home(plan: DatasetPlan, backend: Backend, output_dir: str | None, family: str | None) -> str | None:
    if backend.raw.get("image_embeds"):
        plan.notes.append(
            f"dataset {backend.id!r} keeps its latents in the image_embeds dataset "
            f"{backend.raw.get('image_embeds')!r}; they were not compared"
        )
        return None
    key = vae_prefix(backend, output_dir, family)
    if key is None:
        plan.notes.append(
            f"dataset {backend.id!r} has no cache_dir_vae and its default needs output_dir and "
            "model_family; its latents were not compared"
        )
        return None
    home = bucket_url(backend, key.rstrip("/"))
    if home not in plan.roots:
        plan.roots.append(home)
    plan.remote_settings[home] = settings_for(backend)
    return home


def _bucket_metadata(plan: DatasetPlan, backend: Backend, by_key: dict[str, ObjectInfo]) -> dict[str, Bucket]:
    """Image key -> its bucket's latent size and recorded preprocessing, from the metadata
    SimpleTuner keeps in the bucket (one GET, when the listing shows it)."""
    import json

    from cachedoctor.stores.interface import ObjectChanged, ObjectGone, TransientError

    suffix = str(backend.raw.get("cache_file_suffix") or backend.id)
    base = posixpath.join(backend.instance_data_dir or "", "aspect_ratio_bucket_metadata")
    key = str(PurePosixPath(f"{base}_{suffix}.json"))  # SimpleTuner keeps it as a Path (base.py:130-133)
    info = by_key.get(key)
    if info is None:
        return {}
    try:
        data = store_of(backend).read_whole(info, _METADATA_LIMIT)
        metadata = json.loads(data)
    except (ObjectGone, ObjectChanged, TransientError, ValueError, RecursionError) as exc:
        plan.notes.append(f"{info.url}: unreadable bucket metadata ({exc}); latent sizes were not compared")
        return {}
    return sizes_from_metadata(metadata, "")


Captions = dict[str, tuple[list[str], str, "int | None"]]


def _captions(backend: Backend, by_key: dict[str, ObjectInfo], images: list[ObjectInfo], strategy: str) -> Captions:
    """Image key -> (its captions, the object they come from, that object's time), as
    SimpleTuner derives them; caption objects are read by a small pool of GETs."""
    raw = backend.raw
    if strategy == "filename":
        return {i.key: ([stem(i.key).replace("_", " ")], i.url, None) for i in images}
    if strategy == "instanceprompt" and isinstance(raw.get("instance_prompt"), str):
        return {i.key: ([raw["instance_prompt"]], i.url, None) for i in images}
    if strategy != "textfile":
        return {}
    wanted = {i.key: by_key[t] for i in images if (t := posixpath.splitext(i.key)[0] + ".txt") in by_key}
    store = store_of(backend)

    def read(info: ObjectInfo) -> str | None:
        from cachedoctor.stores.interface import ObjectChanged, ObjectGone, TransientError

        try:
            return store.read_whole(info, _CAPTION_LIMIT).decode("utf-8")
        except (ObjectGone, ObjectChanged, TransientError, UnicodeDecodeError):
            return None

    infos = list(wanted.values())
    from concurrent.futures import ThreadPoolExecutor  # (here: only an aws dataset reads on threads)

    with ThreadPoolExecutor(max_workers=min(_READERS, max(1, len(infos)))) as pool:
        texts = dict(zip([i.url for i in infos], pool.map(read, infos), strict=True))
    out: Captions = {}
    for image_key, info in wanted.items():
        text = texts.get(info.url)
        if text is not None:
            out[image_key] = (
                ([line for line in text.split("\n") if line] if "\n" in text else [text]),
                info.url,
                info.mtime_ns,
            )
    return out
