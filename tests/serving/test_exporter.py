"""The exported SavedModel, loaded where t2t_keras is not, against the decoder CLI."""

import gzip
import json
import math
import os
import random
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import files
from t2t_keras.errors import UsageError
from t2t_keras.kernels import native
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
from t2t_keras.serving import exporter
from tests.testing import assert_one_line_error, read_warmup_requests, run_side_by_side

pytestmark = pytest.mark.slow

# Runs in a fresh interpreter: only TensorFlow and tensorflow_text, as a serving host has.
LOADER = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # registers the SentencePiece ops

    request = json.load(open(sys.argv[2]))
    serving = tf.saved_model.load(sys.argv[1])
    assert not any(name.startswith("t2t_keras") for name in sys.modules), "t2t_keras was imported"
    translate = serving.signatures["serving_default"]
    score = serving.signatures["score"]
    answer = {}
    for name, sentences in request["translate"].items():
        result = translate(inputs=tf.constant(sentences, tf.string))
        answer[name] = {
            "outputs": [t.decode("utf-8") for t in result["outputs"].numpy()],
            "scores": result["scores"].numpy().tolist(),
            "log_probs": result["log_probs"].numpy().tolist(),
        }
    pairs = request["score"]
    result = score(inputs=tf.constant(pairs["inputs"]), targets=tf.constant(pairs["targets"]))
    answer["score"] = result["log_probs"].numpy().tolist()
    ids = serving.signatures["translate_ids"](input_ids=tf.constant([[5, 6, 7, 1]], tf.int32))
    answer["translate_ids_shapes"] = {k: v.shape.as_list() for k, v in ids.items()}
    json.dump(answer, sys.stdout)
    """
)


def _val(language, count):
    with gzip.open(os.path.join(MULTI30K_DIR, f"val.{language}.gz"), "rt", encoding="utf-8") as handle:
        return [next(handle).rstrip("\n") for _ in range(count)]


def _cli(module, *args):
    return subprocess.run([sys.executable, "-m", f"t2t_keras.bin.{module}", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def served(trained_output_dir, tmp_path_factory):
    """Exports a copy of the trained dir, decodes 20 val sentences with the CLI, moves the
    export away and deletes the copy; returns (export path, decoder outputs, their
    (score, log_prob) as the decoder wrote them)."""
    work = tmp_path_factory.mktemp("export")
    train_copy = work / "train"
    shutil.copytree(trained_output_dir, train_copy)
    source = work / "val.en"
    source.write_text("\n".join(_val("en", 20)) + "\n", encoding="utf-8")
    decode_hparams = "beam_size=4,alpha=0.6,extra_length=20"
    decoded = _cli(
        "decoder", f"--output_dir={train_copy}", f"--decode_from_file={source}", f"--decode_to_file={work / 'out.de'}",
        f"--decode_hparams={decode_hparams}", "--noprogress", "--with_scores", "--with_log_probs",
    )
    assert decoded.returncode == 0, decoded.stderr
    exported = _cli("exporter", f"--output_dir={train_copy}", f"--export_dir={work / 'export'}", f"--decode_hparams={decode_hparams}")
    assert exported.returncode == 0, exported.stderr
    version_path = exported.stdout.strip().split()[-1]
    assert os.path.dirname(version_path) == str(work / "export")
    moved = tmp_path_factory.mktemp("elsewhere") / "ende"
    shutil.move(str(work / "export"), moved)
    shutil.rmtree(train_copy)
    lines = [line.split("\t", 2) for line in (work / "out.de").read_text(encoding="utf-8").splitlines()]
    return str(moved / os.path.basename(version_path)), [text for _, _, text in lines], [(float(s), float(p)) for s, p, _ in lines]


def test_layout_is_what_tf_serving_expects(served):
    path, _, _ = served
    assert os.path.basename(path).isdigit()
    for name in ("saved_model.pb", "variables/variables.index", "assets/vocab.spm.model", exporter.WARMUP_FILE):
        assert os.path.isfile(os.path.join(path, name)), name
    assert not [n for n in os.listdir(os.path.dirname(path)) if n.startswith((files.TEMP_PREFIX, files.PREVIOUS_PREFIX))]


def test_the_export_holds_tensorflow_ops_only(served):
    """The decoder that made `served`'s outputs searched with the native top-k (where it
    built); the SavedModel must load wherever TensorFlow does, so none of its graphs holds one."""
    from tensorflow.core.protobuf import saved_model_pb2

    path, _, _ = served
    saved = saved_model_pb2.SavedModel.FromString(open(os.path.join(path, "saved_model.pb"), "rb").read())
    graph = saved.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node} | {node.op for function in graph.library.function for node in function.node_def}
    assert "TopKV2" in ops and not {op for op in ops if op.startswith("T2t")}


def test_an_export_that_fails_midway_leaves_no_version(trained_output_dir, tmp_path, monkeypatch):
    """Killed or failing while writing, an export leaves nothing TF Serving would load, and
    nothing half-written under any name (the temporary .incomplete.<version> is removed); a
    module of in-process decoding (native kernels) is refused before anything is written."""
    def failing_save(_, path, **__):
        os.makedirs(os.path.join(path, "variables"))
        open(os.path.join(path, "saved_model.pb"), "wb").close()
        raise OSError("disk full")

    from t2t_keras.decoding.engine import export_search_module
    from t2t_keras.decoding.trained_run import TrainedRun
    from t2t_keras.translator import Translator

    if native.library() is not None:
        in_process = Translator.from_preset(trained_output_dir, tune_process=False,
                                            kernel_choices="beam_candidates=native;top_k=graph").search_module()
        with pytest.raises(UsageError, match=r"^export_saved_model: this SearchModule runs native kernels \(beam_candidates=native"):
            exporter.export_saved_model(in_process, str(tmp_path / "native"), 7)
        assert not os.path.exists(tmp_path / "native")
    module = export_search_module(TrainedRun.resolve(trained_output_dir))
    assert not module.kernels.native_choices and module.decode_hparams.kernel_choices.startswith("step_product=")
    monkeypatch.setattr(tf.saved_model, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        exporter.export_saved_model(module, str(tmp_path / "export"), 7)
    assert os.listdir(tmp_path / "export") == []


def test_fresh_process_serves_what_the_decoder_returns(served, trained_output_dir, tmp_path):
    from t2t_keras.translator import Translator

    path, decoder_outputs, decoder_numbers = served
    sources = _val("en", 20)
    references = _val("de", 20)
    rng = random.Random(0)
    shuffled = []
    for reference in references:
        words = reference.split()
        while len(words) > 2 and " ".join(words) == reference:
            rng.shuffle(words)
        shuffled.append(" ".join(words))
    warmup_inputs = [
        [s.decode("utf-8") for s in request.inputs["inputs"].string_val]
        for request in read_warmup_requests(os.path.join(path, exporter.WARMUP_FILE))
    ]
    assert len(warmup_inputs) == 3 and all(warmup_inputs)
    request = {
        "translate": {
            "val": sources,
            "edge": ["", "A dog. " * 285 + "Done.", "   "],  # empty, 2000 characters, blank
            "batch64": [sources[i % 20] for i in range(64)],
            **{f"warmup{i}": inputs for i, inputs in enumerate(warmup_inputs)},
        },
        "score": {"inputs": sources + sources, "targets": references + shuffled},
    }
    request_path = tmp_path / "request.json"
    request_path.write_text(json.dumps(request), encoding="utf-8")
    loader = tmp_path / "loader.py"
    loader.write_text(LOADER)
    result = subprocess.run([sys.executable, str(loader), path, str(request_path)], capture_output=True, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr
    # Loading prints nothing of its own: no custom-gradient functions in the served graphs.
    assert [line for line in result.stderr.splitlines() if "WARNING:absl" in line] == [], result.stderr
    answer = json.loads(result.stdout)

    assert answer["val"]["outputs"] == decoder_outputs
    # scores and log_probs are one quantity each through the decoder, the Python API and the SavedModel.
    in_process = Translator.from_preset(trained_output_dir, beam_size=4, alpha=0.6, extra_length=20)
    best = [hypotheses[0] for hypotheses in in_process.translate(sources, log_probs=True)]
    for quantity, column, field in (("scores", 0, "score"), ("log_probs", 1, "log_prob")):
        np.testing.assert_allclose(answer["val"][quantity], [numbers[column] for numbers in decoder_numbers], atol=2e-4)
        np.testing.assert_allclose([getattr(h, field) for h in best], [numbers[column] for numbers in decoder_numbers], atol=2e-4)
    # Two quantities: alpha 0.6 divides log P by ((5 + length) / 6) ** 0.6, 1 for EOS alone (a 30-step
    # model may give that for every line), more past it.
    assert all(s >= p - 1e-4 for s, p in decoder_numbers)
    edge = answer["edge"]
    assert edge["outputs"][0] == "" and edge["outputs"][2] == "" and edge["scores"][0] == 0.0
    # The 2000-character line is answered (what a 30-step model says may well be empty).
    assert len(request["translate"]["edge"][1]) == 2000 and math.isfinite(edge["scores"][1])
    assert answer["batch64"]["outputs"] == [decoder_outputs[i % 20] for i in range(64)]
    for i, inputs in enumerate(warmup_inputs):
        assert len(answer[f"warmup{i}"]["outputs"]) == len(inputs)
    scored = in_process.score(request["score"]["inputs"], request["score"]["targets"])
    np.testing.assert_allclose(answer["score"], scored, rtol=1e-4, atol=1e-3)
    # Even a 30-step model prefers the reference to its words shuffled, most of the time.
    reference_scores, shuffled_scores = answer["score"][:20], answer["score"][20:]
    assert sum(r > s for r, s in zip(reference_scores, shuffled_scores)) >= 12, answer["score"]
    assert answer["translate_ids_shapes"]["ids"][:2] == [1, 4]


def test_bad_input_is_one_line(served, trained_output_dir, tmp_path):
    path, _, _ = served
    export_dir, version = os.path.split(path)
    empty = tmp_path / "untrained"
    shutil.copytree(trained_output_dir, empty, ignore=shutil.ignore_patterns("ckpt-*", "checkpoint"))
    exporter_cli = [sys.executable, "-m", "t2t_keras.bin.exporter"]
    cases = [
        ([f"--output_dir={trained_output_dir}", f"--export_dir={export_dir}", f"--version={version}"], f"error: {path} already exists"),
        ([f"--output_dir={empty}", f"--export_dir={tmp_path / 'export'}"], "error: --output_dir="),
        ([f"--output_dir={trained_output_dir}"], "error: --export_dir is required"),
    ]
    for (_, message), result in zip(cases, run_side_by_side([exporter_cli + args for args, _ in cases])):
        assert_one_line_error(result, message)
    assert not (tmp_path / "export").exists()


def test_python_api_over_the_export_equals_the_in_process_one(served, trained_output_dir):
    from t2t_keras.translator import Translator

    path, decoded, _ = served
    exported = Translator.from_preset(os.path.dirname(path))  # an export dir: its highest version
    sentences = _val("en", 20)
    assert exported.generate(sentences) == decoded
    assert exported.generate(sentences, batch_size=3) == decoded  # batches of like length, in input order
    in_process = Translator.from_preset(trained_output_dir, beam_size=4, alpha=0.6, extra_length=20)
    assert in_process.generate(sentences) == decoded  # the Python API = the decoder CLI
    # Every beam (n_best = beam size), so that a swap of tied hypotheses stays visible.
    for ours, theirs in zip(in_process.translate(sentences[:5] + [""], n_best=4, log_probs=True),
                            exported.translate(sentences[:5] + [""], n_best=4, log_probs=True, batch_size=2)):
        _assert_same_n_best(ours, theirs)
    best = [hypotheses[0] for hypotheses in in_process.translate(sentences, log_probs=True)]
    _assert_same_n_best(best, [hypotheses[0] for hypotheses in exported.translate(sentences, log_probs=True)])
    with pytest.raises(UsageError, match=r"is an export, whose graphs fix its decode settings: beam_size=5 \(it has 4\)"):
        exported.generate(sentences, beam_size=5)
    assert exported.score(["A dog runs."], [decoded[0]]) == pytest.approx(in_process.score(["A dog runs."], [decoded[0]]), abs=1e-4)
    # A prefix through the export's translate_prefix signature: the in-process decoder's outputs and scores.
    prefixes = ["Ein", "", "Zwei Män", None, "Eine Frau ", "Ein Hu"] * 3 + ["Ein", "Ein"]
    steered = in_process.translate(sentences, prefix=prefixes, log_probs=True)
    _assert_same_n_best([h[0] for h in steered],
                        [h[0] for h in exported.translate(sentences, prefix=prefixes, log_probs=True, batch_size=4)])
    assert all(h[0].text.startswith((p or "").strip()) for p, h in zip(prefixes, steered))
    with pytest.raises(UsageError, match=r"is an export: avoided terms are banned by decoding in a process"):
        exported.generate(sentences[:1], avoid=[["Hund"]])
    # Terms through the export's translate_constrained signature: the in-process decoder's outputs and scores.
    terms = [["Hund"], None, ["rote Mütze", "Straße"], [], ["Köter"]] * 4
    held = in_process.translate(sentences, prefix=prefixes, constraints=terms, log_probs=True)
    _assert_same_n_best([h[0] for h in held], [h[0] for h in exported.translate(sentences, prefix=prefixes, constraints=terms,
                                                                             log_probs=True, batch_size=4)])
    assert all(not h[0].missing for h in held)


def test_an_exports_swapped_vocabulary_is_named(served, tmp_path):
    """The export's metadata records its vocabulary's pieces: another of the same size in its
    assets is one line naming both files; the same pieces saved again still load."""
    from sentencepiece import sentencepiece_model_pb2

    from t2t_keras.data.tokenizers import Vocabulary, train_sentencepiece
    from t2t_keras.translator import Translator

    path, _, _ = served
    copy = tmp_path / "1"
    shutil.copytree(path, copy)
    asset = copy / "assets" / "vocab.spm.model"
    own = Vocabulary.load(str(asset))
    resaved = sentencepiece_model_pb2.ModelProto.FromString(own.model_proto)
    resaved.trainer_spec.model_prefix = "elsewhere"
    asset.write_bytes(resaved.SerializeToString())
    Translator.from_preset(str(copy))
    asset.write_bytes(train_sentencepiece(_val("fr", 1014), own.size))
    with pytest.raises(UsageError, match=rf"^{asset} is not the vocabulary recorded in {copy / exporter.METADATA_FILE}: "
                                         rf"the same size \({own.size}\) but other pieces"):
        Translator.from_preset(str(copy))


def _assert_same_n_best(ours, theirs, atol=1e-4):
    """The same hypotheses (text, score, log-probability) at the same scores, except for pairs
    that differ only by a near-tie: the two graphs sum in different orders, so of two candidates
    that cost the same within float noise either may rank first or keep the beam's last place
    (a 30-step test model says "Ein Ein Ein ..." with "Eine" at one of many positions at equal
    cost; both kinds seen in CI)."""
    assert len(ours) == len(theirs)
    np.testing.assert_allclose([h.score for h in ours], [h.score for h in theirs], atol=atol)

    def same(a, b):  # the same text may come from two spellings in pieces, hence "any"
        return a.text == b.text and abs(a.score - b.score) <= atol and abs(a.log_prob - b.log_prob) <= atol

    only_ours = [h for h in ours if not any(same(h, other) for other in theirs)]
    only_theirs = [h for h in theirs if not any(same(h, other) for other in ours)]
    assert len(only_ours) == len(only_theirs), (only_ours, only_theirs)
    for mine, other in zip(sorted(only_ours, key=lambda h: h.score), sorted(only_theirs, key=lambda h: h.score)):
        tied = abs(mine.score - other.score) <= atol and abs(mine.log_prob - other.log_prob) <= atol
        elsewhere = any(h.text == mine.text for h in theirs) or any(h.text == other.text for h in ours)
        assert tied and not elsewhere and len(mine.text.split()) == len(other.text.split()), f"differ without a tie: {mine} vs {other}"


LOADER_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "saved_model_loader.cc")


@pytest.fixture(scope="module")
def cpp_loader(tmp_path_factory):
    """tests/serving/saved_model_loader.cc built with the TensorFlow wheel's headers and
    libraries (tf.sysconfig), and TF Text's op library it loads: (binary, op library)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler (g++ or c++) here: TF Serving's C++ loader cannot be built and is not checked")
    import tensorflow as tf
    import tensorflow_text

    binary = tmp_path_factory.mktemp("cpp") / "saved_model_loader"
    library = tf.sysconfig.get_lib()
    built = subprocess.run(
        [compiler, "-O1", "-w", *tf.sysconfig.get_compile_flags(), LOADER_SOURCE, "-o", str(binary),
         "-Wl,--no-as-needed", *tf.sysconfig.get_link_flags(), "-l:libtensorflow_cc.so.2", f"-Wl,-rpath,{library}"],
        capture_output=True, text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return str(binary), os.path.join(os.path.dirname(tensorflow_text.__file__), "python", "ops", "_sentencepiece_tokenizer.so")


def _requests_file(path, requests):
    """The loader's request format (see saved_model_loader.cc)."""
    with open(path, "wb") as handle:
        for signature, inputs in requests:
            handle.write(f"request {signature}\n".encode())
            for key, values in inputs.items():
                handle.write(f"input {key} {len(values)}\n".encode())
                for value in values:
                    data = value.encode("utf-8")
                    handle.write(f"{len(data)}\n".encode() + data + b"\n")
            handle.write(b"end\n")


def test_tf_servings_cpp_loader_serves_what_the_decoder_returns(served, cpp_loader, trained_output_dir, tmp_path):
    """LoadSavedModel (tag serve) from C++, with no Python: serving_default and score run by the
    SignatureDefs' tensor names give the decoder's outputs and the Python scores, and every
    warmup request TF Serving would replay at load time runs."""
    from t2t_keras.translator import Translator

    binary, op_library = cpp_loader
    path, decoded, _ = served
    sources = _val("en", 20)
    warmups = [[s.decode("utf-8") for s in request.inputs["inputs"].string_val]
               for request in read_warmup_requests(os.path.join(path, exporter.WARMUP_FILE))]
    long_line = "A dog. " * 714 + "Done."  # 5000 words, far over the cap
    requests = [
        ("serving_default", {"inputs": sources}),
        ("serving_default", {"inputs": ["", long_line]}),
        ("score", {"inputs": sources[:4] + [""], "targets": decoded[:4] + ["Ein Hund."]}),
        *[("serving_default", {"inputs": inputs}) for inputs in warmups],
    ]
    _requests_file(tmp_path / "requests", requests)
    result = subprocess.run([binary, path, str(tmp_path / "requests"), op_library], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(answers) == len(requests)
    assert answers[0]["outputs"] == decoded and answers[0]["truncated"] == [False] * 20
    assert answers[1]["outputs"][0] == "" and answers[1]["scores"][0] == 0 and answers[1]["truncated"] == [False, True]
    in_process = Translator.from_preset(trained_output_dir, beam_size=4, alpha=0.6, extra_length=20)
    np.testing.assert_allclose(answers[2]["log_probs"], in_process.score(sources[:4] + [""], decoded[:4] + ["Ein Hund."]), atol=1e-4)
    for inputs, answer in zip(warmups, answers[3:]):
        assert len(answer["outputs"]) == len(inputs)


def test_the_export_says_how_it_decodes_and_bounds_each_request(served):
    from t2t_keras.serving.loaded_export import LoadedExport

    path, _, _ = served
    exported = LoadedExport(path)
    settings = exported.metadata["decode_hparams"]
    assert (settings["beam_size"], settings["alpha"], settings["extra_length"]) == (4, 0.6, 20)
    assert settings["max_input_tokens"] == 64  # the model's max_length (tests/conftest.py)
    assert exported.metadata["problem"] == "translate_ende_multi30k" and exported.metadata["checkpoint"].endswith("ckpt-30")
    import tensorflow as tf

    found = exported.saved_model.signatures["translate_ids"](input_ids=tf.constant([[5] * 499 + [1]], tf.int32))
    assert int(found["lengths"].numpy().max()) <= 64 + 20  # at most the cap plus extra_length, not 500 + 20


def test_an_ensemble_exports_metadata_naming_every_member(trained_output_dir, tmp_path):
    from t2t_keras.decoding.engine import export_search_module
    from t2t_keras.decoding.trained_run import TrainedRun

    member = tmp_path / "member"
    shutil.copytree(trained_output_dir, member)
    run = TrainedRun.resolve(trained_output_dir, ensemble=[str(member)], for_export=True)
    metadata = exporter.export_metadata(export_search_module(run), 30)
    assert metadata["checkpoints"] == [os.path.join(trained_output_dir, "ckpt-30"), str(member / "ckpt-30")]
    assert metadata["checkpoint"] == metadata["checkpoints"][0]
