#!/usr/bin/env bash
# Train, average and score a Multi30k English-German model with the package's commands:
#
#   datagen -> train -> average the last checkpoints -> decode the 1014-sentence val set
#   -> sacreBLEU (cased and lowercased, detokenised) -> the command lines it ran
#
#   bash examples/multi30k.sh                    # the strong small recipe: transformer_multi30k
#   make demo                                    # the same pipeline, sized to ~15 minutes
#
# Settings come from the environment (defaults: the recipe). Rerunning reuses what is
# complete: datagen and the trainer resume, later steps are skipped when their output exists.
set -euo pipefail

BIN_GIVEN=${BIN:-}
BIN=${BIN:-.venv/bin}
OUT=${OUT:-out/multi30k}
HPARAMS_SET=${HPARAMS_SET:-transformer_multi30k}
HPARAMS=${HPARAMS:-}
STEPS=${STEPS:-6000}
SAVE_STEPS=${SAVE_STEPS:-500}
AVERAGE=${AVERAGE:-3}                     # the last N checkpoints are averaged
DECODE_HPARAMS=${DECODE_HPARAMS-beam_size=8,alpha=1.5}  # the val decode (the problem's default: beam 4, alpha 0.6)
EVAL_SENTENCES=${EVAL_SENTENCES:-100}     # dev sentences decoded (beam 4) for BLEU at each checkpoint
PROBLEM=translate_ende_multi30k
DATA=$OUT/data
TRAIN=$OUT/train
AVG=$OUT/train_avg
started=$(date +%s)
[ -n "${BIN_GIVEN:-}" ] || make --no-print-directory .venv/.installed  # the package in .venv, as make test / make demo set it up
mkdir -p "$OUT"
: > "$OUT/commands.sh"

step() { printf '\n=== %s\n' "$*"; }
run() { echo "$*" >> "$OUT/commands.sh"; "$@"; }  # run a command and record its line

step "datagen: SentencePiece vocabulary and TFRecord shards of $PROBLEM"
run "$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$DATA" --noprogress

step "train $HPARAMS_SET${HPARAMS:+ ($HPARAMS)} for $STEPS steps (resumes from the last checkpoint)"
train_started=$(date +%s)
run "$BIN/t2t-keras-trainer" --problem=$PROBLEM --hparams_set="$HPARAMS_SET" --hparams="$HPARAMS" \
    --data_dir="$DATA" --output_dir="$TRAIN" --train_steps="$STEPS" --save_checkpoints_steps="$SAVE_STEPS" \
    --keep_checkpoint_max=$(( AVERAGE > 5 ? AVERAGE : 5 )) --log_steps=100 --eval_sentences="$EVAL_SENTENCES"
train_seconds=$(( $(date +%s) - train_started ))
if [ ! -f "$OUT/train_seconds" ] || [ "$train_seconds" -gt 60 ]; then echo "$train_seconds" > "$OUT/train_seconds"; fi

if [ "$AVERAGE" -gt 1 ]; then step "average the last $AVERAGE checkpoints"; else step "the last checkpoint as the model"; fi
if [ ! -f "$AVG/checkpoint" ]; then
  run "$BIN/t2t-keras-avg-checkpoints" --output_dir="$TRAIN" --num_last_checkpoints="$AVERAGE" --avg_dir="$AVG"
else echo "reusing $AVG"; fi

step "decode the Multi30k val set (1014 sentences${DECODE_HPARAMS:+, $DECODE_HPARAMS})"
for language in en de; do  # the shipped val set, as plain text
  gzip -dc "problems/data/multi30k/val.$language.gz" > "$OUT/val.$language.tmp" && mv "$OUT/val.$language.tmp" "$OUT/val.$language"
done
if [ ! -f "$OUT/val.hyp.de" ]; then
  run "$BIN/t2t-keras-decoder" --output_dir="$AVG" --decode_from_file="$OUT/val.en" --decode_hparams="$DECODE_HPARAMS" \
      --decode_to_file="$OUT/val.hyp.de" --noprogress
else echo "reusing $OUT/val.hyp.de"; fi

step "BLEU: sacreBLEU, detokenised, cased and lowercased"
bleu_line=$(run "$BIN/t2t-keras-bleu" --translation="$OUT/val.hyp.de" --reference="$OUT/val.de")
echo "$bleu_line"
run "$BIN/t2t-keras-bleu" --translation="$OUT/val.hyp.de" --reference="$OUT/val.de" --lowercase

echo "$bleu_line" | sed -nE 's/^BLEU = ([0-9.]+).*/\1/p' > "$OUT/val_bleu"  # the BLEU line (chrF2 follows it)

step "summary"
echo "val BLEU (sacreBLEU, cased, detokenised): $(cat "$OUT/val_bleu")"
echo "training: $STEPS steps of $HPARAMS_SET in $(cat "$OUT/train_seconds") s; this run: $(( $(date +%s) - started )) s"
echo "model: $AVG (TensorBoard: $BIN/tensorboard --logdir=$TRAIN)"
echo "commands run: $OUT/commands.sh"
