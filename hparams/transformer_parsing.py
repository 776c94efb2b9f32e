"""Hparams sets for constituency parsing (section 6.3 of the paper)."""

import dataclasses

from t2t_keras.hparams.transformer import transformer_base, transformer_demo
from t2t_keras.registry import register_hparams


@register_hparams()
def transformer_parsing():
    """The paper's WSJ parser: 4 layers, d_model=1024, otherwise the en-de base model.

    Linearised trees are about 3x as long as their sentences: pairs up to 1024 tokens are kept.
    """
    return dataclasses.replace(transformer_base(), num_hidden_layers=4, hidden_size=1024, max_length=1024)


@register_hparams()
def transformer_parsing_tiny():
    """4 layers of transformer_tiny's width with transformer_demo's short warmup, for tests (not
    in the paper). Unshared embeddings: the treebank sample has a vocabulary per side."""
    return dataclasses.replace(
        transformer_demo(), num_hidden_layers=4, max_length=1024, shared_embedding_and_softmax_weights=False
    )
