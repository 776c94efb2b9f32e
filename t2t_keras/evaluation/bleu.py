"""BLEU two ways: detokenised sacreBLEU (comparable across papers) and the paper's en-de style.

The paper's newstest2014 numbers come from tensor2tensor's `get_ende_bleu.sh`: Moses
tokenisation of hypothesis and reference, compound splitting (a hyphen between two
non-spaces becomes " ##AT##-##AT## "), then BLEU on those tokens. `paper_bleu` reproduces
that pipeline with sacremoses and sacreBLEU's scorer (tokenize="none").
"""

from __future__ import annotations

import re
from typing import NamedTuple

import sacrebleu

from t2t_keras import extras

_COMPOUND = re.compile(r"(\S)-(\S)")


class Score(NamedTuple):
    """A corpus score: its headline number (higher is better), the report line(s) to print,
    and further metrics worth logging beside it (e.g. {"chrf": 58.1})."""

    value: float
    report: str
    extra: dict = {}


# sacreBLEU's tokenizer for target languages whose words are not separated by spaces.
TOKENIZER_BY_LANGUAGE = {"zh": "zh"}


def sacre_bleu(hypotheses: list[str], references: list[str], lowercase: bool = False, language: str = ""):
    """sacreBLEU's BLEUScore (default 13a tokenisation, "zh" for Chinese; cased unless
    `lowercase`) and its signature string."""
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize=TOKENIZER_BY_LANGUAGE.get(language))
    score = metric.corpus_score(hypotheses, [references])
    return score, str(metric.get_signature())


def chrf(hypotheses: list[str], references: list[str], lowercase: bool = False):
    """sacreBLEU's chrF2 (character 6-grams, beta 2) and its signature string."""
    metric = sacrebleu.metrics.CHRF(lowercase=lowercase)
    score = metric.corpus_score(hypotheses, [references])
    return score, str(metric.get_signature())


def sacre_bleu_score(hypotheses: list[str], references: list[str], lowercase: bool = False, language: str = "") -> Score:
    """Detokenised sacreBLEU, with chrF2 beside it, as a Score: what the trainer, the decoder
    and t2t-keras-bleu report."""
    score, signature = sacre_bleu(hypotheses, references, lowercase, language)
    chrf_score, chrf_signature = chrf(hypotheses, references, lowercase)
    report = f"{score}  ({signature})\n{chrf_score}  ({chrf_signature})"
    return Score(score.score, report, {"chrf": chrf_score.score})


def bleu_interval(hypotheses: list[str], references: list[str], language: str = "", resamples: int = 1000) -> float:
    """The half-width of the 95% confidence interval of the corpus BLEU by bootstrap resampling
    of the sentences (Koehn, 2004; sacreBLEU's own `n_bootstrap`): two systems scored on this
    set closer than that are not told apart by it."""
    metric = sacrebleu.metrics.BLEU(tokenize=TOKENIZER_BY_LANGUAGE.get(language))
    return float(metric.corpus_score(hypotheses, [references], n_bootstrap=resamples)._ci)


def paper_tokenize(text: str, tokenizer) -> str:
    tokens = tokenizer.tokenize(text, escape=False, return_str=True)
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokens)  # one non-overlapping pass, as the perl s///g


def paper_bleu(hypotheses: list[str], references: list[str], language: str = "de"):
    """BLEU on Moses-tokenised, compound-split text (tensor2tensor's get_ende_bleu.sh)."""
    tokenizer = extras.require("paper-bleu").MosesTokenizer(lang=language)
    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    score = metric.corpus_score(
        [paper_tokenize(h, tokenizer) for h in hypotheses], [[paper_tokenize(r, tokenizer) for r in references]]
    )
    return score, str(metric.get_signature())
