"""The CLI through ``run(argv, env)``: formats, the JSON contract, exit codes, bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from factories import latent, peers, pt_bytes, save_pt, saved_on

from cachedoctor import __version__
from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment

FINDING_KEYS = {"kind", "severity", "path", "source", "message", "fix", "details"}


def cli(*argv: str, tty: bool = False, cwd: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdout_isatty=tty, stderr_isatty=tty, cwd=cwd or "/")
    code = run(list(argv), env)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """Four healthy peers, one batch-leak error and one device-tagged warning."""
    peers(tmp_path)
    save_pt(tmp_path / "leak.pt", torch.randn(7, 4, 8, 8).to(torch.bfloat16)[1])
    with saved_on("cuda:1"):
        save_pt(tmp_path / "gpu.pt", latent(seed=5))
    return tmp_path


def test_json_document_contract(cache: Path) -> None:
    code, out, err = cli("scan", str(cache), "--format", "json", "--workers", "1")
    doc = json.loads(out)
    assert (code, err) == (1, "")
    assert doc["schema"] == "cachedoctor.scan/1"
    assert doc["targets"] == [str(cache)]
    assert all(set(f) == FINDING_KEYS for f in doc["findings"])
    assert [(f["kind"], f["severity"], Path(f["path"]).name, f["fix"]) for f in doc["findings"]] == [
        ("batch-leak", "error", "leak.pt", "clone-storage"),
        ("device-tagged", "warning", "gpu.pt", "rewrite-cpu"),
    ]
    summary = doc["summary"]
    assert summary["files_read"] == 6 and summary["findings"] == 2
    assert summary["by_kind"] == {"batch-leak": 1, "device-tagged": 1}
    assert summary["by_severity"] == {"error": 1, "warning": 1, "info": 0}
    assert summary["exit_code"] == 1 and summary["fail_on"] == "error" and summary["errors"] == []


def test_jsonl_one_finding_per_line(cache: Path) -> None:
    code, out, _ = cli("scan", str(cache), "--format", "jsonl", "-j", "2")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and [r["kind"] for r in rows] == ["batch-leak", "device-tagged"]


@pytest.mark.parametrize(("fail_on", "expected"), [("error", 1), ("warning", 1), ("never", 0)])
def test_fail_on_with_errors(cache: Path, fail_on: str, expected: int) -> None:
    assert cli("scan", str(cache), "--fail-on", fail_on, "--format", "json")[0] == expected


def test_warning_only_cache_passes_default_gate(tmp_path: Path) -> None:
    peers(tmp_path)
    with saved_on("cuda:0"):
        save_pt(tmp_path / "gpu.pt", latent())
    assert cli("scan", str(tmp_path), "--format", "json")[0] == 0
    assert cli("scan", str(tmp_path), "--format", "json", "--fail-on", "warning")[0] == 1


def test_clean_cache_exits_zero_and_suggests_deep(tmp_path: Path) -> None:
    peers(tmp_path)
    code, out, _ = cli("scan", str(tmp_path))
    assert code == 0 and "No findings." in out and "--deep" in out


def test_table_groups_by_kind_and_says_what_next(cache: Path) -> None:
    code, out, _ = cli("scan", str(cache), cwd=str(cache))
    assert code == 1
    assert "batch-leak (1)" in out and "device-tagged (1)" in out
    assert "  leak.pt: " in out  # paths relative to the working directory
    assert out.index("Worst files") < out.index("leak.pt  [batch-leak]") < out.index("gpu.pt  [device-tagged]")
    assert (  # wrapped to the width at word boundaries
        "1 error(s), 1 warning(s) in 2 file(s). `cachedoctor repair` can fix 2 file(s): 1 to clone-storage, 1 to rewrite-cpu."
        in " ".join(out.split())
    )


def test_output_file_written_and_stdout_quiet(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    code, out, _ = cli("scan", str(cache), "--format", "json", "--output", str(target))
    assert code == 1 and out == ""
    assert json.loads(target.read_text())["summary"]["findings"] == 2


def test_output_file_and_table_on_a_tty(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "r.jsonl"
    code, out, err = cli("scan", str(cache), "--format", "jsonl", "-o", str(target), tty=True)
    assert code == 1 and "batch-leak" in out and len(target.read_text().splitlines()) == 2


def test_progress_only_when_stderr_is_a_tty(cache: Path) -> None:
    assert cli("scan", str(cache), "--format", "json")[2] == ""
    code, _, err = cli("scan", str(cache), "--format", "json", tty=True)
    assert code == 1  # rich draws on the fake terminal; nothing else is written there


def test_missing_path_is_one_line_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    code, out, err = cli("scan", str(missing))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(missing) in err and "Traceback" not in err


def test_bad_option_is_one_line_exit_2(tmp_path: Path) -> None:
    code, _, err = cli("scan", str(tmp_path), "--format", "xml")
    assert code == 2 and err.count("\n") == 1 and "--format" in err


def test_unwritable_output_is_one_line_exit_2(cache: Path, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "r.json"
    code, _, err = cli("scan", str(cache), "--format", "json", "-o", str(target))
    assert code == 2 and err.count("\n") == 1 and str(target) in err


def test_unreadable_file_makes_scan_incomplete(tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads any file; permissions cannot be tested")
    peers(tmp_path)
    locked = tmp_path / "locked.pt"
    locked.write_bytes(pt_bytes(latent()))
    locked.chmod(0)
    code, _, err = cli("scan", str(tmp_path), "--format", "json")
    assert code == 2 and str(locked) in err


def test_symlink_loop_is_walked_once(tmp_path: Path) -> None:
    peers(tmp_path / "a")
    (tmp_path / "a" / "loop").symlink_to(tmp_path, target_is_directory=True)
    code, out, _ = cli("scan", str(tmp_path), "--format", "json")
    assert code == 0 and json.loads(out)["summary"]["files_read"] == 4


def test_single_file_target(tmp_path: Path) -> None:
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"")
    code, out, _ = cli("scan", str(bad), "--format", "json")
    assert code == 1 and [f["kind"] for f in json.loads(out)["findings"]] == ["corrupt-archive"]


def test_state_folder_is_not_scanned(tmp_path: Path) -> None:
    peers(tmp_path)
    (tmp_path / ".cachedoctor").mkdir()
    (tmp_path / ".cachedoctor" / "broken.pt").write_bytes(b"")
    assert cli("scan", str(tmp_path), "--format", "json")[0] == 0


def test_version_and_bare_invocation() -> None:
    assert cli("--version")[:2] == (0, f"cachedoctor {__version__}\n")
    code, out, _ = cli()
    assert code == 0 and "scan" in out


def test_foreign_zip_and_pickle_are_skipped(tmp_path: Path) -> None:
    import pickle
    import zipfile

    peers(tmp_path)
    with zipfile.ZipFile(tmp_path / "images.zip", "w") as z:
        z.writestr("a.txt", "hello")
    (tmp_path / "state.pkl").write_bytes(pickle.dumps({"step": 3}))
    code, out, _ = cli("scan", str(tmp_path), "--format", "json")
    summary = json.loads(out)["summary"]
    assert (code, summary["files_read"], summary["files_skipped"]) == (0, 4, 2)


def test_named_files_keep_their_peers_and_are_not_scanned_twice(tmp_path: Path) -> None:
    files = peers(tmp_path)
    bad = save_pt(tmp_path / "fp32.pt", latent(dtype=torch.float32))
    code, out, _ = cli("scan", *map(str, files), str(bad), str(bad), "--format", "json")
    doc = json.loads(out)
    assert [(f["kind"], f["path"]) for f in doc["findings"]] == [("dtype-mismatch", str(bad))]
    assert doc["summary"]["folders"] == 1
    code, out, _ = cli("scan", str(tmp_path), str(bad), "--format", "json")
    assert json.loads(out)["summary"]["files_read"] == 5


def test_ctrl_c_wrapped_by_a_lazy_import_is_still_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI once sent Ctrl-C while the first deep read imported numpy: Python 3.11 wrapped the
    interrupt, raised in a class body's ``__set_name__``, in a RuntimeError, and the scan
    reported an "internal error while reading" (exit 2) instead of being interrupted (130)."""
    peers(tmp_path)

    class Interrupting:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    def read_while_importing(path: str, deep: bool, tally: object = None, **_: object) -> None:
        class finfo:
            epsneg = Interrupting()

    monkeypatch.setattr("cachedoctor.scan.worker.read_file", read_while_importing)
    code, out, err = cli("scan", str(tmp_path), "--deep", "--workers", "1", "--no-state")
    assert (code, out) == (130, "")
    assert err.strip() == "cachedoctor: error: interrupted; nothing was changed"


def test_a_bad_choice_reads_as_a_plain_sentence(tmp_path: Path) -> None:
    code, out, err = cli("scan", "--fail-on", "bogus", str(tmp_path))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--fail-on: 'bogus' is not a choice; choose error, warning or never (see `cachedoctor scan --help`)" in err
    assert "Value error" not in err


def test_help_names_values_not_python_types() -> None:
    code, out, _ = cli("repair", "--help")
    assert code == 0
    for option, metavar in (("--config", "FILE"), ("--encoder", "SPEC"), ("-j, --workers", "N"), ("--only", "KINDS")):
        assert f"{option} {metavar}" in out
    assert "<str>" not in out and "<int range>" not in out


def test_closing_line_counts_what_repair_would_block_and_why(tmp_path: Path) -> None:
    """A truncated latent outside any dataset: the scan's last line says repair cannot make it
    again and will quarantine it, as the planner decides (issue 14: it promised a fix)."""
    peers(tmp_path)
    (tmp_path / "cut.pt").write_bytes((tmp_path / "peer0.pt").read_bytes()[:200])
    code, out, _ = cli("scan", str(tmp_path), "--layout", "none")
    assert code == 1
    assert "`cachedoctor repair` can fix 1 file(s): 1 to quarantine." in " ".join(out.split()), out


def test_closing_line_says_what_repair_would_leave_and_why(tmp_path: Path) -> None:
    peers(tmp_path)
    save_pt(tmp_path / "nan.pt", torch.full((4, 8, 8), float("nan")))
    code, out, _ = cli("scan", "--deep", str(tmp_path), "--layout", "none")
    assert code == 1
    assert (
        "It would leave 1 file(s) as they are (1: its source is unknown: repair with the dataset "
        "(--config, --layout or --manifest))." in " ".join(out.split())
    ), out
