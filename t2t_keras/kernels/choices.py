"""Kernel alternatives chosen by timing them on the machine that runs them: the one mechanism
behind training's choices (`training/kernel_choices.py`) and decoding's
(`decoding/kernel_choices.py`).

The alternatives of a choice compute the same values (to float rounding), and which is
fastest depends on the CPU (docs/results/training_speed.md, "Kernel choices"): each is
measured where it runs, at the sizes it runs at, never inferred from a CPU's name. A choice
may be forced (reproducing a run, comparing two), kept from a record (a resumed training run
keeps its first start's) or the only one available; the record says which it was.
"""

from __future__ import annotations

from typing import Callable

from absl import logging

from t2t_keras.errors import UsageError


def parse(text: str, alternatives: dict, source: str) -> dict:
    """'name=value,name=value' (or ';'-separated) -> {name: value}; '' -> {} (choose each here).
    An unknown name or value is one line naming `source` and listing the choices."""
    forced = {}
    for item in filter(None, (part.strip() for part in text.replace(";", ",").split(","))):
        name, _, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if value not in alternatives.get(name, ()):
            known = "; ".join(f"{key}={'|'.join(values)}" for key, values in alternatives.items())
            raise UsageError(f"{source}: '{item}' is not a choice; the choices are {known}.")
        forced[name] = value
    return forced


def resolve(alternatives: dict, options: Callable[[str], tuple], forced: dict, measure: Callable[[str], dict],
            kept: dict | None = None, before_the_choice: dict | None = None,
            apply: Callable[[str, str], None] = lambda name, value: None, source: str = "kernel choices",
            why_unavailable: Callable[[str, str], str] = lambda name, value: "not offered here",
            forceable: Callable[[str], tuple] | None = None) -> tuple[dict, dict]:
    """Each choice of `alternatives` ({name: its values}, resolved in order, each `apply`d before
    the next is measured): forced ones as given (one line if `forceable(name)`, by default
    `options(name)`, does not hold it here, with `why_unavailable`), else the value `kept` from a record (one that is not
    available here falls back to the first available, with a warning), else the value a record
    made before the choice existed computed (`before_the_choice`, for a kept record only), else
    the only one offered, else the fastest by `measure(name)` -> {value: ms}.

    Returns (record, how): record {name: value, "measured_ms": {name: {value: ms}}} (measured_ms
    as measured now, or as kept); how {name: why that value}, for the log."""
    kept = kept or {}
    before_the_choice = before_the_choice or {}
    record, measured, how = {}, dict(kept.get("measured_ms", {})), {}
    forceable = forceable or options
    for name in alternatives:
        offered = options(name)
        if name in forced:
            if forced[name] not in forceable(name):
                raise UsageError(f"{source}: {name}={forced[name]} is not available here: "
                                 f"{why_unavailable(name, forced[name])}.")
            record[name], how[name] = forced[name], "forced"
        elif kept.get(name) in offered:
            record[name], how[name] = kept[name], "kept from the record"
        elif kept.get(name) in alternatives[name]:
            record[name], how[name] = offered[0], f"the record's {kept[name]} is not available here"
            logging.warning("Kernel choices: the run's first start chose %s=%s, which is not available here (%s); "
                            "%s=%s computes the same values to float rounding.", name, kept[name],
                            why_unavailable(name, kept[name]), name, offered[0])
        elif kept and name in before_the_choice:
            record[name], how[name] = before_the_choice[name], "as the run's first start, before this choice existed"
        elif len(offered) == 1:
            record[name], how[name] = offered[0], "the only one here"
        else:
            measured[name] = measure(name)
            record[name], how[name] = min(measured[name], key=measured[name].get), f"measured (ms) {measured[name]}"
        apply(name, record[name])
    if measured:
        record["measured_ms"] = measured
    return record, how
