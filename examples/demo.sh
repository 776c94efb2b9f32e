#!/usr/bin/env bash
# `make demo`: the whole mission on the shipped Multi30k en-de, sized for a 2-core CPU.
#
#   datagen -> train transformer_demo -> average checkpoints -> decode the val set with
#   beam search -> BLEU both ways -> export a SavedModel -> translate with it in a fresh
#   process (TensorFlow + tensorflow_text only) -> attention heatmaps -> summary
#
# Every step is one of the package's commands, as a user would type it. Rerunning reuses
# what is complete: datagen and the trainer resume, the other steps are skipped when their
# output exists (each output is written under a temporary name and renamed when complete).
set -euo pipefail

BIN=${BIN:-.venv/bin}
OUT=${DEMO_DIR:-out/demo}
STEPS=${DEMO_STEPS:-800}
PROBLEM=translate_ende_multi30k
DATA=$OUT/data
TRAIN=$OUT/train
AVG=$OUT/train_avg
EXPORT=$OUT/export
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
started=$(date +%s)
mkdir -p "$OUT"

step() { printf '\n=== %s\n' "$*"; }
# TensorFlow's C++ start-up prints CUDA probing lines on machines without a GPU; drop them.
quiet() { "$@" 2> >(grep --line-buffered -v -e '^[IWE]0000 ' -e '^WARNING: All log messages before absl' >&2); }

step "1/8 datagen: SentencePiece vocabulary and TFRecord shards of $PROBLEM"
quiet "$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$DATA" --noprogress

step "2/8 train transformer_demo for $STEPS steps (resumes from the last checkpoint)"
train_started=$(date +%s)
quiet "$BIN/t2t-keras-trainer" --problem=$PROBLEM --hparams_set=transformer_demo --data_dir="$DATA" \
    --output_dir="$TRAIN" --train_steps="$STEPS" --save_checkpoints_steps=200 --log_steps=100 \
    --eval_sentences=100
train_seconds=$(( $(date +%s) - train_started ))
if [ ! -f "$OUT/train_seconds" ] || [ "$train_seconds" -gt 60 ]; then echo "$train_seconds" > "$OUT/train_seconds"; fi

step "3/8 average the last 2 checkpoints"
if [ ! -f "$AVG/checkpoint" ]; then
  quiet "$BIN/t2t-keras-avg-checkpoints" --output_dir="$TRAIN" --num_last_checkpoints=2 --avg_dir="$AVG"
else echo "reusing $AVG"; fi

step "4/8 decode the Multi30k val set (1014 sentences, beam 4, alpha 0.6)"
for language in en de; do  # the shipped val set, as plain text
  gzip -dc "problems/data/multi30k/val.$language.gz" > "$OUT/val.$language.tmp" && mv "$OUT/val.$language.tmp" "$OUT/val.$language"
done
if [ ! -f "$OUT/val.hyp.de" ]; then
  quiet "$BIN/t2t-keras-decoder" --output_dir="$AVG" --decode_from_file="$OUT/val.en" \
      --decode_to_file="$OUT/val.hyp.de" --decode_reference="$OUT/val.de" --noprogress
else echo "reusing $OUT/val.hyp.de"; fi

step "5/8 BLEU: sacreBLEU (detokenised) and the paper's tokenised way"
bleu_line=$(quiet "$BIN/t2t-keras-bleu" --translation="$OUT/val.hyp.de" --reference="$OUT/val.de")
echo "$bleu_line"
quiet "$BIN/t2t-keras-bleu" --translation="$OUT/val.hyp.de" --reference="$OUT/val.de" --paper_tokenized

step "6/8 export a SavedModel for TF Serving"
version=$(ls "$EXPORT" 2>/dev/null | grep -E '^[0-9]+$' | sort -n | tail -1 || true)
if [ -z "$version" ]; then
  quiet "$BIN/t2t-keras-exporter" --output_dir="$AVG" --export_dir="$EXPORT"
  version=$(ls "$EXPORT" | grep -E '^[0-9]+$' | sort -n | tail -1)
else echo "reusing $EXPORT/$version"; fi

step "7/8 translate with the SavedModel in a fresh process (tensorflow + tensorflow_text only)"
quiet "$BIN/python" examples/serving_client.py "$EXPORT/$version" \
    "A man in an orange hat is looking at something." \
    "Two young children are playing in the sand on the beach." \
    "A woman with a red umbrella walks down a busy street."

step "8/8 attention heatmaps (encoder self, decoder self, encoder-decoder; per layer and head)"
quiet "$BIN/t2t-keras-visualize" --output_dir="$AVG" --plot_dir="$OUT/attention" \
    --sentence="Two young children are playing in the sand on the beach."

step "summary"
echo "val BLEU (sacreBLEU, detokenised): $(echo "$bleu_line" | sed -E 's/^BLEU = ([0-9.]+).*/\1/')"
echo "training: $STEPS steps of transformer_demo in $(cat "$OUT/train_seconds") s; whole demo run: $(( $(date +%s) - started )) s"
echo "data:        $DATA"
echo "checkpoints: $TRAIN (TensorBoard: .venv/bin/tensorboard --logdir=$TRAIN)"
echo "averaged:    $AVG"
echo "translation: $OUT/val.hyp.de"
echo "SavedModel:  $EXPORT/$version"
echo "attention:   $OUT/attention/*.png"
