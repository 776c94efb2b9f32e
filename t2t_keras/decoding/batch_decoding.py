"""Translating a batch: the one place where a model, beam search and the n best outputs meet.

    encode -> cache -> beam search (or samples) -> the n best ids -> text -> log P rescored
    -> the problem's output form

`search_batch` / `sample_batch` run the search over a model's cached decode step (the
SearchModule's graphs, the benchmarks and the tests all call them); `translate_lines`,
`n_best_hypotheses`, `score_lines` and `postprocess` turn sentences into `Hypothesis` lists
for the Python API (`t2t_keras.Translator`, over a run or an export) and the decoder CLI. Files and the terminal are
`file_decoding`'s. TensorFlow is imported by the graph functions when they run, so that a
command fails on bad input before TensorFlow starts (and t2t-keras-bleu never starts it).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np

from t2t_keras.errors import UsageError
from t2t_keras.token_ids import EOS_ID, PAD_ID


class Hypothesis(NamedTuple):
    """One output of beam search for one input."""

    text: str
    log_prob: float | None  # log P(text | input), EOS included, of the text as tokenised: what the score signature gives (None: not asked for)
    score: float  # what beam search ranked by: the log-probability of the searched pieces / ((5 + pieces) / 6) ** alpha


EMPTY = Hypothesis("", 0.0, 0.0)  # what an empty input line gets (as in the SavedModel)
# A search part's sentences are split into this many groups with a shortlist, each
# multiplied by its own union of lists: docs/results/decoding_speed.md, "Shortlist".
SHORTLIST_GROUPS = 8


def search_batch(model, input_ids, beam_size: int, alpha: float, max_lengths, token_filter=None,
                 wrap_step: Callable | None = None, cached: bool = True, shortlist=None, exact: bool = False,
                 n_best: int = 1, native_kernels: bool = False, int8_logits: bool = False, min_length: int = 0):
    """Beam search for source ids [B, S] over the model's cached decode step: the encoder runs
    once, its keys and values are projected once per layer (`init_decoding`), and every step
    feeds one token per hypothesis. `cached=False` runs the whole decoder over each
    hypothesis's prefix at every step instead (the reference the cache must match, and the
    baseline it is timed against). `wrap_step` wraps the step function (the benchmarks force
    a fixed number of steps with it). With a `shortlist.Shortlist`, the search chooses among
    the batch's shortlisted tokens only, and the step computes only their logits. `exact` and
    `n_best`: when the search stops (`beam_search.beam_search`); `native_kernels`: its native
    kernels, for a search run in this process; `int8_logits` (a native kernel too): the cached
    step's output product in int8 (`kernels/int8_logits.py`); `min_length`: no output ends
    before it has this many tokens, EOS included (`beam_search.beam_search`). Returns a `beam_search.BeamSearchResult`."""
    import tensorflow as tf

    from t2t_keras.decoding.beam_search import beam_search

    vocabulary = groups = mask = None
    if shortlist is not None:
        vocabulary, groups = shortlist.vocabularies(input_ids, SHORTLIST_GROUPS)
        mask = shortlist.sentence_mask(input_ids, vocabulary, groups)
    encoded = model.encode(input_ids, training=False)
    if cached:
        memory, state = model.init_decoding(encoded, beam_size)
        step = _step_over(model, model.output_weights(vocabulary, int8_logits), float32_logits=not native_kernels)
        if shortlist is not None:
            step, memory = _grouped(step, beam_size, vocabulary.shape[0]), (memory, groups)
    else:
        (memory, state), step = _uncached_step(model, encoded, beam_size, max_lengths, vocabulary, groups)
    filter_state = token_filter.initial_state(input_ids, beam_size) if token_filter else None
    return beam_search(
        wrap_step(step) if wrap_step else step, state, tf.shape(input_ids)[0], beam_size, alpha, max_lengths,
        eos_id=EOS_ID, token_filter=token_filter, filter_state=filter_state, vocabulary=vocabulary,
        sentence_groups=groups, column_mask=mask, exact=exact, n_best=n_best, sentence_state=memory,
        native_kernels=native_kernels, min_length=min_length,
    )


def _step_over(model, output_weights, float32_logits: bool = True):
    """The model's decode step over the output projection prepared once per search: captured
    by the search's loop, not carried through it. Its logits float32, or in the product's
    dtype (for the native beam kernel, which reads bfloat16 as it is)."""
    return lambda ids, index, cache, memory, group_rows=None: model.decode_step(
        ids, index, cache, memory, output_weights, float32_logits, group_rows)


def _grouped(step, beam_size: int, group_count: int):
    """`step` over a shortlist's `group_count` groups: its per-sentence state (memory, each
    sentence's group); the hypotheses of the sentences still searching are contiguous by group
    (sentences leave the search in order), so each group's rows are its count of them x beam_size."""
    import tensorflow as tf

    def grouped_step(ids, index, cache, sentence_state):
        memory, groups = sentence_state
        group_rows = tf.math.bincount(groups, minlength=group_count, maxlength=group_count) * beam_size
        return step(ids, index, cache, memory, group_rows)

    return grouped_step


def _uncached_step(model, encoded, beam_size: int, max_lengths, vocabulary=None, groups=None):
    """((per-sentence state, initial state), step function) of the uncached search: the state is
    each hypothesis's prefix, and a step runs `model.decode` over all of it, against the
    encoder output of its sentence, to read the logits at `index` (the columns of its group's
    row of `vocabulary` only, if given: a shortlist's)."""
    import tensorflow as tf

    def step(ids, index, prefix, sentence_state):
        encoded, groups = sentence_state
        beams = tf.shape(ids)[0] // tf.shape(encoded.mask)[0]
        rows = tf.range(tf.shape(ids)[0])
        prefix = tf.tensor_scatter_nd_update(prefix, tf.stack([rows, tf.fill(tf.shape(ids), index)], axis=1), ids)
        targets = tf.concat([prefix[:, 1:], tf.zeros_like(prefix[:, :1])], axis=1)  # decode() shifts right
        logits = model.decode(targets, tf.nest.map_structure(lambda t: tf.repeat(t, beams, axis=0), encoded))[:, index]
        if vocabulary is None:
            return logits, prefix
        return tf.gather(logits, tf.gather(vocabulary, tf.repeat(groups, beams)), batch_dims=1), prefix

    prefix = tf.zeros([tf.shape(max_lengths)[0] * beam_size, tf.reduce_max(max_lengths)], tf.int32)
    return ((encoded, () if groups is None else groups), prefix), step


def sample_batch(model, input_ids, seeds, samples: int, max_lengths, top_k: int, temperature: float, alpha: float,
                 token_filter=None, min_length: int = 0):
    """`samples` outputs per sentence of source ids [B, S], drawn with each sentence's seed [B],
    none ending before `min_length` tokens (a `beam_search.BeamSearchResult`)."""
    from t2t_keras.decoding.beam_search import sample

    memory, cache = model.init_decoding(model.encode(input_ids, training=False), samples)
    filter_state = token_filter.initial_state(input_ids, samples) if token_filter else None
    return sample(
        _step_over(model, model.output_weights()), cache, seeds, max_lengths, eos_id=EOS_ID, top_k=top_k, temperature=temperature,
        alpha=alpha, samples=samples, token_filter=token_filter, filter_state=filter_state, sentence_state=memory,
        min_length=min_length,
    )


def source_lengths(input_ids):
    """Tokens (EOS included) of each row of 0-padded source ids [B, S]."""
    import tensorflow as tf

    return tf.reduce_sum(tf.cast(input_ids != PAD_ID, tf.int32), axis=1)


def is_over(input_ids, cap: int):
    """bool [B]: which rows of source ids are longer than `cap` tokens (0: no limit, none are)."""
    import tensorflow as tf

    lengths = source_lengths(input_ids)
    return lengths > cap if cap else tf.zeros_like(lengths, tf.bool)


def max_lengths(input_ids, extra_length: int, max_position: int | None = None):
    """The most tokens (EOS included) each sentence of source ids [B, S] may generate: its
    length + extra_length, and never past a learned position table's end."""
    import tensorflow as tf

    lengths = source_lengths(input_ids) + extra_length
    return lengths if max_position is None else tf.minimum(lengths, max_position)


def cap_inputs(input_ids, cap: int):
    """Rows of source ids longer than `cap` cut to it, ending with EOS (a bounded cost per
    request); 0: no limit."""
    import tensorflow as tf

    if not cap:
        return input_ids
    cut = input_ids[:, :cap]
    last = tf.range(tf.shape(cut)[1]) == cap - 1
    return tf.where(is_over(input_ids, cap)[:, None] & last[None, :], EOS_ID, cut)


def padded_batch(rows: list[list[int]]) -> np.ndarray:
    """Id lists as one int32 batch [len(rows), longest], 0-padded."""
    batch = np.full([len(rows), max(map(len, rows))], PAD_ID, np.int32)
    for row, ids in enumerate(rows):
        batch[row, : len(ids)] = ids
    return batch


def n_best_hypotheses(sentences: list[str], row_batches: Iterable[list[int]], search: Callable, decode: Callable,
                      rescore: Callable | None, n_best: int, on_batch: Callable = lambda rows: None,
                      rerank: Callable | None = None) -> list[list[Hypothesis]]:
    """The `n_best` hypotheses of each sentence, best first, in input order (a sentence in no
    batch, a blank one, gets EMPTY ones).

    `search(rows)` gives (ids [R, K, L], scores [R, K]) for the sentences at `rows`; `decode`
    turns one row of ids into text; `rerank(rows, hypotheses)`, if given, turns all K
    hypotheses of each of those sentences into its `n_best`, best first (None: the search's
    first `n_best`); `rescore(sources, texts)` gives log P of each text as the score path
    tokenises it (the search may have spelled a word with other pieces than the tokenizer
    would: same text, another score), or None leaves Hypothesis.log_prob None."""
    hypotheses, order = {}, []
    for rows in row_batches:
        ids, search_scores = search(rows)
        if n_best > ids.shape[1]:
            raise UsageError(f"n_best={n_best}: this model keeps {ids.shape[1]} hypotheses per sentence.")
        kept = ids.shape[1] if rerank else n_best
        for row, i in enumerate(rows):
            hypotheses[i] = [Hypothesis(decode(ids[row, k]), None, float(search_scores[row, k])) for k in range(kept)]
        order.extend(rows)
        on_batch(rows)
    if rerank and order:
        hypotheses = dict(zip(order, rerank(order, [hypotheses[i] for i in order])))
    pairs = [(sentences[i], h.text) for i in order for h in hypotheses[i]]
    log_probs = iter(rescore([s for s, _ in pairs], [t for _, t in pairs]) if rescore and pairs else [None] * len(pairs))
    outputs = [[EMPTY] * n_best for _ in sentences]
    for i in order:
        outputs[i] = [h._replace(log_prob=next(log_probs)) for h in hypotheses[i]]
    return outputs


def translate_lines(translator, lines: list[str], n_best: int = 1, log_probs: bool = True,
                    line_numbers: list[int] | None = None, on_lines: Callable = lambda count: None,
                    batching=None) -> list[list[Hypothesis]]:
    """The `n_best` (at most beam_size) best hypotheses of each line, best first, in input order,
    with a `SearchModule`: lines sorted by length into `batches`, blank lines EMPTY; with the
    module's reverse model, the whole beam reranked by it (`rerank_by_reverse`). `batching`
    (a DecodeHParams; default the module's) gives what its graphs do not fix: the batch sizes
    and reverse_weight.

    `log_probs=False` leaves Hypothesis.log_prob None and skips the teacher-forced pass that
    computes it (a second forward over every output: long for parsing). `on_lines(count)` is
    told as lines are done (a progress bar). With sampling, line i's samples come from the
    seed of its number `line_numbers[i]` (default: i), whatever batch it lands in."""
    vocabularies, hparams = translator.vocabularies, translator.decode_hparams
    batching = batching or hparams
    if not 1 <= n_best <= hparams.beam_size:
        raise UsageError(f"n_best={n_best}: choose 1 to beam_size ({hparams.beam_size}).")
    line_numbers = list(range(len(lines))) if line_numbers is None else line_numbers
    encoded, row_batches = sorted_batches(lines, vocabularies.source, batching, on_lines)
    reverse = translator.reverse

    def search(rows):
        batch = padded_batch([encoded[i] for i in rows])
        if hparams.sampling:
            result = translator.sample_ids(batch, np.array([line_seed(hparams.seed, line_numbers[i]) for i in rows], np.int64))
        else:  # the best only (unless a reverse model reranks them all): a search that stops as soon as it is settled
            result = (translator.best_ids if n_best == 1 and reverse is None else translator.translate_ids)(batch)
        return result["ids"].numpy(), result["scores"].numpy()

    def rerank(rows, hypotheses):
        return rerank_by_reverse(reverse, [lines[i] for i in rows], [len(encoded[i]) for i in rows], hypotheses,
                                 batching.reverse_weight, n_best)

    return n_best_hypotheses(lines, row_batches, search, vocabularies.target.decode,
                             (lambda s, t: score_lines(translator, s, t, batching=batching)) if log_probs else None, n_best,
                             on_batch=lambda rows: on_lines(len(rows)), rerank=rerank if reverse is not None else None)


def rerank_by_reverse(reverse, sources: list[str], source_lengths: list[int], hypotheses: list[list[Hypothesis]],
                      weight: float, n_best: int) -> list[list[Hypothesis]]:
    """Each source's hypotheses ranked by score + weight x log P(source | hypothesis) / source
    tokens (the reverse SearchModule's log-probability of the input given the output, divided by
    the input's length so one weight suits short and long sentences); the `n_best` first, each
    with that sum as its score."""
    pairs = [(i, h) for i, beam in enumerate(hypotheses) for h in beam]
    reverse_log_probs = score_lines(reverse, [h.text for _, h in pairs], [sources[i] for i, _ in pairs],
                                    blank_sources_score_zero=False)  # an empty output explains no input
    ranked = [[] for _ in sources]
    for (i, h), reverse_log_prob in zip(pairs, reverse_log_probs):
        ranked[i].append(h._replace(score=h.score + weight * reverse_log_prob / source_lengths[i]))
    return [sorted(beam, key=lambda h: -h.score)[:n_best] for beam in ranked]


def sorted_batches(lines: list[str], vocabulary, batching, on_lines: Callable = lambda count: None):
    """(each line's source ids, EOS-terminated (None for a blank line), the positions of the
    other lines in batches of like length, longest first: `batches` of `batching`'s sizes).
    `on_lines` is told of the blank lines, which no batch holds."""
    encoded = [vocabulary.encode(line, add_eos=True) if line.strip() else None for line in lines]
    on_lines(sum(ids is None for ids in encoded))
    order = sorted((i for i, ids in enumerate(encoded) if ids is not None), key=lambda i: -len(encoded[i]))
    return encoded, ([order[k] for k in chunk] for chunk in batches([len(encoded[i]) for i in order], batching))


def batches(lengths: list[int], hparams) -> Iterator[list[int]]:
    """Positions in `lengths` (sorted longest first) grouped into batches: sentences_per_batch
    at a time, or with batch_tokens, as many as fit count x longest <= batch_tokens (at least
    one, at most sentences_per_batch)."""
    start = 0
    while start < len(lengths):
        end = min(start + hparams.sentences_per_batch, len(lengths))
        if hparams.batch_tokens:
            longest = lengths[start]
            end = min(end, start + max(1, hparams.batch_tokens // max(longest, 1)))
        yield list(range(start, end))
        start = end


def line_seed(seed: int, line_number: int) -> int:
    """The sampling seed of one input line: the decode seed in the high 32 bits, the line's
    number in the low ones."""
    return (seed << 32) | (line_number & 0xFFFFFFFF)


def score_lines(translator, sources: list[str], targets: list[str], blank_sources_score_zero: bool = True,
                batching=None) -> list[float]:
    """log P(target | source) of each pair (EOS included), as the SavedModel's score signature,
    `batching.sentences_per_batch` pairs at a time (default: the module's); a blank source
    scores 0, as its (empty) translation does everywhere (unless `blank_sources_score_zero` is
    False: then it is the model's log P(target | EOS))."""
    vocabularies = translator.vocabularies
    batch_size = (batching or translator.decode_hparams).sentences_per_batch
    scored = [i for i, source in enumerate(sources) if source.strip() or not blank_sources_score_zero]
    pairs = [(vocabularies.source.encode(sources[i], add_eos=True), vocabularies.target.encode(targets[i], add_eos=True))
             for i in scored]
    scores = [0.0] * len(sources)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        result = translator.score_ids(padded_batch([s for s, _ in chunk]), padded_batch([t for _, t in chunk]))
        for i, score in zip(scored[start : start + batch_size], result["log_probs"].numpy()):
            scores[i] = float(score)
    return scores


def postprocess(problem, sources: list[str], outputs: list[list[Hypothesis]]) -> tuple[list[list[Hypothesis]], int]:
    """Every hypothesis in the problem's output form (parsing: a tree over the input's words),
    and the repairs that took in all."""
    processed, repairs = [], 0
    for source, hypotheses in zip(sources, outputs):
        if not source.strip():
            processed.append(hypotheses)
            continue
        line = []
        for hypothesis in hypotheses:
            text, count = problem.postprocess_output(source, hypothesis.text)
            line.append(hypothesis._replace(text=text))
            repairs += count
        processed.append(line)
    return processed, repairs


def require_sentence_list(sentences, method: str) -> None:
    """A TypeError for a bare string where a list of sentences belongs (it would be read as
    one sentence per character); every method of the Python API that takes sentences checks."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f"{method} takes a list of sentences, e.g. {method}([\"A dog runs.\"]), not a string.")
