"""The documented user problem (examples/usr_dir/my_corpus.py) through the CLI, as a user runs it."""

import subprocess
import sys

from tests.testing import REPO_ROOT, write_corpus_slice

USR_DIR = REPO_ROOT / "examples" / "usr_dir"


def _datagen(*args):
    return subprocess.run([sys.executable, "-m", "t2t_keras.bin.datagen", "--noprogress", *args], capture_output=True, text=True)


def test_user_problem_via_t2t_usr_dir(tmp_path):
    raw = write_corpus_slice(tmp_path / "raw")
    result = _datagen(f"--t2t_usr_dir={USR_DIR}", "--problem=translate_ende_my_corpus", f"--tmp_dir={raw}", f"--data_dir={tmp_path / 'data'}")
    assert result.returncode == 0, result.stderr
    assert "translate_ende_my_corpus: wrote vocabulary translate_ende_my_corpus.spm.model (1000 pieces)" in result.stdout
    assert "train: 2000 pairs in 2 shards" in result.stdout and "dev: 100 pairs in 1 shards" in result.stdout

    result = _datagen(f"--t2t_usr_dir={USR_DIR}", "--registry_help")
    assert "  translate_ende_my_corpus\n      English -> German over my own line-aligned files" in result.stdout
