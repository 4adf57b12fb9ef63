"""Settings from [tool.cachedoctor] / cachedoctor.toml / CACHEDOCTOR_* and their precedence."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from factories import latent, peers, save_pt, saved_on

from cachedoctor.cli import run
from cachedoctor.cli.environment import Environment


def cli(*argv: str, cwd: Path, environ: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(
        stdout=out, stderr=err, stdout_isatty=False, stderr_isatty=False, cwd=str(cwd), environ=environ or {}
    )
    code = run(list(argv), env)
    return code, out.getvalue(), err.getvalue()


def show(cwd: Path, *argv: str, environ: dict[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """``config show`` as {setting: (value, source)}."""
    code, out, err = cli("settings", "show", *argv, cwd=cwd, environ=environ)
    assert (code, err) == (0, "")
    rows = {}
    for line in out.splitlines()[1:]:
        name, rest = line.split(None, 1)
        value, source = rest.rsplit("(", 1)
        rows[name] = (value.strip(), source.rstrip(")"))
    return rows


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose cache has four healthy peers and one device-tagged warning."""
    cache = tmp_path / "project" / "cache"
    peers(cache)
    with saved_on("cuda:1"):
        save_pt(cache / "gpu.pt", latent(seed=5))
    return tmp_path / "project"


def test_pyproject_two_folders_up_is_found_and_paths_resolve_from_it(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n\n[tool.cachedoctor]\npaths = ["cache"]\nfail-on = "warning"\n')
    deep = project / "a" / "b"
    deep.mkdir(parents=True)
    rows = show(deep)
    assert rows["paths"] == (str(project / "cache"), f"{pyproject}:tool.cachedoctor")
    assert rows["fail-on"] == ("warning", f"{pyproject}:tool.cachedoctor")
    assert rows["workers"] == ("(none)", "default")
    code, out, err = cli("scan", "--format", "json", "-j", "1", cwd=deep)
    doc = json.loads(out)
    assert (code, err) == (1, "")
    assert doc["targets"] == [str(project / "cache")]
    assert [f["kind"] for f in doc["findings"]] == ["device-tagged"]


def test_pyproject_without_the_table_is_passed_over(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.cachedoctor]\nworkers = 3\n")
    inner = project / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "inner"\n')
    assert show(inner)["workers"] == ("3", f"{project / 'pyproject.toml'}:tool.cachedoctor")


def test_nearer_cachedoctor_toml_wins(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.cachedoctor]\nworkers = 3\n")
    sub = project / "sub"
    sub.mkdir()
    (sub / "cachedoctor.toml").write_text('workers = 5\npaths = ["../cache"]\n')
    rows = show(sub)
    assert rows["workers"] == ("5", str(sub / "cachedoctor.toml"))
    assert rows["paths"] == (str(project / "cache"), str(sub / "cachedoctor.toml"))
    assert show(project)["workers"] == ("3", f"{project / 'pyproject.toml'}:tool.cachedoctor")


def test_severity_override_turns_a_warning_into_an_error(project: Path) -> None:
    code, _, _ = cli("scan", str(project / "cache"), "--format", "json", "-j", "1", cwd=project)
    assert code == 0  # no config yet: a warning passes the default gate
    (project / "pyproject.toml").write_text('[tool.cachedoctor.severity]\ndevice-tagged = "error"\n')
    code, out, err = cli("scan", str(project / "cache"), "--format", "json", "-j", "1", cwd=project)
    doc = json.loads(out)
    assert (code, err) == (1, "")
    assert [(f["kind"], f["severity"]) for f in doc["findings"]] == [("device-tagged", "error")]
    assert doc["summary"]["by_severity"] == {"error": 1, "warning": 0, "info": 0}


def test_exclude_skips_a_planted_defect(project: Path) -> None:
    with saved_on("cuda:0"):
        save_pt(project / "cache" / "scratch" / "bad.pt", latent(seed=9))
    base = ("scan", str(project / "cache"), "--format", "json", "-j", "1", "--fail-on", "warning")
    doc = json.loads(cli(*base, cwd=project)[1])
    assert sorted(Path(f["path"]).name for f in doc["findings"]) == ["bad.pt", "gpu.pt"]
    (project / "cachedoctor.toml").write_text('exclude = ["scratch/*", "gpu.pt"]\n')
    code, out, err = cli(*base, cwd=project)
    doc = json.loads(out)
    assert (code, err, doc["findings"]) == (0, "", [])
    assert doc["summary"]["files_seen"] == 4  # excluded files are not even seen
    code, out, _ = cli(*base, "--exclude", "scratch", cwd=project)  # the command line replaces the file's list
    assert [Path(f["path"]).name for f in json.loads(out)["findings"]] == ["gpu.pt"] and code == 1


def test_environment_beats_file_and_command_line_beats_environment(project: Path) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.cachedoctor]\nfail-on = "never"\nworkers = 2\ndeep = true\nlayout = "none"\nexclude = ["a"]\n'
    )
    environ = {
        "CACHEDOCTOR_FAIL_ON": "warning",
        "CACHEDOCTOR_WORKERS": "4",
        "CACHEDOCTOR_EXCLUDE": "x, y/*",
        "CACHEDOCTOR_DEEP": "0",
        "CACHEDOCTOR_LAYOUT": "",
    }
    rows = show(project, environ=environ)
    file_source = f"{project / 'pyproject.toml'}:tool.cachedoctor"
    assert rows["fail-on"] == ("warning", "environment CACHEDOCTOR_FAIL_ON")
    assert rows["workers"] == ("4", "environment CACHEDOCTOR_WORKERS")
    assert rows["exclude"] == ("x, y/*", "environment CACHEDOCTOR_EXCLUDE")
    assert rows["deep"] == ("false", "environment CACHEDOCTOR_DEEP")
    assert rows["layout"] == ("none", file_source)  # an empty variable counts as unset
    rows = show(project, "--fail-on", "error", "-j", "1", "--layout", "auto", environ=environ)
    assert rows["fail-on"] == ("error", "command line")
    assert rows["workers"] == ("1", "command line")
    assert rows["layout"] == ("auto", "command line")
    # and scan obeys: the device-tagged warning fails under the environment's gate, not the file's
    code = cli("scan", str(project / "cache"), "--format", "json", cwd=project, environ=environ)[0]
    assert code == 1
    code = cli("scan", str(project / "cache"), "--format", "json", "--fail-on", "error", cwd=project, environ=environ)[
        0
    ]
    assert code == 0


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("pyproject.toml", "[tool.cachedoctor\nworkers = 1\n", "not valid TOML"),
        (
            "pyproject.toml",
            "[tool.cachedoctor]\nworker = 1\n",
            "tool.cachedoctor.worker: unknown key; did you mean 'workers'?",
        ),
        ("cachedoctor.toml", "fail_on = 'error'\n", "fail_on: unknown key; did you mean 'fail-on'?"),
        ("cachedoctor.toml", "colour = 1\n", "colour: unknown key (known: "),
        (
            "pyproject.toml",
            '[tool.cachedoctor.severity]\ndevice-taged = "error"\n',
            "tool.cachedoctor.severity: unknown kind 'device-taged'; did you mean 'device-tagged'?",
        ),
        (
            "pyproject.toml",
            '[tool.cachedoctor.severity]\ndevice-tagged = "fatal"\n',
            "tool.cachedoctor.severity: device-tagged: expected one of error, warning, info",
        ),
        ("cachedoctor.toml", 'fail-on = "sometimes"\n', "fail-on: expected one of error, warning, never"),
        ("cachedoctor.toml", "workers = 0\n", "workers: expected a whole number of at least 1"),
        ("cachedoctor.toml", 'paths = "cache"\n', "paths: expected a list of non-empty strings"),
    ],
)
@pytest.mark.parametrize("command", [("scan", "cache"), ("settings", "show"), ("config", "show")])
def test_broken_config_is_one_line_exit_2(
    project: Path, name: str, text: str, expected: str, command: tuple[str, ...]
) -> None:
    (project / name).write_text(text)
    code, out, err = cli(*command, cwd=project)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"cachedoctor: error: {project / name}: ")
    assert expected in err


def test_bad_environment_value_is_one_line_exit_2(project: Path) -> None:
    code, out, err = cli("scan", str(project / "cache"), cwd=project, environ={"CACHEDOCTOR_WORKERS": "many"})
    assert (code, out) == (2, "")
    assert err == "cachedoctor: error: environment CACHEDOCTOR_WORKERS: 'many': expected a whole number of at least 1\n"


def test_no_config_keeps_the_defaults(tmp_path: Path) -> None:
    rows = show(tmp_path)
    assert all(source == "default" for _, source in rows.values())
    code, out, err = cli("scan", cwd=tmp_path)
    assert code == 2 and "no PATH given" in err


def test_repair_and_recover_take_their_targets_from_the_config_file(tmp_path: Path) -> None:
    peers(tmp_path / "cache")
    (tmp_path / "cache" / "tmpAbCdEfGh").write_bytes(b"half a latent")
    (tmp_path / "cachedoctor.toml").write_text('paths = ["cache"]\n')
    code, out, err = cli("repair", "--dry-run", cwd=tmp_path)
    assert (code, err) == (1, "") and "quarantine     1 file(s)" in out
    code, out, err = cli("recover", cwd=tmp_path)
    assert (code, err) == (1, "") and "temp files of interrupted writes: 1" in out
    (tmp_path / "cachedoctor.toml").write_text('paths = ["missing"]\n')
    code, _, err = cli("repair", "--dry-run", cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and str(tmp_path / "missing") in err


def test_load_takes_relative_paths_from_its_cwd(tmp_path: Path) -> None:
    from cachedoctor.settings import load

    settings = load(cwd=str(tmp_path), environ={}, paths=["cache"], manifest="m.jsonl")
    assert settings.paths.value == (str(tmp_path / "cache"),)
    assert settings.manifest.value == str(tmp_path / "m.jsonl")


def test_a_config_file_that_is_a_folder_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "cachedoctor.toml").mkdir()
    code, _, err = cli("scan", str(tmp_path), cwd=tmp_path)
    assert code == 2 and f"{tmp_path / 'cachedoctor.toml'}: is a folder, not a config file" in err


def test_a_bad_environment_value_is_named_once(tmp_path: Path) -> None:
    code, _, err = cli("scan", str(tmp_path), cwd=tmp_path, environ={"CACHEDOCTOR_SAMPLE": "abc"})
    assert code == 2 and err.count("'abc'") == 1 and "environment CACHEDOCTOR_SAMPLE" in err
