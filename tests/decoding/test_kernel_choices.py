"""The decode kernel choices (decoding/kernel_choices.py) and the one engine that makes every
search (decoding/engine.py): chosen by the mechanism training's are, forced by a setting,
recorded where a user looks, and no search built anywhere else."""

import ast
import os

import pytest

from t2t_keras.decoding import kernel_choices
from t2t_keras.errors import UsageError
from t2t_keras.kernels import native
from t2t_keras.layers.embedding import SharedEmbedding
from tests.testing import REPO_ROOT


class _Measure:
    def __init__(self, times: dict):
        self.times, self.calls = times, []

    def __call__(self, name):
        self.calls.append(name)
        return self.times[name]


TIMES = {"step_product": {"nn": 3.0, "nt": 1.0, "tn": 2.0}, "beam_candidates": {"native": 2.0, "graph": 1.0},
         "top_k": {"native": 1.0, "graph": 2.0}, "attention": {"native": 1.0, "graph": 3.0}}


def _projection():
    layer = SharedEmbedding(vocab_size=500, hidden_size=16)
    layer.build()
    return layer


def test_each_choice_is_the_fastest_when_timed_unless_forced():
    measure = _Measure(TIMES)
    chosen = kernel_choices.choose(_projection(), 32, {}, int8_logits=False, measure=measure)
    if native.library() is None:
        assert (chosen.step_product, chosen.beam_candidates, chosen.top_k, chosen.attention) == ("nt", "graph", "graph", "graph")
        assert measure.calls == ["step_product"]  # the native ones are not offered, so not timed
    else:
        assert (chosen.step_product, chosen.beam_candidates, chosen.top_k, chosen.attention) == ("nt", "graph", "native", "native")
        assert chosen.record()["measured_ms"] == TIMES
        assert chosen.setting() == "step_product=nt;beam_candidates=graph;top_k=native;attention=native"
    forced = kernel_choices.choose(_projection(), 32, kernel_choices.forced_choices("step_product=tn;beam_candidates=graph"),
                                   int8_logits=False, measure=_Measure(TIMES))
    assert (forced.step_product, forced.beam_candidates) == ("tn", "graph") and "step_product" not in forced.record().get("measured_ms", {})


def test_native_kernels_are_offered_only_in_process_where_they_built(monkeypatch):
    """An export's search holds TensorFlow's ops only (int8_logits refused); where the native
    kernels did not build, a forced native kernel is one line saying why."""
    exported = kernel_choices.choose(_projection(), 32, {}, int8_logits=False, in_process=False, measure=_Measure(TIMES))
    assert exported.native_choices == [] and exported.step_product == "nt"
    with pytest.raises(UsageError, match=r"^int8_logits is a native kernel of decoding in this process, not of a SavedModel"):
        kernel_choices.choose(_projection(), 32, {}, int8_logits=True, in_process=False, measure=_Measure(TIMES))
    with pytest.raises(UsageError, match=r"^kernel_choices: beam_candidates=native is not available here: an export's graph"):
        kernel_choices.choose(_projection(), 32, {"beam_candidates": "native"}, int8_logits=False, in_process=False,
                              measure=_Measure(TIMES))
    monkeypatch.setattr(native, "library", lambda: None)
    monkeypatch.setattr(native, "unavailable_reason", lambda: "no C++ compiler ('g++' is not on PATH; set CXX to one)")
    with pytest.raises(UsageError, match=r"^kernel_choices: top_k=native is not available here: no C\+\+ compiler"):
        kernel_choices.choose(_projection(), 32, {"top_k": "native"}, int8_logits=False, measure=_Measure(TIMES))
    assert not kernel_choices.choose(_projection(), 32, {}, int8_logits=True, measure=_Measure(TIMES)).int8_logits


def test_the_timings_time_every_alternative_here():
    projection = _projection()
    chosen = kernel_choices.choose(projection, 16, {}, int8_logits=False, attention=(2, 8))
    measured = chosen.record()["measured_ms"]
    assert sorted(measured["step_product"]) == ["nn", "nt", "tn"]
    if native.library() is not None:
        assert sorted(measured["beam_candidates"]) == sorted(measured["top_k"]) == sorted(measured["attention"]) == ["graph", "native"]
    assert all(ms > 0 for times in measured.values() for ms in times.values())


def test_only_the_engine_builds_a_search():
    """Every SearchModule of the package (the decoder's, the Python API's, the trainer's dev
    decoding, visualize's, an export's) is built in decoding/engine.py."""
    builders = []
    for path in sorted((REPO_ROOT / "t2t_keras").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "SearchModule":
                builders.append(str(path.relative_to(REPO_ROOT)))
    assert builders and set(builders) == {os.path.join("t2t_keras", "decoding", "engine.py")}, builders


def test_the_choices_are_in_the_settings_the_output_record_and_run_json(trained_output_dir, tmp_path):
    """What decoded is recorded in Translator.settings.kernel_choices (every choice written out;
    the decoder output's .decode.json and the trainer's run.json: tests/decoding/test_streamed_decoding.py,
    tests/training/test_trainer.py); forcing the choices the defaults made gives the same module,
    and a forced graph search the same outputs."""
    from t2t_keras import Translator

    translator = Translator.from_preset(trained_output_dir, beam_size=2, extra_length=8, tune_process=False)
    chosen = translator.settings.kernel_choices
    assert kernel_choices.forced_choices(chosen).keys() == kernel_choices.ALTERNATIVES.keys()
    assert translator.search_module(kernel_choices=chosen) is translator.search_module()
    lines = ["A dog runs in the snow.", "Two men are playing football on a green field."]
    graph = translator.search_module(kernel_choices="step_product=nn;beam_candidates=graph;top_k=graph;attention=graph")
    assert graph.kernels.native_choices == [] and graph.decode_hparams.kernel_choices.startswith("step_product=nn")
    assert translator.generate(lines) == translator.generate(
        lines, kernel_choices="step_product=nn;beam_candidates=graph;top_k=graph;attention=graph")


def test_the_timings_are_measured_once_per_machine_and_size(tmp_path, monkeypatch):
    """A second start on the machine reads what the first measured (a decoder's start pays no
    timing); another size is measured afresh; a damaged cache is measured over."""
    monkeypatch.setenv("T2T_KERAS_CACHE", str(tmp_path))
    calls = []

    def timings(name):
        calls.append(name)
        return TIMES[name]

    def chosen(rows):
        cached = kernel_choices.MachineTimings(timings, _projection(), rows, (2, 8))
        return kernel_choices.choose(_projection(), rows, {}, int8_logits=False, measure=cached)

    first = chosen(32)
    measured = len(calls)
    assert measured >= 1 and chosen(32) == first and len(calls) == measured
    chosen(64)
    assert len(calls) == 2 * measured
    (tmp_path / kernel_choices.MachineTimings.FILE).write_text("{damaged")
    assert chosen(32) == first and len(calls) == 3 * measured
