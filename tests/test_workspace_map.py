"""WORKSPACE.md is the map for the next engineer: every file it names exists, and every
function or class its Layout names is defined where the code is."""

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_LIKE = re.compile(r"^[\w.-]+(/[\w.-]*)*$")
# Other libraries' names and the formulas' symbols the Layout mentions: not ours to define.
NOT_OURS = {"MirroredStrategy", "MultiWorkerMirroredStrategy", "TensorFlow", "PyTorch", "CTranslate2", "LN", "drop", "f", "max", "sqrt"}


def _workspace():
    with open(os.path.join(REPO, "WORKSPACE.md"), encoding="utf-8") as handle:
        return handle.read()


def _layout_lines():
    text = _workspace()
    start = text.index("## Layout")
    block = text[text.index("```", start) + 3 : text.index("```", text.index("```", start) + 3)]
    return block.strip("\n").splitlines()


def _layout_paths():
    """(path, line) of each entry of the Layout tree, nested by indentation."""
    stack, paths = [], []
    for line in _layout_lines():
        indent = len(line) - len(line.lstrip())
        if indent > 8 or not line.strip():
            continue  # a description's continuation
        name = line.split()[0]
        if not PATH_LIKE.match(name) or ("." not in name and "/" not in name):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(parent for _, parent in stack) + name
        paths.append((path, line))
        if name.endswith("/"):
            stack.append((indent, name))
    return paths


def _sources():
    """{path: text} of every Python and shell file of the repository (the examples' scripts define functions too)."""
    sources = {}
    for top in ("t2t_keras", "problems", "hparams", "benchmarks", "tests", "examples"):
        for root, _, filenames in os.walk(os.path.join(REPO, top)):
            for filename in filenames:
                if filename.endswith((".py", ".sh")):
                    with open(os.path.join(root, filename), encoding="utf-8") as handle:
                        sources[os.path.join(root, filename)] = handle.read()
    return sources


def test_every_file_the_layout_names_exists():
    paths = _layout_paths()
    assert len(paths) > 60, "the Layout tree was not read"
    missing = [line.strip() for path, line in paths if not os.path.exists(os.path.join(REPO, path))]
    assert not missing, f"WORKSPACE.md names files that do not exist: {missing}"


def test_every_path_named_in_backquotes_exists():
    named = set(re.findall(r"`((?:t2t_keras|problems|hparams|tests|benchmarks|examples)/[\w./-]+?)`", _workspace()))
    missing = sorted(path for path in named if "<" not in path and not os.path.exists(os.path.join(REPO, path)))
    assert not missing, f"WORKSPACE.md names paths that do not exist: {missing}"


def test_every_function_and_class_the_layout_names_is_defined():
    """CamelCase names and names called with "(" in the Layout are a def, a class or a
    module-level name somewhere in the repository; every other snake_case name it lists
    (functions, flags, problems, hparams sets) appears in the code."""
    text = "\n".join(_layout_lines())
    called = set(re.findall(r"\b([A-Za-z_]\w*)\(", text))
    camel = set(re.findall(r"\b([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)\b", text))
    sources = _sources()
    definitions = set()
    for source in sources.values():
        definitions.update(re.findall(r"^\s*(?:def|class)\s+(\w+)", source, re.M))
        definitions.update(re.findall(r"^(\w+)\s*[:=]", source, re.M))
    assert len(called | camel) > 40
    missing = sorted((called | camel) - definitions - NOT_OURS)
    assert not missing, f"WORKSPACE.md's Layout names what is not defined: {missing}"

    files_named = {os.path.splitext(os.path.basename(path))[0] for path, _ in _layout_paths()}
    snake = set(re.findall(r"(?<![\w./-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b", text)) - files_named
    words = set(re.findall(r"\w+", "\n".join(sources.values())))
    assert len(snake) > 40
    unknown = sorted(name for name in snake if name not in words)
    assert not unknown, f"WORKSPACE.md's Layout names what the code does not have: {unknown}"
