"""Atomic writes: a file or directory appears complete or not at all, and a kill is repairable."""

import os

import pytest

from t2t_keras import files
from t2t_keras.errors import UsageError


def test_written_file_appears_whole_and_a_failure_leaves_nothing(tmp_path):
    path = str(tmp_path / "record.json")
    files.write_atomically(path, "first\n")
    with pytest.raises(RuntimeError):
        with files.atomic_path(path) as temporary, open(temporary, "w") as handle:
            handle.write("half of the sec")
            raise RuntimeError("killed")
    assert open(path).read() == "first\n"
    assert os.listdir(tmp_path) == ["record.json"]


def test_several_files_appear_together_or_not_at_all(tmp_path):
    paths = [str(tmp_path / f"shard-{i}") for i in range(3)]
    with pytest.raises(RuntimeError):
        with files.atomic_paths(paths) as temporaries:
            for temporary in temporaries:
                open(temporary, "w").write("data")
            raise RuntimeError("killed")
    assert os.listdir(tmp_path) == []
    with files.atomic_paths(paths) as temporaries:
        for temporary in temporaries:
            open(temporary, "w").write("data")
    assert sorted(os.listdir(tmp_path)) == ["shard-0", "shard-1", "shard-2"]


def test_a_directory_is_replaced_whole(tmp_path):
    target = str(tmp_path / "best")
    for version in ("1", "2"):
        with files.atomic_path(target) as temporary:
            os.makedirs(temporary)
            open(os.path.join(temporary, f"v{version}"), "w").write(version)
    assert os.listdir(target) == ["v2"]
    assert os.listdir(tmp_path) == ["best"]


def test_recover_rolls_back_a_swap_cut_between_its_two_renames(tmp_path):
    target = tmp_path / "best"
    (tmp_path / ".previous.best").mkdir()  # the old version, moved aside
    (tmp_path / ".previous.best" / "v1").write_text("1")
    (tmp_path / ".incomplete.best").mkdir()  # the new one, never moved in
    files.recover(str(target))
    assert os.listdir(tmp_path) == ["best"] and os.listdir(target) == ["v1"]
    (tmp_path / ".previous.best").mkdir()  # cut after the second rename: the new one stays
    files.recover(str(target))
    assert os.listdir(tmp_path) == ["best"] and os.listdir(target) == ["v1"]


def test_leftovers_of_a_killed_writer_are_removed(tmp_path):
    for name in (".incomplete.p-train-00000-of-00002", ".incomplete.p.spm.model", ".incomplete.other", "p-dev"):
        (tmp_path / name).write_text("x")
    files.remove_incomplete(str(tmp_path), "p")
    assert sorted(os.listdir(tmp_path)) == [".incomplete.other", "p-dev"]


def test_unwritable_directory_names_the_flag(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"^--data_dir=.*file/sub is not writable \(.*\); pick another directory\.$"):
        files.ensure_writable_dir(str(tmp_path / "file" / "sub"), "--data_dir")


def test_an_output_path_is_checked_before_any_work_and_nothing_is_made(tmp_path, monkeypatch):
    """A file's directory must exist (a mistyped one is not made); a directory is made with its
    parents later, so its nearest existing ancestor must be a writable directory. Each refusal
    names the path as given."""
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    monkeypatch.chdir(tmp_path)
    files.check_output_path("out.de", "--decode_to_file")
    files.check_output_path("dir/out.de", "--decode_to_file")
    files.check_output_path("dir", "--export_dir", directory=True)
    files.check_output_path("new/deeper/export", "--export_dir", directory=True)
    files.check_output_path("ram://nowhere/out.de", "--decode_to_file")  # its writer's refusal names it
    for path, directory, message in (
        ("new/out.de", False, "--flag=new/out.de: new does not exist; create it first, or choose another path."),
        ("file/out.de", False, f"--flag=file/out.de: {tmp_path / 'file'} is a file, not a directory; choose another path."),
        ("dir", False, "--flag=dir is a directory; name a file."),
        ("file", True, "--flag=file is a file; name a directory."),
        ("file/new/export", True, f"--flag=file/new/export: {tmp_path / 'file'} is a file, not a directory; choose another path."),
    ):
        with pytest.raises(UsageError) as refused:
            files.check_output_path(path, "--flag", directory)
        assert str(refused.value) == message
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # a directory of another user (root may write anywhere)
    with pytest.raises(UsageError) as refused:
        files.check_output_path("dir/out.de", "--flag")
    assert str(refused.value) == f"--flag=dir/out.de: {tmp_path / 'dir'} is not writable; choose another path."
    assert sorted(os.listdir(tmp_path)) == ["dir", "file"] and os.listdir(tmp_path / "dir") == []
