"""A cache file whose name is near the file system's 255-byte limit still has a lock file (the
plain ``.<name>.lock`` would be too long, and a repair of such a file failed on every run with
"File name too long": found by an adversarial review, rebuilt here first)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cachedoctor.statedir import is_lock_name, lock_path


@pytest.mark.parametrize("length", [240, 250, 255])
def test_a_long_name_gets_a_lock_file_that_can_be_made(tmp_path: Path, length: int) -> None:
    name = "l" * (length - 3) + ".pt"
    target = tmp_path / name
    target.write_bytes(b"x")
    lock = lock_path(str(target))
    assert os.path.dirname(lock) == str(tmp_path)
    assert len(os.fsencode(os.path.basename(lock))) <= 255
    assert is_lock_name(os.path.basename(lock))
    Path(lock).write_bytes(b"")  # the file system takes it
    other = lock_path(str(tmp_path / ("l" * (length - 4) + "m.pt")))
    assert other != lock  # one lock per file


def test_a_short_name_keeps_the_cooperating_convention(tmp_path: Path) -> None:
    assert lock_path(str(tmp_path / "a.pt")) == str(tmp_path / ".a.pt.lock")


def test_a_local_repair_of_a_file_with_a_255_byte_name_goes_through(tmp_path: Path) -> None:
    from factories import latent, pt_bytes, saved_on

    from cachedoctor.layouts import LayoutName, LayoutOptions
    from cachedoctor.repair.outcome import RepairOptions
    from cachedoctor.repair.run import repair
    from cachedoctor.scan import ScanOptions

    with saved_on("cuda:0"):
        tagged = pt_bytes({"latents": latent(seed=1)})
    for i in range(3):
        (tmp_path / f"{i}.pt").write_bytes(pt_bytes({"latents": latent(seed=i)}))
    long = tmp_path / ("l" * 252 + ".pt")
    long.write_bytes(tagged)
    options = RepairOptions(scan=ScanOptions(workers=1))
    outcome = repair(
        [str(tmp_path)], LayoutName.AUTO, LayoutOptions(), options, ["repair"], lambda _: True, lambda _: None
    )
    assert [(os.path.basename(r.path), r.state.value) for r in outcome.results] == [(long.name, "verified")]
    assert long.read_bytes() != tagged
