#!/usr/bin/env bash
# The demo recipe's choices judged on both dev splits: make demo's training (transformer_demo,
# 1500 steps) in each of PRECISIONS with each of SEEDS, alternating precisions seed by seed (the
# same commit, A B A B); every model decodes val (dev, where the recipe was tuned) and dev2
# (1000 training pairs held out of training, never tuned on) at each alpha of ALPHAS, beam 4;
# the table gives sacreBLEU on both and the dev loss (val's per-token nll from the trainer's last
# evaluation, dev2's from the model's log P of its references).
#
#   bash examples/demo_seeds.sh                      # float32 and mixed_bfloat16, seeds 1-3
#   SEEDS="4 5" bash examples/demo_seeds.sh          # more seeds into the same table
#
# Rerunning reuses what is complete (the trainer resumes, decodes are skipped when done).
set -euo pipefail

BIN=${BIN:-.venv/bin}
OUT=${STUDY_DIR:-out/demo_seeds}
PRECISIONS=${PRECISIONS:-"float32 mixed_bfloat16"}
SEEDS=${SEEDS:-"1 2 3"}
STEPS=${STEPS:-1500}
ALPHAS=${ALPHAS:-"1.0 1.4 2.0"}
PROBLEM=translate_ende_multi30k
mkdir -p "$OUT"
step() { printf '\n=== %s\n' "$*"; }
source examples/study_helpers.sh

step "datagen $PROBLEM, and its dev (val) and dev2 as text"
"$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$OUT/data" --noprogress
dev_texts "$OUT"

for seed in $SEEDS; do
  for precision in $PRECISIONS; do
    run=$OUT/${precision}_s$seed
    step "train $run: transformer_demo, $STEPS steps, $precision, seed $seed"
    "$BIN/t2t-keras-trainer" --problem=$PROBLEM --data_dir="$OUT/data" --output_dir="$run" --hparams_set=transformer_demo \
        --hparams="mixed_precision=$precision" --train_steps="$STEPS" --save_checkpoints_steps=250 --eval_sentences=100 \
        --seed="$seed" --log_steps=500
    for split in dev dev2; do
      for alpha in $ALPHAS; do
        decode_bleu "$run" "$OUT/$split.en" "$OUT/$split.de" "$run.$split.alpha$alpha.de" "beam_size=4,alpha=$alpha"
      done
    done
    reference_nll "$run" "$OUT/dev2.en" "$OUT/dev2.de"
  done
done

step "the table: sacreBLEU (beam 4) on dev = val and dev2 at each alpha; dev loss (per-token nll)"
"$BIN/python" - "$OUT" "$PRECISIONS" "$SEEDS" "$ALPHAS" <<'EOF'
import json, os, statistics, sys

out, precisions, seeds, alphas = sys.argv[1], *(value.split() for value in sys.argv[2:])
rows = {}
for precision in precisions:
    for seed in seeds:
        run = os.path.join(out, f"{precision}_s{seed}")
        record = os.path.join(run, "dev2.nll")
        evaluations = json.load(open(os.path.join(run, "run.json")))["evaluations"]
        bleu = {(split, alpha): float(open(f"{run}.{split}.alpha{alpha}.de.bleu").read()) for split in ("dev", "dev2")
                for alpha in alphas}
        rows[precision, seed] = (bleu, evaluations[-1]["nll"], float(open(record).read()))
header = "precision        seed " + " ".join(f"{split}@{alpha:<4}" for split in ("dev", "dev2") for alpha in alphas)
print(header + "  dev nll  dev2 nll")
for (precision, seed), (bleu, dev_nll, dev2_nll) in rows.items():
    print(f"{precision:16} {seed:4} " + " ".join(f"{bleu[split, alpha]:9.2f}" for split in ("dev", "dev2") for alpha in alphas)
          + f"  {dev_nll:7.4f}  {dev2_nll:8.4f}")
for precision in precisions:
    mine = [rows[precision, seed] for seed in seeds]
    print(f"{precision:16} mean " + " ".join(f"{statistics.mean(r[0][split, alpha] for r in mine):9.2f}"
                                            for split in ("dev", "dev2") for alpha in alphas)
          + f"  {statistics.mean(r[1] for r in mine):7.4f}  {statistics.mean(r[2] for r in mine):8.4f}")
EOF
