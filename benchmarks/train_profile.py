"""Where a training step's time goes: train_throughput.py's step under TensorFlow's profiler,
summed by what each op does.

    .venv/bin/python benchmarks/train_profile.py --size tiny --precision bf16

The same model, data and TrainStep as train_throughput.py (benchmarks/peers/shapes.py, random ids);
after 3 warm-up steps, `--steps` steps are traced (tf.profiler) and every op's time on
TensorFlow's compute threads is read back from the trace (TensorFlow's own XPlane protocol
buffer, no other tool) and put in one of: the matrix products (their own kernels, as the
FLOP count sees them), casts, softmax, layer norm, dropout, the loss, the optimizer, and the
rest; layer norm, dropout and optimizer are told by the op's name (its Keras layer or the
optimizer's scope), the loss by being the step function's own op (the fused output-layer loss
and its hand-written gradient run there, outside any layer), the others by the op's type. Prints one JSON line: milliseconds per
step of each group and its share of the op time, the top op types, and the CPU. Op time is
the sum over threads; the step's wall time is train_throughput.py's.
"""

import argparse
import collections
import glob
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_throughput import hparams_for, shapes  # noqa: E402  (the protocol's shapes; malloc kept as the CLIs do)

from t2t_keras.system import cpu_model  # noqa: E402

# Checked in this order; the first that matches an op ("name:type") takes it.
BY_NAME = (("optimizer", ("optimizer", "adam")), ("loss", ("loss", "cross_entropy", "output_loss")),
           ("dropout", ("dropout", "random")), ("layer norm", ("layer_norm", "layernorm", "norm/")))
BY_TYPE = (("matmul", ("MatMul", "Einsum", "Conv")), ("cast", ("Cast",)), ("softmax", ("Softmax",)),
           ("relu and bias", ("Relu", "BiasAdd")), ("embedding gradient", ("UnsortedSegmentSum", "AddN")))


def group_of(name: str, op_type: str) -> str:
    lowered = name.lower()
    if "MatMul" not in op_type and name.count("/") <= 1:  # the step's own ops: the fused output-layer loss
        return "loss"
    for group, keys in BY_NAME:
        if any(key in lowered for key in keys):
            return "matmul" if "MatMul" in op_type else group  # a product in a named scope is still a product
    for group, keys in BY_TYPE:
        if any(key in op_type for key in keys):
            return group
    return "other"


def op_times(trace_dir: str) -> dict:
    """{(op name, op type): total microseconds} over the compute threads of the trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    totals = collections.Counter()
    for path in glob.glob(os.path.join(trace_dir, "plugins", "profile", "*", "*.xplane.pb")):
        space = xplane_pb2.XSpace()
        with open(path, "rb") as handle:
            space.ParseFromString(handle.read())
        for plane in space.planes:
            for line in plane.lines:
                if not line.name.startswith("tf_Compute") and not line.name.startswith("tf_inter"):
                    continue
                for event in line.events:
                    label = plane.event_metadata[event.metadata_id].name
                    name, _, op_type = label.rpartition(":")
                    if not name or "::" in label:  # the executor's own regions, not ops
                        continue
                    totals[(name, op_type)] += event.duration_ps / 1e6
    return totals


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(shapes.SHAPES), default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    shape = shapes.SHAPES[args.size]

    import keras
    import tensorflow as tf

    from t2t_keras.models import Transformer
    from t2t_keras.optimization.recipe import make_optimizer
    from t2t_keras.training import kernel_choices
    from t2t_keras.training.train_step import TrainStep

    keras.utils.set_random_seed(shapes.SEED)
    hparams = hparams_for(shape, args.precision)
    source, _, target = shapes.train_batch(shape)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        model = Transformer.from_hparams(hparams, shape.vocab, dtype=hparams.mixed_precision)
        kernels = kernel_choices.choose(model, hparams, {})
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    batch = {"inputs": tf.constant(source), "targets": tf.constant(target)}
    iterator = iter(strategy.distribute_datasets_from_function(lambda context: tf.data.Dataset.from_tensors(batch).repeat()))
    for _ in range(3):
        float(step.update(iterator)[0])
    with tempfile.TemporaryDirectory() as trace_dir:
        tf.profiler.experimental.start(trace_dir)
        started = time.perf_counter()
        for _ in range(args.steps):
            float(step.update(iterator)[0])
        wall = time.perf_counter() - started
        tf.profiler.experimental.stop()
        totals = op_times(trace_dir)
    groups, types = collections.Counter(), collections.Counter()
    for (name, op_type), micros in totals.items():
        groups[group_of(name, op_type)] += micros
        types[op_type] += micros
    op_total = sum(groups.values())
    others = sorted(((key, micros) for key, micros in totals.items() if group_of(*key) == "other"), key=lambda item: -item[1])
    per_step = lambda micros: round(micros / 1000 / args.steps, 2)  # noqa: E731
    print(json.dumps({
        "benchmark": "train_profile", "size": args.size, "precision": args.precision, "steps": args.steps,
        "wall_ms_per_step": round(1000 * wall / args.steps, 2), "op_ms_per_step": per_step(op_total),
        "groups_ms_per_step": {group: per_step(micros) for group, micros in groups.most_common()},
        "groups_share": {group: round(micros / op_total, 3) for group, micros in groups.most_common()},
        "top_op_types_ms_per_step": {op_type: per_step(micros) for op_type, micros in types.most_common(12)},
        "top_other_ops_ms_per_step": {f"{name}:{op_type}": per_step(micros) for (name, op_type), micros in others[:15]},
        "kernel_choices": kernels, "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
