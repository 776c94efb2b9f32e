"""Sentences/s and sacreBLEU of decoding a real file with a trained model: ours as
t2t-keras-decoder decodes it, or the same weights in CTranslate2 (an export of the run).

    .venv/bin/python benchmarks/decode_file.py --output_dir=out/demo/train_avg                      # 128 a batch
    .venv/bin/python benchmarks/decode_file.py --output_dir=out/demo/train_avg --decode_hparams=beam_size=4,alpha=1.4,shortlist=20
    .venv/bin/python benchmarks/decode_file.py --output_dir=out/demo/train_avg --window_lines=0      # the whole file sorted at once
    .venv/bin/python benchmarks/decode_file.py --engine=ctranslate2 --ct2_dir=out/demo/ct2 --compute_type=int8 --parts=2 --use_vmap

Default input: the shipped Multi30k en-de val set (1014 lines), scored against val.de. Ours:
the decoder's streamed windows, batches of sentences_per_batch (or batch_tokens), each batch
searched in parallel_parts parts (a core each). CTranslate2 (`t2t-keras-exporter
--format=ctranslate2`): translate_batch over the whole file, which it sorts by length into
batches of --max_batch_size, on --parts workers of cores/parts threads each; beam and length
penalty from the export's t2t_keras_export.json (CTranslate2 divides log P by |Y|^lp, ours by
((5 + |Y|) / 6)^alpha: --length_penalty overrides). SentencePiece encoding and decoding are
timed in both. Decodes the file once to warm up, then `--repeats` times; prints one JSON line
with the median sentences/s, the BLEU, the settings and the CPU. With `--cold`, the process
first decodes the file's first line alone (what a command on one line does once loaded:
tracing), `startup_s` says how long that took since the process began, and the file's first
decoding is timed (`cold_sentences_per_s`: what a command on the file pays beyond a command on
one line: the first batches' kernels, memory and shapes included, as a user's command decodes
a file once). Run it alone: two benchmarks on 2 cores spoil each other.
"""

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import sys
import time

STARTED = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_keras.system import cpu_model, keep_freed_memory, keep_kernels_for_every_shape  # noqa: E402

keep_freed_memory()  # as the CLIs do
keep_kernels_for_every_shape()


def read(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def timed(decode, repeats: int, cold: dict | None = None):
    """(sentences/s of each of `repeats` runs after a warm-up, the last run's outputs); `decode(lines)`
    decodes the first `lines` (None: all). With `cold` (a dict), the warm-up is timed after a
    decoding of the first line: cold["startup_s"], the process until then, and
    cold["cold_sentences_per_s"], the first decoding's rate."""
    if cold is not None:
        decode(1)  # what a command on one line does once loaded
        cold["startup_s"] = round(time.perf_counter() - STARTED, 2)
    started = time.perf_counter()
    outputs = decode()  # warm-up: traces every batch shape's graph, or CTranslate2's first allocations
    if cold is not None:
        cold["cold_sentences_per_s"] = round(len(outputs) / (time.perf_counter() - started), 2)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = decode()
        rates.append(len(outputs) / (time.perf_counter() - start))
    return rates, outputs


def ours(args, lines):
    """(rates, outputs, settings) of t2t-keras's decoder over `lines`."""
    from t2t_keras.decoding import file_decoding
    from t2t_keras.decoding.trained_run import TrainedRun
    from t2t_keras.translator import Translator

    # As t2t-keras-decoder: each part of a batch on a core of its own, set before TensorFlow starts.
    translator = Translator.from_run(TrainedRun.resolve(args.output_dir, args.decode_hparams))
    window = file_decoding.window_lines(translator.settings) if args.window_lines < 0 else args.window_lines or len(lines)
    translate_window = translator.window_translator()

    def decode(count=None):
        written = []
        file_decoding.decode_stream(translate_window, iter(enumerate(lines[:count])), written.extend, window)
        return written

    rates, outputs = timed(decode, args.repeats, args.cold)
    return rates, outputs, {"engine": "t2t_keras", "decode_hparams": dataclasses.asdict(translator.settings),
                            "window_lines": window, "checkpoint": recorded_path(translator.checkpoint_paths[0])}


def recorded_path(path: str) -> str:
    """`path` as a record keeps it: relative to the repository (out/demo/...), never a machine's
    absolute path (outside the repository: its last two parts)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.abspath(path) if path else path
    if not path or path.startswith(repo + os.sep):
        return os.path.relpath(path, repo) if path else path
    return os.path.join("...", *path.split(os.sep)[-2:])


def ctranslate2_engine(args, lines):
    """(rates, outputs, settings) of CTranslate2 over `lines`, with the export's SentencePiece model."""
    import sentencepiece

    from t2t_keras import extras

    ctranslate2 = extras.require("ctranslate2")  # one line naming the extra if it is missing
    with open(os.path.join(args.ct2_dir, "t2t_keras_export.json")) as handle:
        metadata = json.load(handle)
    search = dict(metadata["translate_batch"])
    if args.length_penalty is not None:
        search["length_penalty"] = args.length_penalty
    source = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.ct2_dir, "source.spm.model"))
    target_path = os.path.join(args.ct2_dir, "target.spm.model")
    target = sentencepiece.SentencePieceProcessor(model_file=target_path) if os.path.exists(target_path) else source
    cores = len(os.sched_getaffinity(0))
    translator = ctranslate2.Translator(args.ct2_dir, device="cpu", compute_type=args.compute_type,
                                        inter_threads=args.parts, intra_threads=max(1, cores // args.parts))

    def decode(count=None):
        tokens = [source.encode(line, out_type=str) for line in lines[:count]]
        results = translator.translate_batch(tokens, max_batch_size=args.max_batch_size, use_vmap=args.use_vmap,
                                             **search)
        return [target.decode(result.hypotheses[0]) for result in results]

    rates, outputs = timed(decode, args.repeats, args.cold)
    return rates, outputs, {"engine": "ctranslate2", "ctranslate2": ctranslate2.__version__,
                            "compute_type": args.compute_type, "parts": args.parts, "use_vmap": args.use_vmap,
                            "max_batch_size": args.max_batch_size, **search, "checkpoint": recorded_path(metadata["checkpoint"] or "")}


def main() -> None:
    from t2t_keras.evaluation.bleu import sacre_bleu
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("t2t_keras", "ctranslate2"), default="t2t_keras")
    parser.add_argument("--input", default=os.path.join(MULTI30K_DIR, "val.en.gz"))
    parser.add_argument("--reference", default=os.path.join(MULTI30K_DIR, "val.de.gz"), help="'' for no BLEU")
    parser.add_argument("--repeats", type=int, default=3, help="timed decodings after the first (0: with --cold, the first only)")
    parser.add_argument("--cold", action="store_const", const={}, default=None,
                        help="time the first decoding too (cold_sentences_per_s) and the start-up (startup_s)")
    parser.add_argument("--output_dir", help="t2t_keras: the trained run")
    parser.add_argument("--decode_hparams", default="beam_size=4,alpha=1.4")
    parser.add_argument("--window_lines", type=int, default=-1, help="t2t_keras: -1: the decoder's; 0: the whole file at once")
    parser.add_argument("--ct2_dir", help="ctranslate2: the run's export (t2t-keras-exporter --format=ctranslate2)")
    parser.add_argument("--compute_type", default="float32", help="ctranslate2: float32, int8, int8_float32, bfloat16, ...")
    parser.add_argument("--parts", type=int, default=1, help="ctranslate2: workers (inter_threads), each of cores/parts threads")
    parser.add_argument("--use_vmap", action="store_true", help="ctranslate2: the export's vmap (the run's shortlist)")
    parser.add_argument("--max_batch_size", type=int, default=32, help="ctranslate2: sentences a batch")
    parser.add_argument("--length_penalty", type=float, help="ctranslate2: instead of the export's")
    args = parser.parse_args()
    if args.repeats < 0 or (args.repeats == 0 and args.cold is None):
        parser.error("--repeats is at least 1 (0 with --cold: the first decoding only)")
    if (args.engine == "t2t_keras") != bool(args.output_dir) or (args.engine == "ctranslate2") != bool(args.ct2_dir):
        parser.error("--engine=t2t_keras takes --output_dir, --engine=ctranslate2 takes --ct2_dir")

    lines = read(args.input)
    rates, outputs, settings = (ours if args.engine == "t2t_keras" else ctranslate2_engine)(args, lines)
    assert len(outputs) == len(lines)
    bleu = round(sacre_bleu(outputs, read(args.reference))[0].score, 2) if args.reference else None
    print(json.dumps({
        "benchmark": "decode_file", "sentences_per_s": round(statistics.median(rates), 2) if rates else None,
        **(args.cold or {}),
        "runs": [round(rate, 2) for rate in rates], "bleu": bleu, "lines": len(lines), "input": os.path.basename(args.input),
        **settings, "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    from t2t_keras.errors import UsageError

    try:
        main()
    except UsageError as e:  # a missing extra, a run that is not one: one line, as the CLIs say it
        sys.exit(f"error: {e}")
