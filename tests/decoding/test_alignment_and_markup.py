"""Word alignments from the cross-attention, and markup carried through by them: alignments in
range and stable under batching, in Python and in the decoder's --alignment_file; markup put
back well-formed on generated nested cases, its text without tags the translation."""

import gzip
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from t2t_keras.decoding.alignment import links_of, pharaoh, word_of_pieces
from t2t_keras.decoding.markup import parse, plain, restore
from t2t_keras.errors import UsageError
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR


def _val(language: str, count: int) -> list[str]:
    with gzip.open(os.path.join(MULTI30K_DIR, f"val.{language}.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def translator(trained_output_dir):
    from t2t_keras import Translator

    return Translator.from_preset(trained_output_dir, beam_size=3, extra_length=8, tune_process=False)


def test_pieces_are_merged_into_whitespace_words():
    assert word_of_pieces(["▁A", "▁do", "g", "▁runs", "."]).tolist() == [0, 1, 1, 2, 2]
    # target pieces 0-1 (word 0) attend to source piece 2 (word 1), piece 2 (word 1) to source piece 0 (word 0)
    attention = np.array([[0.1, 0.1, 0.8], [0.0, 0.2, 0.8], [0.9, 0.05, 0.05]])
    assert links_of(attention, np.array([0, 0, 1]), np.array([0, 0, 1])) == {(1, 0), (0, 1)}
    assert pharaoh({(1, 0), (0, 1), (2, 1)}) == "1-0 0-1 2-1"


def test_alignments_are_in_range_stable_under_batching_and_written_by_the_decoder(translator, trained_output_dir, tmp_path):
    lines = _val("en", 10) + [""]
    aligned = translator.translate(lines, alignments=True)
    rebatched = translator.translate(lines, alignments=True, batch_size=3)
    assert [(h[0].text, h[0].alignment) for h in rebatched] == [(h[0].text, h[0].alignment) for h in aligned]
    for line, (best,) in zip(lines, aligned):
        target_words = len(best.text.split())
        assert {j for _, j in best.alignment} == set(range(target_words))  # every target word, once
        assert all(0 <= i < len(line.split()) for i, _ in best.alignment)
    assert translator.translate(lines[:1])[0][0].alignment is None  # not asked
    (tmp_path / "in.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "t2t_keras.bin.decoder", "--noprogress", f"--output_dir={trained_output_dir}",
                           f"--decode_from_file={tmp_path / 'in.en'}", "--decode_hparams=beam_size=3,extra_length=8",
                           f"--decode_to_file={tmp_path / 'out.de'}", f"--alignment_file={tmp_path / 'out.align'}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.align").read_text().split("\n")[:-1] == [pharaoh(set(h[0].alignment)) for h in aligned]
    assert json.loads((tmp_path / "out.align.decode.json").read_text())["complete"] is True


def _marked_line(rng: random.Random, words: list[str]) -> str:
    """`words` with random nested tags, self-closing tags and placeholders among them."""
    names = ["b", "i", "u", "a", "span"]
    out, stack = [], []
    for word in words:
        for _ in range(rng.randint(0, 2)):
            if rng.random() < 0.25:
                out.append(rng.choice(['<x id="1"/>', "{1}", "<br/>"]))
            else:
                name = rng.choice(names)
                stack.append(name)
                out.append(f'<{name} class="c{len(stack)}">' if name == "span" else f"<{name}>")
        out.append(word)
        while stack and rng.random() < 0.4:
            out.append(f"</{stack.pop()}>")
        out.append(" ")
    while stack:
        out.append(f"</{stack.pop()}>")
    return "".join(out).strip()


def test_markup_is_put_back_well_formed_whatever_the_alignment():
    """On 300 generated lines with random nested tags and random alignments (words dropped,
    reordered, unaligned): every tag exactly once, nested as a tree, and the text without them
    the translation."""
    rng = random.Random(0)
    for _ in range(300):
        words = [rng.choice(["a", "dog", "runs", "in", "the", "snow."]) for _ in range(rng.randint(1, 8))]
        line = _marked_line(rng, words)
        marked = parse(line, 1)
        assert marked.text.split() == words
        translation = " ".join(rng.choice(["ein", "Hund", "rennt", "im", "Schnee."]) for _ in range(rng.randint(0, 9)))
        links = {(rng.randrange(len(words)), j) for j in range(len(translation.split())) if rng.random() < 0.8}
        output = restore(marked, translation, links)
        assert plain(output) == translation
        reparsed = parse(output, 1)  # well-formed: every tag closed in order
        assert sorted(_texts(reparsed.tags)) == sorted(_texts(marked.tags))


def _texts(tags) -> list[str]:
    return [t for tag in tags for t in [tag.opening, tag.closing or ""] + _texts(tag.children)]


def test_the_translator_carries_markup_through(translator):
    lines = ["A <b>dog</b> runs in the <i>snow</i>.", 'Two <a href="x">men</a> are <x id="1"/>talking{1}.', "A woman reads."]
    marked = translator.generate(lines, markup=True)
    assert [plain(output) for output in marked] == translator.generate([plain(line) for line in lines])
    for line, output in zip(lines, marked):
        assert sorted(_texts(parse(output, 1).tags)) == sorted(_texts(parse(line, 1).tags))
    with pytest.raises(UsageError, match=r"^line 2: unbalanced markup: '</i>' closes '<b>'"):
        translator.generate(["A dog.", "A <b>dog</i> runs."], markup=True)
