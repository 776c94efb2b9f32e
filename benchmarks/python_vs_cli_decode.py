"""The same file decoded by t2t-keras-decoder and from Python (`Translator.generate`), whole
processes timed A B A B: the Python API must be as fast as the command.

    .venv/bin/python benchmarks/python_vs_cli_decode.py --output_dir=out/demo/train_avg --decode_hparams=beam_size=4,alpha=2.0

Each side is a fresh process that loads the run and decodes the input (default: the shipped
Multi30k val set, 1014 lines) into a file; the outputs must be identical. Prints one JSON
line: each side's seconds per pair, the medians, and python / command (below 1: Python is
faster). Run it alone: two benchmarks on 2 cores spoil each other.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PYTHON_SIDE = """
import json, sys
from t2t_keras import Translator
run, source, target, settings = sys.argv[1:]
translator = Translator.from_preset(run, **json.loads(settings))
with open(source, encoding="utf-8") as handle:
    lines = handle.read().splitlines()
with open(target, "w", encoding="utf-8") as handle:
    handle.writelines(text + "\\n" for text in translator.generate(lines))
"""


def main() -> None:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, repo)
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
    from t2t_keras.system import cpu_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True, help="the trained run")
    parser.add_argument("--input", default=os.path.join(MULTI30K_DIR, "val.en.gz"))
    parser.add_argument("--decode_hparams", default="beam_size=4,alpha=2.0")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="python_vs_cli_")
    source = os.path.join(work, "input.txt")
    if args.input.endswith(".gz"):
        import gzip

        with gzip.open(args.input, "rt", encoding="utf-8") as handle, open(source, "w", encoding="utf-8") as out:
            out.write(handle.read())
    else:
        source = args.input
    from t2t_keras.hparams_lib import DecodeHParams, apply_overrides

    given = apply_overrides(DecodeHParams(), args.decode_hparams, "--decode_hparams")
    settings = {item.split("=")[0]: getattr(given, item.split("=")[0]) for item in args.decode_hparams.split(",") if item}
    bin_dir = os.path.dirname(sys.executable)
    outputs = {"command": os.path.join(work, "command.out"), "python": os.path.join(work, "python.out")}
    commands = {
        "command": [os.path.join(bin_dir, "t2t-keras-decoder"), f"--output_dir={args.output_dir}", f"--decode_from_file={source}",
                    f"--decode_to_file={outputs['command']}", f"--decode_hparams={args.decode_hparams}", "--noprogress",
                    "--start_over"],
        "python": [sys.executable, "-c", PYTHON_SIDE, args.output_dir, source, outputs["python"], json.dumps(settings)],
    }
    seconds = {"command": [], "python": []}
    for _ in range(args.pairs):
        for side in ("command", "python"):
            started = time.perf_counter()
            subprocess.run(commands[side], check=True, capture_output=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
            seconds[side].append(round(time.perf_counter() - started, 2))
    with open(outputs["command"], encoding="utf-8") as a, open(outputs["python"], encoding="utf-8") as b:
        identical = a.read() == b.read()
    medians = {side: statistics.median(values) for side, values in seconds.items()}
    print(json.dumps({
        "benchmark": "python_vs_cli_decode", "seconds": seconds, "median_s": medians,
        "python_over_command": round(medians["python"] / medians["command"], 3), "identical_outputs": identical,
        "decode_hparams": args.decode_hparams, "input": os.path.basename(args.input), "checkpoint_dir": args.output_dir,
        "cpu": cpu_model(), "date": time.strftime("%Y-%m-%d"),
    }))


if __name__ == "__main__":
    main()
