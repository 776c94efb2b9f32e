"""Markup carried through translation: XML-like tags and {1}-style placeholders are taken out of
a source line, the text translated, and the tags put back around the target words aligned to
the words they enclosed (Marian's and Bergamot's way: by word alignments).

    marked = parse('A <b>dog</b> runs.', line_number=7)   # marked.text == 'A dog runs.'
    restore(marked, 'Ein Hund rennt.', {(0, 0), (1, 1), (2, 2)})   # 'Ein <b>Hund</b> rennt.'

A paired tag (`<b>...</b>`, `<a href="...">...</a>`) encloses the source words between its
ends; a self-closing tag (`<x id="1"/>`) or a placeholder (`{1}`) stands before a word. In the
output every tag appears exactly once, properly nested, its words the target words aligned to
its source words (a span that gets none is kept, empty, where its source position maps to;
a child span is kept inside its parent's, siblings apart), and removing the tags gives the
translation of the text without them.
"""

from __future__ import annotations

import dataclasses
import re

from t2t_keras.errors import UsageError

_MARK = re.compile(r"<(/?)([A-Za-z_][\w:.-]*)((?:\s+[^<>]*?)?)\s*(/?)>|\{\w+\}")


@dataclasses.dataclass
class Tag:
    """A tag of the source: its text (`opening`, and `closing` for a paired one) and the source
    words it encloses [start, end) (a standalone one: start = end, the word it stands before)."""

    opening: str
    closing: str | None
    start: int = 0
    end: int = 0
    children: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Marked:
    """A source line with its markup taken out: `text`, and the top-level tags (a tree)."""

    text: str
    tags: list


def parse(line: str, line_number: int) -> Marked:
    """The line without its tags and the tags' tree over its whitespace words; unbalanced
    markup is one line naming the input line (1-based)."""
    text, stack, roots, offsets = [], [], [], []  # offsets: (tag, 'start' | 'end' | 'at', offset in text)
    position = 0
    for match in _MARK.finditer(line):
        text.append(line[position:match.start()])
        position = match.end()
        offset = sum(map(len, text))
        closing, name, _, self_closing = match.groups()
        if name is None or self_closing:  # a placeholder or a self-closing tag: stands before a word
            tag = Tag(match.group(0), None)
            (stack[-1].children if stack else roots).append(tag)
            offsets.append((tag, "at", offset))
        elif closing:
            if not stack or _name(stack[-1].opening) != name:
                opened = f"'{stack[-1].opening}'" if stack else "nothing"
                raise UsageError(f"line {line_number}: unbalanced markup: '{match.group(0)}' closes {opened}; "
                                 "close each tag after the ones opened inside it, or decode with markup=false.")
            tag = stack.pop()
            tag.closing = match.group(0)
            offsets.append((tag, "end", offset))
        else:
            tag = Tag(match.group(0), "")
            (stack[-1].children if stack else roots).append(tag)
            stack.append(tag)
            offsets.append((tag, "start", offset))
    text.append(line[position:])
    if stack:
        raise UsageError(f"line {line_number}: unbalanced markup: '{stack[-1].opening}' is never closed; close it, or "
                         "decode with markup=false.")
    plain = "".join(text)
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", plain)]
    for tag, kind, offset in offsets:
        if kind == "end":
            tag.end = sum(start < offset for start, _ in words)
        else:
            index = sum(end <= offset for _, end in words) if kind == "start" else sum(start < offset for start, _ in words)
            tag.start = index
            if kind == "at":
                tag.end = index
    return Marked(plain, roots)


def _name(opening: str) -> str:
    return re.match(r"<([A-Za-z_][\w:.-]*)", opening).group(1)


def restore(marked: Marked, translation: str, links) -> str:
    """`translation` (of marked.text) with the tags put back, by `links` ((source word, target
    word) pairs over whitespace words)."""
    words = translation.split()
    if not marked.tags:
        return translation
    target_of = {}
    for i, j in links:
        target_of.setdefault(i, []).append(j)
    prefixes, suffixes = [[] for _ in words], [[] for _ in words]
    tail = []  # what stands after the last word (or is all, without words)

    def place(tags, low: int, high: int) -> None:
        """Each tag's target span, inside [low, high) and after the previous sibling's."""
        floor = low
        for tag in tags:
            aligned = [j for i in range(tag.start, tag.end) for j in target_of.get(i, ())]
            if aligned and tag.closing is not None:
                start, end = min(aligned), max(aligned) + 1
            else:  # none aligned (or a standalone tag): where its source position maps to
                following = [j for i, js in target_of.items() if i >= tag.start for j in js]
                start = end = min(following) if following else high
            start = min(max(start, floor), high)
            end = min(max(end, start), high)
            if start < end:
                prefixes[start].append(tag.opening)
                place(tag.children, start, end)
                suffixes[end - 1].append(tag.closing)
            else:  # empty: the tag, its children inside, at one boundary
                inner = [tag.opening, *_flat(tag.children), *([tag.closing] if tag.closing is not None else [])]
                if start < len(words):
                    prefixes[start].extend(inner)
                elif words:
                    suffixes[-1].extend(inner)
                else:
                    tail.extend(inner)
            floor = end

    place(marked.tags, 0, len(words))
    pieces = ["".join(prefixes[j]) + word + "".join(suffixes[j]) for j, word in enumerate(words)]
    return " ".join(pieces) + "".join(tail)


def _flat(tags) -> list[str]:
    """The texts of `tags` and their children, in order, each paired one closed after its children."""
    texts = []
    for tag in tags:
        texts.append(tag.opening)
        texts.extend(_flat(tag.children))
        if tag.closing is not None:
            texts.append(tag.closing)
    return texts


def plain(text: str) -> str:
    """`text` without its markup (what restore's output must equal, tags aside, to the translation)."""
    return _MARK.sub("", text)
