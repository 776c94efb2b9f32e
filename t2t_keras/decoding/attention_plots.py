"""Heatmaps of attention weights, the paper's Figures 3-5: one PNG per attention kind and
layer, a panel per head, with the subword tokens on the axes."""

from __future__ import annotations

import io
import os

import numpy as np

from t2t_keras import extras, files
from t2t_keras.token_ids import EOS_ID

KINDS = ("encoder_self", "decoder_self", "encoder_decoder")
EOS_LABEL = "</s>"
START_LABEL = "<s>"


def attention_for_pair(model, vocabularies, source: str, target: str) -> tuple[dict, list[str], list[str]]:
    """Weights of a teacher-forced pass of (source, target) as numpy, and both token lists."""
    import tensorflow as tf

    source_ids = vocabularies.source.encode(source, add_eos=True)
    target_ids = vocabularies.target.encode(target, add_eos=True)
    weights = model.attention_weights(tf.constant([source_ids], tf.int32), tf.constant([target_ids], tf.int32))
    weights = {kind: [np.asarray(layer)[0] for layer in layers] for kind, layers in weights.items()}
    return weights, _labels(vocabularies.source, source_ids), _labels(vocabularies.target, target_ids)


def _labels(vocabulary, ids):
    return [EOS_LABEL if i == EOS_ID else piece for i, piece in zip(ids, vocabulary.pieces(ids))]


def attention_figure(layer_weights: np.ndarray, rows: list[str], columns: list[str], title: str):
    """A matplotlib figure of one layer's weights [heads, queries, keys], a panel per head.

    A bare `Figure` (not pyplot): it renders to files without a display and leaves the
    process's pyplot state and backend alone.
    """
    extras.require("plots")
    from matplotlib.figure import Figure

    num_heads = layer_weights.shape[0]
    columns_per_row = int(np.ceil(np.sqrt(num_heads)))
    grid_rows = int(np.ceil(num_heads / columns_per_row))
    size = max(4.0, 0.22 * max(len(rows), len(columns)) + 1.5)
    figure = Figure(figsize=(size * columns_per_row, size * grid_rows))
    axes = figure.subplots(grid_rows, columns_per_row, squeeze=False)
    for head, ax in enumerate(axes.flat):
        if head >= num_heads:
            ax.axis("off")
            continue
        ax.imshow(layer_weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {head + 1}")
        ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=7)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def write_attention_pngs(weights: dict, source_tokens: list[str], target_tokens: list[str], plot_dir: str) -> list[str]:
    """Writes `plot_dir/{kind}_layer{N}.png` for every kind and layer; returns the paths."""
    # Rows are queries, columns keys. Decoder position t reads target token t-1 (the
    # shifted input, "<s>" first) and predicts token t: its rows are labelled with the token
    # they predict, its self-attention columns with the token they read.
    decoder_inputs = [START_LABEL] + target_tokens[:-1]
    axes_tokens = {
        "encoder_self": (source_tokens, source_tokens),
        "decoder_self": (target_tokens, decoder_inputs),
        "encoder_decoder": (target_tokens, source_tokens),
    }
    files.makedirs(plot_dir)
    paths = []
    for kind in KINDS:
        rows, columns = axes_tokens[kind]
        for layer, layer_weights in enumerate(weights[kind], start=1):
            figure = attention_figure(layer_weights, rows, columns, f"{kind.replace('_', '-')} attention, layer {layer}")
            path = os.path.join(plot_dir, f"{kind}_layer{layer}.png")
            image = io.BytesIO()
            figure.savefig(image, format="png", dpi=100)
            files.write_atomically(path, image.getvalue())
            paths.append(path)
    return paths
