#!/usr/bin/env bash
# The Multi30k recipe's choices (examples/multi30k.sh) judged on both dev splits, seed by seed:
# dev = val, where they were made, and dev2, 1000 training pairs held out of training.
#
#   arms (ARMS), each one member of the recipe at one model's compute (23.1M target tokens):
#     v2_bf16   transformer_multi30k_v2, 12000 x 2048 tokens, mixed bf16 (the recipe on a CPU with bf16 units)
#     v1_bf16   transformer_multi30k,     6000 x 4096 tokens, mixed bf16 (the earlier recipe)
#     v2_fp32   transformer_multi30k_v2, 12000 x 2048 tokens, float32
#   each model: the last checkpoint alone, and the averages of the last 3 (the recipe) and 5;
#   decoded with beam 8 at alpha 1.5 with exact search (the recipe), and for the average of 3
#   also at alpha 1.0 and 2.0 (exact) and at 1.5 with the default stop; each arm's seeds 1 and
#   2 also as one ensemble (the recipe's pair), of their averages of 3 and of their last checkpoints;
#   dev2's per-token nll of every average of 3.
#
#   bash examples/recipe_seeds.sh                       # the three arms, seeds 1-3, arms alternating seed by seed
#   SEEDS=1 ARMS="v2_bf16 v1_bf16" bash examples/recipe_seeds.sh   # a part of it
#
# Rerunning reuses what is complete (the trainer resumes from its last checkpoint, averages and
# decodes are skipped when done), so the study can span sessions; the table covers what exists.
set -euo pipefail

BIN=${BIN:-.venv/bin}
OUT=${STUDY_DIR:-out/recipe_seeds}
ARMS=${ARMS:-"v2_bf16 v1_bf16 v2_fp32"}
SEEDS=${SEEDS:-"1 2 3"}
PROBLEM=translate_ende_multi30k
BEAM=8
mkdir -p "$OUT"
step() { printf '\n=== %s\n' "$*"; }
source examples/study_helpers.sh

# arm NAME: the hparams set, precision, steps and checkpoint spacing of an arm.
arm() {
  case $1 in
    v2_bf16) echo "transformer_multi30k_v2 mixed_bfloat16 12000 1000" ;;
    v1_bf16) echo "transformer_multi30k mixed_bfloat16 6000 500" ;;
    v2_fp32) echo "transformer_multi30k_v2 float32 12000 1000" ;;
    *) echo "error: unknown arm '$1' in ARMS: one of v2_bf16, v1_bf16, v2_fp32." >&2; return 2 ;;
  esac
}
for name in $ARMS; do arm "$name" > /dev/null; done

step "datagen $PROBLEM, and its dev (val) and dev2 as text"
"$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$OUT/data" --noprogress
dev_texts "$OUT"

# average RUN N: RUN_avgN, the average of RUN's last N checkpoints (1: the last one alone).
average() {
  [ -f "$1_avg$2/checkpoint" ] || "$BIN/t2t-keras-avg-checkpoints" --output_dir="$1" --num_last_checkpoints="$2" --avg_dir="$1_avg$2"
}
# decode MODEL SPLIT TAG DECODE_HPARAMS [FLAG...]: MODEL.SPLIT.TAG.de and its BLEU.
decode() { decode_bleu "$1" "$OUT/$2.en" "$OUT/$2.de" "$1.$2.$3.de" "$4" "${@:5}"; }
recipe="beam_size=$BEAM,alpha=1.5,exact_search=true"

for seed in $SEEDS; do
  for name in $ARMS; do
    read -r hparams_set precision steps save_steps <<< "$(arm "$name")"
    run=$OUT/${name}_s$seed
    step "train $run: $hparams_set, $steps steps, $precision, seed $seed"
    "$BIN/t2t-keras-trainer" --problem=$PROBLEM --hparams_set="$hparams_set" --hparams="mixed_precision=$precision" \
        --seed="$seed" --data_dir="$OUT/data" --output_dir="$run" --train_steps="$steps" \
        --save_checkpoints_steps="$save_steps" --keep_checkpoint_max=5 --log_steps=500 --eval_sentences=100
    step "decode $run's averages on dev and dev2"
    for n in 1 3 5; do
      average "$run" "$n"
      for split in dev dev2; do decode "${run}_avg$n" "$split" a1.5x "$recipe"; done
    done
    for split in dev dev2; do
      decode "${run}_avg3" "$split" a1.0x "beam_size=$BEAM,alpha=1.0,exact_search=true"
      decode "${run}_avg3" "$split" a2.0x "beam_size=$BEAM,alpha=2.0,exact_search=true"
      decode "${run}_avg3" "$split" a1.5 "beam_size=$BEAM,alpha=1.5"
    done
    reference_nll "${run}_avg3" "$OUT/dev2.en" "$OUT/dev2.de"
    if [ "$seed" = 2 ] && [ -f "$OUT/${name}_s1_avg3/checkpoint" ]; then
      for n in 3 1; do
        for split in dev dev2; do decode "$OUT/${name}_s1_avg$n" "$split" pair_a1.5x "$recipe" --ensemble="${run}_avg$n"; done
      done
    fi
  done
done

step "the table: sacreBLEU (beam $BEAM; x = exact search) on dev = val and dev2; dev2's per-token nll (average of 3)"
"$BIN/python" - "$OUT" "$ARMS" "$SEEDS" <<'EOF'
import json, os, statistics, sys

out, arms, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
# (model, decode, name): the last checkpoint and the averages of 3 and 5 at the recipe's decode,
# then the average of 3 at other alphas and with the default stop.
COLUMNS = [("avg1", "a1.5x", "last"), ("avg3", "a1.5x", "avg3"), ("avg5", "a1.5x", "avg5"),
           ("avg3", "a1.0x", "a3@1.0x"), ("avg3", "a2.0x", "a3@2.0x"), ("avg3", "a1.5", "a3@1.5")]


def number(path):
    return float(open(path).read()) if os.path.exists(path) else None


def cell(value, width=9, digits=2):
    return f"{value:{width}.{digits}f}" if value is not None else " " * (width - 1) + "-"


def mean(values):
    return statistics.mean(values) if values and None not in values else None


for split in ("dev", "dev2"):
    print(f"\n{split}: " + ("val, where the recipe was tuned" if split == "dev" else "1000 training pairs held out"))
    print("arm      seed " + "".join(f"{name:>9}" for _, _, name in COLUMNS) + ("  dev2 nll" if split == "dev2" else ""))
    for arm in arms:
        rows = []
        for seed in seeds:
            run = os.path.join(out, f"{arm}_s{seed}")
            if not os.path.exists(os.path.join(run, "run.json")):
                continue
            rows.append([number(f"{run}_{model}.{split}.{tag}.de.bleu") for model, tag, _ in COLUMNS]
                        + [number(os.path.join(f"{run}_avg3", "dev2.nll"))])
            print(f"{arm:8} {seed:>4} " + "".join(cell(v) for v in rows[-1][:-1])
                  + (f"  {cell(rows[-1][-1], 8, 4)}" if split == "dev2" else ""))
        done = [row for row in rows if None not in row]  # a run still training has no mean's worth
        if len(done) > 1:
            columns = [mean(list(column)) for column in zip(*done)]
            print(f"{arm:8} mean " + "".join(cell(v) for v in columns[:-1])
                  + (f"  {cell(columns[-1], 8, 4)}" if split == "dev2" else "") + f"   ({len(done)} seeds)")
print()
for arm in arms:
    for model, members in (("avg3", "averages of 3"), ("avg1", "last checkpoints")):
        pair = [number(os.path.join(out, f"{arm}_s1_{model}.{split}.pair_a1.5x.de.bleu")) for split in ("dev", "dev2")]
        if None not in pair:
            print(f"{arm}: seeds 1 + 2 as one ensemble (the recipe's pair) of their {members}: "
                  f"dev {pair[0]:.2f}, dev2 {pair[1]:.2f}")
for arm in arms:
    for seed in seeds:
        path = os.path.join(out, f"{arm}_s{seed}", "run.json")
        parts = json.load(open(path)).get("training", []) if os.path.exists(path) else []
        if parts:
            print(f"{arm}_s{seed}: steps {parts[0]['from_step']}-{parts[-1]['to_step']}, "
                  f"{sum(p['target_tokens'] for p in parts) / 1e6:.1f}M target tokens, "
                  f"{sum(p['seconds'] for p in parts) / 60:.0f} min in {len(parts)} start(s) on "
                  + " + ".join(sorted({p["cpu"] for p in parts})))
EOF
