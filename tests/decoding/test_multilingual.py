"""One model of several target languages: the token in the data, in every decoding interface,
and the one-line refusals (translate_text with --train_lang_pairs over a slice of Multi30k)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from t2t_keras import registry
from t2t_keras.data import target_languages
from t2t_keras.data.text_files import TextStats
from t2t_keras.errors import UsageError
from t2t_keras.translator import Translator
from tests.conftest import TRAINED_HPARAMS
from tests.testing import assert_one_line_error, refusal_probe, seed_generators, write_corpus_slice

EN = ["A man in an orange hat is looking at something.", "Two dogs play in the snow.", ""]
DE = ["Ein Mann mit einem orangefarbenen Hut starrt auf etwas.", "Zwei Hunde spielen im Schnee.", ""]


def _flags(text_dir):
    def files(split, *languages):
        return ",".join(os.path.join(text_dir, f"{split}.{language}") for language in languages)

    return {"train_source": files("train", "en", "de"), "train_target": files("train", "de", "en"),
            "dev_source": files("dev", "en", "de"), "dev_target": files("dev", "de", "en"), "vocab_size": 1000,
            "train_lang_pairs": "en-de,de-en", "dev_lang_pairs": "en-de,de-en"}


@pytest.fixture(scope="module")
def both_directions(tmp_path_factory):
    """(problem, data dir, run dir): en<->de data of 2 x 2000 pairs, a tiny model trained 30 steps."""
    from t2t_keras.data import datagen
    from t2t_keras.training import trainer

    work = tmp_path_factory.mktemp("multilingual")
    text_dir = write_corpus_slice(work / "text")
    problem = registry.problem("translate_text")
    problem.configure(problem.settings_from_flags(_flags(text_dir)))
    datagen.generate(problem, str(work / "data"), None, progress=False)
    seed_generators("multilingual")
    settings = trainer.RunSettings(output_dir=str(work / "run"), data_dir=str(work / "data"), train_steps=30,
                                   save_checkpoints_steps=30, log_steps=30, evaluate=False, seed=1)
    trainer.train(problem, registry.hparams("transformer_tiny", TRAINED_HPARAMS), settings,
                  tf.distribute.OneDeviceStrategy("/cpu:0"))
    return problem, str(work / "data"), str(work / "run")


def test_sources_start_with_their_target_language(both_directions):
    """Each pair's source starts with its target's token, one piece of the vocabulary; the
    en -> de pairs' targets are German, the de -> en pairs' English."""
    problem, data_dir, _ = both_directions
    assert problem.target_languages == ("de", "en") and problem.multilingual
    vocabulary = problem.load_vocabularies(data_dir).source
    for language in ("de", "en"):
        assert vocabulary.pieces(vocabulary.encode(target_languages.token(language)))[-1] == target_languages.token(language)
    pairs = list(problem.text_pairs("train", None, TextStats()))
    assert len(pairs) == 4000
    english, german = pairs[0]
    assert english.startswith(">>de<< ") and pairs[2000] == (f">>en<< {german}", english[len(">>de<< "):])  # both ways


@pytest.mark.parametrize("flags, message", [
    ({"train_lang_pairs": "en-de"}, "--train_lang_pairs names 1 language pairs and --train_source 2 files"),
    ({"dev_lang_pairs": None}, "--dev_lang_pairs is needed with --train_lang_pairs"),
    ({"train_lang_pairs": "en-de,de"}, "--train_lang_pairs: 'de' is not SOURCE-TARGET"),
    ({"train_lang_pairs": "en-de,de-e n"}, "--train_lang_pairs: 'e n' is not a language code"),
    ({"dev_lang_pairs": "en-fr,de-en"}, "--dev_lang_pairs asks for fr, which no --train_lang_pairs pair translates into"),
    ({"target_language": "de"}, "--train_lang_pairs names each file pair's languages: leave out --source_language"),
])
def test_bad_lang_pairs_are_one_line(tmp_path, flags, message):
    text_dir = write_corpus_slice(tmp_path, train_lines=10, dev_lines=10)
    values = {key: value for key, value in {**_flags(text_dir), **flags}.items() if value is not None}
    with pytest.raises(UsageError, match="^" + message):
        registry.problem("translate_text").settings_from_flags(values)


def test_target_language_puts_its_token_in_front(both_directions):
    """target_language=de decodes and scores as the line that starts with >>de<< does; the
    alignments index the line's own words (the token is not one of them); a language the
    model was not trained for, none, or two are one line each."""
    _, _, run_dir = both_directions
    translator = Translator.from_preset(run_dir, min_length=6)  # a 30-step model's outputs would be empty
    asked = translator.translate(EN, target_language="de", alignments=True, log_probs=True)
    tagged = translator.translate([target_languages.tagged(line, "de") if line else "" for line in EN], alignments=True,
                                  log_probs=True)
    assert [h[0].text for h in asked] == [h[0].text for h in tagged]
    assert [h[0].log_prob for h in asked] == [h[0].log_prob for h in tagged]
    assert asked[2][0].text == ""
    for hypotheses, line in zip(asked[:2], EN):
        words = len(line.split())
        assert hypotheses[0].alignment and all(0 <= source < words for source, _ in hypotheses[0].alignment)
    into_english = translator.translate(DE, target_language="en", log_probs=True)
    np.testing.assert_allclose(translator.score(DE[:2], [h[0].text for h in into_english[:2]], target_language="en"),
                               [h[0].log_prob for h in into_english[:2]], rtol=1e-5)
    with pytest.raises(UsageError, match=r"^target_language=fr: this model translates into de, en only\.$"):
        translator.generate(EN, target_language="fr")
    with pytest.raises(UsageError, match=r"^line 1 names no target language: this model translates into de, en; pass "
                                         r"target_language \(--target_language\), or start the line with >>de<<\.$"):
        translator.generate(EN)
    with pytest.raises(UsageError, match=r"^line 2 starts with >>en<< but target_language=de"):
        translator.generate([EN[0], ">>en<< " + EN[1]], target_language="de")


def test_export_takes_the_target_languages(both_directions, tmp_path):
    """The SavedModel's text signatures take target_languages: the outputs and scores of the
    in-process decoder, each sentence into its own language; a wrong language stops the call
    with the message; the Python API over the export decodes as over the run dir."""
    from t2t_keras.decoding.trained_run import TrainedRun
    from t2t_keras.serving.exporter import export_run

    _, _, run_dir = both_directions
    path = export_run(TrainedRun.resolve(run_dir, "min_length=6"), str(tmp_path / "export"))  # outputs not empty
    loaded = tf.saved_model.load(path)
    sources, languages = [EN[0], DE[1], EN[1]], ["de", "en", ""]
    sources[2] = target_languages.tagged(sources[2], "de")  # "": the input carries its token
    served = loaded.signatures["serving_default"](inputs=tf.constant(sources), target_languages=tf.constant(languages))
    translator = Translator.from_preset(run_dir, min_length=6)
    ours = [translator.translate([source], target_language=language or "", log_probs=True)[0][0]
            for source, language in zip(sources, languages)]
    assert [text.decode() for text in served["outputs"].numpy()] == [h.text for h in ours] and all(h.text for h in ours)
    # (log_probs may not: the search may spell an output with other pieces than its text's, as this model's ".....")
    np.testing.assert_allclose(served["scores"].numpy(), [h.score for h in ours], rtol=1e-5, atol=1e-5)
    scored = loaded.signatures["score"](inputs=tf.constant(sources[:2]), targets=tf.constant([h.text for h in ours[:2]]),
                                        target_languages=tf.constant(languages[:2]))
    np.testing.assert_allclose(scored["log_probs"].numpy(), [h.log_prob for h in ours[:2]], rtol=1e-5, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="target_languages: give each input one of de, en"):
        loaded.signatures["serving_default"](inputs=tf.constant(EN[:1]), target_languages=tf.constant(["fr"]))
    exported = Translator.from_preset(str(tmp_path / "export"))
    assert exported.generate(EN, target_language="de") == translator.generate(EN, target_language="de")
    with pytest.raises(UsageError, match=r"^target_language=fr: this model translates into de, en only\.$"):
        exported.generate(EN, target_language="fr")


def test_decoder_refuses_an_untrained_language(both_directions, tmp_path):
    _, _, run_dir = both_directions
    (tmp_path / "in.en").write_text("A dog runs.\n")
    result = __import__("subprocess").run(
        refusal_probe("decoder", f"--output_dir={run_dir}", f"--decode_from_file={tmp_path / 'in.en'}",
                      "--target_language=fr"), capture_output=True, text=True)
    assert_one_line_error(result, "error: target_language=fr: this model translates into de, en only.")
    assert result.stdout.split() == ["2", "False"]  # before TensorFlow loads


def test_ctranslate2_reads_the_token_in_the_source(both_directions, tmp_path):
    """The CTranslate2 export scores a source tokenised with its target's token in front as we
    score the same pair asked with target_language; its metadata lists the tokens."""
    import json

    import ctranslate2

    from t2t_keras.decoding.trained_run import TrainedRun
    from t2t_keras.serving import ctranslate2_export

    _, _, run_dir = both_directions
    path = ctranslate2_export.export_run(TrainedRun.resolve(run_dir, "shortlist=0"), str(tmp_path / "ct2"))
    assert json.load(open(os.path.join(path, "t2t_keras_export.json")))["target_languages"] == {"de": ">>de<<",
                                                                                               "en": ">>en<<"}
    translator = Translator.from_preset(run_dir)
    vocabulary = translator.vocabularies.source
    for language, sources, targets in (("de", EN[:2], DE[:2]), ("en", DE[:2], EN[:2])):
        tokens = [vocabulary.pieces(vocabulary.encode(target_languages.tagged(source, language))) for source in sources]
        theirs = ctranslate2.Translator(path, device="cpu").score_batch(
            tokens, [vocabulary.pieces(vocabulary.encode(target)) for target in targets])
        np.testing.assert_allclose([sum(result.log_probs) for result in theirs],
                                   translator.score(sources, targets, target_language=language), rtol=3e-4, atol=1e-3)
