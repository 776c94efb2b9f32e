"""Kernel alternatives chosen at trainer start by timing them on the machine that trains.

A kernel that wins on one CPU can lose on another (docs/results/training_speed.md, "Kernel choices"): which
orientation of a large matrix product oneDNN runs fastest differs between AVX2 and AVX-512
EPYCs. So every such alternative is measured here, once per start, at the model's own sizes
(capped, to take a few seconds), and never inferred from a CPU's name; a resumed run keeps
the choices of its first start (recorded in run.json), so that it ends as an uninterrupted
run would. `--kernel_choices` forces any of them (reproducing a run, comparing two). The
alternatives compute the same values: forcing one changes speed, not the loss trajectory
beyond float rounding. Choices are logged at --verbosity=1.
"""

from __future__ import annotations

from absl import logging

from t2t_keras.errors import UsageError
from t2t_keras.kernels import output_loss

# name -> the values it may take; each is an attribute of the model's layers, set by `apply`.
ALTERNATIVES = {"loss_layout": output_loss.LAYOUTS}
MEASURED_ROWS = 1024  # the measurement's [tokens, vocab] product is capped at these sizes
MEASURED_VOCAB = 8192


def parse(flag_value: str) -> dict:
    """'loss_layout=columns,...' -> {"loss_layout": "columns"}; '' -> {} (measure all)."""
    forced = {}
    for item in filter(None, (part.strip() for part in flag_value.split(","))):
        name, _, value = item.partition("=")
        if name not in ALTERNATIVES or value not in ALTERNATIVES.get(name, ()):
            known = "; ".join(f"{key}={'|'.join(values)}" for key, values in ALTERNATIVES.items())
            raise UsageError(f"--kernel_choices: '{item}' is not a choice; the choices are {known}.")
        forced[name] = value
    return forced


def choose(model, hparams, forced: dict, kept: dict | None = None, measure=None) -> dict:
    """Sets each alternative on `model`: forced ones as given, else the value `kept` from the
    run's first start (run.json: a run keeps its numerics through resumes), else the fastest
    when timed here. Returns the record for run.json: {name: value, "measured_ms": {name:
    {value: ms}}} (measured_ms as measured at this start, or as kept).

    `measure` (tests) replaces the timing: (name, model, hparams) -> {value: ms}.
    """
    measure = measure or _measure
    kept = kept or {}
    record, measured, how = {}, dict(kept.get("measured_ms", {})), {}
    for name in ALTERNATIVES:
        if name in forced:
            record[name], how[name] = forced[name], "forced"
        elif kept.get(name) in ALTERNATIVES[name]:
            record[name], how[name] = kept[name], "kept from run.json"
        else:
            measured[name] = measure(name, model, hparams)
            record[name], how[name] = min(measured[name], key=measured[name].get), f"measured (ms) {measured[name]}"
    apply(model, record)
    if measured:
        record["measured_ms"] = measured
    logging.debug("Kernel choices: %s.", "; ".join(f"{name}={record[name]}, {how[name]}" for name in ALTERNATIVES))
    return record


def apply(model, record: dict) -> None:
    """Sets the chosen values on the layers that read them."""
    model.softmax_projection.loss_layout = record["loss_layout"]


def _measure(name: str, model, hparams) -> dict:
    if name == "loss_layout":
        projection = model.softmax_projection
        return output_loss.layout_timings(
            min(hparams.tokens_per_batch, MEASURED_ROWS), projection.hidden_size,
            min(projection.vocab_size, MEASURED_VOCAB), dtype=projection.embeddings.dtype,
        )
    raise KeyError(name)
