"""Reranking the beam's hypotheses with a model of the other direction (--reverse_model)."""

import gzip
import json
import os
import shutil

import pytest

from t2t_keras.decoding import line_decoding
from t2t_keras.decoding.hypothesis import EMPTY, Hypothesis
from t2t_keras.translator import Translator
from t2t_keras.errors import UsageError
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

SETTINGS = {"beam_size": 4, "extra_length": 8, "alpha": 0.6}


def _val(language, count):
    with gzip.open(os.path.join(MULTI30K_DIR, f"val.{language}.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


@pytest.fixture(scope="module")
def reverse_output_dir(trained_output_dir, tmp_path_factory):
    """The briefly trained en -> de run, copied and labelled translate_deen_multi30k: with the shared
    vocabulary it scores English given German as a de -> en model would (the arithmetic under
    test is the same), without training a second model."""
    output_dir = tmp_path_factory.mktemp("relabelled") / "deen"
    shutil.copytree(trained_output_dir, output_dir)
    run_json = output_dir / "run.json"
    run_json.write_text(json.dumps({**json.loads(run_json.read_text()), "problem": "translate_deen_multi30k"}))
    return str(output_dir)


def test_the_ranking_is_the_search_score_plus_the_weighted_reverse_log_prob(trained_output_dir, reverse_output_dir):
    """Against the same sum computed from the plain n-best and the reverse model's own scores. (The
    decoder command's --reverse_model reaches the same TrainedRun: test_file_decoding's refusals.)"""
    sources = _val("en", 12) + [""]
    plain = Translator.from_preset(trained_output_dir, **SETTINGS)
    reranking = Translator.from_preset(trained_output_dir, **SETTINGS, reverse_weight=0.7, reverse=reverse_output_dir)
    assert reranking.checkpoint_paths[-1].startswith(reverse_output_dir)
    beams = plain.translate(sources, n_best=4)
    pairs = [(h.text, source) for source, beam in zip(sources, beams) if source for h in beam]
    # log P(source | hypothesis) in one batch; an empty hypothesis is the input EOS alone, not a blank line's 0.
    reverse_log_probs = line_decoding.score_lines(reranking.search_module().reverse, *zip(*pairs),
                                                   blank_sources_score_zero=False)
    for weight in (0.7, 0.0):
        ours = reranking.translate(sources, n_best=2, log_probs=True, reverse_weight=weight)
        remaining = iter(reverse_log_probs)
        for source, hypotheses, beam in zip(sources, ours, beams):
            if not source:
                assert hypotheses == [EMPTY] * 2
                continue
            source_length = len(plain.vocabularies.source.encode(source, add_eos=True))
            expected = sorted(((h.score + weight * next(remaining) / source_length, h.text) for h in beam),
                              key=lambda pair: -pair[0])[:2]
            assert [h.text for h in hypotheses] == [text for _, text in expected]
            assert [h.score for h in hypotheses] == pytest.approx([score for score, _ in expected], abs=2e-3)
        # log P(output | input) is the forward model's, whatever the ranking.
        kept = [(source, h) for source, hypotheses in zip(sources, ours) if source for h in hypotheses]
        assert [h.log_prob for _, h in kept] == pytest.approx(plain.score([s for s, _ in kept], [h.text for _, h in kept]), abs=2e-3)
    assert [h[0].text for h in ours] == plain.generate(sources)  # no weight: the beam's own best first


def test_hypotheses_are_sorted_by_the_sum_and_cut_to_n_best(monkeypatch):
    """(The briefly trained models above give every source the same beam: here the reverse model's
    log-probabilities are chosen so that the sum reverses the beam's order.)"""
    beam = [Hypothesis(text, None, score) for text, score in (("a", -1.0), ("b", -2.0), ("c", -3.0))]
    reverse_log_probs = {"a": -30.0, "b": -3.0, "c": -12.0}
    monkeypatch.setattr(line_decoding, "score_lines", lambda reverse, hypotheses, sources, **_: [reverse_log_probs[h] for h in hypotheses])
    ranked = line_decoding.rerank_by_reverse(None, ["x y", "z"], [3, 2], [beam, beam[:1]], 1.5, 2)
    assert [(h.text, h.score) for h in ranked[0]] == [("b", pytest.approx(-3.5)), ("c", pytest.approx(-9.0))]
    assert [(h.text, h.score) for h in ranked[1]] == [("a", pytest.approx(-23.5))]  # per source: its own length


def test_a_reverse_model_without_a_shortlist_reranks_a_shortlisted_search(trained_output_dir, reverse_output_dir, tmp_path):
    """The reverse model only scores: a run dir without shortlist.npz serves as one while the
    forward model searches its shortlist."""
    bare = tmp_path / "deen_without_shortlist"
    shutil.copytree(reverse_output_dir, bare, ignore=shutil.ignore_patterns("shortlist.npz"))
    sources = _val("en", 4)
    bare_beams = Translator.from_preset(trained_output_dir, **SETTINGS, shortlist=5, reverse=str(bare)).translate(sources, n_best=2)
    beams = Translator.from_preset(trained_output_dir, **SETTINGS, shortlist=5, reverse=reverse_output_dir).translate(sources, n_best=2)
    assert [[h.text for h in beam] for beam in bare_beams] == [[h.text for h in beam] for beam in beams]
    # each Translator times its own output product's orientation: the scores agree to float rounding
    assert [h.score for beam in bare_beams for h in beam] == pytest.approx([h.score for beam in beams for h in beam], abs=1e-5)


def test_a_reverse_model_of_the_same_direction_or_with_sampling_is_refused(trained_output_dir, reverse_output_dir):
    with pytest.raises(UsageError, match=r"--reverse_model=.* translates en -> de; reranking en -> de needs a de -> en model"):
        Translator.from_preset(trained_output_dir, **SETTINGS, reverse=trained_output_dir)
    with pytest.raises(UsageError, match=r"with sampling .* nothing to rerank"):
        Translator.from_preset(trained_output_dir, sampling_top_k=5, reverse=reverse_output_dir)
    with pytest.raises(UsageError, match=r"reverse_weight >= 0"):
        Translator.from_preset(trained_output_dir, reverse_weight=-1.0, reverse=reverse_output_dir)
