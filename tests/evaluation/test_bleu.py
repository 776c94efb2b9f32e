"""t2t-keras-bleu against the sacrebleu command line, and the paper's tokenised BLEU."""

import os
import re
import subprocess
import sys

from sacremoses import MosesTokenizer

from t2t_keras.evaluation.bleu import paper_bleu, paper_tokenize, sacre_bleu

HYPOTHESES = [
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Zwei Hunde spielen im Schnee-Feld.",
    "Eine Frau liest ein Buch im Park.",
    "Kinder spielen Fußball auf der Straße.",
]
REFERENCES = [
    "Ein Mann fährt Fahrrad durch die Stadt.",
    "Zwei Hunde spielen auf dem Schnee-Feld.",
    "Eine Frau liest im Park ein Buch.",
    "Kinder spielen auf der Straße Fußball.",
]


def _files(tmp_path):
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    return hyp, ref


def test_cli_agrees_with_the_sacrebleu_command_line(tmp_path):
    hyp, ref = _files(tmp_path)
    ours = subprocess.run([sys.executable, "-m", "t2t_keras.bin.bleu", f"--translation={hyp}", f"--reference={ref}"],
                          capture_output=True, text=True)
    assert ours.returncode == 0, ours.stderr
    sacrebleu_cli = os.path.join(os.path.dirname(sys.executable), "sacrebleu")
    theirs = subprocess.run([sacrebleu_cli, str(ref), "-i", str(hyp), "-b", "-w", "2"], capture_output=True, text=True)
    assert theirs.returncode == 0, theirs.stderr
    assert re.search(r"^BLEU = ([\d.]+)", ours.stdout).group(1) == theirs.stdout.strip()
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in ours.stdout
    assert len(ours.stdout.strip().splitlines()) == 2  # BLEU once, chrF2 once
    theirs = subprocess.run([sacrebleu_cli, str(ref), "-i", str(hyp), "-m", "chrf", "-b", "-w", "2"], capture_output=True, text=True)
    assert re.search(r"^chrF2 = ([\d.]+)", ours.stdout.splitlines()[1]).group(1) == theirs.stdout.strip()

    # Case-insensitive, as most published Multi30k results: sacrebleu's -lc.
    ours = subprocess.run([sys.executable, "-m", "t2t_keras.bin.bleu", f"--translation={hyp}", f"--reference={ref}", "--lowercase"],
                          capture_output=True, text=True)
    theirs = subprocess.run([sacrebleu_cli, str(ref), "-i", str(hyp), "-b", "-w", "2", "-lc"], capture_output=True, text=True)
    assert re.search(r"^BLEU = ([\d.]+)", ours.stdout).group(1) == theirs.stdout.strip()
    assert "case:lc" in ours.stdout


def test_paper_tokenisation_splits_compounds():
    tokenizer = MosesTokenizer(lang="de")
    assert paper_tokenize("Schnee-Feld, gut.", tokenizer) == "Schnee ##AT##-##AT## Feld , gut ."
    score, signature = paper_bleu(HYPOTHESES, REFERENCES)
    assert "tok:none" in signature and 0 < score.score < 100
    assert round(paper_bleu(REFERENCES, REFERENCES)[0].score, 6) == 100.0


def test_perfect_and_disjoint():
    assert round(sacre_bleu(REFERENCES, REFERENCES)[0].score, 6) == 100.0
    assert sacre_bleu(["xyz"] * 4, REFERENCES)[0].score == 0.0


def test_misaligned_files_are_one_line_errors(tmp_path):
    hyp, ref = _files(tmp_path)
    ref.write_text("one line\n")
    result = subprocess.run([sys.executable, "-m", "t2t_keras.bin.bleu", f"--translation={hyp}", f"--reference={ref}"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == "error: --translation has 4 lines, --reference has 1; they must be aligned."


def test_a_dev_set_too_small_to_choose_checkpoints_by_bleu_is_warned_about_once_it_is_seen(caplog):
    """The interval is sacreBLEU's 95% bootstrap over sentences: it narrows as the set grows, and
    the evaluator warns (one line) when it is wider than what checkpoint selection decides."""
    import gzip
    import logging
    import random

    from t2t_keras.evaluation.bleu import bleu_interval
    from t2t_keras.problems.translate_multi30k import MULTI30K_DIR
    from t2t_keras.training import evaluator

    with gzip.open(os.path.join(MULTI30K_DIR, "val.de.gz"), "rt", encoding="utf-8") as handle:
        references = [line.rstrip("\n") for line in handle]
    rng = random.Random(0)  # a translation that drops a quarter of the words: BLEU about 52
    hypotheses = [" ".join(word for word in reference.split() if rng.random() > 0.25) for reference in references]
    widths = [bleu_interval(hypotheses[:n], references[:n]) for n in (100, 1014)]
    assert widths[0] > 3 * widths[1] > 0 and widths[1] < evaluator.DEV_BLEU_INTERVAL_LIMIT < widths[0]
    with caplog.at_level(logging.WARNING):
        evaluator._warn_if_dev_too_small(hypotheses, references, "de")
        evaluator._warn_if_dev_too_small(hypotheses[:100], references[:100], "de")
    lines = [record.getMessage() for record in caplog.records if "bootstrap" in record.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("dev BLEU on these 100 sentences is only known to +-"), lines
