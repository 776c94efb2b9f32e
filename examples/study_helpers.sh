# Sourced by the study scripts; each function needs $BIN.
#
# decode_bleu RUN SOURCE REFERENCE HYP DECODE_HPARAMS [DECODER_FLAG...]: RUN's translation of the
# file SOURCE in HYP and its sacreBLEU (cased, detokenised) against REFERENCE in HYP.bleu, the
# number alone; skipped when HYP.bleu exists.
decode_bleu() {
  [ ! -f "$4.bleu" ] || return 0
  "$BIN/t2t-keras-decoder" --output_dir="$1" --decode_from_file="$2" --decode_to_file="$4" --decode_hparams="$5" \
      --noprogress "${@:6}"
  "$BIN/t2t-keras-bleu" --translation="$4" --reference="$3" | sed -nE 's/^BLEU = ([0-9.]+).*/\1/p' > "$4.bleu.tmp"
  mv "$4.bleu.tmp" "$4.bleu"
}

# dev_texts DIR: Multi30k en-de's dev (= val, where recipes were tuned) and dev2 (1000 training
# pairs held out of training) as DIR/{dev,dev2}.{en,de}, one sentence a line.
dev_texts() {
  "$BIN/python" - "$1" <<'PY'
import os, sys
from t2t_keras.data.text_files import TextStats
from t2t_keras.problems.translate_multi30k import multi30k_pairs

for split in ("dev", "dev2"):
    pairs = list(multi30k_pairs(split, "en", "de", TextStats()))
    for side, language in enumerate(("en", "de")):
        path = os.path.join(sys.argv[1], f"{split}.{language}")
        with open(path + ".tmp", "w", encoding="utf-8") as out:
            out.writelines(pair[side] + "\n" for pair in pairs)
        os.replace(path + ".tmp", path)
PY
}

# reference_nll RUN SOURCE REFERENCE: RUN's per-token negative log-likelihood of REFERENCE's
# lines given SOURCE's (end of sentence included) in RUN/SPLIT.nll, SPLIT = REFERENCE's file name
# without its extension (dev2.de -> dev2.nll); skipped when that exists.
reference_nll() {
  local name=$(basename "$3")
  local record=$1/${name%.*}.nll
  [ ! -f "$record" ] || return 0
  "$BIN/python" - "$1" "$2" "$3" "$record" <<'PY'
import os, sys
from t2t_keras import Translator

run, source, reference, record = sys.argv[1:]
sources = open(source, encoding="utf-8").read().splitlines()
references = open(reference, encoding="utf-8").read().splitlines()
translator = Translator.from_preset(run, tune_process=False)
log_probs = translator.score(sources, references)
tokens = sum(len(translator.vocabularies.target.encode(line)) + 1 for line in references)
with open(record + ".tmp", "w") as handle:
    handle.write(f"{-sum(log_probs) / tokens:.4f}\n")
os.replace(record + ".tmp", record)
PY
}
