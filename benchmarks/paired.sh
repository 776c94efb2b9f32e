#!/usr/bin/env bash
# Paired runs of t2t-keras beside its peers (A B A B ...), the way issue #15's targets are
# measured: this machine drifts 20-30% between minutes, so only ratios of neighbouring runs
# mean something. Prints each benchmark's JSON line as it comes and appends it to $OUT.
#
#   bash benchmarks/paired.sh decode [pairs]   # CTranslate2 float32 and int8 (one batch, two halves), ours
#   bash benchmarks/paired.sh train [pairs]    # keras-hub vs ours, tiny then base
#
# Every peer runs in its better configuration: CTranslate2 both as one batch and as two halves
# side by side (--parts 1|2), keras-hub with the malloc settings ours gets from
# t2t_keras.system.keep_freed_memory. Ours and keras-hub run in each of $PRECISIONS (default:
# fp32, and bf16 where the CPU has bfloat16 units).
# Needs the peers' folder in $T2T_BENCH_DIR and their venvs (its setup_venvs.sh; $BENCH_VENVS, default /tmp/bench).
# Run it alone: two benchmarks at once on 2 cores spoil each other.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
bench="${T2T_BENCH_DIR:?set T2T_BENCH_DIR to the peers' benchmark folder (on this project's machines: ../shared/bench)}"
venvs="${BENCH_VENVS:-${TMPDIR:-/tmp}/bench}"
what="${1:?decode or train}"
pairs="${2:-3}"
OUT="${OUT:-$here/results-$(date +%Y-%m-%d).jsonl}"
ours="$repo/.venv/bin/python"
export TF_CPP_MIN_LOG_LEVEL=2
if [ -z "${PRECISIONS:-}" ]; then  # t2t_keras.system.bfloat16_units decides, as the decoder's fallback does
    PRECISIONS="$("$ours" -c 'from t2t_keras.system import bfloat16_units; print("fp32 bf16" if bfloat16_units() else "fp32")' 2>/dev/null)"
fi
precisions="$PRECISIONS"

run() {  # a benchmark command; its JSON line to stdout and $OUT
    local line
    line="$("$@" 2>/dev/null | tail -n 1)"
    echo "$line"
    echo "$line" >> "$OUT"
}

for pair in $(seq "$pairs"); do
    case "$what" in
        decode)
            for compute_type in float32 int8; do
                for parts in 1 2; do
                    (cd "$bench" && run "$venvs/venv-torch/bin/python" decode_ct2.py --compute_type "$compute_type" --parts "$parts")
                done
            done
            for precision in $precisions; do
                run "$ours" "$here/decode_speed.py" --precision "$precision"
            done
            ;;
        train)
            for size in tiny base; do
                for precision in $precisions; do
                    (cd "$bench" && MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 \
                        run "$venvs/venv-tf/bin/python" train_keras.py --size "$size" --impl keras_hub --precision "$precision")
                    run "$ours" "$here/train_throughput.py" --size "$size" --precision "$precision"
                done
            done
            ;;
        *) echo "error: the first argument is decode or train, not '$what'" >&2; exit 2 ;;
    esac
done
