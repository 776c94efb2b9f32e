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
from typing import Iterable, NamedTuple

import sentencepiece

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
    return model.getvalue()


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
        with open(path, "rb") as handle:
            return cls(handle.read(), path)

    @property
    def size(self) -> int:
        return self._processor.get_piece_size()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.model_proto).hexdigest()

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

    def tf_tokenizer(self, add_eos: bool = False):
        """A tensorflow_text.SentencepieceTokenizer over the same model (ragged int32 ids)."""
        import tensorflow_text

        return tensorflow_text.SentencepieceTokenizer(model=self.model_proto, add_eos=add_eos, out_type="int32")


class Vocabularies(NamedTuple):
    """A problem's source and target vocabularies: the same `Vocabulary` twice when shared."""

    source: Vocabulary
    target: Vocabulary

    @property
    def shared(self) -> bool:
        return self.source.sha256 == self.target.sha256
