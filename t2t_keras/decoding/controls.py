"""What a translator steers a search with, per input: a target prefix (forced pieces, then the
completion of a partial last word), terms that must not appear and terms that must.

    controls = SearchControls.of(prefix_ids, prefix_lengths, completion, banned_context, banned_tokens)
    allowed = step_allowed(controls, alive_seqs, index, vocab_size)   # [A * K, V] bool, beam_search's

The search scores every token by the model's log-probability over the whole vocabulary (the
forced pieces included, so `log_prob` and `score` count them); these only restrict its
choices. Everything here is per sentence ([B, ...], the rows of a batch) and runs in the graph;
`line_decoding.ControlledLines` turns the texts a user gives into these tensors.

  prefix_ids [B, P], prefix_lengths [B]    the pieces step t < prefix_lengths[b] must take
  completion [B, V] bool                   the pieces step prefix_lengths[b] may take: those
                                           that complete a prefix's partial last word (all True
                                           where it ends at a word boundary)
  banned_context [B, N, C], banned_tokens [B, N]
                                           a hypothesis whose last C tokens match a row of
                                           banned_context (right-aligned; WILDCARD matches any
                                           token, and the start of the output too) may not take
                                           banned_tokens[b, n]: every tokenisation of an avoided
                                           term, its last piece banned after the others
                                           (banned_tokens -1: no sequence)
  target_ids [B, E]                        the pieces a prefix forces or completes and those of
                                           the terms that must appear (0-padded): what a
                                           shortlist's rows must hold
  constraint_ids [B, M, L], constraint_lengths [B, M]
                                           the terms that must appear, each as the tokenizer
                                           spells it (length 0 pads; `constraints`); () when
                                           no sentence of the batch has any
"""

from __future__ import annotations

import functools
from typing import NamedTuple

WILDCARD = -1  # in banned_context: matches any token (a sequence shorter than C tokens)


class SearchControls(NamedTuple):
    prefix_ids: object
    prefix_lengths: object
    completion: object
    banned_context: object
    banned_tokens: object
    target_ids: object
    constraint_ids: object = ()
    constraint_lengths: object = ()


def step_allowed(controls: SearchControls, alive_seqs, index, vocab_size):
    """bool [A * K, V]: what each hypothesis (`alive_seqs` [A, K, t]: its tokens so far, the
    start token first) may take at step `index`, under its sentence's `controls` (the rows of
    the A sentences still searching)."""
    import tensorflow as tf

    searching, beams = tf.shape(alive_seqs)[0], tf.shape(alive_seqs)[1]
    columns = tf.range(vocab_size)
    # The prefix: its piece at this step, then the completion of its partial last word, then anything.
    prefix_length = controls.prefix_lengths
    position = tf.minimum(index, tf.shape(controls.prefix_ids)[1] - 1)  # prefix_ids has a column at least
    forced_token = controls.prefix_ids[:, position][:, None]
    forced = (index < prefix_length)[:, None]
    completing = tf.equal(index, prefix_length)[:, None]
    allowed = tf.where(forced, tf.equal(columns[None, :], forced_token),
                       tf.where(completing, controls.completion, True))  # [A, V]
    allowed = tf.repeat(allowed, beams, axis=0)  # [A * K, V]
    # Avoided terms: the last piece of a tokenisation, after a hypothesis ending in the rest of it.
    context_width = tf.shape(controls.banned_context)[2]
    tail = alive_seqs[:, :, 1:]  # without the start token
    padded = tf.pad(tail, [[0, 0], [0, 0], [context_width, 0]], constant_values=WILDCARD - 1)
    tail = padded[:, :, tf.shape(padded)[2] - context_width:]  # [A, K, C]: the last C tokens (before the start: none)
    context = controls.banned_context[:, None, :, :]  # [A, 1, N, C]
    matches = tf.reduce_all(tf.equal(context, WILDCARD) | tf.equal(tail[:, :, None, :], context), axis=-1)
    matches &= (controls.banned_tokens >= 0)[:, None, :]  # [A, K, N]
    where = tf.cast(tf.where(matches), tf.int32)  # (a, k, n)
    rows = where[:, 0] * beams + where[:, 1]
    banned = tf.gather_nd(controls.banned_tokens, tf.stack([where[:, 0], where[:, 2]], axis=1))
    return tf.tensor_scatter_nd_update(allowed, tf.stack([rows, banned], axis=1), tf.zeros_like(rows, tf.bool))


WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word
MAX_SPELLINGS = 256  # tokenisations kept of one avoided term (its shortest first)


class TargetPieces:
    """The target vocabulary's pieces as text: what a prefix's partial word may continue with,
    and every way an avoided term can be spelled."""

    def __init__(self, vocabulary):
        import numpy as np

        self.vocabulary = vocabulary
        self.pieces = vocabulary.pieces(range(vocabulary.size))
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.longest = max(len(piece) for piece in self.pieces)
        order = sorted(range(len(self.pieces)), key=self.pieces.__getitem__)
        self._sorted = [self.pieces[i] for i in order]  # the pieces that start alike are a run of these
        self._sorted_ids = np.array(order, np.int32)
        self._spellings = {}

    def starting_with(self, text: str):
        """The ids of the pieces that start with `text` (a run of the sorted pieces: two bisections)."""
        import bisect

        return self._sorted_ids[bisect.bisect_left(self._sorted, text):bisect.bisect_left(self._sorted, text + "\U0010ffff")]

    def prefix(self, text: str) -> tuple[list[int], "np.ndarray | None"]:
        """(the pieces the output starts with, the ids the next piece may be or None: any). A
        prefix that ends inside a word ("Ein Hu") forces the pieces before that word, then lets
        the next piece be only one that starts the word with what was typed ("▁Hund",
        "▁Hunde"); where no piece does, the typed word's own pieces are forced too (and the
        output may still continue the word). The same rule as an export's translate_prefix."""
        import re

        import numpy as np

        if not text.strip():
            return [], None
        if text[-1].isspace():
            return self.vocabulary.encode(text), None
        head, partial = re.match(r"(.*?)(\S+)$", text, flags=re.S).groups()
        forced = self.vocabulary.encode(head) if head.strip() else []
        continuing = self.starting_with(WORD_START + partial)
        if len(continuing):
            return forced, continuing
        return forced + self.vocabulary.encode(partial), None

    def required(self, term: str) -> list[int]:
        """The pieces a term that must appear is searched as: its words as the tokenizer spells
        them, from a word start."""
        return self.vocabulary.encode(" ".join(term.split()))

    @functools.cached_property
    def continues_word(self):
        """bool [V]: the pieces that continue a word (no word-start mark, a letter or digit first),
        which may not follow the last piece of a term that must appear."""
        import numpy as np

        return np.array([bool(piece) and not piece.startswith(WORD_START) and piece[0].isalnum() for piece in self.pieces])

    def spellings(self, term: str) -> list[list[int]]:
        """Every tokenisation of `term` (one or more words) as the start of a word and glued to
        what precedes it (after punctuation), fewest pieces first, at most MAX_SPELLINGS."""
        words = term.split()
        if not words:
            return []
        if term in self._spellings:
            return self._spellings[term]
        found = []
        for text in (WORD_START + WORD_START.join(words), WORD_START.join(words)):
            found.extend(self._segmentations(text))
            found.append(self.vocabulary.encode(text.replace(WORD_START, " ").strip()) if text[0] == WORD_START else [])
        unique = []
        for spelling in sorted((s for s in found if s), key=len):
            if spelling not in unique:
                unique.append(spelling)
        self._spellings[term] = unique[:MAX_SPELLINGS]
        return self._spellings[term]

    def _segmentations(self, text: str) -> list[list[int]]:
        """The ways `text` is a concatenation of pieces (fewest pieces first, at most MAX_SPELLINGS):
        each position's ways to the end built once from the next positions'."""
        ways = {len(text): [[]]}
        for position in range(len(text) - 1, -1, -1):
            found = []
            for end in range(position + 1, min(len(text), position + self.longest) + 1):
                piece = self.ids.get(text[position:end])
                if piece is not None:
                    found.extend([piece] + rest for rest in ways.get(end, ()))
            ways[position] = sorted(found, key=len)[:MAX_SPELLINGS]
        return ways[0]


def contains_term(text: str, term: str) -> bool:
    """Whether `term` is in `text` as whole words (not inside a longer word)."""
    import re

    words = [re.escape(word) for word in term.split()]
    return bool(words) and re.search(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)", text) is not None


def control_arrays(pieces: TargetPieces, prefixes: list, avoids: list, required: list | None = None) -> SearchControls:
    """The numpy arrays of `SearchControls` for a batch: each sentence's prefix text (None or
    "": none), avoided terms and terms that must appear (lists of strings; None: none; no
    constraint arrays when `required` holds no term)."""
    import numpy as np

    vocab_size = len(pieces.pieces)
    batch = len(prefixes)
    forced, completions = zip(*(pieces.prefix(prefix or "") for prefix in prefixes)) if batch else ((), ())
    sequences = [[s for term in (terms or []) for s in pieces.spellings(term)] for terms in avoids]
    width = max([len(ids) for ids in forced] + [1])
    prefix_ids = np.zeros([batch, width], np.int32)
    for row, ids in enumerate(forced):
        prefix_ids[row, : len(ids)] = ids
    completion = np.ones([batch, vocab_size], bool)
    for row, allowed in enumerate(completions):
        if allowed is not None:
            completion[row] = False
            completion[row, allowed] = True
    count = max([len(s) for s in sequences] + [1])
    context = max([len(ids) - 1 for s in sequences for ids in s] + [1])
    banned_context = np.full([batch, count, context], WILDCARD, np.int32)
    banned_tokens = np.full([batch, count], -1, np.int32)
    for row, spellings in enumerate(sequences):
        for n, ids in enumerate(spellings):
            if len(ids) > 1:
                banned_context[row, n, context - len(ids) + 1:] = ids[:-1]
            banned_tokens[row, n] = ids[-1]
    required = [[pieces.required(term) for term in terms or [] if term.strip()] for terms in required or [None] * batch]
    targets = [list(ids) + ([] if allowed is None else list(allowed)) + [i for term in terms for i in term]
               for ids, allowed, terms in zip(forced, completions, required)]
    target_ids = np.zeros([batch, max([len(ids) for ids in targets] + [1])], np.int32)
    for row, ids in enumerate(targets):
        target_ids[row, : len(ids)] = ids
    controls = SearchControls(prefix_ids, np.array([len(ids) for ids in forced], np.int32), completion, banned_context,
                              banned_tokens, target_ids)
    if not any(required):
        return controls
    constraint_ids = np.zeros([batch, max(map(len, required)), max(len(term) for terms in required for term in terms)], np.int32)
    constraint_lengths = np.zeros(constraint_ids.shape[:2], np.int32)
    for row, terms in enumerate(required):
        for m, ids in enumerate(terms):
            constraint_ids[row, m, : len(ids)] = ids
            constraint_lengths[row, m] = len(ids)
    return controls._replace(constraint_ids=constraint_ids, constraint_lengths=constraint_lengths)


class Steering(NamedTuple):
    """What a window of lines is steered by: each line's prefix (None: none), avoided terms and
    terms that must appear (None or []: none), in the lines' order, with the target
    vocabulary's `TargetPieces`."""

    pieces: TargetPieces
    prefixes: list
    avoids: list
    constraints: list

    @property
    def active(self) -> bool:
        return any(self.prefixes) or any(self.avoids) or any(self.constraints)

    def arrays(self, rows: list[int]) -> SearchControls:
        """The `SearchControls` of the lines at `rows` (a batch)."""
        return control_arrays(self.pieces, [self.prefixes[i] for i in rows], [self.avoids[i] for i in rows],
                              [self.constraints[i] for i in rows])

    def checked(self, row: int, beam: list) -> list:
        """Line `row`'s hypotheses (each with .text), each with the terms that must appear and
        it lacks (`missing`), those with none of its avoided terms first, then those missing
        fewest, in their order (the search ranks an output without every term last; this also
        catches a term met by pieces the text does not show as whole words)."""
        avoided, required = self.avoids[row] or [], [term for term in self.constraints[row] or [] if term.strip()]
        beam = [h._replace(missing=tuple(term for term in required if not contains_term(h.text, term))) for h in beam]
        return sorted(beam, key=lambda h: (any(contains_term(h.text, term) for term in avoided), len(h.missing)))
