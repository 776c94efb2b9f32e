"""Lines of text decoded in batches: sentences -> ids sorted by length into batches -> a
`SearchModule`'s graphs (or an export's signatures) -> each line's n best `Hypothesis`es, in
input order, rescored and in the problem's output form.

The line level of decoding, between the graphs (`graph_search`, `search_module`) and the
interfaces (`t2t_keras.Translator`, the decoder CLI; files and the terminal are
`file_decoding`'s).
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

import numpy as np

from t2t_keras.decoding.controls import Steering
from t2t_keras.decoding.hypothesis import EMPTY, Hypothesis
from t2t_keras.errors import UsageError
from t2t_keras.token_ids import PAD_ID


def padded_batch(rows: list[list[int]]) -> np.ndarray:
    """Id lists as one int32 batch [len(rows), longest], 0-padded."""
    batch = np.full([len(rows), max(map(len, rows))], PAD_ID, np.int32)
    for row, ids in enumerate(rows):
        batch[row, : len(ids)] = ids
    return batch


def n_best_hypotheses(sentences: list[str], row_batches: Iterable[list[int]], search: Callable, decode: Callable,
                      rescore: Callable | None, n_best: int, on_batch: Callable = lambda rows: None,
                      rerank: Callable | None = None, truncated: Callable[[int], bool] = lambda i: False
                      ) -> list[list[Hypothesis]]:
    """The `n_best` hypotheses of each sentence, best first, in input order (a sentence in no
    batch, a blank one, gets EMPTY ones).

    `search(rows)` gives (ids [R, K, L], scores [R, K]) for the sentences at `rows`; `decode`
    turns one row of ids into text; `rerank(rows, hypotheses)`, if given, turns all K
    hypotheses of each of those sentences into its `n_best`, best first (None: the search's
    first `n_best`); `rescore(sources, texts)` gives log P of each text as the score path
    tokenises it (the search may have spelled a word with other pieces than the tokenizer
    would: same text, another score), or None leaves Hypothesis.log_prob None; `truncated(i)`:
    whether sentence i was cut to the search's max_input_tokens (Hypothesis.truncated)."""
    hypotheses, order = {}, []
    for rows in row_batches:
        ids, search_scores = search(rows)
        if n_best > ids.shape[1]:
            raise UsageError(f"n_best={n_best}: this model keeps {ids.shape[1]} hypotheses per sentence.")
        kept = ids.shape[1] if rerank else n_best
        for row, i in enumerate(rows):
            cut = truncated(i)
            hypotheses[i] = [Hypothesis(decode(ids[row, k]), None, float(search_scores[row, k]), cut) for k in range(kept)]
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


def translate_lines(module, lines: list[str], n_best: int = 1, log_probs: bool = True,
                    line_numbers: list[int] | None = None, on_lines: Callable = lambda count: None,
                    batching=None, steering: Steering | None = None) -> list[list[Hypothesis]]:
    """The `n_best` (at most beam_size) best hypotheses of each line, best first, in input order,
    with a `SearchModule`: lines sorted by length into `batches`, blank lines EMPTY; with the
    module's reverse model, the whole beam reranked by it (`rerank_by_reverse`). `batching`
    (a DecodeHParams; default the module's) gives what its graphs do not fix: the batch sizes
    and reverse_weight.

    `log_probs=False` leaves Hypothesis.log_prob None and skips the teacher-forced pass that
    computes it (a second forward over every output: long for parsing). `on_lines(count)` is
    told as lines are done (a progress bar). With sampling, line i's samples come from the
    seed of its number `line_numbers[i]` (default: i), whatever batch it lands in. A line longer
    than the module's max_input_tokens is translated from its first ones (Hypothesis.truncated).
    `steering` (`controls.Steering`): each line's prefix, avoided terms and terms that must
    appear; of a sentence's beam, the best hypotheses without an avoided term come first (the
    search bans every spelling of it up to `controls.MAX_SPELLINGS`; this catches any other),
    then those missing fewest required terms, each naming those it misses
    (`Hypothesis.missing`)."""
    vocabularies, hparams = module.vocabularies, module.decode_hparams
    batching = batching or hparams
    if not 1 <= n_best <= hparams.beam_size:
        raise UsageError(f"n_best={n_best}: choose 1 to beam_size ({hparams.beam_size}).")
    steering = steering if steering is not None and steering.active else None
    if steering is not None and hparams.sampling:
        raise UsageError("prefix, avoid and constraints steer beam search; with sampling (sampling_top_k) the outputs are drawn: "
                         "decode with sampling_top_k=0.")
    line_numbers = list(range(len(lines))) if line_numbers is None else line_numbers
    encoded, row_batches = sorted_batches(lines, vocabularies.source, batching, on_lines)
    reverse = module.reverse

    def search(rows):
        batch = padded_batch([encoded[i] for i in rows])
        if steering is not None:
            controls = steering.arrays(rows)
            if isinstance(controls.constraint_ids, tuple):
                search_steered = module.steered_best_ids if n_best == 1 and reverse is None else module.steered_ids
                result = search_steered(batch, *controls[:-2])
            else:
                search_steered = module.constrained_best_ids if n_best == 1 and reverse is None else module.constrained_ids
                result = search_steered(batch, *controls)
        elif hparams.sampling:
            result = module.sample_ids(batch, np.array([line_seed(hparams.seed, line_numbers[i]) for i in rows], np.int64))
        else:  # the best only (unless a reverse model reranks them all): a search that stops as soon as it is settled
            result = (module.best_ids if n_best == 1 and reverse is None else module.translate_ids)(batch)
        return result["ids"].numpy(), result["scores"].numpy()

    def rerank(rows, hypotheses):
        if reverse is not None:
            hypotheses = rerank_by_reverse(reverse, [lines[i] for i in rows], [len(encoded[i]) for i in rows], hypotheses,
                                           batching.reverse_weight, hparams.beam_size)
        if steering is not None:
            hypotheses = [steering.checked(i, beam) for i, beam in zip(rows, hypotheses)]
        return [beam[:n_best] for beam in hypotheses]

    cap = hparams.max_input_tokens
    return n_best_hypotheses(lines, row_batches, search, vocabularies.target.decode,
                             (lambda s, t: score_lines(module, s, t, batching=batching)) if log_probs else None, n_best,
                             on_batch=lambda rows: on_lines(len(rows)),
                             rerank=rerank if reverse is not None or steering is not None else None,
                             truncated=lambda i: bool(cap) and len(encoded[i]) > cap)


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


def score_lines(module, sources: list[str], targets: list[str], blank_sources_score_zero: bool = True,
                batching=None) -> list[float]:
    """log P(target | source) of each pair (EOS included), as the SavedModel's score signature,
    `batching.sentences_per_batch` pairs at a time (default: the module's); a blank source
    scores 0, as its (empty) translation does everywhere (unless `blank_sources_score_zero` is
    False: then it is the model's log P(target | EOS))."""
    vocabularies = module.vocabularies
    batch_size = (batching or module.decode_hparams).sentences_per_batch
    scored = [i for i, source in enumerate(sources) if source.strip() or not blank_sources_score_zero]
    pairs = [(vocabularies.source.encode(sources[i], add_eos=True), vocabularies.target.encode(targets[i], add_eos=True))
             for i in scored]
    scores = [0.0] * len(sources)
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        result = module.score_ids(padded_batch([s for s, _ in chunk]), padded_batch([t for _, t in chunk]))
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
