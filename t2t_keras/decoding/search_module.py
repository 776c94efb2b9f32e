"""SearchModule: the graphs of translation over one model at fixed decode settings and kernels:
source ids or text -> beam search over the cached model -> target ids or text, and log P of
given pairs.

One module serves the decoder CLI, the Python API (`t2t_keras.Translator`, which keeps one per
settings it was asked for), the trainer's dev score and the exported SavedModel; every one is
built by `decoding/engine.py`, which chooses its kernels (`kernel_choices`):
`translate_ids`, `best_ids`, `sample_ids`, `translate_text`, `score_ids` and `score_text` are
tf.functions of TensorFlow and tensorflow_text ops only, so the exporter puts them into the
graph as they are. They are traced without AutoGraph: the search's loops are tf.while_loops
already, and converting every layer's `call` on the way was most of a decoder's start-up
(docs/results/library.md, "Start-up"). The decode settings are Python constants of the graphs (a
beam size is a shape): other settings need another module.
"""

from __future__ import annotations

import functools
import re

import tensorflow as tf

from t2t_keras.data import target_languages as target_languages_lib
from t2t_keras.decoding import graph_search
from t2t_keras.decoding.beam_search import search_in_parts
from t2t_keras.decoding.controls import WORD_START, SearchControls, TargetPieces
from t2t_keras.decoding.kernel_choices import DecodeKernels
from t2t_keras.hparams_lib import DecodeHParams
from t2t_keras.system import decoding_parts
from t2t_keras.token_ids import PAD_ID

_TEXTS = tf.TensorSpec([None], tf.string, name="inputs")
_PREFIXES = tf.TensorSpec([None], tf.string, name="prefixes")
_CONSTRAINTS = tf.TensorSpec([None, None], tf.string, name="constraints")
_LANGUAGES = tf.TensorSpec([None], tf.string, name="target_languages")


class SearchModule(tf.Module):
    """Beam search translation with a trained Transformer, at fixed decode settings.

    Do not call tf.random.set_seed (or keras.utils.set_random_seed) after creating one: it
    clears TensorFlow's eager kernel cache, which destroys the tensorflow_text SentencePiece
    resource the text signature uses (a NotFoundError on the next translate_text).

    Args:
      model: a built `Transformer` (or an `Ensemble`).
      vocabularies: the problem's `Vocabularies` (source and target; for the text signatures and
        `line_decoding`); None: ids only (a benchmark's model of random weights).
      decode_hparams: beam size, alpha, extra length, whether to constrain.
      kernels: the search's kernel choices (`kernel_choices.DecodeKernels`); native ones only
        for a module that decodes in this process: an exported module's graphs must hold
        TensorFlow's ops only (`export_saved_model` refuses others).
      token_filter: the problem's `beam_search.TokenFilter` (`Problem.token_filter`), applied
        when decode_hparams.constrained.
      problem: for its output form (postprocess_output); None: the raw text.
      shortlist: a `shortlist.Shortlist`: each sentence searched over its shortlisted tokens.
    """

    def __init__(self, model, vocabularies, decode_hparams: DecodeHParams, kernels: DecodeKernels, token_filter=None,
                 problem=None, shortlist=None):
        super().__init__(name="search")
        self.shortlist = shortlist
        self.kernels = kernels
        self.reverse = None  # a SearchModule of the other direction whose score_ids reranks the hypotheses
        self.model = model
        self.problem = problem
        self.vocabularies = vocabularies
        self.decode_hparams = decode_hparams.validated()
        self.token_filter = token_filter if self.decode_hparams.constrained else None
        self.source_tokenizer = self.target_tokenizer = None
        if vocabularies is not None:
            self.source_tokenizer = vocabularies.source.tf_tokenizer()
            self.target_tokenizer = self.source_tokenizer if vocabularies.shared else vocabularies.target.tf_tokenizer()
        self.max_position = model.hparams.max_position if model.hparams.positional_encoding == "learned" else None
        self.parallel_parts = decoding_parts(self.decode_hparams.parallel_parts)
        self.checkpoint_paths = []  # the checkpoints whose weights the model holds, the run's first (an export's metadata)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="input_ids")], autograph=False)
    def translate_ids(self, input_ids):
        """Source ids [B, S] (EOS-terminated, 0-padded) -> {ids [B, K, L], scores [B, K], lengths [B, K]}:
        the K hypotheses of beam search, each final (a sentence's search runs until all K are
        settled), or with sampling, K samples drawn with each sentence's seed from its ids."""
        return self._translate_ids(input_ids, self.decode_hparams.beam_size)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="input_ids")], autograph=False)
    def best_ids(self, input_ids):
        """translate_ids for the best output only: a sentence's search stops as soon as its best
        hypothesis is settled, so only the first of the K is final. What one output per input
        (the decoder without --n_best, serving_default) runs."""
        return self._translate_ids(input_ids, 1)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="input_ids"),
            tf.TensorSpec([None, None], tf.int32, name="prefix_ids"),
            tf.TensorSpec([None], tf.int32, name="prefix_lengths"),
            tf.TensorSpec([None, None], tf.bool, name="completion"),
            tf.TensorSpec([None, None, None], tf.int32, name="banned_context"),
            tf.TensorSpec([None, None], tf.int32, name="banned_tokens"),
            tf.TensorSpec([None, None], tf.int32, name="target_ids"),
        ],
        autograph=False,
    )
    def steered_ids(self, input_ids, *controls):
        """translate_ids steered by each sentence's `controls.SearchControls` (a prefix its
        output starts with, terms it avoids): the K hypotheses of each, all settled."""
        return self._steered_ids(input_ids, controls, self.decode_hparams.beam_size)

    @tf.function(input_signature=steered_ids.input_signature, autograph=False)
    def steered_best_ids(self, input_ids, *controls):
        """steered_ids for the best output only, as best_ids is translate_ids's."""
        return self._steered_ids(input_ids, controls, 1)

    @tf.function(
        input_signature=[
            *steered_ids.input_signature,
            tf.TensorSpec([None, None, None], tf.int32, name="constraint_ids"),
            tf.TensorSpec([None, None], tf.int32, name="constraint_lengths"),
        ],
        autograph=False,
    )
    def constrained_ids(self, input_ids, *controls):
        """steered_ids with terms each output must hold (`constraints`: dynamic beam allocation)."""
        return self._steered_ids(input_ids, controls, self.decode_hparams.beam_size)

    @tf.function(input_signature=constrained_ids.input_signature, autograph=False)
    def constrained_best_ids(self, input_ids, *controls):
        """constrained_ids for the best output only."""
        return self._steered_ids(input_ids, controls, 1)

    def _steered_ids(self, input_ids, controls, n_best: int):
        result = search_in_parts(functools.partial(self._search, n_best=n_best), self._capped(input_ids),
                                 self.parallel_parts, *controls)
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    def _translate_ids(self, input_ids, n_best: int):
        if self.decode_hparams.sampling:
            return self.sample_ids(input_ids, self._seeds_of(input_ids))
        input_ids = self._capped(input_ids)
        result = search_in_parts(functools.partial(self._search, n_best=n_best), input_ids, self.parallel_parts)
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="input_ids"),
            tf.TensorSpec([None], tf.int64, name="seeds"),
        ],
        autograph=False,
    )
    def sample_ids(self, input_ids, seeds):
        """Like translate_ids, but each sentence's beam_size outputs are samples (sampling_top_k,
        sampling_temperature) drawn with its own seed, whatever batch it is in."""
        result = search_in_parts(self._sample, self._capped(input_ids), self.parallel_parts, seeds)
        return {"ids": result.ids, "scores": result.scores, "lengths": result.lengths}

    def _capped(self, input_ids):
        return graph_search.cap_inputs(input_ids, self.decode_hparams.max_input_tokens)

    def _max_lengths(self, input_ids):
        return graph_search.max_lengths(input_ids, self.decode_hparams.extra_length, self.max_position)

    def _search(self, input_ids, *controls, n_best: int):
        hp = self.decode_hparams
        controls = SearchControls(*controls) if controls else None
        forced = None if controls is None else controls.prefix_lengths
        if controls is not None and not isinstance(controls.constraint_lengths, tuple):
            forced += tf.reduce_sum(controls.constraint_lengths, axis=1)  # room for the terms that must appear
        max_lengths = graph_search.max_lengths(input_ids, hp.extra_length, self.max_position, forced)
        continues_word = None
        if controls is not None and not isinstance(controls.constraint_ids, tuple) and self.vocabularies is not None:
            continues_word = tf.constant(TargetPieces(self.vocabularies.target).continues_word)
        return graph_search.search_batch(self.model, input_ids, hp.beam_size, hp.alpha, max_lengths,
                                         self.token_filter, shortlist=self.shortlist, exact=hp.exact_search,
                                         n_best=n_best, kernels=self.kernels, min_length=hp.min_length, controls=controls,
                                         continues_word=continues_word)

    def _sample(self, input_ids, seeds):
        hp = self.decode_hparams
        return graph_search.sample_batch(self.model, input_ids, seeds, hp.beam_size, self._max_lengths(input_ids),
                                           hp.sampling_top_k, hp.sampling_temperature, hp.alpha, self.token_filter,
                                           min_length=hp.min_length, kernels=self.kernels)

    def _seeds_of(self, input_ids):
        """A seed per sentence from the decode seed and its ids (the same sentence, the same samples)."""
        text = tf.strings.reduce_join(tf.strings.as_string(input_ids), axis=1, separator=" ")
        return tf.bitwise.bitwise_xor(tf.strings.to_hash_bucket_fast(text, 2**62),
                                      tf.constant(self.decode_hparams.seed << 32, tf.int64))

    @tf.function(input_signature=[_TEXTS], autograph=False)
    def translate_text(self, inputs):
        """Raw sentences [B] -> {outputs [B] (best translation), scores [B] (what the search ranked
        it by: log P / ((5 + length) / 6) ** alpha), log_probs [B] (log P(output | input) of its
        pieces, EOS included), truncated [B] (the input was longer than max_input_tokens and was
        cut to it)}.

        A blank sentence gives an empty translation, score and log_prob 0, as in the decoder CLI.
        """
        return self._text_outputs(inputs, self.best_ids)

    @tf.function(input_signature=[_TEXTS, _LANGUAGES], autograph=False)
    def translate_text_to(self, inputs, target_languages):
        """translate_text for a model of several target languages: each sentence into its
        language of `target_languages` [B] ("": the sentence starts with its token, >>de<<)."""
        return self._text_outputs(inputs, self.best_ids, self._tagged(inputs, target_languages))

    @tf.function(input_signature=[_TEXTS, _PREFIXES], autograph=False)
    def translate_prefix_text(self, inputs, prefixes):
        """translate_text with each output starting with its prefix [B] ("" for none): the
        prefix's pieces forced and scored; one ending inside a word ("Ein Hu") is completed by
        a piece that starts that word as typed ("Ein Hund"), or, where no piece does, the typed
        word's pieces are forced too (`controls.TargetPieces.prefix`, the same rule)."""
        return self._prefix_outputs(inputs, prefixes)

    @tf.function(input_signature=[_TEXTS, _PREFIXES, _LANGUAGES], autograph=False)
    def translate_prefix_text_to(self, inputs, prefixes, target_languages):
        """translate_prefix_text for a model of several target languages (as translate_text_to)."""
        return self._prefix_outputs(inputs, prefixes, self._tagged(inputs, target_languages))

    def _prefix_outputs(self, inputs, prefixes, model_inputs=None):
        controls = self._prefix_controls(prefixes)
        return self._text_outputs(inputs, lambda input_ids: self.steered_best_ids(input_ids, *controls), model_inputs)

    @tf.function(input_signature=[_TEXTS, _PREFIXES, _CONSTRAINTS], autograph=False)
    def translate_constrained_text(self, inputs, prefixes, constraints):
        """translate_prefix_text with terms each output must contain: `constraints` [B, M], each
        sentence's terms ("" pads), spelled as the tokenizer spells them (the same pieces as
        `controls.TargetPieces.required`), searched by dynamic beam allocation."""
        return self._constrained_outputs(inputs, prefixes, constraints)

    @tf.function(input_signature=[_TEXTS, _PREFIXES, _CONSTRAINTS, _LANGUAGES], autograph=False)
    def translate_constrained_text_to(self, inputs, prefixes, constraints, target_languages):
        """translate_constrained_text for a model of several target languages (as translate_text_to)."""
        return self._constrained_outputs(inputs, prefixes, constraints, self._tagged(inputs, target_languages))

    def _constrained_outputs(self, inputs, prefixes, constraints, model_inputs=None):
        controls = self._prefix_controls(prefixes)
        batch, count = tf.shape(constraints)[0], tf.shape(constraints)[1]
        terms = tf.strings.strip(tf.strings.regex_replace(tf.reshape(constraints, [-1]), r"\s+", " "))
        with tf.device("/device:CPU:0"):
            pieces = self.target_tokenizer.tokenize(terms)[:, :-1]  # without EOS; "" has none
        width = tf.maximum(pieces.bounding_shape(axis=1), 1)
        ids = tf.reshape(pieces.to_tensor(default_value=PAD_ID, shape=tf.stack([tf.cast(batch * count, tf.int64), width])),
                         [batch, count, -1])
        lengths = tf.reshape(tf.cast(pieces.row_lengths(), tf.int32), [batch, count])
        target_ids = tf.concat([controls[-1], tf.reshape(ids, [batch, -1])], axis=1)  # what a shortlist's rows must hold
        return self._text_outputs(
            inputs, lambda input_ids: self.constrained_best_ids(input_ids, *controls[:-1], target_ids, ids, lengths),
            model_inputs)

    def _tagged(self, inputs, target_languages):
        """Sentences [B] as a multilingual model reads them: each after its language's token
        (`data.target_languages`), or as given where its language is "" and it starts with one.
        Anything else (an unknown language, none, or both) stops the call with one message."""
        names = self.problem.target_languages
        languages = tf.constant(list(names))
        known = tf.reduce_any(tf.equal(target_languages[:, None], languages[None, :]), axis=1)
        starts_tagged = tf.strings.regex_full_match(
            inputs, r"\s*(" + "|".join(re.escape(target_languages_lib.token(name)) for name in names) + r")(\s.*)?")
        asked = tf.not_equal(target_languages, "")
        blank = tf.equal(tf.strings.strip(inputs), "")
        each = (known & ~starts_tagged) | (~asked & starts_tagged) | (~asked & blank)
        message = (f"target_languages: give each input one of {', '.join(names)} (or \"\" for an input that starts with "
                   f"its token, e.g. {target_languages_lib.token(names[0])}), not both")
        with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(each), [message])]):
            tokens = tf.strings.join([target_languages_lib.OPEN, target_languages, target_languages_lib.CLOSE])
            tagged = tf.strings.join([tokens, inputs], " ")
            return tf.where(asked, tagged, inputs)

    def _prefix_controls(self, prefixes):
        """`controls.SearchControls` of prefix texts [B], in the graph (no avoided terms)."""
        pieces = tf.constant(self.vocabularies.target.pieces(range(self.vocabularies.target.size)))
        batch = tf.shape(prefixes)[0]
        open_word = tf.strings.regex_full_match(prefixes, r".*\S")  # ends inside a word
        head = tf.where(open_word, tf.strings.regex_replace(prefixes, r"\S+$", ""), prefixes)
        partial = tf.where(open_word, tf.strings.regex_replace(prefixes, r"^.*\s", ""), "")
        key = tf.strings.join([WORD_START, partial])
        lengths = tf.tile(tf.strings.length(key, unit="UTF8_CHAR")[:, None], [1, tf.shape(pieces)[0]])
        starts = tf.strings.substr(tf.tile(pieces[None, :], [batch, 1]), tf.zeros_like(lengths), lengths, unit="UTF8_CHAR")
        continuing = tf.equal(starts, key[:, None]) & open_word[:, None]
        completing = tf.reduce_any(continuing, axis=1)
        forced_word = tf.where(open_word & ~completing, partial, "")  # no piece continues it: its own pieces
        with tf.device("/device:CPU:0"):
            forced = tf.concat([self.target_tokenizer.tokenize(head)[:, :-1],
                                self.target_tokenizer.tokenize(forced_word)[:, :-1]], axis=1)  # without EOS
        width = tf.maximum(forced.bounding_shape(axis=1), 1)
        prefix_ids = forced.to_tensor(default_value=PAD_ID, shape=tf.stack([tf.cast(batch, tf.int64), width]))
        completion = tf.where(completing[:, None], continuing, True)
        allowed_ids = tf.ragged.boolean_mask(tf.tile(tf.range(tf.shape(pieces)[0])[None, :], [batch, 1]), continuing)
        target_ids = tf.concat([forced, allowed_ids], axis=1).to_tensor(default_value=PAD_ID)
        no_terms = tf.fill([batch, 1], -1)
        return (prefix_ids, tf.cast(forced.row_lengths(), tf.int32), completion, no_terms[:, :, None], no_terms,
                tf.pad(target_ids, [[0, 0], [0, 1]]))

    def _text_outputs(self, inputs, search, model_inputs=None):
        """translate_text's outputs of raw sentences [B], with `search(input_ids)` (best_ids, or
        steered_ids with controls) for their hypotheses; `model_inputs`, the sentences as the
        model reads them (a multilingual model's, tagged), if not `inputs`."""
        input_ids = self._tokenize(self.source_tokenizer, inputs if model_inputs is None else model_inputs)
        truncated = graph_search.is_over(input_ids, self.decode_hparams.max_input_tokens)
        result = search(input_ids)
        best_ids = result["ids"][:, 0]
        log_probs = self.score_ids(self._capped(input_ids), best_ids)["log_probs"]  # one teacher-forced pass
        without_eos = tf.RaggedTensor.from_tensor(best_ids, lengths=tf.maximum(result["lengths"][:, 0] - 1, 0))
        with tf.device("/device:CPU:0"):
            outputs = self.target_tokenizer.detokenize(without_eos)
        blank = tf.equal(tf.strings.strip(inputs), "")
        return {
            "outputs": tf.where(blank, tf.constant("", tf.string), outputs),
            "scores": tf.where(blank, tf.zeros_like(result["scores"][:, 0]), result["scores"][:, 0]),
            "log_probs": tf.where(blank, tf.zeros_like(log_probs), log_probs),
            "truncated": truncated,
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="input_ids"),
            tf.TensorSpec([None, None], tf.int32, name="target_ids"),
        ],
        autograph=False,
    )
    def score_ids(self, input_ids, target_ids):
        """log P(target | source) of EOS-terminated, 0-padded id pairs -> {log_probs [B], lengths [B]}."""
        logits = self.model({"inputs": input_ids, "targets": target_ids}, training=False)
        token_log_probs = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids, logits=logits)
        real = target_ids != PAD_ID
        return {
            "log_probs": tf.reduce_sum(tf.where(real, token_log_probs, 0.0), axis=1),
            "lengths": tf.reduce_sum(tf.cast(real, tf.int32), axis=1),
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="targets"),
        ],
        autograph=False,
    )
    def score_text(self, inputs, targets):
        """log P(target | source) of raw sentence pairs -> {log_probs [B], lengths [B] (target tokens + EOS)};
        a blank source has log_prob 0, as its empty translation does."""
        return self._scored_text(inputs, targets)

    @tf.function(input_signature=[_TEXTS, tf.TensorSpec([None], tf.string, name="targets"), _LANGUAGES], autograph=False)
    def score_text_to(self, inputs, targets, target_languages):
        """score_text for a model of several target languages: `target_languages` [B], the
        targets' (as translate_text_to)."""
        return self._scored_text(inputs, targets, self._tagged(inputs, target_languages))

    def _scored_text(self, inputs, targets, model_inputs=None):
        source = inputs if model_inputs is None else model_inputs
        result = self.score_ids(self._tokenize(self.source_tokenizer, source), self._tokenize(self.target_tokenizer, targets))
        blank = tf.equal(tf.strings.strip(inputs), "")
        return {"log_probs": tf.where(blank, 0.0, result["log_probs"]), "lengths": result["lengths"]}

    @staticmethod
    def _tokenize(tokenizer, sentences):
        """EOS-terminated, 0-padded ids [B, S] of raw sentences."""
        # The SentencePiece resource lives on one host device; with several logical CPUs the
        # placer could otherwise run the tokenizer where it does not exist.
        with tf.device("/device:CPU:0"):
            return tokenizer.tokenize(sentences).to_tensor(default_value=PAD_ID)
