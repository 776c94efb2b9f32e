"""The WMT14 problems' real tfds loading code, run on tfds.testing.mock_data (no network here)."""

import numpy as np
import pytest
import tensorflow_datasets as tfds

from t2t_keras import registry
from t2t_keras.data import datagen
from t2t_keras.errors import UsageError
from t2t_keras.problem import VocabSpec


@pytest.mark.parametrize("name, languages", [("translate_ende_wmt14", ("en", "de")), ("translate_enfr_wmt14", ("en", "fr"))])
def test_datagen_and_batches_through_mock_tfds(name, languages, tmp_path):
    problem_cls = registry.PROBLEMS.get(name)
    assert (problem_cls.source_language, problem_cls.target_language) == languages
    assert problem_cls.vocab_spec.size == {"translate_ende_wmt14": 37000, "translate_enfr_wmt14": 32000}[name]

    class MockSized(problem_cls):  # mock text is random letters: a small vocabulary, few shards
        vocab_spec = VocabSpec(size=300)
        num_shards = {"train": 3, "dev": 1, "test": 1}

    problem = MockSized()
    with tfds.testing.mock_data(num_examples=60):
        record = datagen.generate(problem, str(tmp_path / "data"), str(tmp_path / "tfds"), progress=False)
    assert {split: info["pairs"] for split, info in record["splits"].items()} == {"train": 60, "dev": 60, "test": 60}
    assert [f["name"] for f in record["splits"]["train"]["files"]] == [f"{name}-train-0000{i}-of-00003" for i in range(3)]

    batches = list(problem.dataset("test", str(tmp_path / "data"), 512, training=False).as_numpy_iterator())
    assert sum(b["inputs"].shape[0] for b in batches) == 60
    for batch in batches:
        assert set(batch) == {"inputs", "targets"}
        assert batch["inputs"].dtype == np.int32 and batch["inputs"].ndim == 2 and batch["targets"].ndim == 2
    train = next(iter(problem.dataset("train", str(tmp_path / "data"), 512, training=True, seed=1)))
    assert train["inputs"].shape[0] * max(train["inputs"].shape[1], train["targets"].shape[1]) <= 512


def test_splits_map_to_newstest():
    from t2t_keras.problems.translate_wmt14 import TFDS_SPLITS

    assert TFDS_SPLITS == {"train": "train", "dev": "validation", "test": "test"}
    assert registry.problem("translate_ende_wmt14").tfds_name == "wmt14_translate/de-en"
    assert registry.problem("translate_enfr_wmt14").tfds_name == "wmt14_translate/fr-en"


def test_failed_download_is_a_usage_error(tmp_path, monkeypatch):
    def offline(self, *args, **kwargs):
        raise ConnectionError("network is unreachable")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", offline)
    with pytest.raises(UsageError, match=r"could not prepare wmt14_translate/de-en in --tmp_dir=.*ConnectionError: network is unreachable.*tfds build"):
        datagen.generate(registry.problem("translate_ende_wmt14"), str(tmp_path / "data"), str(tmp_path / "tfds"), progress=False)
