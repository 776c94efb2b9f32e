#!/usr/bin/env bash
# Paired runs of t2t-keras beside its peers (A B A B ...), the way issue #15's targets are
# measured: this machine drifts 20-30% between minutes, so only ratios of neighbouring runs
# mean something. Prints each benchmark's JSON line as it comes and appends it to $OUT.
#
#   bash benchmarks/paired.sh decode [pairs]   # CTranslate2 float32, ours (+50), ours (+300)
#   bash benchmarks/paired.sh train [pairs]    # keras-hub vs ours, fp32, tiny then base
#
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

run() {  # a benchmark command; its JSON line to stdout and $OUT
    local line
    line="$("$@" 2>/dev/null | tail -n 1)"
    echo "$line"
    echo "$line" >> "$OUT"
}

for pair in $(seq "$pairs"); do
    case "$what" in
        decode)
            (cd "$bench" && run "$venvs/venv-torch/bin/python" decode_ct2.py)
            run "$ours" "$here/decode_speed.py" --extra_length=50
            run "$ours" "$here/decode_speed.py" --extra_length=300
            ;;
        train)
            for size in tiny base; do
                (cd "$bench" && run "$venvs/venv-tf/bin/python" train_keras.py --size "$size" --impl keras_hub)
                run "$ours" "$here/train_throughput.py" --size "$size" --precision fp32
            done
            ;;
        *) echo "error: the first argument is decode or train, not '$what'" >&2; exit 2 ;;
    esac
done
