#!/usr/bin/env bash
# Train, average and score a Multi30k English-German model with the package's commands:
#
#   datagen -> train -> average the last checkpoints -> decode the 1014-sentence val set
#   -> sacreBLEU (cased and lowercased, detokenised) -> the command lines it ran
#
#   bash examples/multi30k.sh                    # the strong small recipe: transformer_multi30k
#   ENSEMBLE=2 bash examples/multi30k.sh         # two models (seeds 1 and 2), decoded as one
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
ENSEMBLE=${ENSEMBLE:-1}                   # models trained (member k with --seed=k when more than one), decoded together
PROBLEM=translate_ende_multi30k
DATA=$OUT/data
members=$(seq 1 "$ENSEMBLE")
train_dir() { if [ "$ENSEMBLE" -eq 1 ]; then echo "$OUT/train"; else echo "$OUT/train_seed$1"; fi; }
HYP=$OUT/val.hyp.de
[ "$ENSEMBLE" -eq 1 ] || HYP=$OUT/val.ensemble$ENSEMBLE.hyp.de
started=$(date +%s)
[ -n "${BIN_GIVEN:-}" ] || make --no-print-directory .venv/.installed  # the package in .venv, as make test / make demo set it up
mkdir -p "$OUT"
: > "$OUT/commands.sh"

step() { printf '\n=== %s\n' "$*"; }
run() { echo "$*" >> "$OUT/commands.sh"; "$@"; }  # run a command and record its line

step "datagen: SentencePiece vocabulary and TFRecord shards of $PROBLEM"
run "$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$DATA" --noprogress

for member in $members; do
  TRAIN=$(train_dir "$member")
  seed=()
  [ "$ENSEMBLE" -eq 1 ] || seed=(--seed="$member")
  step "train $HPARAMS_SET${HPARAMS:+ ($HPARAMS)} for $STEPS steps${seed[*]:+, ${seed[*]}} (resumes from the last checkpoint)"
  train_started=$(date +%s)
  run "$BIN/t2t-keras-trainer" --problem=$PROBLEM --hparams_set="$HPARAMS_SET" --hparams="$HPARAMS" "${seed[@]}" \
      --data_dir="$DATA" --output_dir="$TRAIN" --train_steps="$STEPS" --save_checkpoints_steps="$SAVE_STEPS" \
      --keep_checkpoint_max=$(( AVERAGE > 5 ? AVERAGE : 5 )) --log_steps=100 --eval_sentences="$EVAL_SENTENCES"
  train_seconds=$(( $(date +%s) - train_started ))
  if [ ! -f "$TRAIN.seconds" ] || [ "$train_seconds" -gt 60 ]; then echo "$train_seconds" > "$TRAIN.seconds"; fi

  if [ "$AVERAGE" -gt 1 ]; then step "average the last $AVERAGE checkpoints"; else step "the last checkpoint as the model"; fi
  if [ ! -f "${TRAIN}_avg/checkpoint" ]; then
    run "$BIN/t2t-keras-avg-checkpoints" --output_dir="$TRAIN" --num_last_checkpoints="$AVERAGE" --avg_dir="${TRAIN}_avg"
  else echo "reusing ${TRAIN}_avg"; fi
done
total=0
for member in $members; do total=$(( total + $(cat "$(train_dir "$member").seconds") )); done
echo "$total" > "$OUT/train_seconds"  # all members' training (demo.sh reads it)
AVG=$(train_dir 1)_avg
others=$(for member in $members; do [ "$member" -eq 1 ] || printf '%s,' "$(train_dir "$member")_avg"; done)
ensemble=()
[ -z "$others" ] || ensemble=(--ensemble="${others%,}")

step "decode the Multi30k val set (1014 sentences${DECODE_HPARAMS:+, $DECODE_HPARAMS})"
for language in en de; do  # the shipped val set, as plain text
  gzip -dc "problems/data/multi30k/val.$language.gz" > "$OUT/val.$language.tmp" && mv "$OUT/val.$language.tmp" "$OUT/val.$language"
done
if [ ! -f "$HYP" ]; then
  run "$BIN/t2t-keras-decoder" --output_dir="$AVG" "${ensemble[@]}" --decode_from_file="$OUT/val.en" \
      --decode_hparams="$DECODE_HPARAMS" --decode_to_file="$HYP" --noprogress
else echo "reusing $HYP"; fi

step "BLEU: sacreBLEU, detokenised, cased and lowercased"
bleu_line=$(run "$BIN/t2t-keras-bleu" --translation="$HYP" --reference="$OUT/val.de")
echo "$bleu_line"
run "$BIN/t2t-keras-bleu" --translation="$HYP" --reference="$OUT/val.de" --lowercase

echo "$bleu_line" | sed -nE 's/^BLEU = ([0-9.]+).*/\1/p' > "$OUT/val_bleu"  # the BLEU line (chrF2 follows it)

step "summary"
echo "val BLEU (sacreBLEU, cased, detokenised): $(cat "$OUT/val_bleu")"
for member in $members; do
  echo "training: $STEPS steps of $HPARAMS_SET in $(cat "$(train_dir "$member").seconds") s ($(train_dir "$member"))"
done
echo "this run: $(( $(date +%s) - started )) s"
echo "model: $AVG${ensemble[*]:+ with ${ensemble[*]}} (TensorBoard: $BIN/tensorboard --logdir=$(train_dir 1))"
echo "commands run: $OUT/commands.sh"
