#!/usr/bin/env bash
# Guided alignment against the same run without it: make demo's recipe (transformer_demo, 1500
# steps, mixed bf16 where the CPU has bf16 units, seed 1) on translate_ende_multi30k with each
# pair's eflomal alignments stored (datagen --word_alignments), one cross-attention head taught
# to follow them at each weight of WEIGHTS; the baseline is examples/demo_seeds.sh's run of the
# same recipe, data order and seed (BASELINE=). Each model: sacreBLEU on val (dev) and dev2 (beam
# 4, alpha 2.0), and its alignments of val's reference pairs against eflomal's (aligned with the
# train pairs; sure = both directions' links, possible = either's) and on identical words
# (benchmarks/alignment_heads.py: every layer, head and shift).
#
#   bash examples/demo_seeds.sh && bash examples/guided_alignment_study.sh
#   WEIGHTS="0.1 0.5" bash examples/guided_alignment_study.sh
set -euo pipefail

BIN=${BIN:-.venv/bin}
OUT=${STUDY_DIR:-out/guided_alignment}
PRECISION=${PRECISION:-$("$BIN/python" -c 'from t2t_keras.system import bfloat16_units; print("mixed_bfloat16" if bfloat16_units() else "float32")' 2>/dev/null)}
BASELINE=${BASELINE:-out/demo_seeds/${PRECISION}_s1}
SEEDS_DIR=$(dirname "$BASELINE")  # its dev.* and dev2.* text
WEIGHTS=${WEIGHTS:-0.5}
PROBLEM=translate_ende_multi30k
mkdir -p "$OUT"
step() { printf '\n=== %s\n' "$*"; }
source examples/study_helpers.sh
[ -f "$BASELINE/run.json" ] || { echo "error: BASELINE=$BASELINE is not a trained run: run examples/demo_seeds.sh first." >&2; exit 2; }

step "datagen $PROBLEM with word alignments (eflomal over all splits)"
"$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$OUT/data" --word_alignments --noprogress

step "reference links of val: eflomal over train + val, sure = both directions', possible = either's"
"$BIN/python" - "$OUT" <<'EOF'
import os, sys
from t2t_keras.data.text_files import TextStats
from t2t_keras.data.word_alignments import directional_links
from t2t_keras.problems.translate_multi30k import multi30k_pairs

out = sys.argv[1]
if not os.path.exists(os.path.join(out, "val.possible")):
    train, val = (list(multi30k_pairs(split, "en", "de", TextStats())) for split in ("train", "dev"))
    links = directional_links(train + val)[len(train):]
    for name, combine in (("sure", lambda f, r: f & r), ("possible", lambda f, r: f | r)):
        with open(os.path.join(out, f"val.{name}.tmp"), "w") as handle:
            handle.writelines(" ".join(f"{i}-{j}" for i, j in sorted(combine(f, r))) + "\n" for f, r in links)
        os.replace(os.path.join(out, f"val.{name}.tmp"), os.path.join(out, f"val.{name}"))
EOF

# evaluate RUN: BLEU on dev and dev2, then the alignment scores of every layer, head and shift.
evaluate() {
  for split in dev dev2; do
    decode_bleu "$1" "$SEEDS_DIR/$split.en" "$SEEDS_DIR/$split.de" "$1.$split.alpha2.0.de" "beam_size=4,alpha=2.0"
  done
  [ -f "$1.alignment.jsonl" ] || { "$BIN/python" benchmarks/alignment_heads.py --output_dir="$1" --sure="$OUT/val.sure" \
      --possible="$OUT/val.possible" > "$1.alignment.jsonl.tmp" && mv "$1.alignment.jsonl.tmp" "$1.alignment.jsonl"; }
}
runs=("$BASELINE")
for weight in $WEIGHTS; do
  run=$OUT/guided_$weight
  step "train $run: transformer_demo, 1500 steps, $PRECISION, seed 1, guided_alignment_weight=$weight"
  "$BIN/t2t-keras-trainer" --problem=$PROBLEM --data_dir="$OUT/data" --output_dir="$run" --hparams_set=transformer_demo \
      --hparams="mixed_precision=$PRECISION,guided_alignment_weight=$weight" --train_steps=1500 --save_checkpoints_steps=250 \
      --eval_sentences=100 --seed=1 --log_steps=500
  runs+=("$run")
done
for run in "${runs[@]}"; do
  step "evaluate $run"
  evaluate "$run"
done

step "the table: BLEU (beam 4, alpha 2.0); AER against eflomal and identical words of the last layer's head 0 and the best candidate"
"$BIN/python" - "${runs[@]}" <<'EOF'
import json, sys

print(f"{'run':40} {'dev':>6} {'dev2':>6}  {'AER L-1 h0':>10} {'ident.':>6}  best candidate (AER, identical words)")
for run in sys.argv[1:]:
    lines = [json.loads(line) for line in open(run + ".alignment.jsonl")]
    last = max(line["layer"] for line in lines)
    taught = next(line for line in lines if line["layer"] == last and line["heads"] == [0] and line["shift"] == 0)
    best = min(lines, key=lambda line: line["aer"])
    bleu = [open(f"{run}.{split}.alpha2.0.de.bleu").read().strip() for split in ("dev", "dev2")]
    print(f"{run:40} {bleu[0]:>6} {bleu[1]:>6}  {taught['aer']:10.4f} {taught['identical_words']:6.3f}  "
          f"layer {best['layer']} heads {best['heads']} shift {best['shift']}: {best['aer']:.4f}, {best['identical_words']:.3f}")
EOF
