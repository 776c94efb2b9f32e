"""Steering a search: a target prefix (completed where it ends inside a word), terms that must
not appear and terms that must, through the graph, the Python API and the decoder command."""

import gzip
import os

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.decoding import graph_search
from t2t_keras.decoding.controls import WORD_START, TargetPieces, contains_term, control_arrays
from t2t_keras.decoding.kernel_choices import DecodeKernels
from t2t_keras.errors import UsageError
from t2t_keras.models import Transformer
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from tests.testing import run_side_by_side

VOCAB = 40


def _val(count: int) -> list[str]:
    with gzip.open(os.path.join(MULTI30K_DIR, "val.en.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def translator(trained_output_dir):
    from t2t_keras import Translator

    return Translator.from_preset(trained_output_dir, beam_size=3, extra_length=8, tune_process=False)


def _controls(batch: int, prefixes: list, banned: list, required: list | None = None):
    """SearchControls of token lists (no vocabulary): prefixes of ids, banned sequences of ids."""
    prefix_ids = np.zeros([batch, max([len(p) for p in prefixes] + [1])], np.int32)
    for row, ids in enumerate(prefixes):
        prefix_ids[row, : len(ids)] = ids
    context = max([len(s) - 1 for rows in banned for s in rows] + [1])
    banned_context = np.full([batch, max([len(rows) for rows in banned] + [1]), context], -1, np.int32)
    banned_tokens = np.full(banned_context.shape[:2], -1, np.int32)
    for row, sequences in enumerate(banned):
        for n, ids in enumerate(sequences):
            banned_context[row, n, context - len(ids) + 1:] = ids[:-1]
            banned_tokens[row, n] = ids[-1]
    from t2t_keras.decoding.controls import SearchControls

    controls = SearchControls(tf.constant(prefix_ids), tf.constant([len(p) for p in prefixes], tf.int32),
                              tf.ones([batch, VOCAB], tf.bool), tf.constant(banned_context), tf.constant(banned_tokens),
                              tf.constant(prefix_ids))
    if required is None:
        return controls
    ids = np.zeros([batch, max([len(r) for r in required] + [1]), max([len(t) for r in required for t in r] + [1])], np.int32)
    lengths = np.zeros(ids.shape[:2], np.int32)
    for row, terms in enumerate(required):
        for m, term in enumerate(terms):
            ids[row, m, : len(term)], lengths[row, m] = term, len(term)
    return controls._replace(constraint_ids=tf.constant(ids), constraint_lengths=tf.constant(lengths))


def _holds(output: list, term: list) -> bool:
    return any(output[i : i + len(term)] == term for i in range(len(output)))


@pytest.mark.parametrize("native", [False, True])
def test_a_forced_prefix_starts_every_hypothesis_and_banned_sequences_never_end_one(native):
    """On a random model: each sentence's K hypotheses start with its prefix (scored: their log
    P counts the forced tokens), the cached search equals the uncached one, a sentence searches
    the same alone as in its batch, and no hypothesis holds a banned sequence."""
    hparams = registry.hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2")
    tf.random.set_seed(3)
    model = Transformer.from_hparams(hparams, VOCAB)
    sources = tf.constant([[5, 6, 7, 1, 0], [8, 9, 10, 11, 1], [13, 1, 0, 0, 0]])
    prefixes, banned = [[20, 21, 22], [], [30]], [[[7]], [[9, 10], [11]], []]
    kernels = DecodeKernels(top_k="native" if native else "graph", attention="native" if native else "graph")

    def search(rows, cached=True):
        controls = _controls(len(rows), [prefixes[r] for r in rows], [banned[r] for r in rows])
        batch = tf.gather(sources, rows)
        lengths = graph_search.max_lengths(batch, 6, None, controls.prefix_lengths)
        return graph_search.search_batch(model, batch, 3, 0.6, lengths, cached=cached, n_best=3, kernels=kernels,
                                         controls=controls)

    together, uncached = search([0, 1, 2]), search([0, 1, 2], cached=False)
    np.testing.assert_array_equal(together.ids.numpy(), uncached.ids.numpy())
    np.testing.assert_allclose(together.scores.numpy(), uncached.scores.numpy(), atol=1e-4)
    for row in range(3):
        alone = search([row])
        steps = alone.ids.shape[2]
        np.testing.assert_array_equal(alone.ids.numpy()[0], together.ids.numpy()[row, :, :steps])
        for ids, length in zip(together.ids.numpy()[row], together.lengths.numpy()[row]):
            output = ids[:length].tolist()
            assert output[: len(prefixes[row])] == prefixes[row]
            for sequence in banned[row]:
                assert not any(output[i : i + len(sequence)] == sequence for i in range(len(output)))


def test_prefix_pieces_and_the_completion_of_a_partial_word(translator):
    """A prefix ending at a word boundary is all forced; one ending inside a word forces the
    words before it and lets the next piece be only one that starts that word as typed."""
    pieces = TargetPieces(translator.vocabularies.target)
    forced, completion = pieces.prefix("Ein Hund ")
    assert translator.vocabularies.target.decode(forced) == "Ein Hund" and completion is None
    forced, completion = pieces.prefix("Ein Hu")
    assert translator.vocabularies.target.decode(forced) == "Ein"
    assert completion is not None and all(pieces.pieces[i].startswith(WORD_START + "Hu") for i in completion)
    decode = translator.vocabularies.target.decode
    forced, completion = pieces.prefix("Zxqy")  # no piece starts the word: its own pieces forced
    assert decode(forced) == "Zxqy" and completion is None
    spellings = pieces.spellings("Hund")
    assert pieces.vocabulary.encode("Hund") in spellings and len(spellings) > 1
    assert all("".join(pieces.pieces[i] for i in ids).replace(WORD_START, "") == "Hund" for ids in spellings)
    arrays = control_arrays(pieces, ["Ein Hu", None], [["Hund", "rote Hunde"], None])
    assert arrays.completion[0].sum() == len(completion_of(pieces, "Ein Hu")) and arrays.completion[1].all()
    assert (arrays.banned_tokens[0] >= 0).sum() == len(pieces.spellings("Hund")) + len(pieces.spellings("rote Hunde"))


def completion_of(pieces, prefix):
    return pieces.prefix(prefix)[1]


def test_outputs_start_with_their_prefix_and_avoid_their_terms(translator):
    """Through the Python API, in any batch: every output starts with its prefix (a partial
    word completed), n_best gives different continuations, and avoided terms never appear."""
    lines = _val(12)
    free = translator.generate(lines)
    prefixes = ["Ein", "Zwei Män", None, "Eine Frau ", "Ein Hu", "Die", "", "Ein Mann", "Kinder sp", None, "A", "Ein a"]
    steered = translator.generate(lines, prefix=prefixes)
    for prefix, output in zip(prefixes, steered):
        assert output.startswith((prefix or "").strip()), (prefix, output)
    assert translator.generate(lines, prefix=prefixes, batch_size=5) == steered
    assert [steered[i] for i in (2, 9)] == [free[i] for i in (2, 9)]  # no prefix: the free search's output
    alternatives = translator.translate(lines[:1], prefix=["Ein"], n_best=3)[0]
    assert len({h.text for h in alternatives}) == 3 and all(h.text.startswith("Ein") for h in alternatives)
    words = [[w for w in output.replace(".", " ").split() if len(w) > 2][:2] for output in free]
    avoided = translator.generate(lines, avoid=words)
    for terms, output in zip(words, avoided):
        assert not any(contains_term(output, term) for term in terms), (terms, output)


def test_bad_steering_is_one_line(translator):
    with pytest.raises(UsageError, match=r"^translate: prefix has 1 items for 2 texts; give one per text"):
        translator.translate(["A dog.", "A cat."], prefix=["Ein"])
    with pytest.raises(TypeError, match=r"^generate: avoid takes one item per text"):
        translator.generate(["A dog."], avoid="Hund")
    with pytest.raises(TypeError, match=r"^generate: avoid item 0 is 'Hund'; give a list of terms"):
        translator.generate(["A dog."], avoid=["Hund"])
    with pytest.raises(TypeError, match=r"^generate: prefix item 1 is int 3"):
        translator.generate(["A dog.", "A cat."], prefix=[None, 3])
    with pytest.raises(UsageError, match=r"prefix, avoid and constraints steer beam search; with sampling"):
        translator.generate(["A dog."], prefix=["Ein"], sampling_top_k=5, beam_size=1)
    with pytest.raises(TypeError, match=r"^translate: constraints item 0 is 'Hund'; give a list of terms"):
        translator.translate(["A dog."], constraints=["Hund"])


def test_the_decoder_reads_prefixes_and_avoided_terms_line_by_line(translator, trained_output_dir, tmp_path):
    """--prefix_file, --avoid_file and --constraints_file, aligned with the input: the outputs are the Python API's;
    their contents are part of the output's record (a rerun with another file is refused), and
    a bad line or another line count is one line naming the file."""
    import json
    import subprocess
    import sys

    lines = _val(6)
    prefixes = ["Ein", "", "Zwei Män", "", "Eine Frau ", "Ein Hu"]
    avoids = [["Hund"], None, ["Männer", "Mann"], None, None, ["Frau"]]
    (tmp_path / "in.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "prefix.de").write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    (tmp_path / "avoid.json").write_text("\n".join(json.dumps(a) if a else "" for a in avoids) + "\n", encoding="utf-8")
    required = [None, ["Straße"], None, ["rote Mütze"], ["Köter"], None]
    (tmp_path / "terms.json").write_text("\n".join(json.dumps(a) if a else "" for a in required) + "\n", encoding="utf-8")

    def command(*flags):
        return [sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", f"--output_dir={trained_output_dir}",
                f"--decode_from_file={tmp_path / 'in.en'}", "--decode_hparams=beam_size=3,extra_length=8", *flags]

    def decoder(*flags):
        return subprocess.run(command(*flags), capture_output=True, text=True)

    done = decoder(f"--prefix_file={tmp_path / 'prefix.de'}", f"--avoid_file={tmp_path / 'avoid.json'}",
                   f"--constraints_file={tmp_path / 'terms.json'}", f"--decode_to_file={tmp_path / 'out.de'}")
    assert done.returncode == 0, done.stderr
    expected = translator.generate(lines, prefix=[p or None for p in prefixes], avoid=avoids, constraints=required)
    assert (tmp_path / "out.de").read_text(encoding="utf-8").splitlines() == expected
    assert all(contains_term(output, term) for output, terms in zip(expected, required) for term in terms or [])
    record = json.loads((tmp_path / "out.de.decode.json").read_text())
    assert "prefix_file_sha256" in record and "avoid_file_sha256" in record and "constraints_file_sha256" in record
    (tmp_path / "prefix.de").write_text("Ein\n" * 6, encoding="utf-8")
    (tmp_path / "bad.json").write_text('["Hund"\n\n\n\n\n\n', encoding="utf-8")
    (tmp_path / "short.de").write_text("Ein\n", encoding="utf-8")
    refused = run_side_by_side([command(f"--prefix_file={tmp_path / 'prefix.de'}", f"--avoid_file={tmp_path / 'avoid.json'}",
                                        f"--decode_to_file={tmp_path / 'out.de'}"),
                                command(f"--constraints_file={tmp_path / 'bad.json'}"),
                                command(f"--prefix_file={tmp_path / 'short.de'}")])
    for result, message in zip(refused, ["was decoded with another --prefix_file content",
                                         f"--constraints_file={tmp_path / 'bad.json'}:1: '[\"Hund\"' is not a JSON list of strings",
                                         f"--prefix_file={tmp_path / 'short.de'} has 1 lines, --decode_from_file has 6"]):
        assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], result.stderr[-500:]


def test_constraint_states_advance_and_the_beam_is_shared_round_robin_by_bank():
    """The state machine of terms that must appear: a next piece advances the term in progress
    (meeting it at its last), another piece abandons it, a first piece starts the term its
    candidate was for; the beam takes the best of each bank, highest bank first, then the next."""
    from t2t_keras.decoding import constraints

    ids = tf.constant([[[5, 6], [5, 7], [9, 0]]])  # one sentence: terms [5 6], [5 7], [9]
    lengths = tf.constant([[2, 2, 1]])
    start = constraints.initial_state(lengths, 1)
    tokens, valid = constraints.advancing_pieces(start, ids, lengths)
    assert tokens.numpy().tolist() == [[[5, 5, 9]]] and valid.numpy().all()
    after = constraints.advance(start, tf.constant([[[5, 5, 9, 3]]]), tf.constant([[[0, 1, 2, -1]]]), ids, lengths)
    assert after.current.numpy().tolist() == [[[0, 1, -1, -1]]] and after.position.numpy().tolist() == [[[1, 1, 0, 0]]]
    assert after.met.numpy()[0, 0, 2].tolist() == [False, False, True] and after.closing.numpy().tolist() == [[[0, 0, 1, 0]]]
    second = constraints.ConstraintState(*(t[:, :, 1] for t in after))  # in the middle of [5 7]
    tokens, valid = constraints.advancing_pieces(second, ids, lengths)
    assert tokens.numpy()[0, 0, 1] == 7 and valid.numpy().tolist() == [[[False, True, False]]]
    done = constraints.advance(second, tf.constant([[[7, 6, 9]]]), tf.fill([1, 1, 3], -1), ids, lengths)
    assert done.met.numpy()[0, 0].tolist() == [[False, True, False], [False, False, False], [False, False, True]]
    assert constraints.progress(constraints.flattened(done, 1, 3), lengths).numpy().tolist() == [[2, 0, 1]]

    log_probs = tf.constant([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -1e9]])
    banks = tf.constant([[0, 0, 1, 1, 2, 0, 2]])
    chosen = constraints.bank_choice(log_probs, banks, 4).numpy()[0].tolist()
    assert chosen == [0, 2, 3, 4]  # banks 2, 1, 0: their best; then bank 2's second (none valid), bank 1's; by log P


@pytest.mark.parametrize("native", [False, True])
def test_every_term_that_must_appear_does_in_every_final_hypothesis(native):
    """On a random model: each sentence's hypotheses hold every term it must (one piece or
    several, two sharing a first piece), cached = uncached, alone = in its batch, a sentence
    without terms decodes as the free search does, and where the maximum length leaves no room
    the hypotheses that lack a term end there, ranked last."""
    hparams = registry.hparams("transformer_tiny", "hidden_size=32,filter_size=64,num_heads=2")
    tf.random.set_seed(4)
    model = Transformer.from_hparams(hparams, VOCAB)
    sources = tf.constant([[5, 6, 7, 1, 0], [8, 9, 10, 11, 1], [13, 1, 0, 0, 0], [14, 15, 1, 0, 0]])
    required = [[[20, 21, 22], [30]], [[25, 26], [25, 27]], [], [[33], [34, 35]]]
    prefixes = [[], [], [], [36]]
    kernels = DecodeKernels(top_k="native" if native else "graph", attention="native" if native else "graph")

    def search(rows, cached=True, alpha=0.6, extra=6, with_terms=True):
        controls = _controls(len(rows), [prefixes[r] for r in rows], [[] for _ in rows],
                             [required[r] for r in rows] if with_terms else None)
        batch = tf.gather(sources, rows)
        forced = controls.prefix_lengths + (tf.reduce_sum(controls.constraint_lengths, axis=1) if with_terms else 0)
        lengths = graph_search.max_lengths(batch, extra, None, forced)  # room for the terms, as SearchModule's
        return graph_search.search_batch(model, batch, 3, alpha, lengths, cached=cached, n_best=3, kernels=kernels,
                                         controls=controls)

    together, uncached = search([0, 1, 2, 3]), search([0, 1, 2, 3], cached=False)
    max_lengths = [10, 11, 8, 10]  # the more of source tokens and forced pieces (prefix and terms), + 6
    np.testing.assert_array_equal(together.ids.numpy(), uncached.ids.numpy())
    np.testing.assert_allclose(together.scores.numpy(), uncached.scores.numpy(), atol=1e-4)
    for row in range(4):
        alone = search([row])
        np.testing.assert_array_equal(alone.ids.numpy()[0], together.ids.numpy()[row, :, : alone.ids.shape[2]])
        holding = []
        for ids, length in zip(together.ids.numpy()[row], together.lengths.numpy()[row]):
            output = ids[:length].tolist()
            assert length > 0 and output[-1] == 1 and output[: len(prefixes[row])] == prefixes[row]
            holding.append(all(_holds(output, term) for term in required[row]))
            assert holding[-1] or length == max_lengths[row], (row, output)  # lacking one: ended at the maximum
        assert holding[0] and holding == sorted(holding, reverse=True), (row, holding)  # those that lack one last
    for alpha in (0.6, 2.0):  # a sentence without terms: the free search's outputs (and its alpha) in any batch
        free = search([2], alpha=alpha, with_terms=False)
        np.testing.assert_array_equal(search([0, 2], alpha=alpha).ids.numpy()[1, :, : free.ids.shape[2]], free.ids.numpy()[0])
    cramped = search([0], extra=-1)  # 4 - 1 = 3 tokens: no room for 4 pieces of terms and EOS
    assert cramped.lengths.numpy()[0].max() == 3 and not all(
        _holds(cramped.ids.numpy()[0, 0].tolist(), term) for term in required[0])


def test_outputs_hold_their_terms_in_any_batch_and_name_the_ones_they_lack(translator):
    """Through the Python API on lines the model never saw: every term is in the output as
    written (whole words), the same in any batch, or the hypothesis names it (`missing`)."""
    lines = _val(10)
    free = translator.generate(lines)
    terms = [["Hund"], ["rote Mütze", "Straße"], None, ["Köter"], [], ["Männer"], ["Kinder", "spielen"], None,
             ["Ball"], ["Frau", "Mann"]]
    outputs = translator.translate(lines, constraints=terms, n_best=2)
    for line_terms, hypotheses in zip(terms, outputs):
        for h in hypotheses:
            assert all(contains_term(h.text, t) or t in h.missing for t in line_terms or []), (line_terms, h)
        assert not hypotheses[0].missing, (line_terms, hypotheses[0])
    assert [outputs[i][0].text for i in (2, 4, 7)] == [free[i] for i in (2, 4, 7)]
    assert translator.generate(lines, constraints=terms, batch_size=3) == [h[0].text for h in outputs]
    cramped = translator.translate(lines[:1], constraints=[["Hund", "Katze", "Vogel", "Fisch", "Pferd", "Maus"]],
                                   extra_length=0, max_input_tokens=3)[0][0]  # room for the terms' pieces, not EOS
    assert cramped.missing and all(not contains_term(cramped.text, t) for t in cramped.missing)
