#!/usr/bin/env bash
# Dev F1 of the parsing recipe against its training compute (issue 43): the README's recipe
# (transformer_parsing_small on parsing_english_ptb_sample_words) at 1x, 2x, 3x its 6000 steps.
#
#   datagen -> one trunk trained to the longest point, a checkpoint every SAVE_STEPS kept
#   -> each shorter point a branch of the trunk where its own cooldown starts (--branch_from)
#   -> every point decoded as the README decodes (beam 4, alpha 0.3, constrained) -> EVALB
#
#   bash examples/parsing_curve.sh                # points 1x 2x 3x: 18000 + 2 x 1800 steps in all
#   POINTS="1 2" bash examples/parsing_curve.sh   # 12000 + 1800
#
# Before its cooldown the recipe's schedule does not depend on --train_steps, so the trunk's
# checkpoint at k x STEPS - cooldown is where a k x STEPS run would be; the branch trains on
# from there with its cooldown ending at k x STEPS, the same run as one started for it. A
# point's compute is its steps x the recipe's target tokens per step, the trunk's steps shared.
# Rerunning resumes every run and skips what is done. Measured: docs/results/parsing.md, "F1
# against training compute".
set -euo pipefail

BIN_GIVEN=${BIN:-}
BIN=${BIN:-.venv/bin}
OUT=${OUT:-out/parse_curve}
STEPS=${STEPS:-6000}                 # the recipe's steps: the 1x point
POINTS=${POINTS:-1 2 3}              # multiples of STEPS, ascending
SAVE_STEPS=${SAVE_STEPS:-600}        # the trunk's checkpoints; every branch point must be one
HPARAMS=${HPARAMS:-}                 # overrides of transformer_parsing_small (the tests shrink it)
SEED=${SEED:-1}
PROBLEM=parsing_english_ptb_sample_words
HPARAMS_SET=transformer_parsing_small
DATA=$OUT/data
TRUNK=$OUT/trunk
started=$(date +%s)
[ -n "$BIN_GIVEN" ] || make --no-print-directory .venv/.installed
mkdir -p "$OUT"

step() { printf '\n=== %s\n' "$*"; }
hparam() { "$BIN/t2t-keras-hparams" --hparams_set=$HPARAMS_SET --hparams="$HPARAMS" 2>/dev/null \
             | "$BIN/python" -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }
cooldown=$(hparam learning_rate_cooldown_steps)
longest=$(( ${POINTS##* } * STEPS ))
for point in $POINTS; do
  branch_at=$(( point * STEPS - cooldown ))
  if [ "$branch_at" -le 0 ] || [ $(( branch_at % SAVE_STEPS )) -ne 0 ]; then
    echo "error: point ${point}x branches at step $branch_at (= $point x $STEPS - the cooldown of $cooldown): make it a positive multiple of SAVE_STEPS=$SAVE_STEPS" >&2
    exit 2
  fi
done
if [ -f "$TRUNK/run.json" ]; then  # a trunk's cooldown ends at its own --train_steps: it serves one longest point
  trained_to=$("$BIN/python" -c "import json, sys; print(json.load(open(sys.argv[1]))['train_steps'])" "$TRUNK/run.json")
  if [ "$trained_to" -ne "$longest" ]; then
    echo "error: $TRUNK is a trunk to step $trained_to, not $longest: end POINTS at $(( trained_to / STEPS )), or give another OUT" >&2
    exit 2
  fi
fi
trainer=("$BIN/t2t-keras-trainer" --problem=$PROBLEM --hparams_set=$HPARAMS_SET --hparams="$HPARAMS" --seed="$SEED"
         --data_dir="$DATA" --save_checkpoints_steps="$SAVE_STEPS" --eval_sentences=0 --log_steps=100)

step "datagen: $PROBLEM"
"$BIN/t2t-keras-datagen" --problem=$PROBLEM --data_dir="$DATA" --noprogress

step "trunk: $HPARAMS_SET${HPARAMS:+ ($HPARAMS)} to step $longest, a checkpoint every $SAVE_STEPS kept (resumes)"
"${trainer[@]}" --output_dir="$TRUNK" --train_steps="$longest" --keep_checkpoint_max=$(( longest / SAVE_STEPS ))

point_dir() { if [ $(( $1 * STEPS )) -eq "$longest" ]; then echo "$TRUNK"; else echo "$OUT/branch_${1}x"; fi; }
for point in $POINTS; do
  dir=$(point_dir "$point")
  [ "$dir" != "$TRUNK" ] || continue
  branch_at=$(( point * STEPS - cooldown ))
  step "${point}x: a branch of the trunk at step $branch_at, its cooldown ending at $(( point * STEPS )) (resumes)"
  "${trainer[@]}" --output_dir="$dir" --train_steps=$(( point * STEPS )) --branch_from="$TRUNK/ckpt-$branch_at"
done

summary=()
for point in $POINTS; do
  dir=$(point_dir "$point")
  parsed=$OUT/dev.${point}x.parsed
  step "${point}x: decode the 273 dev sentences as the README does"
  "$BIN/t2t-keras-decoder" --output_dir="$dir" --decode_hparams=beam_size=4,alpha=0.3 --noprogress \
      --decode_from_file="$DATA/$PROBLEM-dev.words" --decode_to_file="$parsed"
  score=$("$BIN/t2t-keras-evalb" --gold="$DATA/$PROBLEM-dev.trees" --test="$parsed")
  echo "$score"
  seconds=$("$BIN/python" -c "import json, sys; print(round(sum(p['seconds'] for p in json.load(open(sys.argv[1]))['training'])))" "$dir/run.json")
  summary+=("${point}x: $(( point * STEPS )) steps ($seconds s of training in $dir$( [ "$dir" = "$TRUNK" ] || echo ", after the trunk's first $(( point * STEPS - cooldown ))" )); $(echo "$score" | grep -m1 -E '^EVALB all')")
done

step "summary (dev F1 against training steps; the recipe's batch: $(hparam tokens_per_batch) tokens per step)"
printf '%s\n' "${summary[@]}"
echo "CPU: $("$BIN/python" -c 'from t2t_keras.system import cpu_model; print(cpu_model())'); this run: $(( $(date +%s) - started )) s"
