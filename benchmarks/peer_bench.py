"""The peers' benchmark folder (their shapes, data and FLOP formula), named by $T2T_BENCH_DIR:
it lives outside this repository, so a benchmark that needs it says so in one line."""

import os
import sys


def import_shapes():
    """The peers' `shapes` module, from $T2T_BENCH_DIR; exits with one line if it is not there."""
    folder = os.environ.get("T2T_BENCH_DIR", "")
    if not os.path.isfile(os.path.join(folder, "shapes.py")):
        sys.exit("error: set T2T_BENCH_DIR to the peers' benchmark folder, the one with shapes.py "
                 "(on this project's machines: T2T_BENCH_DIR=../shared/bench).")
    sys.path.insert(0, folder)
    import shapes

    return shapes
