"""Input pipeline throughput: token-budget training batches of translate_ende_multi30k.

    .venv/bin/python benchmarks/input_pipeline.py [--data_dir=DIR] [--tokens_per_batch=4096] [--batches=400] [--subword_sampling=0.1]

Generates the problem's data into --data_dir if it is not there yet, then times the training
path (interleaved shards, block parsing, length filter, shuffle, bucketing, padding) after a
warm-up that fills the shuffle buffer; with --subword_sampling, each pair segmented anew as it
is read (the hparam of that name: what BPE-dropout costs the pipeline). Prints one JSON line.
"""

import argparse
import json
import os
import platform
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_keras.system import keep_freed_memory  # noqa: E402

keep_freed_memory()  # as the CLIs do (see t2t_keras/system.py)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", default="translate_ende_multi30k")
    parser.add_argument("--data_dir", default=os.path.join(tempfile.gettempdir(), "t2t_keras_bench_data"))
    parser.add_argument("--tokens_per_batch", type=int, default=4096, help="tokens per batch")
    parser.add_argument("--max_length", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--subword_sampling", type=float, default=0.0, help="the hparam's alpha (0: as written)")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    from t2t_keras import registry
    from t2t_keras.data import datagen

    problem = registry.problem(args.problem)
    datagen.generate(problem, args.data_dir, None, progress=False)
    dataset = problem.dataset("train", args.data_dir, args.tokens_per_batch, training=True, max_length=args.max_length, seed=1,
                              subword_sampling=args.subword_sampling)
    iterator = iter(dataset)
    for _ in range(args.warmup):
        next(iterator)
    pairs = source_tokens = target_tokens = positions = 0
    start = time.perf_counter()
    for _ in range(args.batches):
        batch = next(iterator)
        inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()
        pairs += inputs.shape[0]
        source_tokens += int(np.count_nonzero(inputs))
        target_tokens += int(np.count_nonzero(targets))
        positions += inputs.size + targets.size
    seconds = time.perf_counter() - start
    print(json.dumps({
        "bench": "input_pipeline",
        "problem": args.problem,
        "batch_size_tokens": args.tokens_per_batch,
        "subword_sampling": args.subword_sampling,
        "batches": args.batches,
        "seconds": round(seconds, 2),
        "batches_per_s": round(args.batches / seconds, 1),
        "pairs_per_s": round(pairs / seconds),
        "tgt_tok_per_s": round(target_tokens / seconds),
        "src_tgt_tok_per_s": round((source_tokens + target_tokens) / seconds),
        "padding_fraction": round(1 - (source_tokens + target_tokens) / positions, 3),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
