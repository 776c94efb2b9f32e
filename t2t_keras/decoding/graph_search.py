"""A batch of source ids searched in the graph: encode -> cache -> beam search (or samples) ->
each sentence's K best ids, over a model's cached decode step.

The graph level of decoding: `SearchModule`'s tf.functions call `search_batch` and
`sample_batch` (and the tests, for the uncached reference); lines of text are
`line_decoding`'s. TensorFlow is imported when they run, so that a command fails on bad input
before TensorFlow starts.
"""

from __future__ import annotations

from t2t_keras.decoding.kernel_choices import GRAPH_ONLY, DecodeKernels
from t2t_keras.token_ids import EOS_ID, PAD_ID

# A search part's sentences are split into this many groups with a shortlist, each
# multiplied by its own union of lists: docs/results/decoding_speed.md, "Shortlist".
SHORTLIST_GROUPS = 8


def search_batch(model, input_ids, beam_size: int, alpha: float, max_lengths, token_filter=None,
                 cached: bool = True, shortlist=None, exact: bool = False,
                 n_best: int = 1, kernels: DecodeKernels = GRAPH_ONLY, min_length: int = 0, controls=None,
                 continues_word=None):
    """Beam search for source ids [B, S] over the model's cached decode step: the encoder runs
    once, its keys and values are projected once per layer (`init_decoding`), and every step
    feeds one token per hypothesis. `cached=False` runs the whole decoder over each
    hypothesis's prefix at every step instead (the reference the cache must match). With a
    `shortlist.Shortlist`, the search chooses among the batch's shortlisted tokens only, and
    the step computes only their logits. `exact` and
    `n_best`: when the search stops (`beam_search.beam_search`); `kernels`: the step's kernel
    choices (`kernel_choices.DecodeKernels`: the output product's orientation or int8, the
    native beam kernels of a search run in this process); `min_length`: no output ends
    before it has this many tokens, EOS included (`beam_search.beam_search`); `controls`: each
    sentence's prefix, avoided terms and terms that must appear (`controls.SearchControls`),
    whose pieces a shortlist's rows then include; `continues_word` [V] bool: the pieces that may
    not follow a required term's last one. Returns a `beam_search.BeamSearchResult`."""
    import tensorflow as tf

    from t2t_keras.decoding.beam_search import beam_search

    vocabulary = groups = mask = None
    if shortlist is not None:
        extra = None if controls is None else controls.target_ids
        width = None if controls is None else model.target_vocab_size
        vocabulary, groups = shortlist.vocabularies(input_ids, SHORTLIST_GROUPS, extra, width)
        mask = shortlist.sentence_mask(input_ids, vocabulary, groups, extra, width)
    encoded = model.encode(input_ids, training=False)
    if cached:
        memory, state = model.init_decoding(encoded, beam_size)
        step = _step_over(model, model.output_weights(vocabulary, kernels.output_product),
                          float32_logits=kernels.beam_candidates != "native", native_attention=kernels.attention == "native")
        if shortlist is not None:
            step, memory = _grouped(step, beam_size, vocabulary.shape[0]), (memory, groups)
    else:
        (memory, state), step = _uncached_step(model, encoded, beam_size, max_lengths, vocabulary, groups)
    filter_state = token_filter.initial_state(input_ids, beam_size) if token_filter else None
    return beam_search(
        step, state, tf.shape(input_ids)[0], beam_size, alpha, max_lengths,
        eos_id=EOS_ID, token_filter=token_filter, filter_state=filter_state, vocabulary=vocabulary,
        sentence_groups=groups, column_mask=mask, exact=exact, n_best=n_best, sentence_state=memory,
        kernels=kernels, min_length=min_length, controls=controls, continues_word=continues_word,
    )


def _step_over(model, output_weights, float32_logits: bool = True, native_attention: bool = False):
    """The model's decode step over the output projection prepared once per search: captured
    by the search's loop, not carried through it. Its logits float32, or in the product's
    dtype (for the native beam kernel, which reads bfloat16 as it is); its attentions native
    kernels or the graph's."""
    return lambda ids, index, cache, memory, group_rows=None: model.decode_step(
        ids, index, cache, memory, output_weights, float32_logits, group_rows, native_attention)


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
                 token_filter=None, min_length: int = 0, kernels: DecodeKernels = GRAPH_ONLY):
    """`samples` outputs per sentence of source ids [B, S], drawn with each sentence's seed [B],
    none ending before `min_length` tokens (a `beam_search.BeamSearchResult`); the output product
    in `kernels`' orientation (sampling keeps the float product)."""
    from t2t_keras.decoding.beam_search import sample

    memory, cache = model.init_decoding(model.encode(input_ids, training=False), samples)
    filter_state = token_filter.initial_state(input_ids, samples) if token_filter else None
    return sample(
        _step_over(model, model.output_weights(None, kernels.step_product), native_attention=kernels.attention == "native"),
        cache, seeds, max_lengths, eos_id=EOS_ID, top_k=top_k, temperature=temperature,
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


def max_lengths(input_ids, extra_length: int, max_position: int | None = None, forced_lengths=None):
    """The most tokens (EOS included) each sentence of source ids [B, S] may generate: its
    length + extra_length (or its `forced_lengths` [B], a prefix's pieces, + extra_length, if
    more), and never past a learned position table's end."""
    import tensorflow as tf

    lengths = source_lengths(input_ids) + extra_length
    if forced_lengths is not None:
        lengths = tf.maximum(lengths, forced_lengths + extra_length)
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
