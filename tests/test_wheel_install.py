"""The wheel as a user installs it: built from the working tree, installed (not editable, no
extras) into a fresh venv with the versions of constraints.txt, and run from outside the
checkout, it translates with a trained run, by a command and by the Python API, exactly as the
checkout does."""

import json
import subprocess
import sys
import time

import pytest

from tests.testing import REPO_ROOT, build_wheel, run_side_by_side

pytestmark = pytest.mark.slow

# Every pinned version as a wheel, fetched by make's install step: the install below is offline.
WHEELHOUSE = REPO_ROOT / ".venv" / "wheelhouse"
SENTENCES = ["A dog runs in the snow.", "Two men are playing football in a park.", "A little girl is eating an apple."]
# The Python API as a user of the wheel calls it: the run dir, then the sentences; prints the
# translations as JSON, where t2t_keras imports from, whether nltk (an extra, not installed) does,
# and whether the native kernels' C++ sources (compiled on first use) came with the wheel.
PYTHON_API = """
import importlib.util, json, sys
import t2t_keras
from t2t_keras import Translator
from t2t_keras.kernels import native
translations = Translator.from_preset(sys.argv[1]).generate(sys.argv[2:])
nltk = importlib.util.find_spec("nltk") is not None
sources = all((native.SOURCE_DIR / name).is_file() for name in native.SOURCES)
print(json.dumps({"translations": translations, "package": t2t_keras.__file__, "nltk": nltk, "native_sources": sources}))
"""


def test_the_installed_wheel_translates_as_the_checkout_does(trained_output_dir, tmp_path):
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} is missing: make's install step fetches it (make .venv/.installed)"
    started = time.monotonic()
    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(  # no .pyc compiled ahead: half the install's time
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile", "--no-index",
         "--find-links", str(WHEELHOUSE), "-c", str(REPO_ROOT / "constraints.txt"), str(wheel)],
        capture_output=True, text=True,
    )
    assert install.returncode == 0, install.stderr
    installed = time.monotonic()

    work = tmp_path / "work"  # outside the checkout: nothing can import from it
    work.mkdir()
    (work / "input.en").write_text("".join(line + "\n" for line in SENTENCES))
    decode = [f"--output_dir={trained_output_dir}", "--decode_from_file=input.en"]
    wheel_command, api, checkout = run_side_by_side(
        [[str(venv / "bin" / "t2t-keras-decoder"), *decode, "--decode_to_file=wheel.de"],
         [str(python), "-c", PYTHON_API, trained_output_dir, *SENTENCES],
         [sys.executable, "-m", "t2t_keras.bin.decoder", *decode, "--decode_to_file=checkout.de"]],
        cwd=work,
    )
    for result in (wheel_command, api, checkout):
        assert result.returncode == 0, result.stderr
    print(f"wheel built and installed in {installed - started:.0f} s, three decodes in {time.monotonic() - installed:.0f} s")

    expected = (work / "checkout.de").read_text().splitlines()
    assert len(expected) == len(SENTENCES) and all(expected)
    assert (work / "wheel.de").read_text().splitlines() == expected
    reported = json.loads(api.stdout.splitlines()[-1])
    assert reported["translations"] == expected
    assert reported["package"].startswith(str(venv)) and not reported["nltk"]  # the wheel's own files, without the extras
    assert reported["native_sources"]
