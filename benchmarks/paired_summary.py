"""The medians and ratios of one `paired.sh` run, from its labelled JSON lines.

    .venv/bin/python benchmarks/paired_summary.py benchmarks/results-DATE.jsonl [--run PAIRED_RUN]

Each label's rate per pair (the n-th line of a label belongs to pair n), its median, and
the median over pairs of each ratio "ours ..." / "other ...", where "other" is the label that
names the same configuration (the --against commit's, or a peer's): the paired measure,
since the machine drifts between pairs more than within one.
"""

import argparse
import json
import statistics
from collections import defaultdict

RATE = {"decode": "sentences_per_s", "decode_file": "sentences_per_s", "train": "tgt_tok_per_s", "fit": "steps_per_s"}


def rate(line: dict) -> float | None:
    key = RATE.get(line.get("bench") or line.get("benchmark"))
    return line.get(key) if key else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--run", help="the paired_run of the lines to read (default: the file's last run)")
    args = parser.parse_args()
    with open(args.results) as handle:
        lines = [json.loads(text) for text in handle if text.strip().startswith("{")]
    lines = [line for line in lines if "paired_run" in line]
    if not lines:
        raise SystemExit(f"error: {args.results} has no lines of a paired.sh run")
    run = args.run or lines[-1]["paired_run"]
    by_label, bleus, fractions, ceilings = defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list)
    for line in lines:
        if line["paired_run"] == run and line.get("bench") == "step_matmul_ceiling":
            ceilings[line["label"].removeprefix("ceiling ")].append(line)
        elif line["paired_run"] == run:
            by_label[line["label"]].append(rate(line))
            if line.get("bleu") is not None:
                bleus[line["label"]].append(line["bleu"])
            if line.get("fraction_of_matmul_peak") is not None:
                fractions[line["label"]].append((line["fraction_of_matmul_peak"], line["achieved_gflop_s"],
                                                 line["matmul_peak_gflop_s"]))
    print(f"paired run {run}: rate per pair (sentences/s, target tokens/s or steps/s), median")
    for label, rates in by_label.items():
        shown = " ".join("failed" if r is None else f"{r:g}" for r in rates)
        good = [r for r in rates if r is not None]
        bleu = f"   BLEU {statistics.median(bleus[label]):g}" if label in bleus else ""
        print(f"  {label:36s} {shown}   median {statistics.median(good):g}{bleu}" if good else f"  {label:36s} {shown}")
    if bleus and any(label.startswith("ctranslate2") for label in bleus):
        decode_file_pairings(by_label, bleus)
        return
    print("ratios (median over pairs of ours / other):")
    for label, rates in by_label.items():
        if not label.startswith("ours "):
            continue
        config = label[len("ours "):]
        for other, other_rates in by_label.items():
            if other.startswith("ours ") or not _same_configuration(config, other):
                continue
            ratios = [a / b for a, b in zip(rates, other_rates) if a and b]
            if ratios:
                print(f"  {label} / {other}: {statistics.median(ratios):.3f} "
                      f"(pairs: {' '.join(f'{r:.3f}' for r in ratios)})")
    if fractions:  # issue 40's measure: how much of this CPU's own matmul rate a training step uses
        print("fraction of the machine's matmul rate, measured in the same run (median; achieved / peak GFLOP/s):")
        for label, values in fractions.items():
            print(f"  {label:36s} {statistics.median(v[0] for v in values):.3f}   "
                  f"({statistics.median(v[1] for v in values):g} / {statistics.median(v[2] for v in values):g})")
    if ceilings:
        step_of_ceiling(fractions, ceilings)


def step_of_ceiling(fractions: dict, ceilings: dict) -> None:
    """Issue 75's measure: the step's GFLOP/s over what its own products allow
    (step_matmul_ceiling.py's ceiling_gflop_s), pair by pair from the same run."""
    print("the step's rate over its products' ceiling (step_matmul_ceiling.py), median over pairs:")
    for config, lines in ceilings.items():
        steps = fractions.get(f"ours {config}", [])
        ratios = [step[1] / line["ceiling_gflop_s"] for step, line in zip(steps, lines)]
        if ratios:
            print(f"  {config:36s} {statistics.median(ratios):.3f}   (pairs: {' '.join(f'{r:.3f}' for r in ratios)}; "
                  f"ceiling {statistics.median(line['ceiling_fraction'] for line in lines):.3f} of the square rate)")


def decode_file_pairings(by_label: dict, bleus: dict, within: float = 0.3) -> None:
    """Issue 39's measure on a trained model: per pair, our fastest configuration whose BLEU is
    within `within` of our fp32 one over CTranslate2's fastest whose BLEU is within `within` of
    its float32 one, both without or both with the shortlist (vmap); the median over pairs."""
    ours_reference = statistics.median(next((b for label, b in bleus.items() if label.startswith("ours fp32 shortlist=0")), [0]))
    ct2_reference = statistics.median(next((b for label, b in bleus.items()
                                            if label.startswith("ctranslate2 float32") and "vmap" not in label), [0]))
    for listed in (False, True):
        def eligible(label, engine, reference):
            words = label.split()
            return (words[0] == engine and ("shortlist=20" in words or "vmap" in words) == listed
                    and statistics.median(bleus[label]) >= reference - within)

        ours = [label for label in by_label if eligible(label, "ours", ours_reference)]
        theirs = [label for label in by_label if eligible(label, "ctranslate2", ct2_reference)]
        if not ours or not theirs:
            continue
        pairs = min(len(by_label[label]) for label in ours + theirs)
        ratios = []
        for i in range(pairs):
            best_ours = max(ours, key=lambda label: by_label[label][i] or 0)
            best_theirs = max(theirs, key=lambda label: by_label[label][i] or 0)
            ratios.append((by_label[best_ours][i] / by_label[best_theirs][i], best_ours, best_theirs))
        print(f"{'with' if listed else 'without'} the shortlist / vmap: ours fastest within {within} BLEU of our fp32 "
              f"({ours_reference:g}) / CTranslate2's fastest within {within} of its float32 ({ct2_reference:g}): "
              f"median {statistics.median(r for r, _, _ in ratios):.3f}")
        for ratio, best_ours, best_theirs in ratios:
            print(f"  {ratio:.3f}  {best_ours} / {best_theirs}")


def _same_configuration(config: str, other: str) -> bool:
    """Whether label `other` ("COMMIT fp32", "keras-hub tiny fp32", "ctranslate2 int8 parts=2")
    is compared with ours of `config` ("fp32", "tiny fp32"): the same words after its first
    (an --against commit or keras-hub), or any CTranslate2 line for a decode configuration."""
    words = other.split()
    if words[0] == "ctranslate2":
        return len(config.split()) == 1  # decode: every precision of ours against every CT2 line
    return words[1:] == config.split()


if __name__ == "__main__":
    main()
