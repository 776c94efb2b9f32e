"""The Python API (`t2t_keras.Translator`): per-call settings, one return type, lazy
iteration, the process set up as the decoder's, and README's Python section run as written."""

import gzip
import os
import re
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_keras.errors import UsageError
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.system import ONEDNN_KERNEL_CACHE
from tests.testing import REPO_ROOT, run_side_by_side

SENTENCES = ["A dog runs in the snow.", "", "Two men are playing football on a green field.", "A woman reads."]


@pytest.fixture(scope="module")
def translator(trained_output_dir):
    from t2t_keras import Translator

    return Translator.from_preset(trained_output_dir, beam_size=2, extra_length=8)


def test_the_api_is_importable_from_the_top():
    import t2t_keras
    from t2t_keras import Hypothesis, LabelSmoothedCrossEntropy, Transformer, Translator

    assert Translator.__module__ == "t2t_keras.translator" and Transformer.__module__ == "t2t_keras.models.transformer"
    assert Hypothesis._fields == ("text", "log_prob", "score", "truncated", "alignment", "missing") and LabelSmoothedCrossEntropy.__name__ in t2t_keras.__all__


def test_settings_change_per_call_and_each_graph_is_traced_once(translator):
    """A call's settings: its own graphs for what they fix (traced once, kept), none for batch size."""
    default = translator.search_module()
    assert translator.search_module(sentences_per_batch=3) is default  # batch size is not in the graphs
    wider = translator.search_module(beam_size=3)
    assert wider is not default and wider.decode_hparams.beam_size == 3 and default.decode_hparams.beam_size == 2
    first = translator.generate(SENTENCES)
    traced = default.best_ids.experimental_get_tracing_count()
    translator.generate(SENTENCES, beam_size=3)
    assert translator.generate(SENTENCES, batch_size=1) == first  # back to the defaults: nothing traced again
    assert default.best_ids.experimental_get_tracing_count() == traced == 1
    assert translator.translate(SENTENCES, n_best=3, beam_size=3)[0][2].text  # 3 of beam 3
    with pytest.raises(UsageError, match=r"n_best=3: choose 1 to beam_size \(2\)"):
        translator.translate(SENTENCES, n_best=3)
    with pytest.raises(UsageError, match=r"unknown setting 'beam'; did you mean 'beam_size'"):
        translator.generate(SENTENCES, beam=3)
    with pytest.raises(UsageError, match=r"beam_size='3' should be of type int"):
        translator.generate(SENTENCES, beam_size="3")


def test_min_length_is_a_setting_that_reaches_the_search(translator):
    sources = tf.constant([[5, 6, 7, 1], [8, 1, 0, 0]])
    unconstrained = translator.search_module(extra_length=20).best_ids(sources)["lengths"].numpy()[:, 0]
    at_least_10 = translator.search_module(extra_length=20, min_length=10).best_ids(sources)["lengths"].numpy()[:, 0]
    assert unconstrained.min() < 10 <= at_least_10.min(), (unconstrained, at_least_10)


def test_one_return_type_whatever_n_best(translator):
    one, two = translator.translate(SENTENCES), translator.translate(SENTENCES, n_best=2, log_probs=True)
    assert [len(hypotheses) for hypotheses in one] == [1] * 4 and [len(hypotheses) for hypotheses in two] == [2] * 4
    assert [hypotheses[0].text for hypotheses in one] == translator.generate(SENTENCES)
    assert one[0][0].log_prob is None and two[0][0].log_prob == pytest.approx(
        translator.score(SENTENCES[:1], [two[0][0].text])[0], abs=1e-4)


def test_translate_iter_reads_lazily_and_gives_translates_outputs(translator):
    with gzip.open(os.path.join(MULTI30K_DIR, "val.en.gz"), "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(300)]  # with their newlines, as a file iterates
    read = []

    def source():
        for line in lines:
            read.append(line)
            yield line

    outputs = translator.translate_iter(source(), batch_size=8)  # windows of 8 batches: 64 lines
    first = next(outputs)
    assert len(read) == 64
    rest = list(outputs)
    assert [first, *rest] == translator.translate([line.rstrip("\n") for line in lines], batch_size=8)


def test_samples_of_a_line_depend_on_the_seed_and_its_number_only(translator):
    settings = dict(sampling_top_k=5, beam_size=1, seed=3)
    drawn = translator.generate(SENTENCES * 3, **settings)
    assert drawn == translator.generate(SENTENCES * 3, batch_size=2, **settings)
    assert len(set(drawn[0::4])) > 1  # one sentence at three line numbers: three draws


def test_bad_items_and_settings_are_one_line_naming_them_and_the_translator_decodes_after_each(translator, caplog):
    """The Python API's inputs as a new user gives them: each mistake one line naming the item
    (its index) or the setting (as passed, its rule, the method), no flag names; invalid Unicode
    replaced as the decoder replaces invalid UTF-8, never failing the other sentences."""
    expected = translator.generate(SENTENCES)
    mistakes = [
        (lambda: translator.generate([None]), TypeError, r"^generate: item 0 is NoneType None, not a str"),
        (lambda: translator.translate(["A dog.", 123]), TypeError, r"^translate: item 1 is int 123, not a str"),
        (lambda: list(translator.translate_iter(iter(["A dog.", b"x"]))), TypeError, r"^translate_iter: item 1 is bytes"),
        (lambda: translator.score(["A dog."], [None]), TypeError, r"^score: target item 0 is NoneType"),
        (lambda: translator.generate("A dog runs."), TypeError, r"^generate takes a list of sentences"),
        (lambda: translator.generate(["A dog.", "One line.\nAnother."]), UsageError,
         r"^generate: item 1 holds a line break; give one sentence per item"),
        (lambda: translator.generate(SENTENCES, beam_size=0), UsageError, r"^generate: beam_size=0: need beam_size >= 1\.$"),
        (lambda: translator.translate(SENTENCES, alpha=-1.0), UsageError, r"^translate: alpha=-1\.0: need alpha >= 0\.$"),
        (lambda: translator.generate(SENTENCES, batch_size=0), UsageError,
         r"^generate: batch_size=0: need an int batch_size >= 1\.$"),
        (lambda: translator.generate(SENTENCES, kernel_choices="top_k=fast"), UsageError,
         r"^generate: kernel_choices: 'top_k=fast' is not a choice; the choices are step_product=nn\|nt\|tn"),
    ]
    for call, error, message in mistakes:
        with pytest.raises(error, match=message) as raised:
            call()
        assert "\n" not in str(raised.value) and "--" not in str(raised.value), str(raised.value)
        assert translator.generate(SENTENCES) == expected
    with caplog.at_level("WARNING"):
        damaged = translator.generate(SENTENCES[:2] + ["A dog \ud800 runs.", "A cat\udcff."] + SENTENCES[2:])
    assert damaged[:2] + damaged[4:] == expected and all(damaged[2:4])
    assert "generate: invalid Unicode replaced by U+FFFD in items 2, 3" in caplog.text
    assert translator.generate(["A dog runs in the snow.\n"]) == expected[:1]  # a file's line, its break dropped


def test_a_run_dirs_translator_cuts_inputs_as_its_export_does_and_says_so(translator):
    """A run dir's Translator bounds a request as its export does (max_input_tokens = the
    model's max_length) and marks the hypotheses of a cut input."""
    assert translator.settings.max_input_tokens == 64  # tests/conftest.py's max_length
    long = " ".join(["A dog runs in the snow."] * 40)
    short, cut = translator.translate([SENTENCES[0], long])
    assert not short[0].truncated and cut[0].truncated and cut[0].text
    assert len(translator.vocabularies.target.encode(cut[0].text)) <= 64 + 8  # input cap + extra_length


def test_progress_is_a_bar_on_stderr(translator, capsys):
    translator.generate(SENTENCES, progress=True)
    assert "4/4" in capsys.readouterr().err


def test_a_directory_that_is_neither_a_run_nor_an_export_is_one_line(tmp_path):
    from t2t_keras import Translator

    with pytest.raises(UsageError, match=r"is neither a trainer's run dir \(it has no hparams.json\) nor an export"):
        Translator.from_preset(str(tmp_path))


PROCESS_PROBE = """
import sys
if sys.argv[2] == "late":
    import tensorflow as tf
    tf.zeros([]).numpy()  # TensorFlow started before the Translator
from t2t_keras import Translator
translator = Translator.from_preset(sys.argv[1], tune_process=sys.argv[2] != "untuned")
translator.generate(["A dog runs."])
import os
import tensorflow as tf
print(tf.config.threading.get_intra_op_parallelism_threads(), tf.config.threading.get_inter_op_parallelism_threads(),
      translator.settings.parallel_parts, os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "unset"))
"""


def test_the_process_is_set_up_as_the_decoder_sets_it_and_kept_as_quiet(trained_output_dir):
    """One thread per op, a part of each batch per core and oneDNN's kernels kept for every
    shape, as t2t-keras-decoder, and nothing of TensorFlow's start-up on stderr (no CUDA probe);
    left alone on request; as quiet when TensorFlow ran before (its thread pools exist: README's
    fit-then-translate flow), the decoding parts kept and the threads as they are."""
    unset = ("TF_CPP_MIN_LOG_LEVEL", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    env = {name: value for name, value in os.environ.items() if name not in unset}
    results = run_side_by_side([[sys.executable, "-c", PROCESS_PROBE, trained_output_dir, how]
                                for how in ("tuned", "untuned", "late")], env=env)
    parts = min(len(os.sched_getaffinity(0)), 8)
    cache = str(ONEDNN_KERNEL_CACHE)
    assert results[0].stdout.split() == (["1", str(max(parts, 2)), str(parts), cache] if parts > 1 else ["0", "0", "1", cache]), results[0].stderr
    assert results[0].stderr == "" and results[1].stderr == ""
    assert results[1].stdout.split() == ["0", "0", str(parts), "unset"], results[1].stderr
    assert results[2].stdout.split() == ["0", "0", str(parts), cache], results[2].stderr
    assert "ran before decoding" not in results[2].stderr  # TensorFlow's own start-up lines aside: the probe imported it


def _readme_python_blocks() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### From Python"):]
    section = section[: section.index("\n## ")]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_python_section_runs_as_written(trained_output_dir, multi30k_data_dir, tmp_path):
    """Every Python block of README's "From Python", run in a fresh process on this suite's
    trained run and data (paths and step counts replaced: each replacement must apply)."""
    (tmp_path / "in.en").write_text("A dog runs in the snow.\nA woman reads.\n", encoding="utf-8")
    replacements = {
        "out/demo/train_avg": trained_output_dir, "out/demo/data": multi30k_data_dir, "out/fit": str(tmp_path / "fit"),
        '"in.en"': repr(str(tmp_path / "in.en")), "epochs=3": "epochs=1", "steps_per_epoch=500": "steps_per_epoch=2",
    }
    blocks = _readme_python_blocks()
    assert len(blocks) >= 2, "README's From Python section has its code blocks"
    program = "\n".join(blocks)
    for old, new in replacements.items():
        assert old in program, f"README's Python section no longer has {old!r}: update this test's replacements"
        program = program.replace(old, new)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "fit" / "model.keras").exists()


def test_readme_shows_the_model_fit_the_task_and_per_call_settings():
    program = "\n".join(_readme_python_blocks())
    for shown in ("Transformer(", ".compile(", ".fit(", "load_model(", "Translator.from_preset(", "beam_size=",
                  "batch_size=", "translate_iter(", "Translator.from_model("):
        assert shown in program, shown

