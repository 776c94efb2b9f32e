"""Beam-search decoding speed on the decode setup of the peers' shapes.py ($T2T_BENCH_DIR).

    .venv/bin/python benchmarks/decode_speed.py                    # cached (the growing KV cache)
    .venv/bin/python benchmarks/decode_speed.py --extra_length=300 # the same, allowed input + 300 tokens
    .venv/bin/python benchmarks/decode_speed.py --no-cache         # the decoder re-run over the whole prefix
    .venv/bin/python benchmarks/decode_speed.py --parallel_parts=1 # one search, TensorFlow's default threads
    .venv/bin/python benchmarks/decode_speed.py --precision=bf16   # the model in bfloat16 (decode hparam precision)
    .venv/bin/python benchmarks/decode_speed.py --graph_kernels    # TensorFlow's ops only, as an exported SavedModel

The tiny shape with random weights; 64 source sentences of 20 tokens; beam 4, alpha 0.6;
each sentence may generate input length + extra_length tokens (default 50, the peers'
nominal maximum), but EOS is impossible until step 30 (the search's min_length, as
CTranslate2's min_decoding_length in its harness), where it is the only choice, so every
run does exactly 30 decode steps (as every peer in $T2T_BENCH_DIR) and gives the same
outputs whatever extra_length is: the long case (300, parsing's setting) measures what a
larger maximum length costs by itself. Our real beam_search over the model's decode_step,
the batch searched in parts side by side with one thread per op and with the native kernels
where they built, as t2t-keras-decoder runs it (by default one part per CPU core).
Median of 3 runs after 1 warm-up. Prints one JSON line (shapes.decode_result).

`build_decoder` also plugs into the peers' harness:
    PYTHONPATH=benchmarks python $T2T_BENCH_DIR/decode_keras.py --impl decode_speed:build_decoder
"""

import argparse
import dataclasses
import functools
import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_bench import import_shapes  # noqa: E402

shapes = import_shapes()  # the peers' shapes, data and FLOP formula ($T2T_BENCH_DIR)

from t2t_keras.system import keep_freed_memory, keep_kernels_for_every_shape  # noqa: E402

keep_freed_memory()  # as the CLIs do (see t2t_keras/system.py)
keep_kernels_for_every_shape()


def forced_steps(step_fn, steps, vocab_size):
    """`step_fn` made to end at step `steps`, where EOS is the only choice; with the search's
    min_length=steps (EOS no candidate before, as CTranslate2's min_decoding_length), every
    sentence runs exactly `steps` steps, as the peers do."""
    import numpy as np
    import tensorflow as tf

    from t2t_keras.token_ids import EOS_ID

    is_eos = tf.constant(np.arange(vocab_size) == EOS_ID)

    def step(ids, index, state, sentence_state):
        logits, state = step_fn(ids, index, state, sentence_state)
        impossible = tf.constant(-1e9, logits.dtype)  # the logits are bfloat16 for the native kernels of a bf16 model
        return tf.cond(index < steps - 1, lambda: logits, lambda: tf.where(is_eos[None, :], logits, impossible)), state

    return step


def build_decoder(shape, dcfg, cached=True, extra_length=None, parallel_parts=1, precision="fp32", native_kernels=True,
                  int8_logits=False):
    """A callable: int32 source ids [B, S] -> output ids [B, forced_steps] (best beam), the
    batch searched in `parallel_parts` parts side by side as the Translator does, with the
    model in `precision` (fp32 or bf16, as the decode hparam) and with the native kernels
    where they built (`native_kernels`; False: an export's graph); `int8_logits`: the output
    product in int8 (the decode hparam; needs the native kernels)."""
    import tensorflow as tf

    from t2t_keras import registry
    from t2t_keras.decoding import batch_decoding
    from t2t_keras.decoding.beam_search import search_in_parts
    from t2t_keras.models import Transformer
    from t2t_keras.models.factory import PRECISION_DTYPES

    hparams = dataclasses.replace(
        registry.hparams("transformer_base"), num_hidden_layers=shape.num_layers, hidden_size=shape.d_model,
        filter_size=shape.d_ff, num_heads=shape.num_heads, layer_norm_epsilon=shape.layer_norm_eps,
    )
    model = Transformer.from_hparams(hparams, shape.vocab, dtype=PRECISION_DTYPES[precision])
    steps, beam = dcfg.forced_steps, dcfg.beam_size
    part_sentences = -(-dcfg.num_sentences // parallel_parts)
    model.softmax_projection.choose_step_orientation(part_sentences * beam)  # as Translator does
    extra_length = dcfg.extra_len if extra_length is None else extra_length
    forced = functools.partial(forced_steps, steps=steps, vocab_size=shape.vocab)

    def search(sources):
        max_lengths = tf.fill([tf.shape(sources)[0]], tf.shape(sources)[1] + extra_length)
        return batch_decoding.search_batch(model, sources, beam, dcfg.alpha, max_lengths, wrap_step=forced, min_length=steps,
                                           cached=cached, native_kernels=native_kernels, int8_logits=int8_logits)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False)
    def decode(sources):
        return search_in_parts(search, sources, parallel_parts).ids[:, 0]

    return lambda sources: decode(tf.constant(sources)).numpy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cache", dest="cached", action="store_false")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--extra_length", type=int, default=shapes.DECODE.extra_len,
                        help="each sentence may generate input length + this many tokens")
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
    run = build_decoder(shapes.SHAPES[dcfg.shape], dcfg, cached=args.cached, extra_length=args.extra_length,
                        parallel_parts=parts, precision=args.precision, native_kernels=args.native_kernels,
                        int8_logits=args.int8_logits)
    times, first, out = shapes.time_runs(run, shapes.decode_sources(dcfg, shapes.SHAPES[dcfg.shape].vocab), args.runs)
    assert out.shape[-1] == dcfg.forced_steps and (out[:, -1] == 1).all(), "not exactly the forced number of steps"
    peer = ("t2t_keras_beam_kvcache" if args.cached else "t2t_keras_beam_nocache") + ("_bf16" if args.precision == "bf16" else "")
    peer += "_int8_logits" if args.int8_logits else ""
    from t2t_keras.kernels import native

    extra = {"framework": "tensorflow " + tf.__version__, "max_length": dcfg.src_len + args.extra_length,
             "parallel_parts": parts, "precision": args.precision, "bfloat16_units": bfloat16_units(),
             "native_kernels": args.native_kernels and native.library() is not None, "int8_logits": args.int8_logits}
    shapes.emit(shapes.decode_result(peer, dcfg, times, first, out.shape[-1], extra), T0)


if __name__ == "__main__":
    main()
