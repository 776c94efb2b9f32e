#!/usr/bin/env bash
# Train, average and score a Multi30k English-German model with the package's commands:
#
#   datagen -> train -> each run's last checkpoint (or the average of its last N) -> decode the 1014-sentence val set
#   -> sacreBLEU (cased and lowercased, detokenised) -> the command lines it ran
#
#   bash examples/multi30k.sh                    # the recipe: two transformer_multi30k_v2 models (seeds 1 and 2),
#                                                # 12000 steps each, decoded as one
#   ENSEMBLE=1 bash examples/multi30k.sh         # one model (half the training)
#   REVERSE=1 bash examples/multi30k.sh          # also a de -> en model that reranks the hypotheses (one model more)
#   BACK_TRANSLATE=1 bash examples/multi30k.sh   # the de -> en model also back-translates train's German side,
#                                                # and the en -> de model trains on original + synthetic pairs
#   make demo                                    # the same pipeline with transformer_demo, 1500 steps
#
# Settings come from the environment (defaults: the recipe). Rerunning reuses what is
# complete: datagen and the trainer resume, later steps are skipped when their output exists.
set -euo pipefail

BIN_GIVEN=${BIN:-}
BIN=${BIN:-.venv/bin}
OUT=${OUT:-out/multi30k}
HPARAMS_SET=${HPARAMS_SET:-transformer_multi30k_v2}
HPARAMS=${HPARAMS:-}
STEPS=${STEPS:-12000}
SAVE_STEPS=${SAVE_STEPS:-1000}
AVERAGE=${AVERAGE:-1}                     # the last N checkpoints are averaged (1: the last one, the cooldown's end)
DECODE_HPARAMS=${DECODE_HPARAMS-beam_size=8,alpha=1.5,exact_search=true}  # the val decode (the problem's default: beam 4, alpha 0.6, early stop)
EVAL_SENTENCES=${EVAL_SENTENCES:-100}     # dev sentences decoded (beam 4) for BLEU at each checkpoint
ENSEMBLE=${ENSEMBLE:-2}                   # models trained (member k with --seed=k when more than one), decoded together
SEED=${SEED:-}                            # with ENSEMBLE=1: the one model's --seed (SEED=1: the recipe's first member alone)
REVERSE=${REVERSE:-0}                     # 1: a de -> en model (the same hparams and steps) reranks each sentence's beam
BACK_TRANSLATE=${BACK_TRANSLATE:-0}       # 1 (with REVERSE=1): that model first samples an English side for train's German captions
BACK_TRANSLATE_HPARAMS=${BACK_TRANSLATE_HPARAMS-sampling_top_k=10,beam_size=1,seed=1}  # one draw a line from the 10 likeliest tokens
PROBLEM=translate_ende_multi30k
REVERSE_PROBLEM=translate_deen_multi30k
DATA=$OUT/data
REVERSE_TRAIN=$OUT/train_reverse
if [ "$BACK_TRANSLATE" -eq 1 ] && [ "$REVERSE" -ne 1 ]; then
  echo "error: BACK_TRANSLATE=1 needs REVERSE=1: the de -> en model is what back-translates." >&2
  exit 2
fi
members=$(seq 1 "$ENSEMBLE")
train_dir() { if [ "$ENSEMBLE" -eq 1 ]; then echo "$OUT/train"; else echo "$OUT/train_seed$1"; fi; }
HYP=$OUT/val.hyp.de
[ "$ENSEMBLE" -eq 1 ] || HYP=$OUT/val.ensemble$ENSEMBLE.hyp.de
started=$(date +%s)
[ -n "${BIN_GIVEN:-}" ] || make --no-print-directory .venv/.installed  # the package in .venv, as make test / make demo set it up
# Mixed bf16 where the CPU multiplies bf16 natively (AVX512_BF16 or AMX), fp32 elsewhere, unless
# HPARAMS sets mixed_precision (PRECISION=float32 or mixed_bfloat16 forces one): the recipe's
# members in bf16 scored level with or above fp32 ones of the same seeds on val and dev2
# (docs/results/multi30k.md). The run's hparams.json records the choice.
if [[ "$HPARAMS" != *mixed_precision* ]]; then
  PRECISION=${PRECISION:-$("$BIN/python" -c 'from t2t_keras.system import bfloat16_units; print("mixed_bfloat16" if bfloat16_units() else "float32")' 2>/dev/null)}
  HPARAMS="mixed_precision=$PRECISION${HPARAMS:+,$HPARAMS}"
fi
mkdir -p "$OUT"
: > "$OUT/commands.sh"

step() { printf '\n=== %s\n' "$*"; }
# A member's training as its run.json states it, over every trainer start (a run resumed in
# another session or on another CPU included): $TRAIN.seconds (wall seconds) and $TRAIN.training
# (one line: steps, target tokens, seconds, CPUs). $2: this invocation's seconds, the fallback for
# a run dir without the log.
training_record() {
  "$BIN/python" - "$1" "$2" <<'PY'
import json, os, sys
run_dir, fallback = sys.argv[1], int(sys.argv[2])
with open(run_dir + "/run.json") as handle:
    parts = json.load(handle).get("training", [])
if parts:
    seconds = round(sum(part["seconds"] for part in parts))
    cpus = sorted({part["cpu"] for part in parts})
    line = (f"steps {parts[0]['from_step']}-{parts[-1]['to_step']}, "
            f"{sum(part['target_tokens'] for part in parts) / 1e6:.1f}M target tokens, {seconds} s in "
            f"{len(parts)} start{'s' if len(parts) > 1 else ''} on {' + '.join(cpus)}")
elif os.path.exists(run_dir + ".seconds") and fallback <= 60:  # a rerun that found the training done
    with open(run_dir + ".seconds") as handle:
        seconds = int(handle.read())
    line = f"{seconds} s (an earlier invocation's; run.json has no training log)"
else:
    seconds, line = fallback, f"{fallback} s (this invocation; run.json has no training log)"
for suffix, text in ((".seconds", str(seconds)), (".training", line)):
    with open(run_dir + suffix + ".tmp", "w") as handle:
        handle.write(text + "\n")
    os.replace(run_dir + suffix + ".tmp", run_dir + suffix)
PY
}
run() { echo "$*" >> "$OUT/commands.sh"; "$@"; }  # run a command and record its line
latest_checkpoint() { sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' "$1/checkpoint"; }  # an average is named after its newest step
# averaged_count AVG_DIR: how many checkpoints the average holds (run.json), so a changed AVERAGE= makes it again.
averaged_count() { "$BIN/python" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["averaged"]))' "$1/run.json" 2>/dev/null || true; }

averaged_now=0  # 1 once a model's average is (re)made: the val decode is then redone
# datagen PROBLEM DATA_DIR [FLAG...]: the vocabulary and shards (reused when complete).
datagen() {
  step "datagen: SentencePiece vocabulary and TFRecord shards of $1"
  run "$BIN/t2t-keras-datagen" --problem="$1" --data_dir="$2" "${@:3}" --noprogress
}
# train_and_average PROBLEM DATA_DIR TRAIN_DIR [--seed=K]: the model of TRAIN_DIR_avg.
train_and_average() {
  local problem=$1 data=$2 train=$3 seed=("${@:4}")
  step "train $problem: $HPARAMS_SET${HPARAMS:+ ($HPARAMS)} for $STEPS steps${seed[*]:+, ${seed[*]}} (resumes from the last checkpoint)"
  local train_started=$(date +%s)
  run "$BIN/t2t-keras-trainer" --problem="$problem" --hparams_set="$HPARAMS_SET" --hparams="$HPARAMS" "${seed[@]}" \
      --data_dir="$data" --output_dir="$train" --train_steps="$STEPS" --save_checkpoints_steps="$SAVE_STEPS" \
      --keep_checkpoint_max=$(( AVERAGE > 5 ? AVERAGE : 5 )) --log_steps=100 --eval_sentences="$EVAL_SENTENCES"
  training_record "$train" $(( $(date +%s) - train_started ))

  if [ "$AVERAGE" -gt 1 ]; then step "average the last $AVERAGE checkpoints"; else step "the last checkpoint as the model"; fi
  if [ -f "${train}_avg/checkpoint" ] && [ "$(latest_checkpoint "${train}_avg")" = "$(latest_checkpoint "$train")" ] \
      && [ "$(averaged_count "${train}_avg")" = "$AVERAGE" ]; then
    echo "reusing ${train}_avg"
  else
    run "$BIN/t2t-keras-avg-checkpoints" --output_dir="$train" --num_last_checkpoints="$AVERAGE" --avg_dir="${train}_avg"
    averaged_now=1
  fi
}
trained=()  # every model's train dir, for the training totals
datagen $PROBLEM "$DATA"
reverse=()
if [ "$REVERSE" -eq 1 ]; then  # first: with BACK_TRANSLATE=1 the en -> de model's data comes from it
  datagen $REVERSE_PROBLEM "$OUT/data_reverse"
  train_and_average $REVERSE_PROBLEM "$OUT/data_reverse" "$REVERSE_TRAIN"
  trained+=("$REVERSE_TRAIN")
  reverse=(--reverse_model="${REVERSE_TRAIN}_avg")
fi
train_problem=$PROBLEM train_data=$DATA
if [ "$BACK_TRANSLATE" -eq 1 ]; then
  step "back-translate train's German side with ${REVERSE_TRAIN}_avg ($BACK_TRANSLATE_HPARAMS)"
  # the problem's train split (dev2's pairs held out), as text
  "$BIN/python" - "$OUT" <<'PY'
import os, sys
from t2t_keras.data.text_files import TextStats
from t2t_keras.problems.translate_multi30k import multi30k_pairs

pairs = list(multi30k_pairs("train", "en", "de", TextStats()))
for side, language in enumerate(("en", "de")):
    path = os.path.join(sys.argv[1], f"train.{language}")
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        out.writelines(pair[side] + "\n" for pair in pairs)
    os.replace(path + ".tmp", path)
PY
  redo=()
  [ "$averaged_now" -eq 0 ] || redo=(--start_over)  # a new reverse model: the earlier sample is another's
  run "$BIN/t2t-keras-decoder" --output_dir="${REVERSE_TRAIN}_avg" --decode_from_file="$OUT/train.de" \
      --decode_to_file="$OUT/train.bt.en" --decode_hparams="$BACK_TRANSLATE_HPARAMS" --noprogress "${redo[@]}"
  # original + synthetic pairs, encoded with the en-de vocabulary; val is the dev set, as in the en-de data
  data=problems/data/multi30k
  [ "${#redo[@]}" -eq 0 ] || rm -rf "$OUT/data_bt"  # made from the earlier sample
  datagen translate_text "$OUT/data_bt" --vocab_model="$DATA/$PROBLEM.spm.model" --source_language=en --target_language=de \
      --train_source="$OUT/train.en,$OUT/train.bt.en" --train_target="$OUT/train.de,$OUT/train.de" \
      --dev_source="$data/val.en.gz" --dev_target="$data/val.de.gz"
  train_problem=translate_text train_data=$OUT/data_bt
fi
for member in $members; do
  seed=()
  if [ "$ENSEMBLE" -ne 1 ]; then seed=(--seed="$member"); elif [ -n "$SEED" ]; then seed=(--seed="$SEED"); fi
  train_and_average $train_problem "$train_data" "$(train_dir "$member")" "${seed[@]}"
  trained+=("$(train_dir "$member")")
done
total=0
for train in "${trained[@]}"; do total=$(( total + $(cat "$train.seconds") )); done
echo "$total" > "$OUT/train_seconds"  # all models' training (demo.sh reads it)
AVG=$(train_dir 1)_avg
others=$(for member in $members; do [ "$member" -eq 1 ] || printf '%s,' "$(train_dir "$member")_avg"; done)
ensemble=()
[ -z "$others" ] || ensemble=(--ensemble="${others%,}")

step "decode the Multi30k val set (1014 sentences${DECODE_HPARAMS:+, $DECODE_HPARAMS})"
for language in en de; do  # the shipped val set, as plain text
  gzip -dc "problems/data/multi30k/val.$language.gz" > "$OUT/val.$language.tmp" && mv "$OUT/val.$language.tmp" "$OUT/val.$language"
done
restart=()
[ "$averaged_now" -eq 0 ] || restart=(--start_over)  # new weights: the earlier decode is of others
# The decoder resumes a killed decode, says a complete one has nothing to do, and refuses one of other settings.
run "$BIN/t2t-keras-decoder" --output_dir="$AVG" "${ensemble[@]}" "${reverse[@]}" --decode_from_file="$OUT/val.en" \
    --decode_hparams="$DECODE_HPARAMS" --decode_to_file="$HYP" --noprogress "${restart[@]}"

step "BLEU: sacreBLEU, detokenised, cased and lowercased"
bleu_line=$(run "$BIN/t2t-keras-bleu" --translation="$HYP" --reference="$OUT/val.de")
echo "$bleu_line"
run "$BIN/t2t-keras-bleu" --translation="$HYP" --reference="$OUT/val.de" --lowercase

echo "$bleu_line" | sed -nE 's/^BLEU = ([0-9.]+).*/\1/p' > "$OUT/val_bleu"  # the BLEU line (chrF2 follows it)

step "summary"
echo "val BLEU (sacreBLEU, cased, detokenised): $(cat "$OUT/val_bleu")"
for train in "${trained[@]}"; do
  echo "training of $train ($HPARAMS_SET, $STEPS steps): $(cat "$train.training")"
done
echo "this run: $(( $(date +%s) - started )) s"
echo "model: $AVG${ensemble[*]:+ with ${ensemble[*]}}${reverse[*]:+, reranked by ${reverse[*]}} (TensorBoard: $BIN/tensorboard --logdir=$(train_dir 1))"
[ "$BACK_TRANSLATE" -eq 0 ] || echo "trained on the original pairs + the reverse model's back-translations: $OUT/data_bt"
echo "commands run: $OUT/commands.sh"
