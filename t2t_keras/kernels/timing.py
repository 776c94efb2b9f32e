"""Timing kernel alternatives against each other on the machine that will run them."""

import time

import tensorflow as tf


def best_milliseconds(runs: dict, rounds: int = 3) -> dict:
    """{name: ms} of each zero-argument callable (it must finish its work before returning): the
    best of `rounds` timed calls each, after one that traces and warms up. The alternatives take
    turns in every round, so that the machine's drift between seconds (over 10% on 2 shared
    cores) reaches each alike."""

    def seconds(run):
        started = time.perf_counter()
        run()
        return time.perf_counter() - started

    for run in runs.values():
        seconds(run)
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best[name], seconds(run))
    return {name: round(1e3 * value, 2) for name, value in best.items()}


def chained_forward_backward_ms(functions: dict, x, parameters: list, rounds: int = 3) -> dict:
    """{name: ms} of 10 chained forward + backward passes of each function(x, *parameters), each
    pass's output and gradients folded into the next pass's x (nothing for the graph optimiser to
    share between passes), timed by `best_milliseconds`."""

    def chained(function):
        @tf.function(autograph=False)
        def run(x):
            for _ in range(10):
                with tf.GradientTape() as tape:
                    tape.watch([x, *parameters])
                    outputs = function(x, *parameters)
                dx, *dparameters = tape.gradient(outputs, [x, *parameters], output_gradients=outputs)
                x = outputs - dx + tf.cast(1e-3 * tf.add_n(dparameters), dx.dtype)  # stays finite
            return x

        return lambda: run(x).numpy()

    return best_milliseconds({name: chained(function) for name, function in functions.items()}, rounds)
