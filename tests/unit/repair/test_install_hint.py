"""The install line a missing extra prints names where this cachedoctor came from (PEP 610's
``direct_url.json``), since a plain ``pip install "cachedoctor[repair]"`` fails until cachedoctor
is on an index. Each case is a record as pip writes it."""

from __future__ import annotations

from pathlib import Path

from cachedoctor.install_hint import command_for


def test_from_an_index_the_plain_line() -> None:
    assert command_for(None, "repair") == 'pip install "cachedoctor[repair]"'
    assert command_for(None, "repair", "pipx") == 'pipx install "cachedoctor[repair]"'


def test_an_editable_clone_installs_the_extra_from_the_clone(tmp_path: Path) -> None:
    record = {"url": tmp_path.as_uri(), "dir_info": {"editable": True}}
    assert command_for(record, "repair") == f'pip install -e "{tmp_path}[repair]"'
    assert command_for(record, "repair", "pipx") == f'pipx install "{tmp_path}[repair]"'  # pipx has no -e


def test_a_clone_installed_as_it_is_installs_from_the_same_folder(tmp_path: Path) -> None:
    assert command_for({"url": tmp_path.as_uri(), "dir_info": {}}, "encoders") == f'pip install "{tmp_path}[encoders]"'


def test_a_folder_that_is_gone_falls_back_to_the_plain_line(tmp_path: Path) -> None:
    record = {"url": (tmp_path / "deleted-clone").as_uri(), "dir_info": {"editable": True}}
    assert command_for(record, "repair") == 'pip install "cachedoctor[repair]"'


def test_a_git_url_keeps_the_revision_asked_for() -> None:
    record = {
        "url": "https://git.example.org/ml/cachedoctor.git",
        "vcs_info": {"vcs": "git", "requested_revision": "v0.2.0", "commit_id": "5fb953f" + "0" * 33},
    }
    assert command_for(record, "repair") == (
        'pip install "cachedoctor[repair] @ git+https://git.example.org/ml/cachedoctor.git@v0.2.0"'
    )
    record["vcs_info"] = {"vcs": "git", "commit_id": "5fb953f" + "0" * 33}  # no revision asked for
    assert (
        command_for(record, "repair")
        == 'pip install "cachedoctor[repair] @ git+https://git.example.org/ml/cachedoctor.git"'
    )


def test_a_wheel_file_is_named_while_it_exists(tmp_path: Path) -> None:
    wheel = tmp_path / "cachedoctor-0.2.0-py3-none-any.whl"
    record = {"url": wheel.as_uri(), "archive_info": {"hashes": {"sha256": "0" * 64}}}
    assert command_for(record, "repair") == 'pip install "cachedoctor[repair]"'  # not there: the plain line
    wheel.write_bytes(b"PK")
    assert command_for(record, "repair") == f'pip install "cachedoctor[repair] @ {wheel.as_uri()}"'


def test_a_remote_archive_is_named_as_given() -> None:
    url = "https://files.example.org/cachedoctor-0.2.0.tar.gz"
    assert command_for({"url": url, "archive_info": {}}, "repair") == f'pip install "cachedoctor[repair] @ {url}"'


def test_a_record_without_a_url_gives_the_plain_line() -> None:
    assert command_for({"dir_info": {}}, "repair") == 'pip install "cachedoctor[repair]"'
