"""English constituency parsing on the Penn Treebank (section 6.3 of the paper).

Input: the sentence's words; target: its linearised tree (t2t_keras.parsing.trees). Trees
are read with nltk's treebank reader from .mrg files and preprocessed the standard way.

  parsing_english_wsj         the LDC Penn Treebank WSJ (bring your licensed copy):
                              --tmp_dir holds the .mrg files (any layout, e.g.
                              parsed/mrg/wsj/SS/wsj_SSNN.mrg); sections 02-21 train,
                              22 dev, 23 test; the paper's 16K vocabulary.
  parsing_english_wsj_words   the same split and size with the words in the targets (what
                              works on the sample, with transformer_parsing_wsj).
  parsing_english_ptb_sample  the same over NLTK's Penn Treebank sample: files 0001-0159
                              train, 0160-0179 dev, read from --tmp_dir, else from NLTK's own
                              copy (nltk.download("treebank")), else from the repository's
                              data/ptb_sample (a checkout; the wheel does not ship the sample:
                              its terms are non-commercial, see NOTICE). Its test files,
                              0180-0199, are never read. Separate vocabularies: 8000 source pieces,
                              which keep most words whole (the shared 2000-piece vocabulary
                              split a 33-word sentence into 54), and the tree's symbols as
                              whole words on the target side.
  parsing_english_ptb_sample_words
                              the sample with the words in the targets and one shared
                              vocabulary (the README's parsing recipe).
  parsing_english_ptb_sample_words_closing_labels
                              the same with labelled closing brackets, "... )NP".

Decoding is constrained to well-formed trees with one XX per input word
(`parsing.tree_filter`; `--decode_hparams=constrained=false` turns it off).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import os
import re
from typing import ClassVar, Iterator

from t2t_keras import extras, files
from t2t_keras.data.text_files import TextStats
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams
from t2t_keras.problem import Problem, VocabSpec
from t2t_keras.parsing.trees import PTB_LABELS
from t2t_keras.registry import register_problem

WORD_START = "\u2581"  # SentencePiece's word-boundary mark

# The repository's copy of NLTK's sample, beside problems/: there in a checkout (and so in its
# editable install), never in an installed wheel.
CHECKOUT_PTB_SAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "ptb_sample")
_MRG_NAME = re.compile(r"^wsj_(\d{2})(\d{2})\.mrg$")


class ParsingProblem(Problem):
    """Words -> linearised tree over Penn Treebank .mrg files, split by file number.

    Subclasses set `splits_by_file`: split -> (first, last) file number (wsj_NNNN), and
    may override `mrg_dir`.
    """

    splits_by_file: ClassVar[dict[str, tuple[int, int]]]
    copy_words: ClassVar[bool] = False  # targets spell the words instead of XX (stripped before scoring)
    closing_labels: ClassVar[bool] = False  # ")NP" instead of ")": the decoder sees what it closed
    # The paper's parsing decode settings (section 6.3): beam 21, alpha 0.3, input + 300.
    decode_defaults = DecodeHParams(beam_size=21, alpha=0.3, extra_length=300)
    eval_split = "dev"
    score_name = "f1"

    def mrg_dir(self, tmp_dir: str | None) -> str:
        if not tmp_dir:
            raise UsageError(f"--tmp_dir is required for {self.name}: the directory that holds the wsj_*.mrg files.")
        return tmp_dir

    def mrg_files(self, split: str, tmp_dir: str | None) -> list[str]:
        """The split's .mrg files under `mrg_dir`, in file-number order."""
        root = self.mrg_dir(tmp_dir)
        found = {}
        for path in glob.glob(os.path.join(root, "**", "wsj_*.mrg"), recursive=True):
            match = _MRG_NAME.match(os.path.basename(path))
            if match:
                found[int(match.group(1) + match.group(2))] = path
        if not found:
            raise UsageError(f"--tmp_dir={root} has no wsj_NNNN.mrg files; point it at the treebank's .mrg files.")
        first, last = self.splits_by_file[split]
        return [found[number] for number in sorted(found) if first <= number <= last]

    def trees(self, split: str, tmp_dir: str | None) -> Iterator:
        """(path, preprocessed nltk.Tree) of every sentence of `split`, in file order."""
        nltk = extras.require("parsing")
        from nltk.corpus.reader import BracketParseCorpusReader

        from t2t_keras.parsing.trees import preprocess

        for path in self.mrg_files(split, tmp_dir):
            directory = os.path.dirname(os.path.abspath(path))
            if directory not in nltk.data.path:
                nltk.data.path.append(directory)  # nltk reads only below its data paths
            reader = BracketParseCorpusReader(directory, [os.path.basename(path)])
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                # nltk prints (on stdout or stderr), then flattens, a bad tree
                parsed = list(reader.parsed_sents())
            for number, tree in enumerate(parsed, start=1):
                if any(not isinstance(leaf, str) for leaf in tree.leaves()):
                    raise UsageError(f"{path}: tree {number} is malformed (unbalanced brackets?); fix or remove the file.")
                tree = preprocess(tree)
                if tree is not None:
                    yield path, tree

    def text_pairs(self, split: str, tmp_dir: str | None, stats: TextStats) -> Iterator[tuple[str, str]]:
        from t2t_keras.parsing.trees import linearize

        for _, tree in self.trees(split, tmp_dir):
            yield " ".join(tree.leaves()), linearize(tree, words=self.copy_words, closing_labels=self.closing_labels)

    def token_filter(self, vocabularies):
        from t2t_keras.parsing.tree_filter import TreeFilter

        return TreeFilter(vocabularies, copy_words=self.copy_words, closing_labels=self.closing_labels)

    def structure_tokens(self, vocabularies) -> list[int] | None:
        """With `copy_words`: the brackets and EOS, between the copied words; else None (XX
        stands for a word but does not copy its pieces)."""
        if not self.copy_words:
            return None
        from t2t_keras.parsing.tree_filter import OTHER, target_token_classes

        return [int(token) for token in (target_token_classes(vocabularies.target) != OTHER).nonzero()[0]]

    def postprocess_output(self, source: str, output: str) -> tuple[str, int]:
        """The decoded sequence as a tree over exactly the source words, on one line."""
        from t2t_keras.parsing.trees import restore, to_line, words_to_placeholders

        tree, repairs = restore(words_to_placeholders(output) if self.copy_words else output, source.split())
        return to_line(tree), repairs.total

    def read_reference(self, path: str, flag: str) -> list:
        """Gold trees, one per source line (bracketed; one per line or .mrg style)."""
        from t2t_keras.parsing.trees import read_trees

        return read_trees(path, flag)

    def score_outputs(self, outputs: list[str], references: list):
        """EVALB (COLLINS.prm rules) F1 of the decoded trees (all sentences; the report adds <= 40 words)."""
        from t2t_keras.parsing.evalb import evalb_score
        from t2t_keras.parsing.trees import tree_type

        return evalb_score(references, [tree_type().fromstring(line) for line in outputs])

    def dev_examples(self, data_dir: str, count: int) -> tuple[list[str], list]:
        """The first `count` dev sentences and gold trees, from the files datagen wrote."""
        from t2t_keras.data.text_files import read_lines
        from t2t_keras.parsing.trees import read_trees

        prefix = os.path.join(data_dir, f"{self.name}-{self.eval_split}")
        if not files.isfile(prefix + ".trees"):
            raise UsageError(f"{prefix}.trees is missing; rerun t2t-keras-datagen --problem={self.name} with --overwrite.")
        words = list(read_lines(prefix + ".words", TextStats()))[:count]
        return words, read_trees(prefix + ".trees")[:count]

    def write_eval_files(self, data_dir: str, tmp_dir: str | None) -> list[str]:
        """`{name}-{split}.words` (one sentence per line, the decoder's input) and
        `{name}-{split}.trees` (the gold trees, one per line, for --decode_reference and
        t2t-keras-evalb) for every split but train."""
        from t2t_keras.parsing.trees import to_line

        written = []
        for split in self.splits:
            if split == "train":
                continue
            prefix = os.path.join(data_dir, f"{self.name}-{split}")
            trees = [tree for _, tree in self.trees(split, tmp_dir)]
            for suffix, lines in ((".words", [" ".join(t.leaves()) for t in trees]), (".trees", [to_line(t) for t in trees])):
                files.write_atomically(prefix + suffix, "".join(line + "\n" for line in lines))
                written.append(prefix + suffix)
        return written


@register_problem()
class ParsingEnglishWsj(ParsingProblem):
    """WSJ Penn Treebank, the standard split; the paper's WSJ-only setting (16K vocabulary)."""

    name = "parsing_english_wsj"
    vocab_spec = VocabSpec(size=16000)
    num_shards = {"train": 10, "dev": 1, "test": 1}
    splits_by_file = {"train": (200, 2199), "dev": (2200, 2299), "test": (2300, 2399)}


@register_problem()
class ParsingEnglishWsjWords(ParsingEnglishWsj):
    """The WSJ split with the words in place of XX in the targets (as
    parsing_english_ptb_sample_words: the decoder copies each word, so its attention lines up
    with the source; the words become XX again before scoring). One shared 16K vocabulary in
    which every "(LABEL" is one piece. The recipe that works on the sample, at the paper's
    scale: train it with transformer_parsing_wsj; decoding uses beam 21, alpha 0.3, +300."""

    name = "parsing_english_wsj_words"
    copy_words = True
    vocab_spec = VocabSpec(
        size=16000, size_is_bound=True,
        user_defined_symbols=tuple(WORD_START + "(" + label for label in PTB_LABELS) + (WORD_START + ")",),
    )


@register_problem()
class ParsingEnglishPtbSample(ParsingProblem):
    """NLTK's WSJ sample: files 0001-0159 train, 0160-0179 dev. Its test files 0180-0199 are never read."""

    name = "parsing_english_ptb_sample"
    vocab_spec = VocabSpec(size=8000, size_is_bound=True)  # the shipped slice has fewer words
    target_vocab_spec = VocabSpec(size=100, model_type="word")  # about 30 symbols: "(NP", ")", XX
    num_shards = {"train": 1, "dev": 1}
    splits_by_file = {"train": (1, 159), "dev": (160, 179)}

    def mrg_dir(self, tmp_dir: str | None) -> str:
        """--tmp_dir; else NLTK's copy (nltk.download("treebank") into one of NLTK's data
        directories); else the repository's, in a checkout."""
        if tmp_dir:
            return tmp_dir
        nltk = extras.require("parsing")
        try:
            found = nltk.data.find("corpora/treebank/combined")
        except LookupError:
            found = None
        if isinstance(found, nltk.data.FileSystemPathPointer):  # not a zip that was never unpacked
            return found.path
        if os.path.isdir(CHECKOUT_PTB_SAMPLE_DIR):
            return CHECKOUT_PTB_SAMPLE_DIR
        raise UsageError(
            f"{self.name} reads NLTK's Penn Treebank sample, which the installed package does not ship: "
            "run python -m nltk.downloader treebank, or pass --tmp_dir=DIR holding its wsj_*.mrg files."
        )


@register_problem()
class ParsingEnglishPtbSampleWords(ParsingEnglishPtbSample):
    """The NLTK sample with the words in place of XX in the targets: "(S (NP Pierre Vinken ) ...",
    so the decoder copies each word and its attention lines up with the source; the words
    become XX again before scoring. One shared vocabulary in which every "(LABEL" is one piece."""

    name = "parsing_english_ptb_sample_words"
    copy_words = True
    vocab_spec = VocabSpec(
        size=8000, size_is_bound=True, user_defined_symbols=tuple(WORD_START + "(" + label for label in PTB_LABELS) + (WORD_START + ")",)
    )
    target_vocab_spec = None


@register_problem()
class ParsingEnglishPtbSampleWordsClosingLabels(ParsingEnglishPtbSampleWords):
    """parsing_english_ptb_sample_words with labelled closing brackets, "(S (NP Pierre Vinken )NP
    left )S": each ")" says which constituent it ends, so the decoder need not count brackets
    back to the matching opening. Decoding allows only the innermost open label's ")LABEL"."""

    name = "parsing_english_ptb_sample_words_closing_labels"
    closing_labels = True
    vocab_spec = dataclasses.replace(
        ParsingEnglishPtbSampleWords.vocab_spec,
        user_defined_symbols=ParsingEnglishPtbSampleWords.vocab_spec.user_defined_symbols
        + tuple(WORD_START + ")" + label for label in PTB_LABELS),
    )
