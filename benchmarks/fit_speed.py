"""Keras' `fit` of README's block against the trainer's own step, on the same data and model.

    .venv/bin/python benchmarks/fit_speed.py --loop fit       # compile() + fit, as README's Python block
    .venv/bin/python benchmarks/fit_speed.py --loop trainer   # the trainer's TrainStep
    bash benchmarks/paired.sh fit 3                           # both, A B per pair, and fit / trainer

The demo model of README's block (transformer_demo with 2 layers, `--precision`), Multi30k
en-de's training batches of 4096 tokens from the demo's data dir (`make demo` writes
out/demo/data; `--data_dir` another), the same seed for both. Each runs `--steps` updates and
reports the steps per second from update `--from_step` to the last (tracing, the kernel
timing and the shuffle buffer's filling before it). One JSON line.
"""

import argparse
import os
import sys
import time

STARTED = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import shapes  # noqa: E402  (the JSON line: CPU, date, commit, command)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loop", choices=["fit", "trainer"], required=True)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--data_dir", default=os.path.join(REPO, "out", "demo", "data"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--from_step", type=int, default=100)
    args = parser.parse_args()
    if not os.path.isdir(args.data_dir):
        sys.exit(f"error: --data_dir={args.data_dir} does not exist: make demo writes it (or give a translate_ende_multi30k data dir).")

    import keras
    import tensorflow as tf

    from t2t_keras import Transformer, registry
    from t2t_keras.system import keep_freed_memory

    keep_freed_memory()  # as the CLIs do
    problem = registry.problem("translate_ende_multi30k")
    vocab_size = problem.load_vocabularies(args.data_dir).source.size
    settings = dict(num_hidden_layers=2, mixed_precision={"fp32": "float32", "bf16": "mixed_bfloat16"}[args.precision])
    keras.utils.set_random_seed(shapes.SEED)

    def batches():
        return problem.dataset("train", args.data_dir, tokens_per_batch=4096, training=True, seed=shapes.SEED)

    marks = {}
    if args.loop == "fit":
        model = Transformer("transformer_demo", vocab_size=vocab_size, **settings)
        model.compile(train_steps=args.steps)

        class Marks(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch + 1 in (args.from_step, args.steps):
                    marks[batch + 1] = time.perf_counter()

        model.fit(batches(), epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[Marks()])
        kernels = getattr(model, "kernel_choices", None) or {}  # a commit before fit chose kernels: none
    else:
        from t2t_keras.optimization.recipe import make_optimizer
        from t2t_keras.training import kernel_choices
        from t2t_keras.training.train_step import TrainStep

        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
        with strategy.scope():
            model = Transformer("transformer_demo", vocab_size=vocab_size, **settings)
            kernels = kernel_choices.choose(model, model.hparams, {})
            step = TrainStep(model, make_optimizer(model.hparams, args.steps), model.hparams, strategy)
        iterator = iter(strategy.distribute_datasets_from_function(lambda context: batches()))
        for index in range(1, args.steps + 1):
            loss = step.update(iterator)[0]
            if index in (args.from_step, args.steps):
                float(loss)  # the update done, as Keras' callback sees it
                marks[index] = time.perf_counter()
    seconds = marks[args.steps] - marks[args.from_step]
    shapes.emit({
        "bench": "fit", "loop": args.loop, "precision": args.precision, "steps": args.steps, "from_step": args.from_step,
        "steps_per_s": round((args.steps - args.from_step) / seconds, 3),
        "kernel_choices": {name: value for name, value in kernels.items() if name != "measured_ms"},
        "framework": f"tensorflow {tf.__version__}, keras {keras.__version__}",
    }, STARTED)


if __name__ == "__main__":
    main()
