"""The paper's Transformer hparams sets: base, big and every row of Table 3.

Each set is its parent with a few fields replaced. Unlisted values equal the base model,
as in the paper's Table 3. The paper trains base for 100K steps and big for 300K
(`--train_steps`), and averages the last 5 (base) or 20 (big) checkpoints.
"""

import dataclasses

from t2t_keras.hparams_lib import HParams
from t2t_keras.registry import register_hparams


@register_hparams()
def transformer_base():
    """Table 3 base: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, eps_ls=0.1 (65M params)."""
    return HParams()


@register_hparams()
def transformer_big():
    """Table 3 big: d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M params)."""
    return dataclasses.replace(
        transformer_base(),
        hidden_size=1024,
        filter_size=4096,
        num_heads=16,
        layer_prepostprocess_dropout=0.3,
    )


@register_hparams()
def transformer_big_enfr():
    """Big model for WMT14 en-fr: P_drop=0.1 instead of 0.3 (section 6.1)."""
    return dataclasses.replace(transformer_big(), layer_prepostprocess_dropout=0.1)


@register_hparams()
def transformer_prenorm():
    """tensor2tensor's later base recipe: pre-norm, attention/ReLU dropout 0.1, warmup 8000."""
    return dataclasses.replace(
        transformer_base(),
        norm_type="pre",
        attention_dropout=0.1,
        relu_dropout=0.1,
        adam_beta2=0.997,
        learning_rate=2.0,
        learning_rate_warmup_steps=8000,
    )


@register_hparams()
def transformer_tiny():
    """A 2-layer, d_model=128 model for tests and demos (not in the paper)."""
    return dataclasses.replace(
        transformer_base(), num_hidden_layers=2, hidden_size=128, filter_size=512, num_heads=4
    )


@register_hparams()
def transformer_demo():
    """transformer_tiny for `make demo` (not in the paper): a short warmup to a high peak
    learning rate (0.0044 after 400 steps), then a linear cooldown to 0 over the last 750
    steps, which is worth more than checkpoint averaging in a short run. `make demo` trains it
    1500 steps (~10 minutes on the Intel Xeon measured; 1200 steps took 4-24 minutes on the
    2-core EPYCs, Zen 5 to Zen 1): Multi30k en-de val BLEU about 37.8 with beam 4, alpha 2.0,
    against 36.6-37.0 for 1200 steps decoded the same way (docs/results/demo.md)."""
    return dataclasses.replace(
        transformer_tiny(), learning_rate_warmup_steps=400, learning_rate=1.0, learning_rate_cooldown_steps=750
    )


@register_hparams()
def transformer_multi30k():
    """A strong small model for Multi30k-sized data (29K pairs) on 2 CPU cores (not in the paper).

    3 layers of d_model 128, d_ff 512, 4 heads; residual dropout 0.2 and attention / ReLU
    dropout 0.1 (the small-data recipes' regularisation: the paper's base model overfits 29K
    pairs); a peak learning rate of 0.0022 after 800 warmup steps, then the paper's
    inverse square root decay, falling linearly to 0 over the last 1500 updates (+0.6 val BLEU
    over the same run without it, p = 0.02). Trained 6000 steps (4096 tokens each), the last 3
    checkpoints (500 steps apart) averaged, decoded with beam 8, alpha 1.5 and exact search, it
    was the one-model recipe of `examples/multi30k.sh` until transformer_multi30k_v2
    (docs/training.md, "Training a strong small model").
    """
    return dataclasses.replace(
        transformer_tiny(),
        num_hidden_layers=3,
        layer_prepostprocess_dropout=0.2,
        attention_dropout=0.1,
        relu_dropout=0.1,
        learning_rate=0.7,
        learning_rate_warmup_steps=800,
        learning_rate_cooldown_steps=1500,
    )


@register_hparams()
def transformer_multi30k_v2():
    """transformer_multi30k one layer deeper, at half the batch for twice the updates, with
    residual dropout 0.1 for the first 4000 updates and 0.2 after (not in the paper).

    The same training compute per model as transformer_multi30k's 6000 x 4096 tokens:
    `examples/multi30k.sh` trains it 12000 steps of 2048 tokens, twice (seeds 1 and 2), and
    decodes the two averaged models as one ensemble. The warmup (1600) and cooldown (3000)
    keep transformer_multi30k's fractions of the run. The lower early rate lets the model
    learn to use the source sooner; from update 4000 on, 0.2 keeps it from overfitting 29K
    pairs (Multi30k val, 2026-11-29: 41.18 alone against 40.21 and 40.33 at 0.2 throughout;
    docs/log/2026-11-22_to_2026-12-03.md, "Past 41.5", row d4late).
    """
    return dataclasses.replace(
        transformer_multi30k(),
        num_hidden_layers=4,
        tokens_per_batch=2048,
        learning_rate_warmup_steps=1600,
        learning_rate_cooldown_steps=3000,
        layer_prepostprocess_dropout_early=0.1,
        layer_prepostprocess_dropout_early_steps=4000,
    )


def _table3_row(name: str, doc: str, **changes) -> None:
    """Register `name` as transformer_base with one Table 3 row's changes."""

    def hparams_set():
        return dataclasses.replace(transformer_base(), **changes)

    hparams_set.__name__ = hparams_set.__qualname__ = name
    hparams_set.__doc__ = doc
    register_hparams(name)(hparams_set)


# Row (A): number of heads, with h * d_k = d_model held constant.
for _h, _depth in ((1, 512), (4, 128), (16, 32), (32, 16)):
    _table3_row(
        f"transformer_base_h{_h}",
        f"Table 3 row A: h={_h}, d_k=d_v={_depth}.",
        num_heads=_h,
        attention_key_depth=_depth,
        attention_value_depth=_depth,
    )
# Row (B): smaller attention key size d_k only (d_v stays 64).
for _dk in (16, 32):
    _table3_row(f"transformer_base_dk{_dk}", f"Table 3 row B: d_k={_dk}.", attention_key_depth=_dk)
# Row (C): model size.
for _n in (2, 4, 8):
    _table3_row(f"transformer_n{_n}", f"Table 3 row C: N={_n} layers.", num_hidden_layers=_n)
for _d, _depth in ((256, 32), (1024, 128)):
    _table3_row(
        f"transformer_base_d{_d}",
        f"Table 3 row C: d_model={_d}, d_k=d_v={_depth}.",
        hidden_size=_d,
        attention_key_depth=_depth,
        attention_value_depth=_depth,
    )
for _ff in (1024, 4096):
    _table3_row(f"transformer_base_ff{_ff}", f"Table 3 row C: d_ff={_ff}.", filter_size=_ff)
# Row (D): regularisation.
for _suffix, _p in (("drop0", 0.0), ("drop02", 0.2)):
    _table3_row(f"transformer_base_{_suffix}", f"Table 3 row D: P_drop={_p}.", layer_prepostprocess_dropout=_p)
for _suffix, _eps in (("ls0", 0.0), ("ls02", 0.2)):
    _table3_row(f"transformer_base_{_suffix}", f"Table 3 row D: eps_ls={_eps}.", label_smoothing=_eps)
# Row (E): learned positional embeddings instead of sinusoids.
_table3_row(
    "transformer_base_learned_pos",
    "Table 3 row E: learned positional embeddings instead of sinusoids.",
    positional_encoding="learned",
)
