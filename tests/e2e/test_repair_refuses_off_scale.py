"""A recompute through the wrong VAE is judged against its peers before it replaces anything.

The reported case: a SimpleTuner cache made with one VAE, three latents missing, ``repair``
run with ``--encoder`` naming another VAE (another seed, and no scaling factor): it wrote the
three latents and only the final scan said ``worse: distribution-outlier ... please report
this``. Now each is refused with one line naming the image and the encoder, the cache stays
byte for byte as it was, and the right VAE still repairs it.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from repair_factories import POOL, simpletuner, tree_bytes
from tiny_models import build_tiny_vae

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.exit_status import ExitStatus

IMAGES = 24  # 21 healthy peers after three go missing: enough to judge (MIN_PEERS 20)
MISSING = 3


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, stdin_isatty=False, cwd="/")
    return run(list(argv), env), out.getvalue(), err.getvalue()


def test_a_wrong_vae_is_refused_before_it_replaces_anything(tmp_path: Path) -> None:
    right = f"diffusers-vae:{build_tiny_vae(tmp_path / 'vae')}"
    wrong = f"diffusers-vae:{build_tiny_vae(tmp_path / 'other-vae', seed=1, scaling_factor=1.0)}"
    ds = simpletuner(tmp_path / "st", IMAGES, encoder=right)
    victims = ds.images[:MISSING]
    for victim in victims:
        ds.latent_path(victim).unlink()
    before = tree_bytes(ds.root)
    mode = ("--posterior", "mode")  # the factory cached the mean
    code, out, err = cli("repair", "--deep", "--config", str(ds.config), "--encoder", wrong, "--yes", *mode)
    assert (code, err) == (ExitStatus.FINDINGS, ""), out
    assert "done: 0 verified, 0 skipped, 0 blocked, 3 failed" in out
    text = " ".join(out.split())  # the terminal's wrapping undone
    for victim in victims:
        line = re.compile(
            rf"failed: refused: recomputed latent for {victim.name} is off its peers' scale \(std (\S+) vs peers "
            rf"(\S+)±\S+; unscaled latents\?\): the encoder {re.escape(wrong)} may be the wrong VAE or scaling "
            rf"for this cache; nothing replaced {re.escape(str(ds.latent_path(victim))[1:])}: missing-entry"
        )
        (match,) = line.findall(text)
        own, peers = float(match[0]), float(match[1])
        assert own > 3 * peers, match  # no scaling factor: several times its peers'
    assert "please report this" not in out and "worse:" not in out
    assert tree_bytes(ds.root) == before  # nothing written, nothing moved
    assert not list((ds.vae / ".cachedoctor" / "quarantine").rglob("*.pt"))

    code, out, err = cli("repair", "--deep", "--config", str(ds.config), "--encoder", right, "--yes", *mode)
    assert (code, err) == (ExitStatus.CLEAN, ""), out
    assert "done: 3 verified" in out and "missing-entry 3 -> 0" in out and "not judged" not in out
    assert all(ds.latent_path(v).exists() for v in victims)


def test_the_refusal_is_in_the_json_document(tmp_path: Path) -> None:
    right = f"diffusers-vae:{build_tiny_vae(tmp_path / 'vae')}"
    wrong = f"diffusers-vae:{build_tiny_vae(tmp_path / 'other-vae', seed=1, scaling_factor=1.0)}"
    ds = simpletuner(tmp_path / "st", IMAGES - 2, encoder=right)
    victim = ds.latent_path(ds.images[0])
    victim.unlink()
    code, out, _ = cli("repair", "--config", str(ds.config), "--encoder", wrong, "--yes", "--format", "json")
    doc = json.loads(out)
    assert code == ExitStatus.FINDINGS == doc["exit_code"]
    (refused,) = doc["result"]["refused"]
    assert refused["path"] == str(victim)
    assert refused["message"].startswith(f"refused: recomputed latent for {ds.images[0].name} is off its peers'")
    assert refused["message"].endswith(
        f"the encoder {wrong} may be the wrong VAE or scaling for this cache; nothing replaced"
    )
    assert [f["state"] for f in doc["result"]["files"]] == ["failed"] and doc["result"]["worse"] == {}


def test_too_few_peers_are_said_and_the_file_still_written(tmp_path: Path) -> None:
    """Four latents: the scan does not judge a folder this small, so neither does the write;
    the outcome says so in one line, and the item is repaired."""
    ds = simpletuner(tmp_path, 4)
    victim = ds.latent_path(ds.images[0])
    victim.unlink()
    code, out, err = cli("repair", "--config", str(ds.config), "--encoder", POOL, "--yes")
    assert (code, err) == (ExitStatus.CLEAN, ""), out
    assert victim.exists() and "done: 1 verified" in out
    said = f"not judged: {str(victim)[1:]} against its peers' scale: 3 healthy peer(s) read, 19 needed"
    assert " ".join(out.split()).count(said) == 1 and out.count("not judged") == 1, out  # cwd /: relative
