#!/usr/bin/env bash
# One model for both directions against one model per direction, on the shipped Multi30k:
#
#   en->de and de->en models of STEPS steps each (one per direction),
#   an en<->de model (translate_ende_deen_multi30k) of STEPS steps: equal total compute (one
#   model's), half of it per direction, and of 2 x STEPS steps: equal compute per direction
#   (both single models' together); every model decodes the val set in each of its directions.
#
#   bash examples/multilingual_study.sh                 # transformer_demo, 1500 steps, seed 1; a table at the end
#   SEEDS="1 2" bash examples/multilingual_study.sh     # more seeds (the table gives each)
#
# Mixed bf16 where the CPU has bf16 units, fp32 elsewhere (PRECISION= forces one), as make demo.
# Rerunning reuses what is complete (datagen and the trainer resume, decodes are skipped when done).
set -euo pipefail

BIN=${BIN:-.venv/bin}
OUT=${STUDY_DIR:-out/multilingual_study}
HPARAMS_SET=${HPARAMS_SET:-transformer_demo}
STEPS=${STEPS:-1500}
SEEDS=${SEEDS:-1}
DECODE=${DECODE:-beam_size=4,alpha=2.0}  # the demo's decode
PRECISION=${PRECISION:-$("$BIN/python" -c 'from t2t_keras.system import bfloat16_units; print("mixed_bfloat16" if bfloat16_units() else "float32")' 2>/dev/null)}
mkdir -p "$OUT"
step() { printf '\n=== %s\n' "$*"; }
source examples/study_helpers.sh

for language in en de; do
  [ -f "$OUT/val.$language" ] || { gzip -dc "problems/data/multi30k/val.$language.gz" > "$OUT/val.$language.tmp" && mv "$OUT/val.$language.tmp" "$OUT/val.$language"; }
done
for problem in translate_ende_multi30k translate_deen_multi30k translate_ende_deen_multi30k; do
  step "datagen $problem"
  "$BIN/t2t-keras-datagen" --problem=$problem --data_dir="$OUT/data_$problem" --noprogress
done

# train NAME PROBLEM STEPS SEED: the run dir $OUT/NAME_sSEED, its last checkpoint the model.
train() {
  local dir=$OUT/$1_s$4
  step "train $dir: $2, $HPARAMS_SET, $3 steps, seed $4"
  "$BIN/t2t-keras-trainer" --problem="$2" --data_dir="$OUT/data_$2" --output_dir="$dir" --hparams_set="$HPARAMS_SET" \
      --hparams="mixed_precision=$PRECISION" --train_steps="$3" --save_checkpoints_steps=500 --eval_sentences=100 \
      --seed="$4" --log_steps=250
}
# decode RUN SOURCE TARGET [FLAG...]: val.SOURCE -> RUN.val.TARGET and its BLEU in RUN.val.TARGET.bleu.
decode() { decode_bleu "$1" "$OUT/val.$2" "$OUT/val.$3" "$1.val.$3" "$DECODE" "${@:4}"; }
for seed in $SEEDS; do
  train ende translate_ende_multi30k "$STEPS" "$seed"
  train deen translate_deen_multi30k "$STEPS" "$seed"
  train both translate_ende_deen_multi30k "$STEPS" "$seed"
  train both2x translate_ende_deen_multi30k $(( 2 * STEPS )) "$seed"
  step "decode val in each direction ($DECODE)"
  decode "$OUT/ende_s$seed" en de
  decode "$OUT/deen_s$seed" de en
  for both in both both2x; do
    decode "$OUT/${both}_s$seed" en de --target_language=de
    decode "$OUT/${both}_s$seed" de en --target_language=en
  done
done

step "val BLEU (sacreBLEU, cased, detokenised)"
seconds() { "$BIN/python" -c 'import json, sys; print(round(sum(p["seconds"] for p in json.load(open(sys.argv[1] + "/run.json"))["training"])))' "$1"; }
printf '%-6s %-28s %7s %7s %7s %9s\n' seed model steps en-de de-en seconds
for seed in $SEEDS; do
  printf '%-6s %-28s %7s %7s %7s %9s\n' "$seed" "one per direction" "$STEPS x2" "$(cat "$OUT/ende_s$seed.val.de.bleu")" \
      "$(cat "$OUT/deen_s$seed.val.en.bleu")" "$(( $(seconds "$OUT/ende_s$seed") + $(seconds "$OUT/deen_s$seed") ))"
  printf '%-6s %-28s %7s %7s %7s %9s\n' "$seed" "en<->de, equal total" "$STEPS" "$(cat "$OUT/both_s$seed.val.de.bleu")" \
      "$(cat "$OUT/both_s$seed.val.en.bleu")" "$(seconds "$OUT/both_s$seed")"
  printf '%-6s %-28s %7s %7s %7s %9s\n' "$seed" "en<->de, equal per direction" "$(( 2 * STEPS ))" "$(cat "$OUT/both2x_s$seed.val.de.bleu")" \
      "$(cat "$OUT/both2x_s$seed.val.en.bleu")" "$(seconds "$OUT/both2x_s$seed")"
done
