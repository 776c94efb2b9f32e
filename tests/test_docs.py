"""What the project knows stays findable (issue 72): every section that a docstring, comment or
doc cites exists, every linked file and anchor exists, and no committed doc names a path of a
particular machine. Pure text, no TensorFlow: it runs in a second.

A citation has one form: a path ending in .md, a comma, and the section's heading in double
quotes, as in `docs/results/parsing.md, "Tried, not adopted"` (more sections of the same file
may follow: `and "Another"`). The quoted text must begin a heading (any level, outside code
blocks) of that file; the path is the citing file's directory's or the repository root's. In
the docs, a link `[text](page.md#anchor)` is the other form: its file must exist and its anchor
be one of GitHub's heading anchors there. The frozen logs under docs/log are not checked for
citations (they are kept as written), only for machine paths.
"""

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_DIRS = {"out", "build", "dist", "node_modules", "__pycache__"}
LOGS = "docs/log/"

# A citation: PATH.md, "Section" [and "Another"]; in Python source the quotes may be escaped.
CITATION = re.compile(r'([\w./-]*\.md),\s+(\\?"[^"\\]+\\?"(?:\s*(?:,|and)\s+\\?"[^"\\]+\\?")*)')
README_CITATION = re.compile(r'(?<![\w./-])README[,:]\s+(\\?"[^"\\]+\\?")')
QUOTED = re.compile(r'\\?"([^"\\]+)\\?"')
# Other ways of naming a section after a file, which the checks could not read: refused.
OTHER_FORMS = re.compile(r'([\w./-]*\.md)(?:\s*\(\s*|\s+|:\s*)\\?"([A-Za-z][^"\\]*)')
BARE_PATH = re.compile(r"(?<![\w$/.<>-])((?:[\w.-]+/)*[\w.-]+\.md)\b(?![/\w-])")
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:work|tmp|root|home|Users|mnt|scratch)/|[A-Z]:\\Users\\")
OUTSIDE_FOLDER = re.compile(r"\.\./shared\b")  # the team's reference folder beside the clone: a reader has no such thing



def _files(root, extensions):
    """Repository-relative paths of the files with these extensions, skipping hidden
    directories (.git, .venv), build outputs and this test itself."""
    for directory, subdirectories, filenames in os.walk(root):
        subdirectories[:] = sorted(
            name for name in subdirectories
            if not name.startswith(".") and name not in SKIPPED_DIRS and not name.endswith(".egg-info"))
        for filename in sorted(filenames):
            path = os.path.relpath(os.path.join(directory, filename), root).replace(os.sep, "/")
            if filename.endswith(extensions) and path != "tests/test_docs.py":
                yield path


def _read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as handle:
        return handle.read()


def _one_line(text):
    """The text with line breaks (and a comment's leading '#') as single spaces, so that a
    citation wrapped over lines reads as one."""
    return re.sub(r"[ \t]*\n[ \t]*(?:#+[ \t]*(?=\S))?", " ", text)


def _without_code_blocks(text):
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def headings(text):
    """The heading texts of a markdown document, outside fenced code blocks."""
    return [match.group(1).strip() for match in re.finditer(r"^#{1,6}[ \t]+(.*?)[ \t#]*$", _without_code_blocks(text), re.M)]


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text):
    seen, result = {}, set()
    for heading in headings(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def _resolve(root, citing, target):
    """The repository-relative path a citing file means by `target`: its own directory's, else
    the repository root's; None when neither exists."""
    for base in (os.path.dirname(citing), ""):
        path = os.path.normpath(os.path.join(base, target)).replace(os.sep, "/")
        if not path.startswith("..") and os.path.exists(os.path.join(root, path)):
            return path
    return None


def _normal(text):
    return " ".join(text.replace("`", "").split())


def citation_problems(root):
    """One line per citation, link or file reference that does not resolve."""
    problems = []
    cache = {}

    def heading_texts(path):
        if path not in cache:
            cache[path] = [_normal(heading) for heading in headings(_read(root, path))]
        return cache[path]

    for citing in _files(root, (".py", ".sh", ".md")):
        if citing.startswith(LOGS):
            continue
        raw = _read(root, citing)
        text = _one_line(_without_code_blocks(raw) if citing.endswith(".md") else raw)
        cited = [(match.group(1), match.group(2), citing) for match in CITATION.finditer(text)]
        cited += [("README.md", match.group(1), "") for match in README_CITATION.finditer(text)]  # the root's
        for target, sections, relative_to in cited:
            path = _resolve(root, relative_to, target)
            for section in QUOTED.findall(sections):
                if path is None:
                    problems.append(f'{citing}: {target}, "{section}": no such file')
                elif not any(heading.startswith(_normal(section)) for heading in heading_texts(path)):
                    problems.append(f'{citing}: {target}, "{section}": no heading of {path} begins so')
        for target, section in OTHER_FORMS.findall(text):
            problems.append(f'{citing}: {target} "{section}": cite a section as PATH.md, "Section"')
        for target in BARE_PATH.findall(LINK.sub(" ", text)):  # links are checked below
            if _resolve(root, citing, target) is None:
                problems.append(f"{citing}: {target}: no such file")
        if citing.endswith(".md"):
            for link in LINK.findall(_without_code_blocks(raw)):
                if re.match(r"[a-z]+:", link):
                    continue  # a URL
                target, _, anchor = link.partition("#")
                path = _resolve(root, citing, target) if target else citing
                if path is None:
                    problems.append(f"{citing}: link {link}: no such file")
                elif anchor and path.endswith(".md") and anchor not in anchors(_read(root, path)):
                    problems.append(f"{citing}: link {link}: no heading of {path} has that anchor")
    return problems


def machine_path_problems(root):
    """One line per committed doc line, or line of a benchmark's script or record, that names a
    path of a particular machine (a record names run dirs as `make demo` does: out/demo/...),
    and per line of a doc, benchmark, test or the package that names a folder outside the clone."""
    problems = []
    benchmarks = [path for path in _files(root, (".py", ".sh", ".jsonl", ".md")) if path.startswith("benchmarks/")]
    for doc in sorted(set(_files(root, (".md",))) | set(benchmarks)):
        for number, line in enumerate(_read(root, doc).splitlines(), 1):
            if MACHINE_PATH.search(line):
                problems.append(f"{doc}:{number}: {line.strip()[:120]}")
    code = [path for path in _files(root, (".py", ".sh", ".md", ".toml", ".txt", ".cfg")) if "/" not in path or
            path.split("/")[0] in ("benchmarks", "docs", "examples", "t2t_keras", "problems", "hparams", "tests")]
    for path in code:
        for number, line in enumerate(_read(root, path).splitlines(), 1):
            if OUTSIDE_FOLDER.search(line):
                problems.append(f"{path}:{number}: names a folder outside the repository: {line.strip()[:100]}")
    return problems


RESULTS_INDEX = "docs/results/README.md"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _table_rows(text):
    """The cells of each row of the Markdown tables in `text`, header rows and rules left out."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) > 2 and cells[1] != "current result":
                rows.append(cells)
    return rows


def _agrees(figure: str, numbers: list) -> bool:
    """Whether `figure` ("0.81") is one of `numbers` at its own precision (0.809 rounds to it)."""
    decimals = len(figure.partition(".")[2])
    return any(abs(float(figure) - float(number)) <= 0.5 * 10 ** -decimals + 1e-9 for number in numbers)


def results_agreement_problems(root):
    """One line per figure of README's results table (its bold ones) or intro (the demo's val
    BLEU) that the results index (docs/results/README.md) does not give for the same page and date."""
    readme, index = _read(root, "README.md"), _read(root, RESULTS_INDEX)
    index_rows = [(re.search(r"\(([\w.]+\.md)\)", cells[-1]), cells) for cells in _table_rows(index)]
    index_rows = [(match.group(1), cells) for match, cells in index_rows if match]
    problems = []
    for cells in _table_rows(readme):
        page = re.search(r"docs/results/([\w.]+\.md)", cells[-1])
        if not page:
            continue
        same = [row for name, row in index_rows if name == page.group(1) and row[2] == cells[2]]
        if not same:
            problems.append(f"README.md: the row '{cells[0]}' ({page.group(1)}, {cells[2]}) has no row of that page and "
                            f"date in {RESULTS_INDEX}")
            continue
        numbers = NUMBER.findall(" ".join(row[1] for row in same))
        for bold in re.findall(r"\*\*([^*]+)\*\*", cells[1]):
            for figure in NUMBER.findall(bold):
                if not _agrees(figure, numbers):
                    problems.append(f"README.md: '{cells[0]}': {figure} is not in {RESULTS_INDEX}'s row of {page.group(1)}")
    demo = [row for name, row in index_rows if name == "demo.md"]
    for figure in re.findall(r"scores val sacreBLEU ([\d.]+(?:-[\d.]+)?)", readme):
        for number in NUMBER.findall(figure):
            if not demo or not _agrees(number, NUMBER.findall(demo[0][1])):
                problems.append(f"README.md: the demo's val sacreBLEU {number} is not in {RESULTS_INDEX}'s row of demo.md")
    return problems


def test_readme_figures_agree_with_the_results_index():
    problems = results_agreement_problems(REPO)
    assert not problems, "README and the results index disagree:\n" + "\n".join(problems)


def test_every_cited_section_and_linked_file_exists():
    problems = citation_problems(REPO)
    assert not problems, "citations that do not resolve:\n" + "\n".join(problems)


def test_no_committed_doc_names_a_machine_path():
    problems = machine_path_problems(REPO)
    assert not problems, "machine-local paths in docs (describe them instead):\n" + "\n".join(problems)


def test_the_old_notebook_does_not_grow_again():
    """EXPERIMENTS.md, if kept, only points to where results went; the current state is in
    docs/results, each period's notebook in docs/log: DATE_to_DATE.md, frozen (it says so at
    its top), and at most one open DATE_onwards.md, renamed with its end date when frozen."""
    path = os.path.join(REPO, "EXPERIMENTS.md")
    if os.path.exists(path):
        assert len(_read(REPO, "EXPERIMENTS.md").splitlines()) <= 6
    logs = sorted(name for name in os.listdir(os.path.join(REPO, LOGS)) if name.endswith(".md"))
    frozen = [name for name in logs if re.fullmatch(r"\d{4}-\d\d-\d\d_to_\d{4}-\d\d-\d\d\.md", name)]
    open_logs = [name for name in logs if re.fullmatch(r"\d{4}-\d\d-\d\d_onwards\.md", name)]
    assert frozen and sorted(frozen + open_logs) == logs and len(open_logs) <= 1, logs
    for name in frozen:
        assert "Frozen" in _read(REPO, LOGS + name)[:600], f"{LOGS}{name} does not say at its top that it is frozen"


def test_the_checks_find_what_they_look_for(tmp_path):
    """The checks on a small tree with one good and one bad case of each kind."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(
        "# Page\n\n## Tried, not adopted\n\n```bash\n# Not a heading\n```\n"
        "[good](other.md#a-section-with-more) [bad anchor](other.md#nothing) [no file](missing.md)\n"
        "A run dir in /work/runs/x.\n", encoding="utf-8")
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "results.jsonl").write_text(
        '{"checkpoint": "out/demo/train_avg/ckpt-1"}\n{"checkpoint": "/home/me/run/ckpt-1"}\n', encoding="utf-8")
    (tmp_path / "benchmarks" / "paired.sh").write_text('bench="${BENCH:-..' + '/shared/bench}"\n', encoding="utf-8")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n### A section: with more\n", encoding="utf-8")
    (tmp_path / "code.py").write_text(
        '"""As measured (docs/page.md, "Tried,\n    not adopted"; docs/other.md, "A section" and "Gone").\n'
        'Also docs/page.md, "Not a heading", README, "Nowhere", docs/gone.md and docs/page.md ("Old form")."""\n'
        "# a comment: docs/other.md,\n# \"A section\"\n", encoding="utf-8")
    problems = citation_problems(str(tmp_path))
    assert sorted(problems) == sorted([
        'code.py: docs/other.md, "Gone": no heading of docs/other.md begins so',
        'code.py: docs/page.md, "Not a heading": no heading of docs/page.md begins so',
        'code.py: README.md, "Nowhere": no such file',
        "code.py: docs/gone.md: no such file",
        'code.py: docs/page.md "Old form": cite a section as PATH.md, "Section"',
        "docs/page.md: link other.md#nothing: no heading of docs/other.md has that anchor",
        "docs/page.md: link missing.md: no such file",
    ]), problems
    (tmp_path / "docs" / "results").mkdir()
    (tmp_path / "docs" / "results" / "README.md").write_text(
        "| topic | current result | date | CPU | page |\n|---|---|---|---|---|\n"
        "| demo | val BLEU 36.98-37.66 | 2026-12-04 | Zen 4 | [demo.md](demo.md) |\n"
        "| speed | 1.090x | 2026-12-06 | Zen 4 | [decoding_speed.md](decoding_speed.md) |\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "It scores val sacreBLEU 37.79.\n\n| what | current result | date | CPU | page |\n|---|---|---|---|---|\n"
        "| demo | **36.98-37.66** | 2026-12-04 | Zen 4 | [demo](docs/results/demo.md) |\n"
        "| speed | **1.09x**, **0.81x** | 2026-12-06 | Zen 4 | [speed](docs/results/decoding_speed.md) |\n"
        "| tests | **593** tests | 2026-12-05 | Zen 4 | [tests](docs/results/test_suite.md) |\n", encoding="utf-8")
    assert results_agreement_problems(str(tmp_path)) == [
        "README.md: 'speed': 0.81 is not in docs/results/README.md's row of decoding_speed.md",
        "README.md: the row 'tests' (test_suite.md, 2026-12-05) has no row of that page and date in docs/results/README.md",
        "README.md: the demo's val sacreBLEU 37.79 is not in docs/results/README.md's row of demo.md"]
    assert machine_path_problems(str(tmp_path)) == [
        'benchmarks/results.jsonl:2: {"checkpoint": "/home/me/run/ckpt-1"}', "docs/page.md:9: A run dir in /work/runs/x.",
        'benchmarks/paired.sh:1: names a folder outside the repository: bench="${BENCH:-..' + '/shared/bench}"']
