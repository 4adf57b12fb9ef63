"""``cachedoctor explain [KIND]``: the texts on every check, the rendering, the CLI and its cost."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from cachedoctor.checks import CHECKS, KINDS
from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment
from cachedoctor.explain import RECOMPUTE_NOTE, WIDTH, UnknownKind, check_for, explain, how_found, listing
from cachedoctor.findings import Fix


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), Environment(stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd="/"))
    return code, out.getvalue(), err.getvalue()


def flat(text: str) -> str:
    """Undo the wrapping: one space between words."""
    return " ".join(text.split())


def section(text: str, title: str) -> str:
    """The body of one titled section of ``explain``'s output, unwrapped."""
    blocks = text.split("\n\n")
    start = next(i for i, b in enumerate(blocks) if b.startswith(title + "\n"))
    body = [blocks[start][len(title) + 1 :]]
    for block in blocks[start + 1 :]:
        if not block.startswith("  "):  # the next title
            break
        body.append(block)
    return flat(" ".join(body))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.kind)
def test_every_registered_check_says_why_and_what_repair_does(check) -> None:  # type: ignore[no-untyped-def]
    assert check.summary.strip() and check.why.strip() and check.repair.strip()
    assert check.repair.startswith(check.fix.value), "the repair text opens with the fix it describes"
    assert len(flat(check.why).split(". ")) >= 2  # a few concrete sentences, not a tag line


def test_the_abc_defaults_are_empty() -> None:
    from cachedoctor.checks.interface import Check

    assert (Check.why, Check.repair) == ("", "")


def test_batch_leak_prints_every_field() -> None:
    leak = KINDS["batch-leak"]
    text = explain("batch-leak")
    assert text.splitlines()[:3] == ["batch-leak", "  default severity: error", "  fix: clone-storage"]
    titles = [line for line in text.splitlines() if line and not line.startswith(" ")][1:]
    assert titles == ["What it means", "Why it breaks training", "What repair does", "How to find it"]
    assert section(text, "What it means") == flat(leak.summary)
    assert section(text, "Why it breaks training") == flat(leak.why)
    assert "7x larger" in section(text, "Why it breaks training")
    # the leading-batch form is recomputed, so the general recompute note (and when it is blocked) follows
    assert section(text, "What repair does") == flat(leak.repair) + " " + flat(RECOMPUTE_NOTE)
    assert section(text, "How to find it") == flat(how_found(leak))
    assert section(text, "How to find it").startswith("A quick scan finds it from each file alone and by comparing")


def test_text_is_wrapped_at_88_columns_and_plain() -> None:
    for check in CHECKS:
        text = explain(check.kind)
        assert max(len(line) for line in text.splitlines()) <= WIDTH, check.kind
        assert "\x1b" not in text and text.isascii()
    assert max(len(line) for line in listing().splitlines()) <= WIDTH


def test_lossless_and_quarantine_kinds_get_no_recompute_note() -> None:
    for kind in ("device-tagged", "partial-write", "orphan-entry"):
        assert flat(RECOMPUTE_NOTE) not in flat(explain(kind)), kind
        assert KINDS[kind].fix is not Fix.RECOMPUTE
    assert "lossless" in section(explain("device-tagged"), "What repair does")
    # an unsafe pickle the dataset expects is quarantined and recomputed, so it says when that is blocked
    assert section(explain("unsafe-pickle"), "What repair does").endswith(flat(RECOMPUTE_NOTE))
    for check in CHECKS:
        if check.fix is Fix.RECOMPUTE:
            assert "It is blocked, and changes nothing" in section(explain(check.kind), "What repair does")


def test_how_to_find_says_deep_and_dataset() -> None:
    assert section(explain("non-finite"), "How to find it") == "Needs --deep: a quick scan does not read tensor data."
    for kind in ("missing-entry", "orphan-entry", "stale-entry", "name-collision"):
        found = section(explain(kind), "How to find it")
        assert found.startswith("Needs the dataset: scan with --config multidatabackend.json"), kind
        assert "--layout kohya|onetrainer" in found and "--manifest FILE" in found
    assert "The part marked (deep) above needs --deep." in section(explain("corrupt-archive"), "How to find it")
    assert section(explain("dtype-mismatch"), "How to find it").startswith(
        "A quick scan finds it from each file alone and by comparing each file with the files of its folder "
        "(no --deep, no dataset needed)."
    )
    assert "When the scan knows the dataset" in section(explain("shape-mismatch"), "How to find it")


def test_why_quotes_what_the_trainer_says() -> None:
    assert "failed finding central directory" in flat(KINDS["corrupt-archive"].why)
    device = flat(KINDS["device-tagged"].why)
    assert "Attempting to deserialize object on a CUDA device" in device
    assert "Expected all tensors to be on the same device" in device
    assert "Some images were not correctly cached" in flat(KINDS["missing-entry"].why)
    assert "NaN loss" in KINDS["non-finite"].why


def test_listing_has_every_kind_with_its_summary() -> None:
    text = listing()
    lines = text.splitlines()
    assert lines[0] == f"{len(CHECKS)} finding kinds; `cachedoctor explain KIND` says more about one:"
    starts = [line.split()[0] for line in lines[2:] if line.startswith("  ") and not line.startswith("   ")]
    assert starts == [c.kind for c in CHECKS] and len(starts) == len(KINDS) >= 15
    body = flat(text)
    for check in CHECKS:
        assert f"{check.kind} {flat(check.summary)}" in body


def test_cli_explain_one_kind_and_the_listing() -> None:
    assert cli("explain", "batch-leak") == (0, explain("batch-leak") + "\n", "")
    assert cli("explain") == (0, listing() + "\n", "")


@pytest.mark.parametrize("spelling", ["device_tagged", "Device-Tagged", " device-tagged "])
def test_kind_with_underscores_or_capitals(spelling: str) -> None:
    assert cli("explain", spelling) == (0, explain("device-tagged") + "\n", "")
    assert check_for(spelling).kind == "device-tagged"


def test_unknown_kind_suggests_the_closest_and_exits_2() -> None:
    code, out, err = cli("explain", "batch-leek")
    assert (code, out) == (2, "")
    assert err == "cachedoctor: error: unknown finding kind 'batch-leek'; did you mean 'batch-leak'?\n"
    assert (
        cli("explain", "orphan")[2]
        == "cachedoctor: error: unknown finding kind 'orphan'; did you mean 'orphan-entry'?\n"
    )


def test_unknown_kind_without_a_close_one() -> None:
    code, out, err = cli("explain", "zzz")
    assert (code, out) == (2, "")
    assert (
        err == f"cachedoctor: error: unknown finding kind 'zzz'; `cachedoctor explain` lists the {len(KINDS)} kinds\n"
    )
    with pytest.raises(UnknownKind) as caught:
        check_for("zzz")
    assert (caught.value.kind, caught.value.suggestion) == ("zzz", None)


def test_explain_imports_neither_torch_nor_numpy() -> None:
    code = (
        "import sys, io, cachedoctor.cli\n"
        "from cachedoctor.cli.environment import Environment\n"
        "env = Environment(stdout=io.StringIO(), stderr=io.StringIO())\n"
        "codes = [cachedoctor.cli.run(['explain', 'batch-leak'], env), cachedoctor.cli.run(['explain'], env)]\n"
        "print(codes, sorted(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[0, 0] []"
