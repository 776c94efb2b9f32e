"""Kernel alternatives chosen at trainer start by timing them on the machine that trains (the
mechanism decoding's choices share: kernels/choices.py).

A kernel that wins on one CPU can lose on another (docs/results/training_speed.md, "Kernel choices"): which
orientation of a large matrix product oneDNN runs fastest differs between AVX2 and AVX-512
EPYCs. So every such alternative is measured here, once per start, at the model's own sizes
(capped, to take a few seconds), and never inferred from a CPU's name; a resumed run keeps
the choices of its first start (recorded in run.json), so that it ends as an uninterrupted
run would. `--kernel_choices` forces any of them (reproducing a run, comparing two). The
alternatives compute the same values: forcing one changes speed, not the loss trajectory
beyond float rounding. Choices are logged at --verbosity=1.

Under mixed precision the output layer's products may also run in the layers' compute dtype
(`loss_products=compute`: bfloat16 inputs, the logits rounded to bfloat16 before the float32
softmax, as every other layer's outputs are) instead of the variables' float32: on a CPU with
AMX that is several times faster, where emulated bfloat16 is slower than float32.

Layer normalisation may run as one native kernel each way (`layer_norm=native`,
kernels/native/; post-norm's dropout and residual add inside the same kernel), and so may the
FFN's bias + ReLU (`bias_relu=native`) and the output layer's softmax cross-entropy
(`loss_layout=native_rows|native_rows_in_chunks`), where those kernels could be built on the
machine; else they are not offered.
"""

from __future__ import annotations

from absl import logging

from t2t_keras.kernels import bias_relu, choices, layer_norm, native, output_loss
from t2t_keras.layers.dense import Dense
from t2t_keras.layers.normalization import LayerNorm

# name -> the values it may take; each is an attribute of the model's layers, set by `apply`.
# In this order: the layout is timed in the products' dtype chosen first.
ALTERNATIVES = {"loss_products": ("variable", "compute"), "loss_layout": output_loss.LAYOUTS,
                "layer_norm": layer_norm.IMPLEMENTATIONS, "bias_relu": bias_relu.IMPLEMENTATIONS}
# The native kernels' choices: name -> the layers whose `implementation` it sets.
NATIVE = {"layer_norm": LayerNorm, "bias_relu": Dense}
# The values that run native kernels: offered only where they were built.
NATIVE_VALUES = {"layer_norm": ("native",), "bias_relu": ("native",), "loss_layout": output_loss.NATIVE_LAYOUTS}
# What a run started before a choice existed computed: its resumes keep that.
BEFORE_THE_CHOICE = {"loss_products": "variable", "layer_norm": "graph", "bias_relu": "graph"}
MEASURED_ROWS = 1024  # the measurement's [tokens, vocab] product is capped at these sizes
MEASURED_VOCAB = 8192


def parse(flag_value: str) -> dict:
    """'loss_layout=columns,...' -> {"loss_layout": "columns"}; '' -> {} (measure all)."""
    return choices.parse(flag_value, ALTERNATIVES, "--kernel_choices")


def choose(model, hparams, forced: dict, kept: dict | None = None, measure=None) -> dict:
    """Sets each alternative on `model` (`kernels.choices.resolve`): forced ones as given, else
    the value `kept` from the run's first start (run.json: a run keeps its numerics through
    resumes; one started before a choice existed keeps what it computed then), else the only one
    that differs here, else the fastest when timed here. Returns the record for run.json:
    {name: value, "measured_ms": {name: {value: ms}}} (measured_ms as measured at this start, or as kept).

    `measure` (tests) replaces the timing: (name, model, hparams) -> {value: ms}.
    """
    measure = measure or _Timings()
    if native.library() is None:
        logging.warning("Kernel choices: the native kernels are not available here (%s); TensorFlow's ops run "
                        "in their place (the same values, a slower step).", native.unavailable_reason())
    record, how = choices.resolve(
        ALTERNATIVES, lambda name: _options(name, model), forced, lambda name: measure(name, model, hparams), kept,
        BEFORE_THE_CHOICE, apply=lambda name, value: apply(model, {name: value}), source="--kernel_choices",
        why_unavailable=lambda name, value: native.unavailable_reason(), forceable=_built)
    logging.debug("Kernel choices: %s.", "; ".join(f"{name}={record[name]}, {how[name]}" for name in ALTERNATIVES))
    return record


def apply(model, record: dict) -> None:
    """Sets the chosen values on the layers that read them."""
    for name, value in record.items():
        if name in NATIVE:
            for layer in model._flatten_layers():
                if isinstance(layer, NATIVE[name]):
                    layer.implementation = value
        elif name in ALTERNATIVES:
            setattr(model.softmax_projection, name, value)


def _built(name: str) -> tuple:
    """The values of `name` that can run here: all but the native kernels where they did not build."""
    if native.library() is None:
        return tuple(value for value in ALTERNATIVES[name] if value not in NATIVE_VALUES.get(name, ()))
    return ALTERNATIVES[name]


def _options(name: str, model) -> tuple:
    """The values of `name` that differ on this model: the products' dtypes only under mixed
    precision; the native kernels only where they were built."""
    projection = model.softmax_projection
    if name == "loss_products" and projection.compute_dtype == projection.embeddings.dtype:
        return ("variable",)
    return _built(name)


class _Timings:
    """The measurements of one start: each layout timed once per products' dtype."""

    def __init__(self):
        self.by_dtype = {}

    def layouts(self, model, hparams, dtype) -> dict:
        if dtype not in self.by_dtype:
            projection = model.softmax_projection
            self.by_dtype[dtype] = output_loss.layout_timings(
                min(hparams.tokens_per_batch, MEASURED_ROWS), projection.hidden_size,
                min(projection.vocab_size, MEASURED_VOCAB), dtype=dtype)
        return self.by_dtype[dtype]

    def __call__(self, name: str, model, hparams) -> dict:
        projection = model.softmax_projection
        if name == "loss_products":
            dtypes = {"variable": projection.embeddings.dtype, "compute": projection.compute_dtype}
            return {value: min(self.layouts(model, hparams, dtype).values()) for value, dtype in dtypes.items()}
        if name == "loss_layout":
            return self.layouts(model, hparams, projection.products_dtype())
        rows = min(hparams.tokens_per_batch, MEASURED_ROWS)
        if name == "layer_norm":
            return layer_norm.implementation_timings(rows, projection.hidden_size, dtype=projection.compute_dtype)
        if name == "bias_relu":
            return bias_relu.implementation_timings(rows, hparams.filter_size, dtype=projection.compute_dtype)
        raise KeyError(name)
