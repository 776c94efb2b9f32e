"""Which cross-attention of a trained model aligns words best: each layer, each head of it and
their mean, read at the target word's own step or the step after, scored against reference
links and against identical words (a name, a number: the one word spelled alike once on each
side of a pair).

    .venv/bin/python benchmarks/alignment_heads.py --output_dir=out/demo/train_avg \\
        --sure=val.intersect.links --possible=val.union.links

The model reads each (source, reference) pair of the file teacher-forced (`alignment.
attention_links`); the reference links are Pharaoh "i-j" lines over whitespace words, one per
pair (e.g. eflomal's forward and reverse links of train + val, `pip install eflomal`, their
intersection as --sure and union as --possible: docs/results/decoding_speed.md, "Word
alignments"). Prints one JSON line per candidate (precision and recall against the sure links,
AER against sure and possible, accuracy on identical words), the best first.
"""

import argparse
import gzip
import json
import os
import re
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def read(path: str) -> list[str]:
    with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def links(line: str) -> set:
    return {tuple(map(int, pair.split("-"))) for pair in line.split()}


def identical_words(source: str, target: str) -> set:
    """(i, j) of each word of 2+ characters with a digit or a capital that is spelled alike
    exactly once in the source and once in the target (punctuation around it aside)."""
    def words(text):
        return [re.sub(r"^\W+|\W+$", "", word) for word in text.split()]

    source_words, target_words = words(source), words(target)
    found = set()
    for i, word in enumerate(source_words):
        if len(word) > 1 and re.search(r"[\dA-Z]", word) and source_words.count(word) == 1 and target_words.count(word) == 1:
            found.add((i, target_words.index(word)))
    return found


def main() -> None:
    from t2t_keras import Translator
    from t2t_keras.decoding.alignment import CANDIDATE_SHIFTS, attention_links, candidate_heads
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
    from t2t_keras.system import cpu_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--input", default=os.path.join(MULTI30K_DIR, "val.en.gz"))
    parser.add_argument("--reference", default=os.path.join(MULTI30K_DIR, "val.de.gz"))
    parser.add_argument("--sure", help="Pharaoh links of the pairs, one line each (the sure ones)")
    parser.add_argument("--possible", help="and the possible ones (default: the sure ones)")
    args = parser.parse_args()
    sources, targets = read(args.input), read(args.reference)
    sure = [links(line) for line in read(args.sure)] if args.sure else None
    possible = [links(line) for line in read(args.possible)] if args.possible else sure
    identical = [identical_words(s, t) for s, t in zip(sources, targets)]
    translator = Translator.from_preset(args.output_dir, tune_process=False)
    model, vocabularies = translator.model, translator.vocabularies
    hparams = model.hparams
    results = []
    for layer, heads in candidate_heads(hparams.num_hidden_layers, hparams.num_heads):
        for shift in CANDIDATE_SHIFTS:
            found = attention_links(model, vocabularies, sources, targets, layer, heads, shift)
            line = {"benchmark": "alignment_heads", "layer": layer, "heads": list(heads), "shift": shift}
            if sure is not None:
                matched_sure = sum(len(f & s) for f, s in zip(found, sure))
                matched_possible = sum(len(f & p) for f, p in zip(found, possible))
                total, total_sure = sum(map(len, found)), sum(map(len, sure))
                line.update(precision=round(matched_possible / max(total, 1), 4), recall=round(matched_sure / max(total_sure, 1), 4),
                            aer=round(1 - (matched_sure + matched_possible) / max(total + total_sure, 1), 4))
            pairs = sum(map(len, identical))
            line["identical_words"] = round(sum(len(f & g) for f, g in zip(found, identical)) / max(pairs, 1), 4)
            line["identical_pairs"] = pairs
            results.append(line)
    key = (lambda r: r["aer"]) if sure is not None else (lambda r: -r["identical_words"])
    for line in sorted(results, key=key):
        print(json.dumps({**line, "lines": len(sources), "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
