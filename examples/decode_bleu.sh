# Sourced by the study scripts: decode_bleu RUN SOURCE REFERENCE HYP DECODE_HPARAMS [DECODER_FLAG...]
# writes RUN's translation of the file SOURCE to HYP and its sacreBLEU (cased, detokenised)
# against REFERENCE to HYP.bleu, the number alone; skipped when HYP.bleu exists. Needs $BIN.
decode_bleu() {
  [ ! -f "$4.bleu" ] || return 0
  "$BIN/t2t-keras-decoder" --output_dir="$1" --decode_from_file="$2" --decode_to_file="$4" --decode_hparams="$5" \
      --noprogress "${@:6}"
  "$BIN/t2t-keras-bleu" --translation="$4" --reference="$3" | sed -nE 's/^BLEU = ([0-9.]+).*/\1/p' > "$4.bleu.tmp"
  mv "$4.bleu.tmp" "$4.bleu"
}
