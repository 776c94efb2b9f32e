"""The typed, frozen configurations: HParams (a model and its training recipe) and
DecodeHParams (how a trained model searches).

Named sets (see `t2t_keras.hparams`) are small functions deriving from a parent with
`dataclasses.replace`. Users override fields with the `--hparams="a=1,b=2"` and
`--decode_hparams="a=1"` syntax, parsed by each field's declared type (never `eval`). Run
settings (output dir, number of steps, distribution) are flags of the CLIs, not hparams.

Every HParams field belongs to a group: "model" fields fix the architecture (a checkpoint
only restores into the same values), "training" fields are the recipe (optimizer, schedule,
regularisation, batching) and may change between runs.

Lengths, which mean different things in different places:
  * `HParams.max_length`: training pairs longer than this many tokens are dropped (training only);
  * `HParams.max_position`: the rows of a learned position table, so the longest sequence
    such a model can read or write (sinusoids have no limit);
  * `DecodeHParams.extra_length`: each sentence may generate input length + extra_length
    tokens, which also sizes the decoder's key/value cache.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from typing import Literal

from t2t_keras.errors import UsageError

MODEL = "model"
TRAINING = "training"
DECODING = "decoding"
SHORTLIST_MAX_PER_SOURCE = 100  # what a run dir's shortlist keeps (decoding.shortlist)
SHORTLIST_MAX_FREQUENT = 1000

# Fields renamed or replaced since earlier releases: an old name gets an error naming the new one.
RENAMED = {
    "batch_size": "renamed to tokens_per_batch (training) or sentences_per_batch (decoding)",
    "return_beams": "replaced by the decoder's --n_best=N flag (N hypotheses per input; --with_scores adds log-probabilities)",
}


def _field(default, group: str, help: str):
    return dataclasses.field(default=default, metadata={"group": group, "help": help})


@dataclasses.dataclass(frozen=True)
class HParams:
    """Architecture and training recipe of a Transformer; defaults = the paper's base model."""

    # --- architecture (section 3, Table 3) ---
    model: str = _field("transformer", MODEL, "registered model class to build")
    num_hidden_layers: int = _field(6, MODEL, "N: layers in the encoder and in the decoder")
    hidden_size: int = _field(512, MODEL, "d_model")
    filter_size: int = _field(2048, MODEL, "d_ff: inner size of the position-wise FFN")
    num_heads: int = _field(8, MODEL, "h: attention heads")
    attention_key_depth: int = _field(0, MODEL, "d_k per head; 0 = hidden_size / num_heads")
    attention_value_depth: int = _field(0, MODEL, "d_v per head; 0 = hidden_size / num_heads")
    positional_encoding: Literal["sinusoid", "learned"] = _field(
        "sinusoid", MODEL, "sinusoid (section 3.5) or learned position embeddings (Table 3 row E)"
    )
    max_position: int = _field(
        1024, MODEL, "positions a learned position table holds (and the longest decode)"
    )
    norm_type: Literal["post", "pre"] = _field(
        "post", MODEL, "post: LayerNorm(x + Dropout(f(x))) as published; pre: x + Dropout(f(LayerNorm(x)))"
    )
    layer_norm_epsilon: float = _field(1e-6, MODEL, "epsilon of every LayerNorm")
    shared_embedding_and_softmax_weights: bool = _field(
        True, MODEL, "one matrix for source and target embeddings and the pre-softmax projection"
    )
    copy_position_encoding: bool = _field(
        False, MODEL,
        "not in the paper: add to each decoder input a learned projection of the sinusoid of the source "
        "position its next copied token comes from, for problems whose targets copy the source in order "
        "(parsing_english_ptb_sample_words)",
    )
    # --- regularisation (section 5.4) ---
    layer_prepostprocess_dropout: float = _field(
        0.1, TRAINING, "P_drop: residual dropout on sub-layer outputs and embedding sums"
    )
    layer_prepostprocess_dropout_early: float = _field(
        0.0, TRAINING,
        "not in the paper: P_drop for the first layer_prepostprocess_dropout_early_steps updates, then "
        "layer_prepostprocess_dropout: a lower rate early lets a small-data model learn to use the source sooner, "
        "the full rate later keeps it from overfitting (close to Liu et al., 2023's late dropout)",
    )
    layer_prepostprocess_dropout_early_steps: int = _field(
        0, TRAINING, "updates trained with layer_prepostprocess_dropout_early; 0 = P_drop throughout"
    )
    attention_dropout: float = _field(0.0, TRAINING, "dropout on attention weights (t2t extra)")
    relu_dropout: float = _field(0.0, TRAINING, "dropout on the FFN's ReLU output (t2t extra)")
    label_smoothing: float = _field(0.1, TRAINING, "eps_ls")
    weight_decay: float = _field(
        0.0, TRAINING, "decoupled weight decay (AdamW, as fairseq's --weight-decay): w -= lr * weight_decay * w each update"
    )
    rdrop_alpha: float = _field(
        0.0, TRAINING,
        "not in the paper: R-Drop (Liang et al., 2021; fairseq's --rdrop-alpha): each batch goes through the model "
        "twice with independent dropout and alpha x the symmetric KL divergence of the two predictions joins the "
        "loss; twice the compute of an update",
    )
    guided_alignment_weight: float = _field(
        0.0, TRAINING,
        "not in the paper: guided alignment (Garg et al., 2019; OpenNMT-tf's guided_alignment_type=ce): this weight x "
        "the cross-entropy between one cross-attention head's weights and the word alignments datagen stored "
        "(--word_alignments) joins each target token's loss; the decoder's alignments then read that head")
    guided_alignment_layer: int = _field(
        -1, TRAINING, "guided alignment: the decoder layer whose cross-attention is taught (-1: the last, as OpenNMT-tf)")
    guided_alignment_head: int = _field(0, TRAINING, "guided alignment: the head of that layer taught (the others stay free)")
    subword_sampling: float = _field(
        0.0, TRAINING,
        "not in the paper: each training pair is segmented anew every time it is read, by SentencePiece's "
        "sampling with this alpha: BPE-dropout (Provilkov et al., 2020; the probability of dropping a merge) for "
        "a BPE vocabulary, subword regularisation (Kudo, 2018; the smoothing) for a unigram one; evaluation and "
        "decoding keep the one segmentation. OpenNMT-tf's sp_alpha. The draws are SentencePiece's own, not --seed's",
    )
    # --- optimizer and schedule (section 5.3) ---
    adam_beta1: float = _field(0.9, TRAINING, "Adam beta1")
    adam_beta2: float = _field(0.98, TRAINING, "Adam beta2")
    adam_epsilon: float = _field(1e-9, TRAINING, "Adam epsilon")
    learning_rate: float = _field(
        1.0, TRAINING, "multiplier of d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)"
    )
    learning_rate_warmup_steps: int = _field(4000, TRAINING, "warmup_steps")
    learning_rate_cooldown_steps: int = _field(
        0, TRAINING, "not in the paper: over the last N updates before --train_steps the rate falls linearly to 0"
    )
    # --- batching (section 5.1) ---
    tokens_per_batch: int = _field(
        4096, TRAINING, "tokens per replica per batch: sentences x padded length of the longer side stays within it"
    )
    max_length: int = _field(256, TRAINING, "training pairs longer than this (in tokens, either side) are dropped")
    gradient_accumulation_steps: int = _field(
        1, TRAINING, "batches per update: the paper's 8 GPUs x ~3125 tokens = 1 GPU with 8 steps"
    )
    # --- numerics ---
    mixed_precision: Literal["float32", "mixed_bfloat16", "mixed_float16"] = _field(
        "float32", TRAINING, "Keras dtype policy for training; mixed_float16 adds dynamic loss scaling"
    )
    xla: bool = _field(False, TRAINING, "compile the train step with XLA (jit_compile)")

    def validated(self) -> "HParams":
        """Self, after checking the values fit together; a one-line UsageError otherwise."""
        problems = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if (isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0
                    and field.name != "guided_alignment_layer"):
                problems.append(f"{field.name}={value} must not be negative")
        for name in ("num_hidden_layers", "hidden_size", "filter_size", "num_heads", "max_position", "tokens_per_batch", "gradient_accumulation_steps"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive")
        if self.num_heads > 0 and 0 in (self.attention_key_depth, self.attention_value_depth):
            if self.hidden_size % self.num_heads:
                problems.append(
                    f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                    "set attention_key_depth and attention_value_depth"
                )
        for name in ("layer_prepostprocess_dropout", "layer_prepostprocess_dropout_early", "attention_dropout",
                     "relu_dropout", "label_smoothing", "subword_sampling"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name}={getattr(self, name)} must be in [0, 1)")
        if not -self.num_hidden_layers <= self.guided_alignment_layer < self.num_hidden_layers:
            problems.append(f"guided_alignment_layer={self.guided_alignment_layer} names no layer of {self.num_hidden_layers}")
        if self.guided_alignment_head >= self.num_heads:
            problems.append(f"guided_alignment_head={self.guided_alignment_head} names no head of {self.num_heads}")
        if self.guided_alignment_weight and self.subword_sampling:
            problems.append("guided_alignment_weight needs the stored segmentation its alignments index; set subword_sampling=0")
        if self.max_length > self.tokens_per_batch:
            problems.append(f"max_length={self.max_length} exceeds tokens_per_batch={self.tokens_per_batch}: such a pair fits no batch")
        if problems:
            raise UsageError("invalid hparams: " + "; ".join(problems))
        return self

    @property
    def key_depth(self) -> int:
        """d_k per head."""
        return self.attention_key_depth or self.hidden_size // self.num_heads

    @property
    def value_depth(self) -> int:
        """d_v per head."""
        return self.attention_value_depth or self.hidden_size // self.num_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, values: dict, source: str = "hparams") -> "HParams":
        """Typed construction from a dict (e.g. a saved hparams.json); unknown keys rejected."""
        kwargs = {key: _check_type(cls, _field_named(key, source, cls), value, source) for key, value in values.items()}
        return cls(**kwargs).validated()

    @classmethod
    def from_json(cls, text: str, source: str = "hparams.json") -> "HParams":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"{source}: not valid JSON ({e}); rewrite it or delete it.") from None
        if not isinstance(values, dict):
            raise UsageError(f"{source}: expected a JSON object of hparams.")
        return cls.from_dict(values, source)

    def differences(self, other: "HParams", group: str | None = None) -> list[str]:
        """'name: mine -> other' for each field that differs (optionally one group only)."""
        return [
            f"{f.name}: {getattr(self, f.name)!r} -> {getattr(other, f.name)!r}"
            for f in dataclasses.fields(self)
            if (group is None or f.metadata["group"] == group)
            and getattr(self, f.name) != getattr(other, f.name)
        ]


@dataclasses.dataclass(frozen=True)
class DecodeHParams:
    """How a trained model searches: a problem's `decode_defaults`, overridden with
    --decode_hparams="a=1,b=2". The defaults are the paper's for translation (section 6.1)."""

    beam_size: int = _field(4, DECODING, "hypotheses kept per sentence; 1 = greedy search")
    alpha: float = _field(0.6, DECODING, "GNMT length penalty exponent: scores are log P / ((5 + |Y|) / 6)^alpha")
    extra_length: int = _field(50, DECODING, "each sentence may generate input length + extra_length tokens (EOS included)")
    min_length: int = _field(
        0, DECODING,
        "no output ends before it has this many tokens (EOS included), unless its maximum (extra_length) is smaller: "
        "EOS is not chosen before, its probability still counted (as CTranslate2's min_decoding_length and fairseq's "
        "--min-len); 0 = no minimum")
    sentences_per_batch: int = _field(
        128, DECODING, "sentences decoded together (at most, with batch_tokens); the demo model decoded val 1.11x "
        "faster at 128 than at 64 (1.19x with a shortlist) once oneDNN kept its kernels for every shape "
        "(docs/results/decoding_speed.md, \"Batch size\")")
    batch_tokens: int = _field(
        0, DECODING,
        "if > 0: batches of length-sorted sentences whose count x longest input stays within this many tokens "
        "(the trainer's token budget), up to sentences_per_batch sentences; 0 = sentences_per_batch sentences a batch",
    )
    parallel_parts: int = _field(
        0, DECODING,
        "each batch is searched as this many independent parts side by side, one per CPU core; 0 = one per "
        "CPU core (at most 8) without a GPU, 1 with one",
    )
    constrained: bool = _field(
        True, DECODING, "apply the problem's output constraint, if it has one (parsing: only well-formed trees over the input's words)"
    )
    max_input_tokens: int = _field(
        0, DECODING,
        "inputs longer than this many tokens (EOS included) are cut to it, so one request's cost is bounded; 0 = no "
        "limit (the exporter's default: the model's max_length)",
    )
    sampling_top_k: int = _field(
        0, DECODING,
        "0 = beam search; k > 0 = sample each token from the k most likely, -1 = from the whole distribution "
        "(back-translation); beam_size samples per sentence (beam_size=1 for one)",
    )
    sampling_temperature: float = _field(1.0, DECODING, "sampling: divide the logits by this (< 1 sharper, > 1 flatter)")
    seed: int = _field(0, DECODING, "sampling: the seed; a line's samples depend only on it and the line's number")
    precision: Literal["fp32", "bf16"] = _field(
        "fp32", DECODING,
        "bf16: weights, activations, caches and logits in bfloat16 (log-probabilities, length penalty and the "
        "search in float32), for CPUs with AVX512_BF16/AMX and GPUs of compute capability 8.0+; elsewhere fp32 "
        "is used, with one line saying so (the exporter writes a bf16 SavedModel anyway, for the serving machine)",
    )
    int8_logits: bool = _field(
        False, DECODING,
        "the output product (the decode step's largest on a small model) in int8, as CTranslate2's int8 decoding: "
        "each token's weights and each step's states quantised by their absolute maximum, products summed in "
        "int32; beam search (sampling keeps the float product); a native kernel, for decoding in this process (not "
        "an export), fast on CPUs with AVX-512 VNNI "
        "(docs/results/decoding_speed.md, \"int8 logits\"); without VNNI a portable loop, slower than the float product",
    )

    shortlist: int = _field(
        0, DECODING,
        "if > 0: beam search lets each sentence choose only among the tokens this many most associated with one of "
        "its source tokens in the training pairs, and the shortlist_frequent most frequent (at most 100; faster: "
        "the output product covers only them); 0 = the whole vocabulary",
    )
    shortlist_frequent: int = _field(1000, DECODING, "shortlist: the most frequent target tokens always in it (at most 1000)")
    exact_search: bool = _field(
        False, DECODING,
        "search until no alive hypothesis could beat a finished one even at the maximum length (the n-best list is "
        "then the exact K best of the beam; with a large alpha up to 2.6x slower); default: a sentence stops once its "
        "best finished hypothesis beats its best alive one at the current length, as OpenNMT and CTranslate2",
    )

    target_language: str = _field(
        "", DECODING,
        "a model of several target languages (translate_ende_deen_multi30k, translate_text with --train_lang_pairs): "
        "the language every input is translated into, its token (>>de<<) put in front of it; '' = each input starts "
        "with its own token, as OPUS-MT's; a language the model was not trained for is refused in one line")
    markup: bool = _field(
        False, DECODING,
        "carry XML-like tags (<b>...</b>, <a href=\"...\">...</a>, <x id=\"1\"/>) and {1}-style placeholders of the "
        "input through: the text translated without them, the tags put back around the target words aligned to the "
        "words they enclosed (always well-formed; unbalanced input markup is one line naming the line)")
    alignment_layer: int = _field(
        -1, DECODING,
        "word alignments (alignments=True, --alignment_file) read this decoder layer's cross-attention, all heads' "
        "mean (-1: the last; benchmarks/alignment_heads.py measures which layer aligns a model's words best)")
    alignment_head: int = _field(
        -1, DECODING,
        "word alignments read this head of alignment_layer (-1: all heads' mean); a run trained with guided alignment "
        "defaults to the layer and head it taught")
    kernel_choices: str = _field(
        "", DECODING,
        "the decode step's kernel alternatives forced, 'step_product=nn|nt|tn;beam_candidates=native|graph;"
        "top_k=native|graph' (any of them); '' = each timed on this machine when the model loads, as training's "
        "(decoding/kernel_choices.py: the same outputs to float rounding, at another speed); the Python API's "
        "settings and the decoder's output record show those chosen")

    reverse_weight: float = _field(
        0.5, DECODING,
        "with a reverse model (the decoder's --reverse_model): each sentence's beam_size finished hypotheses are "
        "ranked by score + reverse_weight x log P(source | hypothesis) / source tokens, the reverse model's "
        "log-probability of the input given the hypothesis, which penalises dropping parts of the input (0.5: +0.5 and "
        "+0.7 val BLEU on two Multi30k models, docs/results/multi30k.md, \"Options of the script\")",
    )

    @property
    def sampling(self) -> bool:
        return self.sampling_top_k != 0

    def validated(self, source: str = "--decode_hparams") -> "DecodeHParams":
        """Self, after checking each setting against its rule: a one-line UsageError naming
        `source` (a flag, or the Python method the settings were given to), the first setting
        that breaks its rule, and the rule."""
        for name, holds, rule in _DECODE_RULES:
            value = getattr(self, name)
            if not holds(value):
                raise UsageError(f"{source}: {name}={value!r}: need {name} {rule}.")
        if self.shortlist and self.sampling:
            raise UsageError(f"{source}: shortlist is for beam search; sampling draws from the whole vocabulary "
                             "(set shortlist=0 or sampling_top_k=0).")
        return self  # kernel_choices is checked where decoding reads it (decoding/kernel_choices.forced_choices)


# Each decode setting's rule: (name, whether a value keeps it, the rule in words).
_DECODE_RULES = (
    ("beam_size", lambda v: v >= 1, ">= 1"),
    ("sentences_per_batch", lambda v: v >= 1, ">= 1"),
    ("extra_length", lambda v: v >= 0, ">= 0"),
    ("min_length", lambda v: v >= 0, ">= 0"),
    ("alpha", lambda v: v >= 0, ">= 0"),
    ("parallel_parts", lambda v: v >= 0, ">= 0 (0 = one per CPU core)"),
    ("batch_tokens", lambda v: v >= 0, ">= 0 (0 = sentences_per_batch a batch)"),
    ("sampling_top_k", lambda v: v >= -1, ">= -1 (0 = beam search, -1 = the whole distribution)"),
    ("sampling_temperature", lambda v: v > 0, "> 0"),
    ("max_input_tokens", lambda v: v == 0 or v >= 2, "0 (no limit) or >= 2"),
    ("reverse_weight", lambda v: v >= 0, ">= 0"),
    ("alignment_head", lambda v: v >= -1, ">= -1 (-1 = all heads' mean)"),
    ("shortlist", lambda v: 0 <= v <= SHORTLIST_MAX_PER_SOURCE, f"0 to {SHORTLIST_MAX_PER_SOURCE}"),
    ("shortlist_frequent", lambda v: 0 <= v <= SHORTLIST_MAX_FREQUENT, f"0 to {SHORTLIST_MAX_FREQUENT}"),
)


def field_names(group: str | None = None) -> list[str]:
    return [f.name for f in dataclasses.fields(HParams) if group is None or f.metadata["group"] == group]


def describe_fields(values: "HParams | DecodeHParams | None" = None, config_type=HParams) -> str:
    """Help text: one line per field of `config_type` (HParams or DecodeHParams) with its type,
    group and meaning, and its value in `values` when given."""
    config_type = type(values) if values is not None else config_type
    hints = typing.get_type_hints(config_type)
    lines = []
    for f in dataclasses.fields(config_type):
        value = f" = {json.dumps(getattr(values, f.name))}" if values is not None else ""
        lines.append(f"  {f.name}{value} ({_type_name(hints[f.name])}, {f.metadata['group']}): {f.metadata['help']}")
    return "\n".join(lines)


def apply_overrides(config, overrides: str, flag: str = "--hparams"):
    """`config` (HParams or another config dataclass) with "a=1,b=2" applied, parsed by field type."""
    return dataclasses.replace(config, **parse_overrides(type(config), overrides, flag))


def parse_overrides(config_type, overrides: str, flag: str = "--hparams") -> dict:
    """{name: value} of "a=1,b=2", each name a field of `config_type` and its value parsed by the
    field's type: what a flag sets, for callers that must know which fields it names."""
    changes = {}
    for item in (part.strip() for part in overrides.split(",")):
        if not item:
            continue
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep:
            raise UsageError(f"{flag}: {item!r} is not name=value; write e.g. {flag}=\"name=value\".")
        field = _field_named(key, flag, config_type)
        changes[key] = _parse_value(field, text.strip(), flag, config_type)
    return changes


def replace_fields(config, changes: dict, source: str):
    """`config` (HParams or DecodeHParams) with `changes` ({name: Python value}) applied, each
    checked against its field's declared type; validated (a DecodeHParams' errors name `source`)."""
    config_type = type(config)
    checked = {key: _check_type(config_type, _field_named(key, source, config_type), value, source)
               for key, value in changes.items()}
    changed = dataclasses.replace(config, **checked)
    return changed.validated(source) if isinstance(changed, DecodeHParams) else changed.validated()


def _field_named(key: str, source: str, config_type) -> dataclasses.Field:
    fields = {f.name: f for f in dataclasses.fields(config_type)}
    if key not in fields:
        close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
        hint = f"{RENAMED[key]}; " if key in RENAMED else f"did you mean {close[0]!r}? " if close else ""
        kind = "hparam" if config_type is HParams else "setting"
        raise UsageError(f"{source}: unknown {kind} {key!r}; {hint}valid: {', '.join(fields)}.")
    return fields[key]


def _checked_choice(kind, value, where: str):
    """`value` if it is one of the Literal type `kind`'s choices; a UsageError otherwise."""
    if value not in typing.get_args(kind):
        raise UsageError(f"{where} is not one of {', '.join(typing.get_args(kind))}.")
    return value


def _parse_value(field: dataclasses.Field, text: str, flag: str, config_type):
    kind = typing.get_type_hints(config_type)[field.name]
    where = f"{flag}: {field.name}={text!r}"
    if typing.get_origin(kind) is Literal:
        return _checked_choice(kind, text, where)
    if kind is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise UsageError(f"{where} is not a bool; use true or false.")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"{where} is not an int.") from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"{where} is not a float.") from None
    return text


def _check_type(config_type, field: dataclasses.Field, value, source: str):
    """`value` (from JSON) if it has the type `config_type` declares for `field`; a UsageError otherwise."""
    kind = typing.get_type_hints(config_type)[field.name]
    where = f"{source}: {field.name}={value!r}"
    if typing.get_origin(kind) is Literal:
        return _checked_choice(kind, value, where)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{where} should be of type {kind.__name__}.")
    return value


def _type_name(kind) -> str:
    if typing.get_origin(kind) is Literal:
        return "|".join(typing.get_args(kind))
    return kind.__name__
