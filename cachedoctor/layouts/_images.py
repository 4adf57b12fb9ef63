"""Dataset items on disk: which files are images, and their size from the header alone.

Pillow's ``Image.open`` parses only the header (no pixel decoding), which is what makes the
dataset comparison cheap next to the cache scan. Sizes are the stored width and height, before
any EXIF rotation: that is what the trainers put in their file names and bucket metadata.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".jxl", ".avif")
CAPTION_SUFFIX = ".txt"
SOURCE_SUFFIXES = IMAGE_SUFFIXES + (CAPTION_SUFFIX, ".json", ".caption", ".toml", ".yaml", ".csv", ".jsonl")


def is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def image_size(path: str) -> tuple[int, int] | None:
    """``(width, height)`` from the file's header, or ``None`` if it is no readable image."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return image.size
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError):
        return None


#: How many directory entries ``--layout auto`` may list per layout before it gives up: detection
#: looks for a sign (an image with its cache file beside it, a ``variation-<n>/aggregate.pt``),
#: and a sign shows within the first folders that hold one. Without a bound, guessing the layout
#: of a million-file cache would list all of it, once per layout, before the scan lists it again.
DETECT_ENTRIES = 20_000


def walk_images(root: str, budget: int | None = None) -> Iterator[tuple[str, list[os.DirEntry], set[str]]]:
    """``(folder, image entries sorted by name, every name in it)`` for each folder under ``root``;
    with ``budget``, no more folders once that many entries have been listed.

    Hidden folders and cachedoctor's own state are skipped; symlinked folders are followed once.
    """
    seen: set[tuple[int, int]] = set()
    stack = [root]
    listed = 0
    while stack and (budget is None or listed < budget):
        folder = stack.pop()
        try:
            st = os.stat(folder)
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        listed += len(entries)
        images, subdirs = [], []
        for entry in entries:
            try:
                if entry.is_dir():
                    if not entry.name.startswith("."):
                        subdirs.append(entry.path)
                elif is_image(entry.name) and entry.is_file():
                    images.append(entry)
            except OSError:
                continue
        images.sort(key=lambda e: e.name)
        yield folder, images, {e.name for e in entries}
        stack.extend(sorted(subdirs, reverse=True))


def names_in(folder: str) -> set[str]:
    """Every name in ``folder`` (empty when it does not exist or cannot be listed)."""
    try:
        with os.scandir(folder) as it:
            return {e.name for e in it}
    except OSError:
        return set()


def stem(name: str) -> str:
    return os.path.splitext(os.path.basename(name))[0]
