#!/usr/bin/env bash
# Paired runs (A B A B ...; with --against, A B then B A): this machine drifts 20-30% between
# minutes, so only ratios of neighbouring runs mean something. Prints each benchmark's JSON
# line as it comes, appends it (with a "label") to $OUT, and ends with the medians and ratios
# of this run
# (benchmarks/paired_summary.py).
#
#   bash benchmarks/peers/setup.sh                  # once: the peers' venvs (PyTorch, keras-hub), pinned
#   bash benchmarks/paired.sh decode [pairs]        # CTranslate2 float32 and int8 (one batch, two halves), ours
#   bash benchmarks/paired.sh train [pairs]         # the peers of $TRAIN_PEERS vs ours, tiny then base
#   bash benchmarks/paired.sh decode_file [pairs]   # a trained run ($RUN_DIR, default out/demo/train_avg) on
#                                                   # Multi30k val: ours with and without its shortlist, the same
#                                                   # weights in CTranslate2 (each compute type, one batch or two
#                                                   # halves, with and without the vmap); sentences/s and BLEU
#   bash benchmarks/paired.sh fit [pairs]           # README's Keras fit ("ours") against the trainer's step on
#                                                   # the demo's data (out/demo/data, make demo): steps/s
#   bash benchmarks/paired.sh decode 3 --against b17efc8   # the working tree vs a commit, nothing else
#   bash benchmarks/paired.sh train 3 --against HEAD~1
#
# --against COMMIT checks COMMIT out into a temporary git worktree and runs its own copy of
# each benchmark script (the working tree's where it has none) with the same .venv, its
# package first on PYTHONPATH: a regression is caught the day it is written.
#
# The peers and the protocol they share (shapes, data, timing, FLOPs) are benchmarks/peers/.
# Every peer runs in its better configuration: CTranslate2 both as one batch and as two halves
# side by side (--parts 1|2), keras-hub with the malloc settings ours gets from
# t2t_keras.system.keep_freed_memory. $TRAIN_PEERS (default: all of them) picks the training
# peers: keras-hub, torch (PyTorch's nn.Transformer, eager), torch-compile (the same under
# torch.compile), and ceiling (step_matmul_ceiling.py: the step's own products alone, so that
# the summary gives the step's fraction of that ceiling from the same run); $TRAIN_SIZES (default
# "tiny base") the shapes. Ours and keras-hub run in each of $PRECISIONS (default:
# fp32, and bf16 where the CPU has bfloat16 units; for decode, fp32+int8 or bf16+int8 adds the
# int8 output product, decode_speed.py --int8_logits; decode's default adds the fastest
# configuration: bf16+int8 where the CPU has bfloat16 units, else fp32+int8).
# The training peers need their venvs (benchmarks/peers/setup.sh; $PEER_VENVS, default
# benchmarks/peers/.venvs); CTranslate2 and --against need only the package's .venv.
# $PAIRED_LOG, if set, collects the benchmarks' stderr. Run it alone: two benchmarks at once
# on 2 cores spoil each other.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
peers="$here/peers"
venvs="${PEER_VENVS:-$peers/.venvs}"
what="${1:?decode or train}"
pairs="${2:-3}"
against=""
if [ "${3:-}" = "--against" ]; then
    against="${4:?--against needs a commit}"
elif [ -n "${3:-}" ]; then
    echo "error: the third argument is --against COMMIT, not '$3'" >&2; exit 2
fi
case "$what" in decode|train|decode_file|fit) ;; *) echo "error: the first argument is decode, train, decode_file or fit, not '$what'" >&2; exit 2 ;; esac
OUT="${OUT:-$here/results-$(date +%Y-%m-%d).jsonl}"
ours="$repo/.venv/bin/python"
export TF_CPP_MIN_LOG_LEVEL=2
if [ -z "${PRECISIONS:-}" ]; then  # t2t_keras.system.bfloat16_units decides, as the decoder's fallback does
    PRECISIONS="$("$ours" -c 'from t2t_keras.system import bfloat16_units; print("fp32 bf16" if bfloat16_units() else "fp32")' 2>/dev/null)"
    if [ "$what" = decode ]; then PRECISIONS="$PRECISIONS ${PRECISIONS##* }+int8"; fi  # the fastest configuration
fi
precisions="$PRECISIONS"
train_peers="${TRAIN_PEERS:-keras-hub torch torch-compile ceiling}"
for peer in $train_peers; do
    case "$peer" in keras-hub|torch|torch-compile|ceiling) ;; *) echo "error: TRAIN_PEERS: unknown peer '$peer' (keras-hub, torch, torch-compile, ceiling)" >&2; exit 2 ;; esac
done
run_started="$(date -u +%Y-%m-%dT%H:%M:%S)"

run_dir="${RUN_DIR:-$repo/out/demo/train_avg}"
decode_hparams="${DECODE_HPARAMS:-beam_size=4,alpha=1.4}"
if [ "$what" = decode_file ]; then
    [ -f "$run_dir/hparams.json" ] || { echo "error: RUN_DIR=$run_dir is not a trained run (make demo writes out/demo/train_avg)" >&2; exit 2; }
    if [ -z "$against" ]; then  # the same weights for CTranslate2, exported once for this run
        ct2_dir="$(mktemp -d "${TMPDIR:-/tmp}/t2t-ct2-XXXXXX")/model"
        trap 'rm -rf "$(dirname "$ct2_dir")"' EXIT
        "$ours" -m t2t_keras.bin.exporter --format=ctranslate2 --output_dir="$run_dir" --export_dir="$ct2_dir" \
            --decode_hparams="$decode_hparams" > /dev/null
        ct2_types="$("$ours" -c 'import ctranslate2; t = ctranslate2.get_supported_compute_types("cpu"); print(" ".join(c for c in ("float32", "int8", "bfloat16") if c in t))')"
    fi
elif [ "$what" = train ] && [ -z "$against" ]; then
    for peer in $train_peers; do
        venv="$venvs/${peer%-compile}"
        [ "$peer" = ceiling ] || [ -f "$venv/.requirements" ] \
            || { echo "error: TRAIN_PEERS: $peer needs $venv; make it with: bash benchmarks/peers/setup.sh" >&2; exit 2; }
    done
fi
if [ -n "$against" ]; then
    commit="$(git -C "$repo" rev-parse --verify --quiet "$against^{commit}")" \
        || { echo "error: --against $against: no such commit in $repo" >&2; exit 2; }
    other="$(mktemp -d "${TMPDIR:-/tmp}/t2t-against-XXXXXX")"
    trap 'git -C "$repo" worktree remove --force "$other" >/dev/null 2>&1 || rm -rf "$other"' EXIT
    git -C "$repo" worktree add --detach --quiet "$other" "$commit"
    # The catalogs are importable only as t2t_keras.problems / t2t_keras.hparams (the editable
    # install's mapping, which points at the working tree): the same names, inside the copy.
    ln -s ../problems "$other/t2t_keras/problems"
    ln -s ../hparams "$other/t2t_keras/hparams"
    # Older commits' benchmarks read the protocol's shapes.py from the folder $T2T_BENCH_DIR names.
    export T2T_BENCH_DIR="$peers"
fi

run() {  # LABEL COMMAND...: the command's last stdout line (its JSON), labelled, to stdout and $OUT
    local label="$1" line
    shift
    line="$("$@" 2>>"${PAIRED_LOG:-/dev/null}" | tail -n 1)" || true
    line="$(LABEL="$label" STARTED="$run_started" "$ours" -c '
import json, os, sys
line = sys.argv[1]
try:
    result = json.loads(line)
except ValueError:
    result = {"status": "failed", "output": line[-300:]}
print(json.dumps({"label": os.environ["LABEL"], "paired_run": os.environ["STARTED"], **result}))' "$line")"
    echo "$line"
    echo "$line" >> "$OUT"
}

ours_in() {  # TREE LABEL SCRIPT ARGS...: one of our benchmarks, run with TREE's package and script
    local tree="$1" label="$2" script="$3"
    shift 3
    local path="$tree/benchmarks/$script"
    [ -f "$path" ] || path="$here/$script"
    if [ "$tree" = "$repo" ]; then
        run "$label" "$ours" "$path" "$@"
    else
        BENCH_COMMIT="$against ($(git -C "$tree" rev-parse --short HEAD))" PYTHONPATH="$tree${PYTHONPATH:+:$PYTHONPATH}" \
            run "$label" "$ours" "$path" "$@"
    fi
}

# against_and_ours LABEL SCRIPT ARGS...: ours (labelled "ours LABEL"), and with --against the
# commit's run first in odd pairs and second in even ones: whichever runs second in a pair
# gains or loses from its place (a control of identical code read 1.044), and alternating
# the order cancels that in the median.
against_and_ours() {
    local label="$1"
    shift
    if [ -n "$against" ] && [ $((pair % 2)) -eq 1 ]; then ours_in "$other" "$against $label" "$@"; fi
    ours_in "$repo" "ours $label" "$@"
    if [ -n "$against" ] && [ $((pair % 2)) -eq 0 ]; then ours_in "$other" "$against $label" "$@"; fi
}

for pair in $(seq "$pairs"); do
    case "$what" in
        decode)
            if [ -z "$against" ]; then
                for compute_type in float32 int8; do
                    for parts in 1 2; do
                        run "ctranslate2 $compute_type parts=$parts" \
                            "$ours" "$peers/decode_ct2.py" --compute_type "$compute_type" --parts "$parts"
                    done
                done
            fi
            for precision in $precisions; do  # fp32, bf16, or either +int8 (the int8 output product)
                flag=(); [ "${precision%+int8}" = fp32 ] || flag=(--precision "${precision%+int8}")  # older scripts know fp32 only
                [ "$precision" = "${precision%+int8}" ] || flag+=(--int8_logits)
                against_and_ours "$precision" decode_speed.py "${flag[@]}"
            done
            ;;
        train)
            for size in ${TRAIN_SIZES:-tiny base}; do
                for precision in $precisions; do
                    flag=(); [ "$precision" = fp32 ] || flag=(--precision "$precision")
                    if [ -z "$against" ]; then
                        for peer in $train_peers; do
                            case "$peer" in
                                keras-hub) MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1073741824 \
                                    run "keras-hub $size $precision" "$venvs/keras-hub/bin/python" "$peers/train_keras_hub.py" \
                                    --size "$size" --precision "$precision" ;;
                                torch) run "torch $size $precision" "$venvs/torch/bin/python" \
                                    "$peers/train_torch.py" --size "$size" --precision "$precision" ;;
                                torch-compile) run "torch-compile $size $precision" \
                                    "$venvs/torch/bin/python" "$peers/train_torch.py" --size "$size" --precision "$precision" --compile ;;
                                ceiling) ours_in "$repo" "ceiling $size $precision" step_matmul_ceiling.py \
                                    --size "$size" --precision "$precision" ;;
                            esac
                        done
                    fi
                    against_and_ours "$size $precision" train_throughput.py --size "$size" "${flag[@]}"
                done
            done
            ;;
        fit)
            for precision in $precisions; do
                [ -n "$against" ] || ours_in "$repo" "trainer $precision" fit_speed.py --loop trainer --precision "$precision"
                against_and_ours "$precision" fit_speed.py --loop fit --precision "$precision"
            done
            ;;
        decode_file)
            for precision in $precisions; do
                for shortlist in 0 20; do
                    for sentences in 64 128; do
                        label="$precision shortlist=$shortlist sentences=$sentences"
                        args=(--output_dir="$run_dir"
                              --decode_hparams="$decode_hparams,precision=$precision,shortlist=$shortlist,sentences_per_batch=$sentences")
                        against_and_ours "$label" decode_file.py "${args[@]}"
                    done
                done
            done
            if [ -z "$against" ]; then
                for compute_type in $ct2_types; do
                    for parts in 1 2; do
                        for vmap in "" --use_vmap; do
                            for sentences in 8 32; do  # its vocabulary map is a batch's union: smaller batches, fewer columns
                                run "ctranslate2 $compute_type parts=$parts${vmap:+ vmap} sentences=$sentences" "$ours" \
                                    "$here/decode_file.py" --engine=ctranslate2 --ct2_dir="$ct2_dir" --compute_type="$compute_type" \
                                    --parts="$parts" --max_batch_size="$sentences" $vmap
                            done
                        done
                    done
                done
            fi
            ;;
    esac
done
"$ours" "$here/paired_summary.py" "$OUT" --run "$run_started"
