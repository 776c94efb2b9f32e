"""Latency and throughput of an exported SavedModel's serving_default, loaded as TF Serving would.

    .venv/bin/python benchmarks/serving_latency.py --saved_model=demo/export/<version>

Loads the export with only tensorflow and tensorflow_text (no t2t_keras), then sends real
Multi30k val sentences (the English side shipped in problems/data): p50 / p99 latency of
single-sentence requests, sentences/s of 32-sentence requests, and the cost of one request
far over the export's max_input_tokens (5000 words of val text, cut to the limit and marked
`truncated`) beside one just under the limit (the most words not truncated). Decode settings are
the export's (the problem's defaults unless the exporter was given --decode_hparams).
Prints one JSON line.
"""

import argparse
import gzip
import json
import os
import time

from t2t_keras.system import cpu_model

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VAL_SOURCE = os.path.join(REPO, "problems", "data", "multi30k", "val.en.gz")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--saved_model", required=True, help="An export version directory (export_dir/<version>).")
    parser.add_argument("--single_requests", type=int, default=100, help="Batch-1 requests timed for p50 / p99.")
    parser.add_argument("--batches", type=int, default=8, help="Batch-32 requests timed for sentences/s.")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops, as the model server links them)

    with gzip.open(VAL_SOURCE, "rt", encoding="utf-8") as handle:
        sentences = [line.rstrip("\n") for line in handle]
    started = time.perf_counter()
    serving = tf.saved_model.load(args.saved_model).signatures["serving_default"]
    load_s = time.perf_counter() - started
    translate = lambda batch: serving(inputs=tf.constant(batch, tf.string))["outputs"].numpy()  # noqa: E731

    translate(sentences[:1])  # warm-up, as TF Serving replays assets.extra/tf_serving_warmup_requests
    translate(sentences[:32])
    single = []
    for sentence in sentences[: args.single_requests]:
        started = time.perf_counter()
        translate([sentence])
        single.append(time.perf_counter() - started)
    batched = []
    for start in range(0, 32 * args.batches, 32):
        started = time.perf_counter()
        translate(sentences[start : start + 32])
        batched.append(time.perf_counter() - started)
    words = " ".join(sentences).split()
    truncated = lambda count: bool(serving(inputs=tf.constant([" ".join(words[:count])]))["truncated"].numpy()[0])  # noqa: E731
    low, high = 1, 5000  # the longest request the limit leaves whole
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if not truncated(middle) else (low, middle - 1)

    def fastest_of_3(count):
        times = []
        for _ in range(3):
            started = time.perf_counter()
            translate([" ".join(words[:count])])
            times.append(time.perf_counter() - started)
        return min(times)

    print(json.dumps({
        "bench": "serving_latency",
        "saved_model": os.path.relpath(os.path.abspath(args.saved_model), REPO)
        if os.path.abspath(args.saved_model).startswith(REPO + os.sep) else os.path.join("...", *os.path.abspath(args.saved_model).split(os.sep)[-2:]),
        "batch1_requests": len(single),
        "batch1_p50_ms": round(1000 * float(np.percentile(single, 50)), 1),
        "batch1_p99_ms": round(1000 * float(np.percentile(single, 99)), 1),
        "batch32_sentences_per_s": round(32 * len(batched) / sum(batched), 1),
        "words_under_limit": low,
        "under_limit_request_ms": round(1000 * fastest_of_3(low), 1),
        "request_5000_words_truncated": truncated(5000),
        "request_5000_words_ms": round(1000 * fastest_of_3(5000), 1),
        "load_s": round(load_s, 1),
        "framework": "tensorflow " + tf.__version__,
        "machine": f"{cpu_model()} {os.cpu_count()} cpus",
        "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
