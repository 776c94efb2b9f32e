"""Timing kernel alternatives against each other on the machine that will run them."""

import time


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
