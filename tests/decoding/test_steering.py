"""Steering a search: a target prefix (completed where it ends inside a word) and terms that
must not appear, through the graph, the Python API and the decoder command."""

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

VOCAB = 40


def _val(count: int) -> list[str]:
    with gzip.open(os.path.join(MULTI30K_DIR, "val.en.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def translator(trained_output_dir):
    from t2t_keras import Translator

    return Translator.from_preset(trained_output_dir, beam_size=3, extra_length=8, tune_process=False)


def _controls(batch: int, prefixes: list, banned: list):
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

    return SearchControls(tf.constant(prefix_ids), tf.constant([len(p) for p in prefixes], tf.int32),
                          tf.ones([batch, VOCAB], tf.bool), tf.constant(banned_context), tf.constant(banned_tokens),
                          tf.constant(prefix_ids))


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
    with pytest.raises(UsageError, match=r"prefix and avoid steer beam search; with sampling"):
        translator.generate(["A dog."], prefix=["Ein"], sampling_top_k=5, beam_size=1)


def test_the_decoder_reads_prefixes_and_avoided_terms_line_by_line(translator, trained_output_dir, tmp_path):
    """--prefix_file and --avoid_file, aligned with the input: the outputs are the Python API's;
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

    def decoder(*flags):
        return subprocess.run([sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", f"--output_dir={trained_output_dir}",
                               f"--decode_from_file={tmp_path / 'in.en'}", "--decode_hparams=beam_size=3,extra_length=8",
                               *flags], capture_output=True, text=True)

    done = decoder(f"--prefix_file={tmp_path / 'prefix.de'}", f"--avoid_file={tmp_path / 'avoid.json'}",
                   f"--decode_to_file={tmp_path / 'out.de'}")
    assert done.returncode == 0, done.stderr
    expected = translator.generate(lines, prefix=[p or None for p in prefixes], avoid=avoids)
    assert (tmp_path / "out.de").read_text(encoding="utf-8").splitlines() == expected
    record = json.loads((tmp_path / "out.de.decode.json").read_text())
    assert "prefix_file_sha256" in record and "avoid_file_sha256" in record
    (tmp_path / "prefix.de").write_text("Ein\n" * 6, encoding="utf-8")
    (tmp_path / "bad.json").write_text('["Hund"\n\n\n\n\n\n', encoding="utf-8")
    (tmp_path / "short.de").write_text("Ein\n", encoding="utf-8")
    refused = [decoder(f"--prefix_file={tmp_path / 'prefix.de'}", f"--avoid_file={tmp_path / 'avoid.json'}",
                       f"--decode_to_file={tmp_path / 'out.de'}"),
               decoder(f"--avoid_file={tmp_path / 'bad.json'}"), decoder(f"--prefix_file={tmp_path / 'short.de'}")]
    for result, message in zip(refused, ["was decoded with another --prefix_file content",
                                         f"--avoid_file={tmp_path / 'bad.json'}:1: '[\"Hund\"' is not a JSON list of strings",
                                         f"--prefix_file={tmp_path / 'short.de'} has 1 lines, --decode_from_file has 6"]):
        assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], result.stderr[-500:]
