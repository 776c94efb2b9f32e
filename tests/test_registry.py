import subprocess
import sys
import textwrap

import pytest

from t2t_keras import registry
from t2t_keras.errors import UsageError
from t2t_keras.registry import Registry


def _catalog(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_catalog_is_loaded_on_first_lookup_only(tmp_path, monkeypatch):
    things = Registry("thing", "lazy_catalog", "t2t_keras.test_things")
    monkeypatch.setattr(sys.modules[__name__], "THINGS", things, raising=False)
    _catalog(tmp_path, monkeypatch, "lazy_catalog", f"""
        from {__name__} import THINGS

        @THINGS.register()
        def alpha():
            "The first thing."
    """)
    assert "lazy_catalog" not in sys.modules
    assert things.names() == ["alpha"]
    assert "lazy_catalog" in sys.modules
    assert "  alpha\n      The first thing." in things.help()


def test_duplicate_names_are_rejected():
    things = Registry("thing", "json", "t2t_keras.test_things")

    @things.register("same")
    def first():
        pass

    with pytest.raises(ValueError, match="thing 'same' is already registered .*first.*pick another name"):

        @things.register("same")
        def second():
            pass


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UsageError, match=r"^unknown hparams set 'transformer_bgi'; did you mean 'transformer_big'"):
        registry.hparams("transformer_bgi")
    with pytest.raises(UsageError, match=r"^unknown hparams set 'xyz'; use --registry_help to list them.$"):
        registry.hparams("xyz")
    with pytest.raises(UsageError, match="unknown model 'transfomer'; did you mean 'transformer'"):
        registry.model("transfomer")


def test_public_listing():
    assert "transformer_big" in registry.list_hparams()
    assert registry.list_models() == ["transformer"]
    assert {"translate_ende_wmt14", "translate_enfr_wmt14", "translate_ende_multi30k", "parsing_english_wsj",
            "parsing_english_ptb_sample"} <= set(registry.list_problems())
    assert registry.list_problems() == sorted(registry.list_problems())
    text = registry.help_string()
    assert "hparams sets:" in text and "  transformer_big\n      Table 3 big" in text and "models:" in text


def _run_python(code, env_path):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env={"PYTHONPATH": str(env_path), "PATH": "/usr/bin:/bin"},
    )


def test_entry_point_group_plugs_in_a_package(tmp_path):
    """An installed distribution advertising t2t_keras.hparams gets its sets registered lazily."""
    (tmp_path / "my_plugin_sets.py").write_text(textwrap.dedent("""
        import dataclasses
        from t2t_keras.registry import register_hparams
        from t2t_keras.hparams_lib import HParams

        @register_hparams()
        def plugin_small():
            "A plug-in set."
            return dataclasses.replace(HParams(), num_hidden_layers=1)
    """))
    dist_info = tmp_path / "my_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[t2t_keras.hparams]\nsets = my_plugin_sets\n")
    result = _run_python("""
        import sys
        from t2t_keras import registry
        assert "my_plugin_sets" not in sys.modules
        print(registry.hparams("plugin_small").num_hidden_layers)
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


USER_SET = """
import dataclasses
from t2t_keras.registry import register_hparams
from t2t_keras.hparams_lib import HParams

@register_hparams()
def {name}():
    "A user's set."
    return dataclasses.replace(HParams(), hidden_size=96, num_heads=3)
"""


@pytest.mark.parametrize("as_package", [True, False])
def test_t2t_usr_dir_registers_user_sets(tmp_path, as_package):
    usr_dir = tmp_path / "my_usr_dir"
    usr_dir.mkdir()
    (usr_dir / "my_sets.py").write_text(USER_SET.format(name="my_user_set"))
    if as_package:
        (usr_dir / "__init__.py").write_text("from . import my_sets\n")
    result = subprocess.run(
        [sys.executable, "-m", "t2t_keras.bin.hparams", f"--t2t_usr_dir={usr_dir}", "--hparams_set=my_user_set"],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert '"hidden_size": 96' in result.stdout


def test_t2t_usr_dir_must_exist(tmp_path):
    with pytest.raises(UsageError, match="--t2t_usr_dir=.*nope: not a directory"):
        registry.import_usr_dir(str(tmp_path / "nope"))
