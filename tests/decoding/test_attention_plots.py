"""Attention weights of a trained model and their heatmaps."""

import os
import subprocess
import sys

import numpy as np
import pytest

from t2t_keras.decoding import attention_plots
from t2t_keras.checkpoints import RunDir, restore_model

SOURCE, TARGET = "Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."


@pytest.fixture(scope="module")
def weights_and_tokens(trained_output_dir):
    run_dir = RunDir(trained_output_dir)
    model, _ = restore_model(run_dir)
    return model, attention_plots.attention_for_pair(model, run_dir.vocabularies(), SOURCE, TARGET)


def test_weights_are_distributions_and_the_decoder_is_causal(weights_and_tokens):
    model, (weights, source_tokens, target_tokens) = weights_and_tokens
    heads, layers = model.hparams.num_heads, model.hparams.num_hidden_layers
    assert source_tokens[-1] == target_tokens[-1] == "</s>" and "▁Zwei" in target_tokens[0]
    S, T = len(source_tokens), len(target_tokens)
    expected = {"encoder_self": (heads, S, S), "decoder_self": (heads, T, T), "encoder_decoder": (heads, T, S)}
    for kind, shape in expected.items():
        assert len(weights[kind]) == layers
        for layer in weights[kind]:
            assert layer.shape == shape
            np.testing.assert_allclose(layer.sum(-1), 1.0, atol=1e-5)
    for layer in weights["decoder_self"]:
        assert np.all(np.triu(layer, k=1) == 0.0)  # no position sees a later one


def test_first_encoder_layer_weights_match_a_numpy_recomputation(weights_and_tokens):
    """softmax(Q K^T / sqrt(d_k)) from the layer's own projections, with padding masked."""
    import tensorflow as tf

    model, _ = weights_and_tokens
    inputs = tf.constant([[5, 6, 7, 1, 0, 0]])
    weights = model.attention_weights(inputs, tf.constant([[8, 9, 1]]))["encoder_self"][0][0].numpy()  # [h, S, S]
    x = model._embed_sources(inputs, training=False)
    attention = model.encoder_blocks[0].self_attention
    x = model.encoder_blocks[0].self_attention_residual.prepare(x)  # identity for post-norm
    heads, depth = attention.num_heads, attention.key_depth
    q = attention.query_dense(x).numpy()[0].reshape(-1, heads, depth).transpose(1, 0, 2)
    k = attention.key_dense(x).numpy()[0].reshape(-1, heads, depth).transpose(1, 0, 2)
    logits = q @ k.transpose(0, 2, 1) / np.sqrt(depth)
    logits[:, :, 4:] = -np.inf  # padding keys
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights, expected, atol=1e-5)


def test_figure_has_the_tokens_on_its_axes_and_pngs_are_written(weights_and_tokens, tmp_path):
    _, (weights, source_tokens, target_tokens) = weights_and_tokens
    figure = attention_plots.attention_figure(weights["encoder_decoder"][0], target_tokens, source_tokens, "t")
    ax = figure.axes[0]
    assert [label.get_text() for label in ax.get_xticklabels()] == source_tokens
    assert [label.get_text() for label in ax.get_yticklabels()] == target_tokens
    paths = attention_plots.write_attention_pngs(weights, source_tokens, target_tokens, str(tmp_path))
    assert sorted(os.path.basename(p) for p in paths) == sorted(
        f"{kind}_layer{n}.png" for kind in attention_plots.KINDS for n in (1, 2)
    )
    from matplotlib import image

    picture = image.imread(paths[0])
    assert picture.shape[0] > 300 and picture.shape[1] > 300 and picture.std() > 0.05  # a drawing, not blank
    assert not [n for n in os.listdir(tmp_path) if "incomplete" in n]


@pytest.mark.slow
def test_cli_translates_then_draws(trained_output_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "t2t_keras.bin.visualize", f"--output_dir={trained_output_dir}", f"--sentence={SOURCE}",
         f"--plot_dir={tmp_path}", "--decode_hparams=beam_size=1,extra_length=10"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("translation: ") and "wrote 6 PNGs" in result.stdout
    assert len(os.listdir(tmp_path)) == 6
