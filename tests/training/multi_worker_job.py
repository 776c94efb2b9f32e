"""One worker of tests/training/test_multi_worker.py (run as a subprocess with TF_CONFIG set).

Trains a few updates of a small Transformer under MultiWorkerMirroredStrategy: worker i
reads half i of a fixed global batch. Writes its losses and final weights to --out.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tests.testing import VOCAB, global_batch, halves, aggregation_hparams  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--initial", required=True, help=".npz of the initial weights")
    parser.add_argument("--out", required=True)
    parser.add_argument("--updates", type=int, default=3)
    args = parser.parse_args()

    from t2t_keras.models import Transformer
    from t2t_keras.training.distribution import make_strategy
    from t2t_keras.optimization.recipe import make_optimizer
    from t2t_keras.training.train_step import TrainStep

    strategy = make_strategy("multi_worker_mirrored")
    hparams = aggregation_hparams()
    initial = np.load(args.initial)
    with strategy.scope():
        model = Transformer.from_hparams(hparams, VOCAB)
        model.set_weights([initial[f"w{i}"] for i in range(len(initial.files))])
        step = TrainStep(model, make_optimizer(hparams), hparams, strategy)
    per_worker = halves(global_batch())
    dataset = strategy.distribute_datasets_from_function(
        lambda context: tf.data.Dataset.from_tensors(per_worker[context.input_pipeline_id]).repeat()
    )
    iterator = iter(dataset)
    losses = [float(step.update(iterator)[0]) for _ in range(args.updates)]
    np.savez(args.out, losses=np.array(losses), **{f"w{i}": w for i, w in enumerate(model.get_weights())})


if __name__ == "__main__":
    main()
