"""The installed layout: catalogs only under t2t_keras, every package listed in pyproject."""

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.testing import REPO_ROOT, build_wheel, source_copy

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _source_packages():
    """Every directory with an __init__.py, under its installed name (hidden directories, such as
    the peers' venvs, and tests/ and build/ are not the package's)."""
    mapping = {v: k for k, v in PYPROJECT["tool"]["setuptools"]["package-dir"].items()}
    found = set()
    for root, directories, filenames in os.walk(REPO_ROOT):
        relative = Path(root).relative_to(REPO_ROOT)
        directories[:] = [name for name in directories
                          if not name.startswith(".") and (relative.parts or name not in ("tests", "build"))]
        if relative.parts and "__init__.py" in filenames:
            top = mapping.get(relative.parts[0], relative.parts[0])
            found.add(".".join([top, *relative.parts[1:]]))
    return found


def _package_directory(package):
    """The source directory of an installed package name, through package-dir's remapping."""
    remapped = PYPROJECT["tool"]["setuptools"]["package-dir"]
    for prefix in sorted(remapped, key=len, reverse=True):
        if package == prefix or package.startswith(prefix + "."):
            return REPO_ROOT / remapped[prefix] / Path(*package[len(prefix) :].split(".")[1:])
    return REPO_ROOT / Path(*package.split("."))


def test_every_package_directory_is_listed():
    """Code packages are the directories with an __init__.py (some with data files too); data-only
    ones are listed with their data."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    with_data = set(PYPROJECT["tool"]["setuptools"]["package-data"])
    code = _source_packages()
    assert code <= listed and listed - code <= with_data
    assert with_data <= listed


@pytest.mark.parametrize("package", sorted(PYPROJECT["tool"]["setuptools"]["package-data"]))
def test_data_packages_hold_their_data(package):
    """Each data-only package maps to a directory whose files match its package-data globs."""
    directory = _package_directory(package)
    for pattern in PYPROJECT["tool"]["setuptools"]["package-data"][package]:
        assert list(directory.glob(pattern)), f"{directory} has no {pattern}"


@pytest.mark.parametrize("catalog", ["problems", "hparams"])
def test_catalogs_refuse_their_top_level_name(catalog):
    """From the repo root `import hparams` must fail instead of registering a second copy."""
    result = subprocess.run(
        [sys.executable, "-c", f"import {catalog}"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert f"import this catalog as t2t_keras.{catalog}" in result.stderr


def test_wheel_has_only_the_t2t_keras_top_level_and_no_treebank_file(tmp_path):
    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    top_levels = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_levels == {"t2t_keras"}
    assert "t2t_keras/hparams/transformer.py" in names and "t2t_keras/problems/__init__.py" in names
    assert "t2t_keras/problems/data/multi30k/val.de.gz" in names  # the demo's corpus ships
    assert not [name for name in names if name.endswith(".mrg")]  # the PTB sample's terms are non-commercial (NOTICE)
    assert {"t2t_keras-0.1.0.dist-info/licenses/LICENSE", "t2t_keras-0.1.0.dist-info/licenses/NOTICE"} <= set(names)


def test_sdist_has_the_license_and_notice_and_no_treebank_file(tmp_path):
    """The sdist as setuptools' PEP 517 backend builds it (no network: no build isolation)."""
    code = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    source = source_copy(tmp_path)
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=source, check=True, capture_output=True, text=True)
    with tarfile.open(tmp_path / result.stdout.splitlines()[-1]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
        metadata = sdist.extractfile("t2t_keras-0.1.0/PKG-INFO").read().decode()
    assert {"LICENSE", "NOTICE", "pyproject.toml", "problems/data/multi30k/val.de.gz"} <= names
    assert not [name for name in names if name.endswith(".mrg")]
    assert "License-Expression: Apache-2.0" in metadata and "License-File: NOTICE" in metadata
