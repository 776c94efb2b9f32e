"""The decode step's kernel alternatives, chosen as training's are (`kernels/choices.py`): timed
on this machine at the search's own sizes when a model is loaded for decoding, forceable with
the decode setting `kernel_choices`, and recorded (`Translator.settings.kernel_choices`, the
decoder output's `.decode.json`, run.json's `decode_kernel_choices` for the trainer's dev
decoding, an export's metadata).

    step_product     the output product's orientation (layers/embedding.py): nn, nt or tn
    beam_candidates  a step's best tokens and log-probabilities: one native kernel, or top-k + softmax
    top_k            with a token filter (parsing): the native row top-k, or TensorFlow's by blocks
    attention        the step's self- and cross-attention: one native kernel each, or the graph's
                     products and softmax (whose every new shape costs oneDNN a new kernel)

The native values are offered only where the kernels were built and only for decoding in this
process: an export's graph holds TensorFlow's ops only (`GRAPH_ONLY`). Parsing the setting
loads no TensorFlow (a command checks its flags first). Every alternative gives the
same tokens, log-probabilities equal to float rounding. `int8_logits` is a decode setting, not
a choice (it changes the logits by its quantisation): the record says whether it runs.
"""

from __future__ import annotations

import dataclasses

from absl import logging

from t2t_keras.errors import UsageError
from t2t_keras.kernels import choices

ALTERNATIVES = {"step_product": ("nn", "nt", "tn"), "beam_candidates": ("native", "graph"), "top_k": ("native", "graph"),
                "attention": ("native", "graph")}
NATIVE_CHOICES = ("beam_candidates", "top_k", "attention")  # the choices whose value may be "native"
ATTENTION_TIMED_LENGTH = 32  # the cached positions the attention alternatives are timed at
NATIVE_VALUES = ("native",)
SOURCE = "kernel_choices"


@dataclasses.dataclass(frozen=True)
class DecodeKernels:
    """The kernels one search runs: what `graph_search.search_batch` and `beam_search` read."""

    step_product: str = "nn"
    beam_candidates: str = "graph"
    top_k: str = "graph"
    attention: str = "graph"
    int8_logits: bool = False
    measured_ms: tuple = dataclasses.field(default=(), compare=False)  # ((name, ((value, ms), ...)), ...)

    @property
    def output_product(self) -> str:
        """What `SharedEmbedding.output_weights` prepares: "int8", or the float product's orientation."""
        return "int8" if self.int8_logits else self.step_product

    @property
    def native_choices(self) -> list[str]:
        """The choices that run native kernels (none may be in an exported graph)."""
        return [f"{name}=native" for name in NATIVE_CHOICES if getattr(self, name) == "native"] + (
            ["int8_logits"] if self.int8_logits else [])

    def setting(self) -> str:
        """The `kernel_choices` setting that forces these choices: 'step_product=tn;beam_candidates=native;top_k=native'."""
        return ";".join(f"{name}={getattr(self, name)}" for name in ALTERNATIVES)

    def record(self) -> dict:
        """What run.json and an export's metadata keep: each choice, int8_logits, and what was measured."""
        measured = {name: dict(times) for name, times in self.measured_ms}
        return {**{name: getattr(self, name) for name in ALTERNATIVES}, "int8_logits": self.int8_logits,
                **({"measured_ms": measured} if measured else {})}


GRAPH_ONLY = DecodeKernels()  # TensorFlow's ops only, as an export's graph must be


def forced_choices(setting: str, source: str = "--decode_hparams") -> dict:
    """The `kernel_choices` setting parsed: {name: value}; a bad one is one line naming `source`."""
    return choices.parse(setting, ALTERNATIVES, f"{source}: {SOURCE}")


def choose(projection, rows: int, forced: dict, int8_logits: bool, in_process: bool = True, measure=None,
           attention: tuple[int, int] = (1, 1)) -> DecodeKernels:
    """The kernels of a search whose step has `rows` hypotheses a part, over `projection` (the
    model's `SharedEmbedding`, whose table is the output product's) and attention of
    `attention` = (heads, depth per head): forced, the only one offered, or timed here (about a
    second in all). `in_process=False`: an export's, graph kernels only (int8_logits refused).
    `measure` (tests) replaces the timing: name -> {value: ms}."""
    from t2t_keras.kernels import native  # TensorFlow loads here, not where settings are checked

    if int8_logits and not in_process:
        raise UsageError("int8_logits is a native kernel of decoding in this process, not of a SavedModel: export "
                         "without it (a CTranslate2 export quantises with --quantization=int8).")
    available = in_process and native.library() is not None

    def options(name):
        return tuple(value for value in ALTERNATIVES[name] if available or value not in NATIVE_VALUES)

    def why_unavailable(name, value):
        return native.unavailable_reason() if in_process else "an export's graph holds TensorFlow's ops only"

    measure = measure or MachineTimings(_Timings(projection, rows, attention), projection, rows, attention)
    record, how = choices.resolve(ALTERNATIVES, options, forced, measure, source=SOURCE, why_unavailable=why_unavailable)
    if int8_logits and native.library() is None:
        logging.warning("int8_logits: the native kernels are not built here (%s); the output product stays float.",
                        native.unavailable_reason())
    logging.debug("Decode kernel choices for %d rows: %s.", rows, "; ".join(f"{n}={record[n]}, {how[n]}" for n in ALTERNATIVES))
    measured = tuple((name, tuple(times.items())) for name, times in record.get("measured_ms", {}).items())
    return DecodeKernels(**{name: record[name] for name in ALTERNATIVES}, int8_logits=int8_logits and available,
                         measured_ms=measured)


class MachineTimings:
    """`timings` (name -> {value: ms}) measured once per machine and size: kept in the native
    kernels' cache directory (`kernels.native.cache_dir()`) under a key of the CPU (its model and
    flags), TensorFlow's version, the native library and the sizes timed, so that a decoder's
    start on the same machine does not time the same kernels again (a second or more of each
    command); another CPU, library or size is timed afresh. A cache that cannot be read or
    written is passed over."""

    FILE = "decode_kernel_timings.json"

    def __init__(self, timings, projection, rows: int, attention: tuple[int, int]):
        import hashlib

        import tensorflow as tf

        from t2t_keras.kernels import native

        self.timings = timings
        sources = [(native.SOURCE_DIR / name).read_text() for name in native.SOURCES + native.HEADERS]
        machine = "\n".join([native.cpu_flags(), tf.__version__, native.unavailable_reason() or "built", *sources])
        sizes = (str(projection.embeddings.dtype), projection.vocab_size, projection.hidden_size, rows, *attention)
        self.key = hashlib.sha256(machine.encode()).hexdigest()[:16] + ":" + ",".join(map(str, sizes))
        self.path = native.cache_dir() / self.FILE

    def __call__(self, name: str) -> dict:
        import json

        from t2t_keras import files

        key = f"{self.key}:{name}"
        try:
            cached = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except (OSError, ValueError):
            cached = {}
        if isinstance(cached.get(key), dict):
            return cached[key]
        measured = self.timings(name)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            files.write_atomically(str(self.path), json.dumps({**cached, key: measured}, indent=1) + "\n")
        except OSError:
            pass
        return measured


class _Timings:
    """Each alternative timed at the search's sizes: `rows` hypotheses against the whole table,
    and over ATTENTION_TIMED_LENGTH cached positions of `attention` = (heads, depth)."""

    def __init__(self, projection, rows: int, attention: tuple[int, int]):
        self.projection, self.rows, self.attention = projection, rows, attention

    def __call__(self, name: str) -> dict:
        from t2t_keras.kernels import attention_step, beam_candidates, top_k

        vocabulary = self.projection.vocab_size
        if name == "step_product":
            return self.projection.step_product_timings(self.rows)
        if name == "beam_candidates":
            return beam_candidates.implementation_timings(self.rows, vocabulary, dtype=self.projection.embeddings.dtype)
        if name == "top_k":
            return top_k.implementation_timings(self.rows, vocabulary)
        if name == "attention":
            heads, depth = self.attention
            return attention_step.implementation_timings(self.rows, heads, depth, ATTENTION_TIMED_LENGTH,
                                                         dtype=self.projection.compute_dtype)
        raise KeyError(name)
