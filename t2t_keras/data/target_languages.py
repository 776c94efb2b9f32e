"""Target-language tokens: one model translating into several languages (Johnson et al., 2017).

A multilingual problem starts every training source with the token of its target language,
`>>de<<` as OPUS-MT's Marian models spell it, one piece of its own in the vocabulary
(SentencePiece's user_defined_symbols). Decoding does the same to each input: the token of
the asked language (the decode setting `target_language`) in front of it, or, with no
language asked, the token the line already starts with, as OPUS-MT's users write it. The
token is a source word of the model's input only: alignments and markup index the line
without it.
"""

from __future__ import annotations

import re

from t2t_keras.errors import UsageError

_LANGUAGE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
OPEN, CLOSE = ">>", "<<"  # around the language's code


def token(language: str) -> str:
    """The piece that asks for `language`: `>>de<<`."""
    return f"{OPEN}{language}{CLOSE}"


def tagged(text: str, language: str) -> str:
    """`text` as a multilingual model's input that asks for `language`."""
    return f"{token(language)} {text}"


def checked_codes(codes, flag: str) -> list[str]:
    """Language codes as given (e.g. from --train_lang_pairs), each a letter then letters,
    digits or '_' ('-' separates a pair's languages); anything else is one line naming `flag`."""
    for code in codes:
        if not _LANGUAGE.fullmatch(code):
            raise UsageError(f"{flag}: {code!r} is not a language code; use letters, digits or '_' (e.g. de, pt_BR).")
    return list(codes)


def leading_language(line: str, languages) -> tuple[str, str]:
    """(the language whose token `line` starts with, or "", the rest of the line)."""
    head, _, rest = line.lstrip().partition(" ")
    for language in languages:
        if head == token(language):
            return language, rest.lstrip()
    return "", line


def check_language(languages, target_language: str) -> None:
    """A one-line UsageError if `target_language` is not among `languages` (a model that names
    its languages); "" asks for none."""
    if target_language and languages and target_language not in languages:
        raise UsageError(f"target_language={target_language}: this model translates into "
                         f"{', '.join(languages)} only.")


def line_languages(lines, languages, target_language: str, describe) -> list[tuple[str, str]]:
    """(the language asked, the text) of each line, for a problem whose models translate into
    `languages` (several: each line needs one; one or none: the language is ""). A line may
    start with its language's token; `target_language` ("" for none) is asked of every line.
    A line of a multilingual model that names no language, or a language the model was not
    trained for, is one UsageError; `describe(i)` names line i ("line 3")."""
    languages = tuple(languages)
    check_language(languages, target_language)
    if len(languages) <= 1:
        return [("", line) for line in lines]
    split = []
    for i, line in enumerate(lines):
        given, text = leading_language(line, languages)
        if given and target_language and given != target_language:
            raise UsageError(f"{describe(i)} starts with {token(given)} but target_language={target_language}; "
                             "give one of them.")
        language = given or target_language
        if not language and text.strip():
            raise UsageError(f"{describe(i)} names no target language: this model translates into "
                             f"{', '.join(languages)}; pass target_language (--target_language), or start the line "
                             f"with {token(languages[0])}.")
        split.append((language, text))
    return split


def model_input(language: str, text: str) -> str:
    """What the model reads of `text` asked in `language` ("": no token); a blank text stays blank."""
    return tagged(text, language) if language and text.strip() else text
