"""Beam-search decoding speed on the decode setup of benchmarks/peers/shapes.py.

    .venv/bin/python benchmarks/decode_speed.py                    # the decoder's search, kernels chosen here
    .venv/bin/python benchmarks/decode_speed.py --parallel_parts=1 # one search, TensorFlow's default threads
    .venv/bin/python benchmarks/decode_speed.py --precision=bf16   # the model in bfloat16 (decode hparam precision)
    .venv/bin/python benchmarks/decode_speed.py --graph_kernels    # TensorFlow's ops only, as an exported SavedModel

The tiny shape with random weights; 64 source sentences of 20 tokens; beam 4, alpha 0.6;
every run does exactly 30 decode steps (as every engine in benchmarks/peers): EOS is no candidate
until step 30 (the search's min_length, as CTranslate2's min_decoding_length in peers/decode_ct2.py),
where the maximum length (input + 10) makes it the only one. The search is the decoder's: a
`SearchModule` built by the decoding engine (decoding/engine.py), the batch searched in parts
side by side with one thread per op (by default one part per CPU core), its kernels chosen by
timing them here (`kernel_choices`, printed in the JSON line). Median of 3 runs after 1
warm-up. Prints one JSON line (shapes.decode_result).
"""

import argparse
import dataclasses
import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import shapes  # noqa: E402  (the protocol every engine is measured with)

from t2t_keras.system import keep_freed_memory, keep_kernels_for_every_shape  # noqa: E402

keep_freed_memory()  # as the CLIs do (see t2t_keras/system.py)
keep_kernels_for_every_shape()


def build_decoder(shape, dcfg, parallel_parts=1, precision="fp32", native_kernels=True, int8_logits=False, module=None):
    """A callable: int32 source ids [B, S] -> output ids [B, forced_steps] (best beam), searched
    as the decoder searches (`SearchModule.best_ids`: the batch in `parallel_parts` parts side by
    side), with the model in `precision` (fp32 or bf16, as the decode hparam; bf16 even where
    this machine has no bfloat16 units) and its kernels chosen here, native ones only if
    `native_kernels` (False: an export's graph); `int8_logits`: the output product in int8.
    `module` (a list), if given, receives the SearchModule."""
    import tensorflow as tf

    from t2t_keras import registry
    from t2t_keras.decoding.engine import DecodingEngine
    from t2t_keras.hparams_lib import DecodeHParams
    from t2t_keras.models import Transformer
    from t2t_keras.models.factory import in_precision

    hparams = dataclasses.replace(
        registry.hparams("transformer_base"), num_hidden_layers=shape.num_layers, hidden_size=shape.d_model,
        filter_size=shape.d_ff, num_heads=shape.num_heads, layer_norm_epsilon=shape.layer_norm_eps,
    )
    model = Transformer.from_hparams(hparams, shape.vocab)
    steps = dcfg.forced_steps
    settings = DecodeHParams(beam_size=dcfg.beam_size, alpha=dcfg.alpha, extra_length=steps - dcfg.src_len, min_length=steps,
                             sentences_per_batch=dcfg.num_sentences, parallel_parts=parallel_parts, precision=precision,
                             int8_logits=int8_logits,
                             kernel_choices="" if native_kernels else "beam_candidates=graph;top_k=graph")
    engine = DecodingEngine(settings, None, None, lambda precision: in_precision(model, precision), tune_process=False)
    search = engine.search_module(engine.settings)
    if module is not None:
        module.append(search)
    return lambda sources: search.best_ids(tf.constant(sources))["ids"][:, 0].numpy()


def huge_pages_mb():
    """This process's memory in transparent huge pages (Linux; None elsewhere): whether a run's
    buffers landed in 2 MB pages, one candidate for run-to-run speed modes."""
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            return next(int(line.split()[1]) // 1024 for line in rollup if line.startswith("AnonHugePages:"))
    except (OSError, StopIteration):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel_parts", type=int, default=0,
                        help="parts of the batch searched side by side, one thread per op (as t2t-keras-decoder); "
                             "0 = one per CPU core, 1 = one search with TensorFlow's default threads")
    parser.add_argument("--graph_kernels", dest="native_kernels", action="store_false",
                        help="TensorFlow's ops only, as an exported SavedModel decodes (default: the native kernels where they built)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="the model's precision (bf16 runs even where the CPU has no bfloat16 units: the JSON says so)")
    parser.add_argument("--int8_logits", action="store_true",
                        help="the output product in int8 (the decode hparam int8_logits; a native kernel)")
    args = parser.parse_args()
    import tensorflow as tf

    from t2t_keras.system import bfloat16_units, cores_for_decoding

    parts = cores_for_decoding(args.parallel_parts)  # as t2t-keras-decoder
    tf.random.set_seed(shapes.SEED)
    dcfg = shapes.DECODE
    module = []
    run = build_decoder(shapes.SHAPES[dcfg.shape], dcfg, parallel_parts=parts, precision=args.precision,
                        native_kernels=args.native_kernels, int8_logits=args.int8_logits, module=module)
    times, first, out = shapes.time_runs(run, shapes.decode_sources(dcfg, shapes.SHAPES[dcfg.shape].vocab), args.runs)
    assert out.shape[-1] == dcfg.forced_steps and (out[:, -1] == 1).all(), "not exactly the forced number of steps"
    peer = "t2t_keras_beam_kvcache" + ("_bf16" if args.precision == "bf16" else "")
    peer += "_int8_logits" if args.int8_logits else ""
    kernels = module[0].kernels
    extra = {"framework": "tensorflow " + tf.__version__, "max_length": dcfg.forced_steps,
             "parallel_parts": parts, "precision": args.precision, "bfloat16_units": bfloat16_units(),
             "native_kernels": bool(kernels.native_choices), "int8_logits": kernels.int8_logits,
             "kernel_choices": kernels.setting(), "huge_pages_mb": huge_pages_mb()}
    shapes.emit(shapes.decode_result(peer, dcfg, times, first, out.shape[-1], extra), T0)


if __name__ == "__main__":
    main()
