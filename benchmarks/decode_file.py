"""Sentences/s of decoding a real file with a trained model, as t2t-keras-decoder decodes it:
the decoder's streamed windows, batches of a fixed sentence count or of a token budget.

    .venv/bin/python benchmarks/decode_file.py --output_dir=out/demo/train_avg                      # 32 a batch
    .venv/bin/python benchmarks/decode_file.py --output_dir=out/demo/train_avg --decode_hparams=batch_tokens=1024,sentences_per_batch=128
    .venv/bin/python benchmarks/decode_file.py --output_dir=out/demo/train_avg --window_lines=0      # the whole file sorted at once

Default input: the shipped Multi30k en-de val set (1014 lines). Decodes the file once to
warm up (traces the graphs), then `--repeats` times; prints one JSON line with the median
sentences/s, the settings and the CPU. Run it alone: two benchmarks on 2 cores spoil each other.
"""

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import time

from machine import cpu_model  # benchmarks/machine.py: the script's own folder is on sys.path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_keras.system import keep_freed_memory  # noqa: E402

keep_freed_memory()  # as the CLIs do


def main() -> None:
    from t2t_keras.decoding import file_decoding
    from t2t_keras.decoding.translator import Translator
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
    from t2t_keras.system import cores_for_decoding

    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--input", default=os.path.join(MULTI30K_DIR, "val.en.gz"))
    parser.add_argument("--decode_hparams", default="beam_size=4,alpha=1.4")
    parser.add_argument("--window_lines", type=int, default=-1, help="-1: the decoder's; 0: the whole file at once")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    opener = gzip.open if args.input.endswith(".gz") else open
    with opener(args.input, "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    from t2t_keras.checkpoints import RunDir

    hparams = RunDir(args.output_dir).problem().decode_settings(args.decode_hparams)
    # Before TensorFlow starts: each part of a batch gets its own core, as in t2t-keras-decoder.
    hparams = dataclasses.replace(hparams, parallel_parts=cores_for_decoding(hparams.parallel_parts))
    translator = Translator.from_run_dir(args.output_dir, hparams)
    if args.window_lines >= 0:
        file_decoding.window_lines = lambda _: args.window_lines or len(lines)

    def decode() -> float:
        written = []
        start = time.perf_counter()
        file_decoding.decode_stream(translator, translator.problem, iter(enumerate(lines)), written.extend)
        assert len(written) == len(lines)
        return len(lines) / (time.perf_counter() - start)

    decode()  # warm-up: traces every batch shape's graph
    rates = [decode() for _ in range(args.repeats)]
    print(json.dumps({
        "benchmark": "decode_file", "sentences_per_s": round(statistics.median(rates), 2),
        "runs": [round(rate, 2) for rate in rates], "lines": len(lines), "input": os.path.basename(args.input),
        "decode_hparams": dataclasses.asdict(hparams), "window_lines": file_decoding.window_lines(hparams),
        "checkpoint": translator.checkpoint_path, "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
