"""What steering a search does to a trained model's outputs, and what it costs: a target prefix
(whole words, and one ending inside a word) and avoided terms, against the free search, on a
file and its references (default: the shipped Multi30k val set, lines the model never saw).

    .venv/bin/python benchmarks/steering.py --output_dir=out/demo/train_avg

  free            the run's decode settings, unsteered
  prefix          each output starts with its reference's first two words
  partial prefix  ... its first word and the first two letters of its second ("Ein Hu")
  avoid           each output avoids the first word of 4+ letters of the free output that its
                  reference lacks (a word the model chose and the translator rejects)
  constraints     each output must hold its reference's first word of 4+ letters that the free
                  output lacks (a term the translator wants and the model did not choose), and
                  a second reference word of 4+ letters where there is one (seeded)
  markup          each source with tags around random words and a placeholder (seeded): the
                  outputs well-formed with every tag once, their text without tags the free output
  alignments      the free search with each output's word alignment (a teacher-forced pass more)

Prints one JSON line per configuration (sacreBLEU, the share of outputs that start with their
prefix or are free of their avoided term, sentences/s of a warm decoding, median of --repeats)
and a Markdown table on stderr. With `--ct2_dir` (the run's `t2t-keras-exporter
--format=ctranslate2`), the same in CTranslate2 float32 where it has the feature (target_prefix:
our pieces of the prefix's whole words, no completion of a partial one; suppress_sequences: our
spellings of the term, a line at a time as it takes one list a batch), and how many of its
outputs equal ours. Run it alone: two benchmarks on 2 cores spoil each other.
"""

import argparse
import gzip
import json
import os
import re
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_keras.decoding import markup  # noqa: E402
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


def wanted_words(output: str, reference: str, seed: int) -> list[str] | None:
    """The reference's first word of 4+ letters that `output` lacks, then another of its words
    of 4+ letters (chosen with `seed`), or None when the output has them all."""
    import random

    words = list(dict.fromkeys(re.findall(r"\w{4,}", reference)))
    missing = [w for w in words if not re.search(r"(?<!\w)" + re.escape(w) + r"(?!\w)", output)]
    if not missing:
        return None
    others = [w for w in words if w != missing[0]]
    return [missing[0]] + ([random.Random(seed).choice(others)] if others else [])


def marked_line(line: str, seed: int) -> str:
    """`line` with a tag around one or two random words, another inside or beside it, and a
    placeholder, by a generator seeded with the line's number."""
    import random

    rng = random.Random(seed)
    words = line.split()
    if len(words) < 3:
        return line
    inner = rng.randrange(len(words))
    words[inner] = '<i class="x">' + words[inner] + "</i>"  # inside the <b> span or beside it, never across
    start = rng.randrange(len(words) - 1)
    end = rng.randrange(start + 1, min(len(words), start + 3) + 1)
    words[start] = "<b>" + words[start]
    words[end - 1] = words[end - 1] + "</b>"
    words.insert(rng.randrange(len(words) + 1), "{1}")
    return " ".join(words)


def same_tags(source: str, output: str) -> bool:
    """Whether `output` is well-formed and holds each tag of `source` exactly once."""
    from t2t_keras.errors import UsageError

    def texts(tags):
        return [t for tag in tags for t in [tag.opening, tag.closing or ""] + texts(tag.children)]

    try:
        return sorted(texts(markup.parse(output, 1).tags)) == sorted(texts(markup.parse(source, 1).tags))
    except UsageError:
        return False


def timed_lines(translator, lines, repeats: int, **settings):
    translator.generate(lines, **settings)
    rates, outputs = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        outputs = translator.generate(lines, **settings)
        rates.append(len(lines) / (time.perf_counter() - started))
    return outputs, statistics.median(rates)


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
    parser.add_argument("--ct2_dir", help="the run's CTranslate2 export: its outputs under the same steering")
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
    wanted = [wanted_words(output, reference, number) for number, (output, reference) in enumerate(zip(free, references))]
    configurations.append(("constraints", {"constraints": wanted}, None))
    rows = []
    marked = [marked_line(line, number) for number, line in enumerate(lines)]
    for label, steering, given in configurations + [("markup", {}, None), ("alignments", {}, None)]:
        if label == "markup":
            translated, rate = timed_lines(translator, marked, args.repeats, markup=True)
            outputs = [markup.plain(output) for output in translated]
        elif label == "alignments":
            rates = []
            for _ in range(args.repeats + 1):
                started = time.perf_counter()
                translator.translate(lines, alignments=True)
                rates.append(len(lines) / (time.perf_counter() - started))
            outputs, rate = free, statistics.median(rates[1:])
        else:
            outputs, rate = (free, free_rate) if label == "free" else timed(**steering)
        line = {"benchmark": "steering", "label": label, "bleu": round(sacre_bleu(outputs, references)[0].score, 2),
                "sentences_per_s": round(rate, 1), "relative_speed": round(rate / free_rate, 3), "lines": len(lines)}
        if given is not None:
            line["start_with_prefix"] = round(sum(o.startswith(p) for o, p in zip(outputs, given)) / len(lines), 4)
        if label == "avoid":
            steered = [(o, w) for o, w in zip(outputs, avoided) if w]
            line["lines_with_a_term"] = len(steered)
            line["free_of_term"] = round(sum(not contains_term(o, w) for o, w in steered) / max(len(steered), 1), 4)
        if label == "constraints":
            terms = [(o, w) for o, words in zip(outputs, wanted) for w in words or []]
            line["lines_with_terms"] = sum(words is not None for words in wanted)
            line["terms_present"] = round(sum(contains_term(o, w) for o, w in terms) / max(len(terms), 1), 4)
            line["lines_with_terms_bleu"] = round(sacre_bleu([o for o, w in zip(outputs, wanted) if w],
                                                             [r for r, w in zip(references, wanted) if w])[0].score, 2)
            line["lines_with_terms_free_bleu"] = round(sacre_bleu([o for o, w in zip(free, wanted) if w],
                                                                  [r for r, w in zip(references, wanted) if w])[0].score, 2)
        if label == "markup":
            line["well_formed"] = round(sum(same_tags(source, output) for source, output in zip(marked, translated)) / len(lines), 4)
            line["text_as_unmarked"] = round(sum(a == b for a, b in zip(outputs, free)) / len(lines), 4)
        line.update(decode_hparams=f"beam_size={translator.settings.beam_size},alpha={translator.settings.alpha}",
                    kernel_choices=translator.settings.kernel_choices, cpu=cpu_model(), date=time.strftime("%Y-%m-%d"),
                    input=os.path.basename(args.input))
        print(json.dumps(line), flush=True)
        rows.append(line)
    import sys

    if args.ct2_dir:
        for line in ctranslate2_lines(args.ct2_dir, translator, lines, references, configurations, rows):
            print(json.dumps(line), flush=True)
            rows.append(line)
    print("| configuration | BLEU | sentences/s | of free | outputs as asked | equal to ours |\n|---|---:|---:|---:|---:|---:|",
          file=sys.stderr)
    for line in rows:
        asked = line.get("start_with_prefix", line.get("free_of_term", line.get("terms_present", "")))
        label = f"{line['engine']}, {line['label']}" if "engine" in line else line["label"]
        print(f"| {label} | {line['bleu']} | {line['sentences_per_s']} | {line.get('relative_speed', '')} | {asked} | "
              f"{line.get('equal_to_ours', '')} |", file=sys.stderr)


def ctranslate2_lines(ct2_dir: str, translator, lines, references, configurations, ours: list) -> list:
    """CTranslate2's outputs under the configurations it can steer, and their agreement with ours."""
    import ctranslate2

    from t2t_keras.decoding.controls import TargetPieces, contains_term
    from t2t_keras.evaluation.bleu import sacre_bleu

    with open(os.path.join(ct2_dir, "t2t_keras_export.json")) as handle:
        search = json.load(handle)["translate_batch"]
    engine = ctranslate2.Translator(ct2_dir, device="cpu", compute_type="float32")
    source, target = translator.vocabularies.source, translator.vocabularies.target
    pieces = TargetPieces(target)
    tokens = [source.pieces(source.encode(line)) for line in lines]
    ours_by_label = {line["label"]: line for line in ours}
    found = []
    for label, steering, given in configurations:
        if label == "partial prefix":
            continue  # CTranslate2 forces whole pieces only
        started = time.perf_counter()
        if label == "avoid":
            outputs = []
            for words, line_tokens in zip(steering["avoid"], tokens):
                suppress = [target.pieces(ids) for word in (words or []) for ids in pieces.spellings(word)]
                result = engine.translate_batch([line_tokens], suppress_sequences=suppress or None, **search)[0]
                outputs.append(target.decode([pieces.ids[p] for p in result.hypotheses[0]]))
        else:
            prefixes = [target.pieces(target.encode(p)) for p in steering["prefix"]] if steering else None
            results = engine.translate_batch(tokens, target_prefix=prefixes, max_batch_size=16, **search)
            outputs = [target.decode([pieces.ids[p] for p in result.hypotheses[0]]) for result in results]
        seconds = time.perf_counter() - started
        line = {"benchmark": "steering", "engine": "ctranslate2 float32", "label": label,
                "bleu": round(sacre_bleu(outputs, references)[0].score, 2), "sentences_per_s": round(len(lines) / seconds, 1)}
        if given is not None:
            line["start_with_prefix"] = round(sum(o.startswith(p) for o, p in zip(outputs, given)) / len(lines), 4)
        if label == "avoid":
            steered = [(o, w[0]) for o, w in zip(outputs, steering["avoid"]) if w]
            line["free_of_term"] = round(sum(not contains_term(o, w) for o, w in steered) / max(len(steered), 1), 4)
        line["cpu"], line["date"] = cpu_model(), time.strftime("%Y-%m-%d")
        found.append((line, outputs))
    # Agreement with ours: the same configuration decoded by both (ours re-decoded here, in order).
    lines_out = []
    for line, outputs in found:
        steering = next(s for label, s, _ in configurations if label == line["label"])
        mine = translator.generate(lines, **steering)
        line["equal_to_ours"] = round(sum(a == b for a, b in zip(outputs, mine)) / len(lines), 4)
        line["ours_bleu"] = ours_by_label[line["label"]]["bleu"]
        lines_out.append(line)
    return lines_out


if __name__ == "__main__":
    main()
