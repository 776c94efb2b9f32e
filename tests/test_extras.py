"""The optional dependencies: each feature without its extra stops with one line naming the pip
install that brings it, and the extras' table matches pyproject.toml's."""

import importlib.metadata
import subprocess
import sys
import tomllib

import numpy as np
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from t2t_keras import extras, registry
from t2t_keras.data.text_files import TextStats
from t2t_keras.errors import UsageError
from tests.testing import REPO_ROOT, assert_one_line_error

OPTIONAL = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _use_parsing(tmp_path):
    next(iter(registry.problem("parsing_english_ptb_sample").text_pairs("train", None, TextStats())))


def _use_plots(tmp_path):
    from t2t_keras.decoding import attention_plots

    attention_plots.attention_figure(np.zeros([1, 2, 2]), ["a", "b"], ["c", "d"], "title")


def _use_serving(tmp_path):
    from t2t_keras.serving import exporter

    exporter.write_warmup_requests(str(tmp_path / "warmup"))


def _use_paper_bleu(tmp_path):
    from t2t_keras.evaluation import bleu

    bleu.paper_bleu(["Ein Hund."], ["Ein Hund."])


def _use_ctranslate2(tmp_path):
    from t2t_keras.serving import ctranslate2_export

    ctranslate2_export.model_spec(model=None, vocabularies=None)


def _use_alignment(tmp_path):
    from t2t_keras.data import word_alignments

    word_alignments.word_links([("A dog.", "Ein Hund.")])


FEATURES = {"parsing": _use_parsing, "plots": _use_plots, "serving": _use_serving, "paper-bleu": _use_paper_bleu,
            "ctranslate2": _use_ctranslate2, "alignment": _use_alignment}


def test_each_extra_of_pyproject_installs_the_module_of_its_feature():
    assert {name for name in OPTIONAL if name not in ("all", "test")} == set(extras.EXTRAS) == set(FEATURES)
    distributions = importlib.metadata.packages_distributions()
    for extra, (module, _) in extras.EXTRAS.items():
        required = {canonicalize_name(Requirement(line).name) for line in OPTIONAL[extra]}
        assert required == {canonicalize_name(name) for name in distributions[module]}, extra
    assert OPTIONAL["all"] == [f"t2t-keras[{','.join(extras.EXTRAS)}]"]
    assert "t2t-keras[all]" in OPTIONAL["test"]  # the suite tests every feature


@pytest.mark.parametrize("extra", sorted(extras.EXTRAS))
def test_a_feature_without_its_extra_is_one_line_naming_the_install(extra, monkeypatch, tmp_path):
    module, feature = extras.EXTRAS[extra]
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed: importing it fails
    with pytest.raises(UsageError) as raised:
        FEATURES[extra](tmp_path)
    assert str(raised.value) == f'{feature} needs {module}, which is not installed: pip install "t2t-keras[{extra}]".'


def test_a_broken_install_of_an_extra_is_not_called_missing(monkeypatch, tmp_path):
    """The extra's package is there but one of its own imports fails: that error, unchanged."""
    (tmp_path / "installed_but_broken.py").write_text("import no_such_dependency_of_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(extras.EXTRAS, "broken", ("installed_but_broken", "a feature"))
    with pytest.raises(ModuleNotFoundError) as raised:
        extras.require("broken")
    assert raised.value.name == "no_such_dependency_of_it"


def test_a_command_without_the_extra_is_one_line_and_status_2(tmp_path):
    (tmp_path / "trees").write_text("(S (NP (DT A) (NN dog)) (VP (VBZ runs)))\n")
    code = (
        "import sys; sys.modules['nltk'] = None; from t2t_keras.bin.evalb import run; "
        f"sys.argv = ['t2t-keras-evalb', '--gold={tmp_path / 'trees'}', '--test={tmp_path / 'trees'}']; run()"
    )
    assert_one_line_error(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True),
        "error: constituency parsing (the parsing_english_* problems, t2t-keras-evalb) needs nltk, which is not installed: "
        'pip install "t2t-keras[parsing]".',
    )
