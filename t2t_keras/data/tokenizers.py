"""SentencePiece vocabularies: trained with `sentencepiece`, applied in the graph with tensorflow_text.

Datagen trains a problem's model (one shared by both sides, or one per side) and writes it
into data_dir; training, decoding and serving then tokenise with the same `.model` files
through `tensorflow_text`, so a string becomes the same ids everywhere.

Normalisation: SentencePiece's `nmt_nfkc` rule (Unicode NFKC, plus whitespace runs folded to
one space and trimmed). Detokenising returns the normalised text; for almost all text that
is the original (in Multi30k val, one line of 1014 differs: a no-break space becomes a space).
`byte_fallback` spells characters missing from the vocabulary as UTF-8 bytes, so no input
ever becomes <unk>.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from typing import Iterable, NamedTuple

import sentencepiece

from t2t_keras import files
from t2t_keras.errors import UsageError
from t2t_keras.token_ids import EOS_ID, PAD_ID, UNK_ID


def train_sentencepiece(sentences: Iterable[str], vocab_size: int, model_type: str = "bpe", size_is_bound: bool = False,
                        user_defined_symbols: Iterable[str] = ()) -> bytes:
    """A serialized SentencePiece model trained on `sentences` (deterministic for the same input).

    With `size_is_bound` (always for a "word" model), `vocab_size` is an upper bound: text
    with fewer distinct pieces (a small corpus, or a closed set of symbols) gets a smaller
    vocabulary instead of an error. Subword models spell unknown characters as bytes.
    `user_defined_symbols` are always one piece each (e.g. "\u2581(NP" for trees).
    """
    options = {} if model_type == "word" else {"byte_fallback": True}
    if size_is_bound or model_type == "word":
        # Set only where it applies: an option set explicitly is stored in the model (its bytes would change).
        options["hard_vocab_limit"] = False
    if user_defined_symbols:
        options["user_defined_symbols"] = list(user_defined_symbols)
    model = io.BytesIO()
    try:
        _train(sentences, model, vocab_size, model_type, options)
    except RuntimeError as e:
        required = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", str(e))
        if not required:
            raise
        needed = int(required.group(2))
        raise UsageError(
            f"a vocabulary of {vocab_size} pieces is too small for this text: its characters, the byte pieces and the "
            f"reserved ids alone take {needed}; choose a size of at least {needed + 100} (--vocab_size)."
        ) from None
    return model.getvalue()


def _train(sentences, model, vocab_size, model_type, options) -> None:
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type=model_type,
        pad_id=PAD_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        bos_id=-1,
        character_coverage=1.0,
        **options,
        normalization_rule_name="nmt_nfkc",
        input_sentence_size=0,  # the caller already bounded the sample
        max_sentence_length=16384,
        num_threads=2,
        minloglevel=2,
    )


RESERVED_IDS = {"pad": PAD_ID, "eos": EOS_ID, "unk": UNK_ID}  # what every t2t-keras vocabulary assigns


class Vocabulary:
    """A SentencePiece model: Python encode/decode for datagen, tensorflow_text ops for graphs.

    Ids: 0 = padding, 1 = EOS, 2 = unknown (unused thanks to byte fallback).
    """

    def __init__(self, model_proto: bytes, path: str | None = None):
        self.model_proto = model_proto
        self.path = path
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)

    @classmethod
    def load(cls, path: str) -> "Vocabulary":
        return cls(files.read_bytes(path), path)

    @property
    def size(self) -> int:
        return self._processor.get_piece_size()

    def reserved_ids(self) -> dict:
        """The model's pad, EOS and unknown ids (-1: none), to compare with RESERVED_IDS."""
        return {"pad": self._processor.pad_id(), "eos": self._processor.eos_id(), "unk": self._processor.unk_id()}

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.model_proto).hexdigest()

    @property
    def pieces_sha256(self) -> str:
        """The SHA-256 of its pieces in id order: what ids mean to a model trained with it (a
        SentencePiece model saved again, or trained again to the same pieces, keeps it)."""
        return hashlib.sha256("\n".join(self.pieces(range(self.size))).encode()).hexdigest()

    def check_against(self, record: dict, prefix: str, recorded_in: str) -> None:
        """A UsageError naming this file and `recorded_in` when `record`'s {prefix}sha256 (and
        {prefix}pieces_sha256, {prefix}size) say it is not the vocabulary recorded there: other
        bytes with the same pieces pass; a record without pieces passes with a warning when the
        size agrees (runs of earlier versions)."""
        recorded = record.get(f"{prefix}sha256")
        if recorded is None or recorded == self.sha256:
            return
        pieces, size = record.get(f"{prefix}pieces_sha256"), record.get(f"{prefix}size")
        if pieces == self.pieces_sha256:
            return
        fix = "put back the vocabulary it was trained with (the data dir's, from datagen)"
        if size is not None and size != self.size:
            raise UsageError(f"{self.path} has {self.size} pieces, the model's vocabulary in {recorded_in} has {size}: "
                             f"it is not the vocabulary the model was trained with; {fix}.")
        if pieces is not None:
            raise UsageError(f"{self.path} is not the vocabulary recorded in {recorded_in}: the same size ({self.size}) "
                             f"but other pieces (sha256 {self.sha256[:12]}, recorded {recorded[:12]}); {fix}.")
        from absl import logging

        logging.warning("%s differs from the vocabulary recorded in %s (sha256 %s, recorded %s; same size, pieces not "
                        "recorded by this older run): decoding with it; if outputs are garbage, %s.", self.path,
                        recorded_in, self.sha256[:12], recorded[:12], fix)

    def encode(self, text: str, add_eos: bool = False) -> list[int]:
        """Ids of `text`, ending with EOS if `add_eos` (as the model reads and writes them)."""
        ids = self._processor.encode(text)
        return ids + [EOS_ID] if add_eos else ids

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """The subword of each id, as SentencePiece writes it ("▁" marks a word start)."""
        return [self._processor.id_to_piece(int(i)) for i in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`, stopping at the first EOS and skipping padding."""
        kept = []
        for token in ids:
            if token == EOS_ID:
                break
            if token != PAD_ID:
                kept.append(int(token))
        return self._processor.decode(kept)

    def tf_tokenizer(self, sampling_alpha: float = 0.0):
        """A tensorflow_text.SentencepieceTokenizer over the same model: text -> ragged int32 ids,
        each row EOS-terminated (as the model reads and writes them), and ids -> text. With
        `sampling_alpha`, each call samples a segmentation (a BPE model's merge dropout
        probability, a unigram model's smoothing).

        Every tokenizer of one model in a process shares one SentencePiece processor (tf-text
        caches the resource by the model), and its EOS option is that processor's state: a
        tokenizer without EOS running beside one with it makes either drop or add EOS at random.
        So every tokenizer here adds EOS; detokenizing is the same either way."""
        import tensorflow_text

        sampling = {"nbest_size": -1, "alpha": sampling_alpha} if sampling_alpha else {}
        return tensorflow_text.SentencepieceTokenizer(model=self.model_proto, add_eos=True, out_type="int32", **sampling)

    def sampled_resegmenter(self, alpha: float):
        """A graph function from EOS-terminated ids of this vocabulary (ragged [N, None]) to ids of
        the same text in a segmentation sampled with `alpha` (see `tf_tokenizer`), each row again
        EOS-terminated. One tokenizer both ways: detokenizing does not sample."""
        sampler = self.tf_tokenizer(sampling_alpha=alpha)
        return lambda ids: sampler.tokenize(sampler.detokenize(ids[:, :-1]))


class Vocabularies(NamedTuple):
    """A problem's source and target vocabularies: the same `Vocabulary` twice when shared."""

    source: Vocabulary
    target: Vocabulary

    @property
    def shared(self) -> bool:
        return self.source.sha256 == self.target.sha256

    def difference(self, expected: "Vocabularies") -> str | None:
        """None if these map text to the ids `expected` does; else which side differs, for a
        message: "its target vocabulary (600 pieces, not 8000)". The one rule wherever two runs'
        models must read and write the same ids (ensembles, warm starts, merged shortlists)."""
        for side, theirs, ours in zip(("source", "target"), self, expected):
            if theirs.sha256 != ours.sha256:
                name = "vocabulary" if expected.shared else f"{side} vocabulary"
                sizes = f"{theirs.size} pieces, not {ours.size}" if theirs.size != ours.size else f"other pieces, {ours.size} of them"
                return f"its {name} ({sizes})"
        return None


def given_vocabularies(spec: str) -> Vocabularies:
    """The SentencePiece model(s) of --vocab_model: one path (shared), two comma-separated
    paths (source, target), or a t2t-keras run dir (its vocab.spm.model, and target.spm.model
    if it has one). Each must use t2t-keras's reserved ids (pad 0, EOS 1, unknown 2)."""
    paths = [files.absolute(part.strip()) for part in spec.split(",") if part.strip()]
    if len(paths) == 1 and files.isdir(paths[0]):
        run_dir = paths[0]
        paths = [os.path.join(run_dir, name) for name in ("vocab.spm.model", "target.spm.model")
                 if files.isfile(os.path.join(run_dir, name))]
        if not paths:
            raise UsageError(f"--vocab_model={spec} is a directory without vocab.spm.model: name a run dir or a .model file.")
    if not 1 <= len(paths) <= 2:
        raise UsageError(f"--vocab_model={spec}: give one SentencePiece model (shared) or two (source,target).")
    loaded = [_load_vocab_model(path, spec) for path in paths]
    return Vocabularies(loaded[0], loaded[-1])


def _load_vocab_model(path: str, spec: str) -> Vocabulary:
    if not files.isfile(path):
        raise UsageError(f"--vocab_model={spec}: {path}: no such file.")
    try:
        vocabulary = Vocabulary.load(path)
    except (RuntimeError, OSError) as e:
        raise UsageError(f"--vocab_model={spec}: {path} is not a SentencePiece model ({e}).") from None
    reserved = vocabulary.reserved_ids()
    if reserved != RESERVED_IDS:
        found = ", ".join(f"{name} {value}" for name, value in reserved.items())
        raise UsageError(
            f"--vocab_model={spec}: {path} has ids {found}; t2t-keras needs pad 0, eos 1, unk 2 (train it with "
            "pad_id=0 eos_id=1 unk_id=2 bos_id=-1, or take a t2t-keras run's vocab.spm.model)."
        )
    return vocabulary
