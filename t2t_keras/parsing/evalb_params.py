"""EVALB's parameter files: COLLINS.prm (the default) and new.prm built in, or any file in
their format (`read_params`), as `EvalbParams` for `parsing.evalb`."""

from __future__ import annotations

import dataclasses
import functools
import os

from t2t_keras import files
from t2t_keras.errors import UsageError

DEFAULT_PARAMS = "COLLINS.prm"


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter file; a key the file leaves out keeps EVALB's default."""

    max_error: int = 10
    cutoff_length: int = 40
    labeled: bool = True
    delete_labels: frozenset[str] = frozenset()
    delete_labels_for_length: frozenset[str] = frozenset()
    quote_labels: frozenset[str] = frozenset()
    equal_labels: frozenset[frozenset[str]] = frozenset()  # EQ_LABEL pairs
    equal_words: frozenset[frozenset[str]] = frozenset()  # EQ_WORD pairs

    def same_label(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) in self.equal_labels

    def same_word(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) in self.equal_words


# Parameter file key -> (EvalbParams field, kind of value). DEBUG only changes the C program's
# printout: it is checked, not kept.
PARAM_KEYS = {
    "DEBUG": (None, "number"),
    "MAX_ERROR": ("max_error", "number"),
    "CUTOFF_LEN": ("cutoff_length", "number"),
    "LABELED": ("labeled", "0 or 1"),
    "DELETE_LABEL": ("delete_labels", "label"),
    "DELETE_LABEL_FOR_LENGTH": ("delete_labels_for_length", "label"),
    "QUOTE_LABEL": ("quote_labels", "label"),
    "EQ_LABEL": ("equal_labels", "pair"),
    "EQ_WORD": ("equal_words", "pair"),
}


# EVALB's own two parameter files, shipped in evalb_prm/ (their settings in their format; the
# comments are ours).
BUILT_IN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "evalb_prm")
BUILT_IN_PARAMS = ("COLLINS.prm", "new.prm")


def read_params(path: str = DEFAULT_PARAMS, flag: str | None = None) -> EvalbParams:
    """The settings of an EVALB parameter file: a path, or COLLINS.prm / new.prm (EVALB's own,
    built in) when no such file exists."""
    where = f"{flag}={path}" if flag else path
    if files.isfile(path):
        return parse_params(files.read_bytes(path).decode("utf-8", errors="replace"), where)
    if path in BUILT_IN_PARAMS:
        return parse_params(files.read_text(os.path.join(BUILT_IN_DIR, path)), where)
    raise UsageError(f"{where}: no such file; give a path or one of EVALB's own: {', '.join(BUILT_IN_PARAMS)}.")


@functools.cache
def default_params() -> EvalbParams:
    return read_params(DEFAULT_PARAMS)


def parse_params(text: str, where: str) -> EvalbParams:
    """The settings of parameter file text: "KEY value" lines and # comments, as EVALB reads
    them; a UsageError names `where` and the line of anything else."""
    settings: dict = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        try:
            _set_param(settings, fields[0], fields[1:])
        except ValueError as e:
            raise UsageError(f"{where}:{number}: {e}") from None
    return EvalbParams(**settings)


def _set_param(settings: dict, key: str, values: list[str]) -> None:
    """Adds one parameter line to `settings` (EvalbParams fields); ValueError says what is wrong."""
    if key not in PARAM_KEYS:
        raise ValueError(f"unknown key {key} (EVALB's keys: {' '.join(PARAM_KEYS)}).")
    field, kind = PARAM_KEYS[key]
    wanted = 2 if kind == "pair" else 1
    if len(values) != wanted:
        raise ValueError(f"{key} takes {wanted} value{'s' if wanted > 1 else ''}, not {len(values)}.")
    if kind == "label":
        settings[field] = settings.get(field, frozenset()) | {values[0]}
    elif kind == "pair":
        settings[field] = settings.get(field, frozenset()) | {frozenset(values)}
    elif not values[0].isdigit() or (kind == "0 or 1" and values[0] not in ("0", "1")):
        raise ValueError(f"{key} takes {'a whole number' if kind == 'number' else kind}, not {values[0]}.")
    elif field:
        settings[field] = values[0] == "1" if kind == "0 or 1" else int(values[0])
