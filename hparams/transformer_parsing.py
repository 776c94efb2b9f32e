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


@register_hparams()
def transformer_parsing_small():
    """A parser for a few thousand trees on 2 CPU cores (not in the paper): 4 pre-norm layers
    of d_model 256, d_ff 1024, 4 heads, residual dropout 0.3 and attention / ReLU dropout 0.1
    (small data); batches of 2048 target tokens, a warmup of 800 updates to a peak learning
    rate of 0.00177 and a linear cooldown over the last 1800. Pre-norm because the post-norm
    encoder collapses on these long sources (every position the same vector, uniform
    cross-attention); copy positions because without them the decoder loses its place in the
    source where words repeat (dev F1 61.6 -> 75.9 in the same 2400 steps); 2048-token batches
    for twice the updates of the first recipe's 4096 at the same target tokens because they
    parse better (6000 x 2048: dev F1 77.97 and 78.57 on two seeds; 3000 x 4096: 76.51-77.24
    on three): docs/results/parsing.md, "Tried, not adopted". For parsing_english_ptb_sample_words
    (one shared vocabulary, targets that copy the words); docs/parsing.md, "English constituency
    parsing"."""
    return dataclasses.replace(
        transformer_base(),
        num_hidden_layers=4,
        hidden_size=256,
        filter_size=1024,
        num_heads=4,
        norm_type="pre",
        layer_prepostprocess_dropout=0.3,
        attention_dropout=0.1,
        relu_dropout=0.1,
        tokens_per_batch=2048,
        learning_rate=0.8,
        learning_rate_warmup_steps=800,
        learning_rate_cooldown_steps=1800,
        max_length=1024,
        copy_position_encoding=True,
    )


@register_hparams()
def transformer_parsing_wsj():
    """The paper's WSJ parser shape (4 layers, d_model 1024, otherwise the en-de base model)
    with what made the sample's parser work: pre-norm and copy positions, for
    parsing_english_wsj_words (words in the targets). Residual, attention and ReLU dropout
    0.3 / 0.1 / 0.1 as transformer_parsing_small (the paper chose its dropout on section 22:
    tune it there). Sized for GPUs: ~25K target tokens per step = tokens_per_batch x replicas
    x gradient_accumulation_steps, as the paper's 8 x 3125."""
    return dataclasses.replace(
        transformer_parsing(),
        norm_type="pre",
        copy_position_encoding=True,
        layer_prepostprocess_dropout=0.3,
        attention_dropout=0.1,
        relu_dropout=0.1,
    )
