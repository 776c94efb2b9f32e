"""The installed layout: catalogs only under t2t_keras, every package listed in pyproject; the
wheel as a user installs it translates as the checkout does."""

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.testing import REPO_ROOT, build_wheel, run_side_by_side, source_copy

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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The working tree's wheel, built once for the tests of it."""
    return build_wheel(tmp_path_factory.mktemp("dist"))


def test_wheel_has_only_the_t2t_keras_top_level_and_no_treebank_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
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


# Every pinned version as a wheel, fetched by make's install step: pip's resolution below is offline.
WHEELHOUSE = REPO_ROOT / ".venv" / "wheelhouse"
SENTENCES = ["A dog runs in the snow.", "Two men are playing football in a park.", "A little girl is eating an apple."]
# The Python API as a user of the wheel calls it: the run dir, then the sentences; prints the
# translations as JSON, where t2t_keras imports from, and whether the native kernels' C++ sources
# (compiled on first use) came with the wheel.
PYTHON_API = """
import json, sys
import t2t_keras
from t2t_keras import Translator
from t2t_keras.kernels import native
translations = Translator.from_preset(sys.argv[1]).generate(sys.argv[2:])
sources = all((native.SOURCE_DIR / name).is_file() for name in native.SOURCES)
print(json.dumps({"translations": translations, "package": t2t_keras.__file__, "native_sources": sources}))
"""


@pytest.mark.slow
def test_the_installed_wheel_translates_as_the_checkout_does(wheel, trained_output_dir, tmp_path):
    """Into a fresh venv, offline: pip resolves the wheel's dependencies from the pinned wheels
    alone (no extra among them); the wheel itself installed (not editable), its dependencies those
    same versions from the test venv (their install is pip's business and half a minute), run from
    outside the checkout it translates by a command and by the Python API as the checkout does."""
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} is missing: make's install step fetches it (make .venv/.installed)"
    started = time.monotonic()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
           "--find-links", str(WHEELHOUSE), "-c", str(REPO_ROOT / "constraints.txt")]
    resolved = subprocess.run([*pip, "--dry-run", "--report", str(tmp_path / "report.json"), str(wheel)],
                              capture_output=True, text=True)
    assert resolved.returncode == 0, resolved.stderr
    versions = {item["metadata"]["name"].lower(): item["metadata"]["version"]
                for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    assert {"tensorflow", "keras", "tensorflow-text", "sentencepiece", "sacrebleu"} <= versions.keys()
    assert not {"nltk", "pytest", "eflomal"} & versions.keys()  # extras stay extras
    from importlib.metadata import version

    assert {name: version(name) for name in versions if name != "t2t-keras"} == {
        name: found for name, found in versions.items() if name != "t2t-keras"}  # the test venv's very versions

    installed = subprocess.run([*pip, "--no-deps", "--no-compile", str(wheel)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    # The dependencies from the test venv's site-packages, after the venv's own: a path in a .pth
    # file is not a site directory, so the checkout's editable install there is not seen.
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    ready = time.monotonic()

    work = tmp_path / "work"  # outside the checkout: nothing can import from it
    work.mkdir()
    (work / "input.en").write_text("".join(line + "\n" for line in SENTENCES))
    wheel_command, api = run_side_by_side(
        [[str(venv / "bin" / "t2t-keras-decoder"), f"--output_dir={trained_output_dir}", "--decode_from_file=input.en",
          "--decode_to_file=wheel.de"],
         [str(python), "-c", PYTHON_API, trained_output_dir, *SENTENCES]],
        cwd=work,
    )
    for result in (wheel_command, api):
        assert result.returncode == 0, result.stderr
    print(f"wheel resolved and installed in {ready - started:.0f} s, two decodes in {time.monotonic() - ready:.0f} s")

    from t2t_keras import Translator  # the checkout's, in this process (its command decodes as it does: test_file_decoding)

    expected = Translator.from_preset(trained_output_dir, tune_process=False).generate(SENTENCES)
    assert len(expected) == len(SENTENCES) and all(expected)
    assert (work / "wheel.de").read_text().splitlines() == expected
    reported = json.loads(api.stdout.splitlines()[-1])
    assert reported["translations"] == expected
    assert reported["package"].startswith(str(venv))  # the wheel's own files
    assert reported["native_sources"]
