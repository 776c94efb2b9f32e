"""A warm start across vocabularies (`--warm_start_from=PARENT --update_vocabulary`): fine-tuning
on data whose SentencePiece vocabulary is new (trained on the new data, or on the union with the
parent's), as OpenNMT-tf's vocabulary update does.

Every weight of the parent is copied as it is, but the tables indexed by a piece (the source and
target embeddings and the output layer: one table when they are shared). A piece of the new
vocabulary that the parent's also has keeps the parent's row; a new piece keeps the row the
model was built with, the paper's initialisation of an embedding. So before any update the
model scores and translates a sentence made of pieces of both vocabularies as the parent does,
but for the new pieces' place in the output's normalisation (tests/training/test_vocabulary_update.py).
"""

from __future__ import annotations

import numpy as np
from absl import logging

from t2t_keras.errors import UsageError


def shared_rows(parent, vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """(ids in `vocabulary`, the same pieces' ids in `parent`) of every piece both have."""
    parent_ids = {piece: index for index, piece in enumerate(parent.pieces(range(parent.size)))}
    pairs = [(index, parent_ids[piece]) for index, piece in enumerate(vocabulary.pieces(range(vocabulary.size)))
             if piece in parent_ids]
    ids, theirs = zip(*pairs) if pairs else ((), ())
    return np.asarray(ids, np.int64), np.asarray(theirs, np.int64)


NEW_PIECES = ("paper", "parent_pieces")


def warm_start(model, parent_model, parent_vocabularies, vocabularies, new_pieces: str = "paper") -> dict:
    """Sets `model`'s weights from `parent_model`'s (the same architecture, other vocabularies):
    whole weights where the shapes agree, the shared pieces' rows of the piece-indexed tables.
    A new piece's row is the paper's initialisation as the model was built ("paper"), or the
    mean of the parent's rows of the pieces the parent splits its text into ("parent_pieces").
    Logs and returns, per side, how many pieces came from the parent and how many are new."""
    if new_pieces not in NEW_PIECES:
        raise UsageError(f"--new_pieces={new_pieces}: choose {' or '.join(NEW_PIECES)}.")
    if model.copy_position is not None:
        raise UsageError("--update_vocabulary: this model's copy positions are indexed by the target vocabulary's "
                         "structure tokens; update the vocabulary of a model without copy_position_encoding.")
    sides = {id(model.source_embedding.embeddings): "source", id(model.target_embedding.embeddings): "target",
             id(model.softmax_projection.embeddings): "target"}
    rows = {"source": shared_rows(parent_vocabularies.source, vocabularies.source),
            "target": shared_rows(parent_vocabularies.target, vocabularies.target)}
    if [_within(w) for w in model.weights] != [_within(w) for w in parent_model.weights]:
        raise UsageError("--update_vocabulary: the parent's weights are not this model's; it needs the same architecture.")
    for weight, parent_weight in zip(model.weights, parent_model.weights):
        if id(weight) in sides:
            side = sides[id(weight)]
            ids, theirs = rows[side]
            parent_table = parent_weight.numpy()
            table = np.array(weight.numpy())
            table[ids] = parent_table[theirs]
            if new_pieces == "parent_pieces":
                parent_vocabulary, vocabulary = getattr(parent_vocabularies, side), getattr(vocabularies, side)
                for index, split in _parent_splits(parent_vocabulary, vocabulary, ids).items():
                    table[index] = parent_table[split].mean(axis=0)
            weight.assign(table)
        else:
            weight.assign(parent_weight.numpy())
    record = {}
    for side, vocabulary in (("source", vocabularies.source), ("target", vocabularies.target)):
        kept = len(rows[side][0])
        record[side] = {"pieces": vocabulary.size, "from_parent": kept, "new": vocabulary.size - kept,
                        "parent_pieces": getattr(parent_vocabularies, side).size}
        if vocabularies.shared:
            break
    logging.info("Vocabulary updated: %s.", "; ".join(
        f"{side} {r['from_parent']} of {r['pieces']} pieces from the parent's {r['parent_pieces']}, {r['new']} new"
        for side, r in record.items()))
    return record


def _parent_splits(parent, vocabulary, shared_ids) -> dict:
    """{new piece's id: the parent's ids of its text} for the pieces `shared_ids` leaves out."""
    shared = set(shared_ids.tolist())
    splits = {}
    for index, piece in enumerate(vocabulary.pieces(range(vocabulary.size))):
        text = piece.replace("\u2581", " ").strip()
        if index not in shared and text:
            split = parent.encode(text)
            if split:
                splits[index] = split
    return splits


def _within(weight) -> str:
    """A weight's path inside its model (the model's own, numbered, name left out)."""
    return weight.path.partition("/")[2]
