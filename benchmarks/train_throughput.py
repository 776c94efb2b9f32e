"""Training throughput of t2t-keras on the shapes of benchmarks/peers/shapes.py.

    .venv/bin/python benchmarks/train_throughput.py --size tiny --precision fp32
    .venv/bin/python benchmarks/train_throughput.py --size base --precision bf16

Same protocol as the peers in benchmarks/peers (random ids, seed 1234, no padding, dropout
0.1, label smoothing 0.1, Adam 0.9/0.98/1e-9; 3 warm-up steps, then the median of 10 timed
steps): our Transformer and our real TrainStep (global-token-normalised loss, the paper's
schedule) under a one-device strategy. Then, in the same process, the machine's own
large-matmul rate in the same precision (`matmul_peak.py`): the line's
`fraction_of_matmul_peak` is achieved_gflop_s over it, how much of this CPU the step uses.
Prints one JSON line (shapes.train_result).
"""

import argparse
import dataclasses
import os
import sys
import time

T0 = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import shapes  # noqa: E402  (the protocol every engine is measured with)
from matmul_peak import matmul_gflop_s  # noqa: E402

from t2t_keras.system import cpu_model, keep_freed_memory  # noqa: E402

keep_freed_memory()  # as the CLIs do (see t2t_keras/system.py)


def hparams_for(shape, precision):
    from t2t_keras import registry

    return dataclasses.replace(
        registry.hparams("transformer_base"),
        num_hidden_layers=shape.num_layers, hidden_size=shape.d_model, filter_size=shape.d_ff,
        num_heads=shape.num_heads, layer_prepostprocess_dropout=shape.dropout,
        label_smoothing=shape.label_smoothing, layer_norm_epsilon=shape.layer_norm_eps,
        mixed_precision={"fp32": "float32", "bf16": "mixed_bfloat16"}[precision],
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=list(shapes.SHAPES), default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--kernel_choices", default="", help="as the trainer's flag: '' measures each on this machine")
    args = parser.parse_args()
    shape = shapes.SHAPES[args.size]

    import keras
    import tensorflow as tf

    from t2t_keras.models import Transformer
    from t2t_keras.training import kernel_choices
    from t2t_keras.optimization.recipe import make_optimizer
    from t2t_keras.training.train_step import TrainStep

    keras.utils.set_random_seed(shapes.SEED)
    hparams = dataclasses.replace(hparams_for(shape, args.precision), xla=args.xla)
    source, _, target = shapes.train_batch(shape)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = Transformer.from_hparams(hparams, shape.vocab, dtype=hparams.mixed_precision)
        kernels = kernel_choices.choose(model, hparams, kernel_choices.parse(args.kernel_choices))
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    batch = {"inputs": tf.constant(source), "targets": tf.constant(target)}
    iterator = iter(strategy.distribute_datasets_from_function(lambda context: tf.data.Dataset.from_tensors(batch).repeat()))
    times, first = shapes.time_steps(lambda: step.update(iterator)[0], sync=lambda loss: float(loss))
    peer = f"t2t_keras_{'xla' if args.xla else 'nojit'}" + ("_bf16" if args.precision == "bf16" else "")
    peak = matmul_gflop_s(args.precision)
    result = shapes.train_result(peer, shape, times, first, {
        "framework": f"tensorflow {tf.__version__}, keras {keras.__version__}",
        "precision": args.precision,
        "model_params": model.count_params(),
        "matmul_peak_gflop_s": round(peak, 1),
        "cpu": cpu_model(),
        "kernel_choices": kernels,
    })
    result["fraction_of_matmul_peak"] = round(result["achieved_gflop_s"] / peak, 3)
    shapes.emit(result, T0)


if __name__ == "__main__":
    main()
