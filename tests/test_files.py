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
