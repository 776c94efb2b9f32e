"""The native kernels' build: compiled once per machine into the cache, refused cleanly."""

import os
import shutil
import stat

import pytest

from t2t_keras.kernels import native


def test_a_missing_compiler_is_named_and_nothing_is_built(tmp_path):
    library, reason = native.build_and_load("no-such-c++-compiler", tmp_path / "native")
    assert library is None
    assert reason == "no C++ compiler ('no-such-c++-compiler' is not on PATH; set CXX to one)"
    assert not (tmp_path / "native").exists()


def test_a_failing_build_says_so_in_one_line_and_leaves_no_library(tmp_path):
    compiler = tmp_path / "broken-g++"
    compiler.write_text("#!/bin/sh\necho 'fatal error: broken on purpose' >&2\nexit 3\n")
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    library, reason = native.build_and_load(str(compiler), tmp_path / "native")
    assert library is None
    assert reason.startswith("building the native kernels failed: ") and "exited with 3" in reason
    assert "\n" not in reason
    assert sorted(path.name for path in (tmp_path / "native").iterdir()) == [".lock"]


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="no C++ compiler here")
def test_the_library_is_built_once_then_loaded_from_the_cache():
    assert native.library() is not None, native.unavailable_reason()
    built = sorted((native.cache_dir() / "native").glob("ops-*.so"))
    inodes = {path: path.stat().st_ino for path in built}
    library, reason = native.build_and_load(os.environ.get("CXX", "g++"), native.cache_dir() / "native")
    assert reason is None and hasattr(library, "t2t_layer_norm") and hasattr(library, "t2t_layer_norm_grad")
    assert {path: path.stat().st_ino for path in sorted((native.cache_dir() / "native").glob("ops-*.so"))} == inodes
