"""What steering a search does to a trained model's outputs, and what it costs: a target prefix
(whole words, and one ending inside a word) and avoided terms, against the free search, on a
file and its references (default: the shipped Multi30k val set, lines the model never saw).

    .venv/bin/python benchmarks/steering.py --output_dir=out/demo/train_avg

  free            the run's decode settings, unsteered
  prefix          each output starts with its reference's first two words
  partial prefix  ... its first word and the first two letters of its second ("Ein Hu")
  avoid           each output avoids the first word of 4+ letters of the free output that its
                  reference lacks (a word the model chose and the translator rejects)

Prints one JSON line per configuration (sacreBLEU, the share of outputs that start with their
prefix or are free of their avoided term, sentences/s of a warm decoding, median of --repeats)
and a Markdown table on stderr. Run it alone: two benchmarks on 2 cores spoil each other.
"""

import argparse
import gzip
import json
import os
import re
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_keras.system import cpu_model  # noqa: E402


def read(path: str) -> list[str]:
    with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def first_words(text: str, count: int) -> str:
    return " ".join(text.split()[:count])


def partial(text: str) -> str:
    words = text.split()
    return words[0] + " " + words[1][:2] if len(words) > 1 and len(words[1]) > 2 else first_words(text, 1)


def rejected_word(output: str, reference: str) -> str | None:
    """The output's first word of 4+ letters that the reference does not contain, or None."""
    reference_words = set(re.findall(r"\w+", reference.lower()))
    return next((w for w in re.findall(r"\w{4,}", output) if w.lower() not in reference_words), None)


def main() -> None:
    from t2t_keras import Translator
    from t2t_keras.decoding.controls import contains_term
    from t2t_keras.evaluation.bleu import sacre_bleu
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--input", default=os.path.join(MULTI30K_DIR, "val.en.gz"))
    parser.add_argument("--reference", default=os.path.join(MULTI30K_DIR, "val.de.gz"))
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    lines, references = read(args.input), read(args.reference)
    translator = Translator.from_preset(args.output_dir)

    def timed(**steering):
        translator.generate(lines, **steering)  # warm-up: traces the graphs, meets the shapes
        rates, outputs = [], None
        for _ in range(args.repeats):
            started = time.perf_counter()
            outputs = translator.generate(lines, **steering)
            rates.append(len(lines) / (time.perf_counter() - started))
        return outputs, statistics.median(rates)

    free, free_rate = timed()
    prefixes = [first_words(reference, 2) for reference in references]
    partials = [partial(reference) for reference in references]
    avoided = [rejected_word(output, reference) for output, reference in zip(free, references)]
    configurations = [("free", {}, None), ("prefix", {"prefix": prefixes}, prefixes),
                      ("partial prefix", {"prefix": partials}, partials),
                      ("avoid", {"avoid": [[w] if w else None for w in avoided]}, None)]
    rows = []
    for label, steering, given in configurations:
        outputs, rate = (free, free_rate) if label == "free" else timed(**steering)
        line = {"benchmark": "steering", "label": label, "bleu": round(sacre_bleu(outputs, references)[0].score, 2),
                "sentences_per_s": round(rate, 1), "relative_speed": round(rate / free_rate, 3), "lines": len(lines)}
        if given is not None:
            line["start_with_prefix"] = round(sum(o.startswith(p) for o, p in zip(outputs, given)) / len(lines), 4)
        if label == "avoid":
            steered = [(o, w) for o, w in zip(outputs, avoided) if w]
            line["lines_with_a_term"] = len(steered)
            line["free_of_term"] = round(sum(not contains_term(o, w) for o, w in steered) / max(len(steered), 1), 4)
        line.update(decode_hparams=f"beam_size={translator.settings.beam_size},alpha={translator.settings.alpha}",
                    kernel_choices=translator.settings.kernel_choices, cpu=cpu_model(), date=time.strftime("%Y-%m-%d"),
                    input=os.path.basename(args.input))
        print(json.dumps(line), flush=True)
        rows.append(line)
    import sys

    print("| configuration | BLEU | sentences/s | of free | outputs as asked |\n|---|---:|---:|---:|---:|", file=sys.stderr)
    for line in rows:
        asked = line.get("start_with_prefix", line.get("free_of_term", ""))
        print(f"| {line['label']} | {line['bleu']} | {line['sentences_per_s']} | {line['relative_speed']} | {asked} |",
              file=sys.stderr)


if __name__ == "__main__":
    main()
