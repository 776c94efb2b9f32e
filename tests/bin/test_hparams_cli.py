import json
import subprocess
import sys

from t2t_keras import registry
from t2t_keras.hparams_lib import HParams
from tests.testing import assert_one_line_error


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "t2t_keras.bin.hparams", *args], capture_output=True, text=True)


def test_prints_the_resolved_set_as_json():
    result = _cli("--hparams_set=transformer_big", "--hparams=num_hidden_layers=4")
    assert result.returncode == 0, result.stderr
    assert HParams.from_json(result.stdout) == registry.hparams("transformer_big", "num_hidden_layers=4")
    assert json.loads(result.stdout)["num_hidden_layers"] == 4


def test_registry_help_lists_everything():
    result = _cli("--registry_help")
    assert result.returncode == 0, result.stderr
    for line in ("problems:", "hparams sets:", "  transformer_base_learned_pos\n      Table 3 row E", "models:", "  transformer"):
        assert line in result.stdout
    # Whole descriptions, not their first lines: the end of transformer_demo's docstring is there.
    assert "checkpoint averaging in a short run." in " ".join(result.stdout.split())


def test_bad_input_is_one_line_and_status_2():
    for args, message in (
        (["--hparams_set=transformer_bgi"], "error: unknown hparams set 'transformer_bgi'; did you mean 'transformer_big'"),
        (["--hparams_set=transformer_big", "--hparams=num_hiden_layers=4"], "error: --hparams: unknown hparam 'num_hiden_layers'; did you mean 'num_hidden_layers'?"),
        ([], "error: --hparams_set is required"),
    ):
        assert_one_line_error(_cli(*args), message)


def test_describe_shows_a_sets_values_and_the_decode_settings():
    result = _cli("--describe", "--hparams_set=transformer_big", "--hparams=num_hidden_layers=4")
    assert result.returncode == 0, result.stderr
    assert "  hidden_size = 1024 (int, model): d_model" in result.stdout
    assert "  num_hidden_layers = 4 (int, model)" in result.stdout
    assert "  hidden_size (int, model): d_model" in _cli("--describe").stdout  # no set: meanings only

    result = _cli("--describe_decode", "--problem=parsing_english_ptb_sample")
    assert result.returncode == 0, result.stderr
    assert "  beam_size = 21 (int, decoding): hypotheses kept per sentence" in result.stdout
    assert "  extra_length = 300 (int, decoding)" in result.stdout
    decoder_help = subprocess.run([sys.executable, "-m", "t2t_keras.bin.decoder", "--help"], capture_output=True, text=True).stdout
    assert "decode settings (--decode_hparams=" in decoder_help and "  alpha = 0.6 (float, decoding): GNMT length penalty" in decoder_help
