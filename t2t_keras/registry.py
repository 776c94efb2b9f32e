"""Registries of problems, hparams sets and models, looked up by name.

Catalogs register with decorators (`@register_hparams`, `@register_problem`,
`@register_model`). A registry imports its catalog lazily, on the first lookup or listing:
one explicit module (whose `__init__` lists its submodules), then the modules that installed
packages advertise in the entry-point group of the same name, e.g. in a plug-in's
pyproject.toml:

    [project.entry-points."t2t_keras.problems"]
    my_corpus = "my_package.my_problems"

User code can also be loaded the tensor2tensor way with `--t2t_usr_dir=DIR`
(`import_usr_dir`). Duplicate names are rejected, and an unknown name is answered with the
closest registered ones.

    registry.hparams("transformer_big", "num_hidden_layers=4")   # a resolved HParams
    registry.problem("translate_ende_multi30k")                  # a Problem instance
    registry.model("transformer")                                # the model class
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import textwrap
import traceback
from typing import Callable, Generic, TypeVar

from t2t_keras import hparams_lib
from t2t_keras.errors import UsageError

T = TypeVar("T")
HELP_WIDTH = 100


class Registry(Generic[T]):
    """A name -> object map filled by a decorator and loaded lazily from catalogs.

    Args:
      kind: what is registered, used in messages ("hparams set").
      catalog: module imported on first lookup; importing it registers the built-ins.
      entry_point_group: entry-point group whose modules are imported after the catalog.
    """

    def __init__(self, kind: str, catalog: str, entry_point_group: str):
        self.kind = kind
        self.catalog = catalog
        self.entry_point_group = entry_point_group
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str | None = None) -> Callable[[T], T]:
        """Decorator registering an object under `name`.

        The default name is the object's `name` attribute (problem classes declare one) or
        else its `__name__` (hparams functions).
        """

        def decorator(obj: T) -> T:
            key = name or getattr(obj, "name", None) or obj.__name__
            if key in self._entries and self._entries[key] is not obj:
                raise ValueError(
                    f"{self.kind} {key!r} is already registered (by "
                    f"{_origin(self._entries[key])}); pick another name for {_origin(obj)}."
                )
            self._entries[key] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        self._load()
        if name not in self._entries:
            raise UsageError(self._unknown_message(name))
        return self._entries[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries

    def help(self) -> str:
        """Every registered name with its whole docstring, wrapped under it."""
        lines = [f"{self.kind}s:"]
        for key in self.names():
            lines.append(f"  {key}")
            paragraphs = inspect.cleandoc(self._entries[key].__doc__ or "").split("\n\n")
            for paragraph in filter(None, (" ".join(p.split()) for p in paragraphs)):
                lines += textwrap.wrap(paragraph, HELP_WIDTH, initial_indent="      ", subsequent_indent="      ")
        return "\n".join(lines)

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, self._entries, n=3, cutoff=0.6)
        if close:
            hint = "did you mean " + " or ".join(repr(c) for c in close) + "?"
        else:
            hint = "use --registry_help to list them."
        return f"unknown {self.kind} {name!r}; {hint}"

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True  # set first: catalogs may look names up while importing
        importlib.import_module(self.catalog)
        for entry_point in importlib.metadata.entry_points(group=self.entry_point_group):
            entry_point.load()


def _origin(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


HPARAMS: Registry[Callable[[], hparams_lib.HParams]] = Registry(
    "hparams set", "t2t_keras.hparams", "t2t_keras.hparams"
)
PROBLEMS: Registry[type] = Registry("problem", "t2t_keras.problems", "t2t_keras.problems")
MODELS: Registry[type] = Registry("model", "t2t_keras.models", "t2t_keras.models")

register_hparams = HPARAMS.register
register_problem = PROBLEMS.register
register_model = MODELS.register


def hparams(name: str, overrides: str = "") -> hparams_lib.HParams:
    """The named hparams set with `--hparams`-style overrides applied and validated."""
    base = HPARAMS.get(name)()
    return hparams_lib.apply_overrides(base, overrides).validated()


def problem(name: str):
    """A new instance of the named problem."""
    return PROBLEMS.get(name)()


def model(name: str) -> type:
    """The model class registered under `name`."""
    return MODELS.get(name)


def list_hparams() -> list[str]:
    return HPARAMS.names()


def list_problems() -> list[str]:
    return PROBLEMS.names()


def list_models() -> list[str]:
    return MODELS.names()


def help_string() -> str:
    """What `--registry_help` prints: every registry with one line per name."""
    return "\n\n".join(r.help() for r in (PROBLEMS, HPARAMS, MODELS))


def import_usr_dir(usr_dir: str) -> None:
    """Import user code for its registrations, as tensor2tensor's `--t2t_usr_dir`.

    A directory with an `__init__.py` is imported as a package (its parent goes on
    sys.path, so its modules can import each other); otherwise every `*.py` file in it is
    imported, in name order. Code that fails to import is a UsageError naming its file and line.
    """
    path = os.path.abspath(os.path.expanduser(usr_dir))
    if not os.path.isdir(path):
        raise UsageError(f"--t2t_usr_dir={usr_dir}: not a directory; pass the folder of your modules.")
    if os.path.isfile(os.path.join(path, "__init__.py")):
        parent, package = os.path.split(path)
        if parent not in sys.path:
            sys.path.insert(0, parent)
        with _reported_as_usage_error(path):
            importlib.import_module(package)
        return
    for filename in sorted(os.listdir(path)):
        if not filename.endswith(".py"):
            continue
        module_name = f"t2t_usr_dir.{os.path.basename(path)}.{filename[:-3]}"
        if module_name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(module_name, os.path.join(path, filename))
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        with _reported_as_usage_error(path):
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[module_name]
                raise


@contextlib.contextmanager
def _reported_as_usage_error(usr_dir: str):
    """An exception raised while importing user code in `usr_dir` -> a one-line UsageError
    at the file and line where it happened (the innermost frame under `usr_dir`)."""
    try:
        yield
    except UsageError:
        raise
    except SyntaxError as e:
        raise UsageError(f"{e.filename}:{e.lineno}: {e.msg} (in --t2t_usr_dir={usr_dir}); fix that line.") from None
    except Exception as e:  # any error in user code: say where, keep it one line
        frames = [frame for frame in traceback.extract_tb(e.__traceback__) if frame.filename.startswith(usr_dir + os.sep)]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else usr_dir
        raise UsageError(f"{where}: {type(e).__name__}: {e} (while importing --t2t_usr_dir={usr_dir}).") from None
