"""Constituency trees as sequences: the "Grammar as a Foreign Language" linearisation.

    (S (NP-SBJ (NNP Pierre) (NNP Vinken)) (VP (MD will) ...) (. .))
      -> source  "Pierre Vinken will ... ."
      -> target  "(S (NP XX XX ) (VP XX ... ) XX )"

Opening brackets carry the label; closing brackets do not, or with `closing_labels` repeat
it ("(NP XX XX )NP", as that paper draws it). Every part-of-speech tag becomes the
placeholder XX (tags are not part of the bracket F1). `restore` turns any token sequence back
into a tree over exactly the input words, counting what it repaired.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from t2t_keras import extras, files
from t2t_keras.errors import UsageError

if TYPE_CHECKING:
    from nltk import Tree

PLACEHOLDER = "XX"
CLOSE = ")"
ROOT_LABELS = ("", "ROOT", "TOP")
FALLBACK_ROOT = "S"  # the root given to output that has none (the most frequent root label)
# The Penn Treebank's constituent labels (after function tags are stripped), for vocabularies
# that must keep each "(LABEL" one piece.
PTB_LABELS = (
    "ADJP", "ADVP", "CONJP", "FRAG", "INTJ", "LST", "NAC", "NP", "NX", "PP", "PRN", "PRT", "QP", "RRC", "S",
    "SBAR", "SBARQ", "SINV", "SQ", "UCP", "VP", "WHADJP", "WHADVP", "WHNP", "WHPP", "X",
)


def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP; labels that start with '-' (-NONE-, -LRB-) are kept."""
    if label.startswith("-"):
        return label
    return label.split("-")[0].split("=")[0]


def tree_type() -> type[Tree]:
    """nltk's Tree (the [parsing] extra), imported when trees are first made or read."""
    return extras.require("parsing").Tree


def is_preterminal(tree) -> bool:
    return isinstance(tree, tree_type()) and len(tree) == 1 and isinstance(tree[0], str)


def preprocess(tree: Tree) -> Tree | None:
    """The standard parsing form of a Penn Treebank tree.

    Drops the unlabelled root wrapper, -NONE- empty elements and the constituents they
    leave empty, and function tags and indices. None if no word is left.
    """
    Tree = tree_type()
    while isinstance(tree, Tree) and tree.label() in ROOT_LABELS and len(tree) == 1 and isinstance(tree[0], Tree):
        tree = tree[0]
    return remove_empty_elements(tree)


def remove_empty_elements(tree):
    """`tree` without -NONE- leaves, the constituents left empty and function tags; None if
    no word is left."""
    Tree = tree_type()
    if is_preterminal(tree):
        return None if tree.label() == "-NONE-" else Tree(tree.label(), [tree[0]])
    children = [child for child in (remove_empty_elements(c) for c in tree if isinstance(c, Tree)) if child is not None]
    return Tree(strip_function_tags(tree.label()), children) if children else None


def linearize(tree: Tree, words: bool = False, closing_labels: bool = False) -> str:
    """The target sequence of a preprocessed tree: "(S (NP XX XX ) XX )", with `words` the
    words in place of XX: "(S (NP Pierre Vinken ) left )", with `closing_labels` each ")"
    followed by its constituent's label: "(S (NP XX XX )NP XX )S"."""
    tokens: list[str] = []

    def walk(node):
        if is_preterminal(node):
            tokens.append(node[0] if words else PLACEHOLDER)
            return
        tokens.append("(" + node.label())
        for child in node:
            walk(child)
        tokens.append(CLOSE + node.label() if closing_labels else CLOSE)

    walk(tree)
    return " ".join(tokens)


@dataclasses.dataclass
class Repairs:
    """What `restore` had to change to make a tree of a decoded sequence."""

    unmatched_closings: int = 0  # ")" with nothing open: dropped
    mislabelled_closings: int = 0  # ")VP" closing an NP: closes it all the same
    unclosed_openings: int = 0  # closed at the end
    empty_constituents: int = 0  # "(NP )": dropped
    unknown_tokens: int = 0  # neither "(LABEL", ")" nor XX: dropped
    extra_placeholders: int = 0  # more XX than words: dropped
    missing_words: int = 0  # fewer XX than words: attached to the root
    root_added: int = 0  # no single constituent on top: wrapped in FALLBACK_ROOT

    @property
    def total(self) -> int:
        return sum(dataclasses.astuple(self))


def _is_label(text: str) -> bool:
    return bool(text) and "(" not in text and ")" not in text


def is_closing(token: str) -> bool:
    """")" or, with closing labels, ")LABEL" (capitals: ")NP", ")PRT|ADVP"; not a word such as "):")."""
    label = token[1:]
    return token == CLOSE or (token.startswith(CLOSE) and label.replace("|", "").isalpha() and label.isupper())


def is_bracket(token: str) -> bool:
    return is_closing(token) or (token.startswith("(") and _is_label(token[1:]))


def words_to_placeholders(sequence: str) -> str:
    """A linearisation with words ("(NP Pierre Vinken )") in the paper's form ("(NP XX XX )")."""
    return " ".join(token if is_bracket(token) else PLACEHOLDER for token in sequence.split())


def restore(sequence: str, words: list[str]) -> tuple[Tree, Repairs]:
    """A valid tree over exactly `words` from any decoded sequence, with the repairs made.

    Placeholders take the words in order and keep XX as their tag.
    """
    Tree = tree_type()
    repairs = Repairs()
    top: list = []  # the finished top-level nodes
    stack: list[Tree] = []
    next_word = 0

    def attach(node):
        (stack[-1] if stack else top).append(node)

    for token in sequence.split():
        if is_closing(token):
            if not stack:
                repairs.unmatched_closings += 1
                continue
            node = stack.pop()
            if token != CLOSE and token[1:] != node.label():
                repairs.mislabelled_closings += 1
            if len(node) == 0:
                repairs.empty_constituents += 1
            else:
                attach(node)
        elif is_bracket(token):
            stack.append(Tree(token[1:], []))
        elif token == PLACEHOLDER:
            if next_word == len(words):
                repairs.extra_placeholders += 1
                continue
            attach(Tree(PLACEHOLDER, [words[next_word]]))
            next_word += 1
        else:
            repairs.unknown_tokens += 1
    while stack:
        node = stack.pop()
        repairs.unclosed_openings += 1
        if len(node) == 0:
            repairs.empty_constituents += 1
        else:
            attach(node)
    if len(top) == 1 and not is_preterminal(top[0]):
        root = top[0]
    else:
        root = Tree(FALLBACK_ROOT, top)
        repairs.root_added += 1
    if next_word < len(words):
        repairs.missing_words += len(words) - next_word
        root.extend(Tree(PLACEHOLDER, [word]) for word in words[next_word:])
    return root, repairs


def to_line(tree: Tree) -> str:
    """A tree on one line, in Penn Treebank bracket format (what EVALB reads)."""
    return tree.pformat(margin=10**9)


def read_trees(path: str, flag: str | None = None) -> list[Tree]:
    """The bracketed trees of a file, one or many lines each (one per line, or .mrg style)."""
    where = f"{flag}={path}" if flag else path
    if not files.isfile(path):
        raise UsageError(f"{where}: no such file.")
    text = files.read_bytes(path).decode("utf-8", errors="replace")
    trees, depth, start, start_line, line = [], 0, None, 0, 1
    for index, char in enumerate(text):
        if char == "\n":
            line += 1
        elif char == "(":
            if depth == 0:
                start, start_line = index, line
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise UsageError(f"{where}:{line}: ')' closes nothing; the file is not bracketed trees.")
            if depth == 0:
                trees.append(_parse(text[start : index + 1], where, start_line))
        elif depth == 0 and not char.isspace():
            raise UsageError(f"{where}:{line}: text outside brackets; expected one bracketed tree after another.")
    if depth:
        raise UsageError(f"{where}:{start_line}: the tree starting here is never closed.")
    return trees


def _parse(text: str, where: str, line: int) -> Tree:
    Tree = tree_type()  # outside the try: its UsageError is a ValueError too
    try:
        return Tree.fromstring(text)
    except ValueError as e:
        raise UsageError(f"{where}:{line}: malformed tree ({str(e).splitlines()[0]}).") from None
