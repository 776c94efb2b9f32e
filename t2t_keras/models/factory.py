"""The one model factory: the registered model an hparams set names, for given vocabularies.

The trainer builds its model here, and `checkpoints.build_model` builds a trained run's
model here (for decoding, exporting, averaging, warm starts), so the two cannot drift.
"""

from __future__ import annotations

from t2t_keras import registry
from t2t_keras.errors import UsageError


def structure_tokens(hparams, problem, vocabularies) -> list[int] | None:
    """The target ids that are not copies of the source (copy_position_encoding needs them), or
    None when the hparams do not use copy positions; a one-line error when the problem has none."""
    if not hparams.copy_position_encoding:
        return None
    tokens = problem.structure_tokens(vocabularies)
    if tokens is None:
        raise UsageError(
            f"copy_position_encoding=true needs targets that copy the source; {problem.name}'s do not "
            "(use it with parsing_english_ptb_sample_words)."
        )
    return tokens


def build_model(hparams, vocabularies, structure_tokens: list[int] | None = None, dtype=None):
    """`registry.model(hparams.model)` for the source and target vocabularies, built (fresh
    weights). `dtype`: a Keras dtype policy name ("mixed_bfloat16"), default the global one."""
    return registry.model(hparams.model).from_hparams(
        hparams, vocabularies.source.size, vocabularies.target.size, dtype=dtype, structure_tokens=structure_tokens
    )


PRECISION_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}  # DecodeHParams.precision -> Keras dtype policy


def in_precision(model, precision: str):
    """`model` itself for "fp32"; for "bf16", a copy whose weights, activations and caches are
    bfloat16 (its logits still come out float32), with `model`'s weights rounded to it."""
    if precision == "fp32":
        return model
    copy = type(model).from_hparams(model.hparams, model.vocab_size, model.target_vocab_size,
                                    dtype=PRECISION_DTYPES[precision], structure_tokens=model.structure_tokens)
    copy.set_weights(model.get_weights())  # Keras casts each weight to the copy's dtype
    return copy
