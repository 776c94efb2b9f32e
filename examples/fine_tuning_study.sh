#!/usr/bin/env bash
# Does the README's fine-tuning recipe help? Two in-domain subsets carved from Multi30k's
# training pairs (captions about dogs; about children), each split into train / dev / test,
# the dev and test pairs of both held out of the parent's training. The parent is the demo
# recipe as the study measured it (transformer_demo, 1200 steps cooling down over the last
# 600) on the rest; each recipe fine-tunes it on each subset; every checkpoint is decoded on
# the subset's test and on Multi30k val (the general set), so that selection by dev BLEU and
# by dev loss are both read off the same runs.
#
#   bash examples/fine_tuning_study.sh            # outputs in out/ft_study, a table at the end
#   RECIPES="readme gentle" bash examples/fine_tuning_study.sh
#   PARENT_SEES=none STUDY_DIR=out/ft_study_new bash examples/fine_tuning_study.sh
#   PARENT_SEES=none RECIPES="mixed vocab" DOMAINS=dogs bash examples/fine_tuning_study.sh
#
# Recipe "vocab" is "mixed" with an updated vocabulary (--update_vocabulary): a SentencePiece
# model trained on the parent's pairs and the domain's train pairs together (the union), so
# that the domain's words get pieces of their own; "vocab_mean" starts each new piece from the
# mean of the parent's embeddings of the pieces its text was split into.
#
# PARENT_SEES=train (the default) leaves the domains' train pairs in the parent's data, so
# fine-tuning only reweights what it saw; PARENT_SEES=none holds each domain out of the parent
# entirely, the usual case of a user with new in-domain data.
#
# Rerunning reuses what is complete (each command resumes or skips).
set -euo pipefail

BIN=${BIN:-.venv/bin}
OUT=${STUDY_DIR:-out/ft_study}
PARENT_STEPS=${PARENT_STEPS:-1200}
RECIPES=${RECIPES:-"readme gentle mixed"}
PARENT_SEES=${PARENT_SEES:-train}
DOMAINS=${DOMAINS:-"dogs children"}
DECODE="beam_size=4,alpha=1.4"
# the domains, by their English side (a caption may be in both: it goes to the first)
DOMAIN_PATTERNS='{"dogs": "\\b(dog|dogs|puppy|puppies)\\b", "children": "\\b(child|children|girl|girls|boy|boys|kid|kids)\\b"}'
mkdir -p "$OUT/text"

# --- the corpora: held-out dev (150) and test (300) pairs of each domain, the rest ---
"$BIN/python" - "$OUT/text" "$PARENT_SEES" "$DOMAIN_PATTERNS" <<'EOF'
import gzip, json, os, random, re, sys
from t2t_keras.problems.translate_multi30k import MULTI30K_DIR

out, parent_sees, domains = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if parent_sees not in ("train", "none"):
    sys.exit(f"error: PARENT_SEES={parent_sees!r}: give train or none")
done = os.path.join(out, "done")
if os.path.exists(done):
    made_for = open(done).read().strip() or "train"
    if made_for != parent_sees:
        sys.exit(f"error: {out} was made with PARENT_SEES={made_for}; give another STUDY_DIR")
    sys.exit(0)
def read(name):
    with gzip.open(os.path.join(MULTI30K_DIR, name), "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
en, de = read("train.en.gz"), read("train.de.gz")
held, splits = set(), {}
rng = random.Random(0)
for name, pattern in domains.items():
    members = [i for i, line in enumerate(en) if re.search(pattern, line, re.IGNORECASE) and i not in held]
    rng.shuffle(members)
    splits[name] = {"test": members[:300], "dev": members[300:450], "train": members[450:]}
    held.update(members[:450] if parent_sees == "train" else members)
def write(name, indices):
    for lang, lines in (("en", en), ("de", de)):
        with open(os.path.join(out, f"{name}.{lang}"), "w", encoding="utf-8") as f:
            f.writelines(lines[i] + "\n" for i in indices)
for name, parts in splits.items():
    for part, indices in parts.items():
        write(f"{name}.{part}", indices)
    # the in-domain train pairs mixed with as many of the parent's other pairs (recipe "mixed")
    others = [i for i in range(len(en)) if i not in held and i not in set(parts["train"])]
    write(f"{name}.general_sample", rng.sample(others, len(parts["train"])))
write("parent.train", [i for i in range(len(en)) if i not in held])
for lang in ("en", "de"):
    with open(os.path.join(out, f"val.{lang}"), "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in read(f"val.{lang}.gz"))
print({name: {part: len(v) for part, v in parts.items()} for name, parts in splits.items()}, "parent", len(en) - len(held))
with open(done, "w") as f:
    f.write(parent_sees + "\n")
EOF
T=$OUT/text

# --- the parent: the demo recipe on everything not held out ---
"$BIN/t2t-keras-datagen" --problem=translate_text --data_dir="$OUT/parent_data" --noprogress \
    --train_source="$T/parent.train.en" --train_target="$T/parent.train.de" --dev_source="$T/val.en" --dev_target="$T/val.de" \
    --source_language=en --target_language=de
start=$(date +%s)
"$BIN/t2t-keras-trainer" --problem=translate_text --data_dir="$OUT/parent_data" --hparams_set=transformer_demo \
    --hparams=learning_rate_cooldown_steps=600 --output_dir="$OUT/parent" --train_steps="$PARENT_STEPS" \
    --save_checkpoints_steps=200 --log_steps=100 --eval_sentences=100
echo "parent trained or reused in $(( $(date +%s) - start )) s"

decode() {  # run dir, checkpoint, input, output
  "$BIN/t2t-keras-decoder" --output_dir="$1" --checkpoint_path="$2" --decode_from_file="$3" --decode_to_file="$4" \
      --decode_hparams="$DECODE" --noprogress 2>/dev/null
}
bleu() { "$BIN/t2t-keras-bleu" --translation="$1" --reference="$2" | sed -nE '1s/^BLEU = ([0-9.]+).*/\1/p'; }

# --- each recipe on each domain ---
for domain in $DOMAINS; do
  "$BIN/t2t-keras-datagen" --problem=translate_text --data_dir="$OUT/$domain/data" --vocab_model="$OUT/parent" --noprogress \
      --train_source="$T/$domain.train.en" --train_target="$T/$domain.train.de" \
      --dev_source="$T/$domain.dev.en" --dev_target="$T/$domain.dev.de" --source_language=en --target_language=de
  "$BIN/t2t-keras-datagen" --problem=translate_text --data_dir="$OUT/$domain/mixed_data" --vocab_model="$OUT/parent" --noprogress \
      --train_source="$T/$domain.train.en,$T/$domain.general_sample.en" --train_target="$T/$domain.train.de,$T/$domain.general_sample.de" \
      --dev_source="$T/$domain.dev.en" --dev_target="$T/$domain.dev.de" --source_language=en --target_language=de
  if [[ " $RECIPES " == *" vocab"* ]]; then  # the union's vocabulary, then the mixed pairs in it
    "$BIN/t2t-keras-datagen" --problem=translate_text --data_dir="$OUT/$domain/union_data" --noprogress \
        --train_source="$T/parent.train.en,$T/$domain.train.en" --train_target="$T/parent.train.de,$T/$domain.train.de" \
        --dev_source="$T/$domain.dev.en" --dev_target="$T/$domain.dev.de" --source_language=en --target_language=de
    "$BIN/t2t-keras-datagen" --problem=translate_text --data_dir="$OUT/$domain/mixed_vocab_data" --noprogress \
        --vocab_model="$OUT/$domain/union_data/translate_text.spm.model" \
        --train_source="$T/$domain.train.en,$T/$domain.general_sample.en" --train_target="$T/$domain.train.de,$T/$domain.general_sample.de" \
        --dev_source="$T/$domain.dev.en" --dev_target="$T/$domain.dev.de" --source_language=en --target_language=de
  fi
  for recipe in $RECIPES; do
    data=$OUT/$domain/data
    update=()
    steps=100; save=25  # the gentle recipes: a seventh of the parent's peak rate, 100 steps
    gentle="learning_rate=0.03,learning_rate_warmup_steps=20,learning_rate_cooldown_steps=80"
    case $recipe in
      readme) hp="learning_rate=0.15,learning_rate_warmup_steps=50,learning_rate_cooldown_steps=250"; steps=300; save=100 ;;
      gentle) hp=$gentle ;;
      mixed) hp=$gentle; data=$OUT/$domain/mixed_data ;;  # half in-domain, half the parent's other pairs
      vocab) hp=$gentle; data=$OUT/$domain/mixed_vocab_data; update=(--update_vocabulary) ;;  # mixed, in the union's vocabulary
      vocab_mean) hp=$gentle; data=$OUT/$domain/mixed_vocab_data; update=(--update_vocabulary --new_pieces=parent_pieces) ;;
      *) echo "unknown recipe $recipe" >&2; exit 2 ;;
    esac
    run=$OUT/$domain/$recipe
    start=$(date +%s)
    "$BIN/t2t-keras-trainer" --problem=translate_text --data_dir="$data" --hparams_set=transformer_demo --hparams="$hp" \
        --warm_start_from="$OUT/parent" "${update[@]}" --output_dir="$run" --train_steps=$steps --save_checkpoints_steps=$save \
        --keep_checkpoint_max=10 --eval_sentences=150 --log_steps=$save
    echo "$domain $recipe trained or reused in $(( $(date +%s) - start )) s"
    for step in $(seq 0 "$save" "$steps"); do
      for split in test val; do
        input=$T/$domain.test.en; reference=$T/$domain.test.de
        [ "$split" = val ] && input=$T/val.en && reference=$T/val.de
        hyp=$run/$split.ckpt-$step.de
        [ -f "$hyp.bleu" ] || { decode "$run" "$run/ckpt-$step" "$input" "$hyp" && bleu "$hyp" "$reference" > "$hyp.bleu"; }
      done
    done
  done
done

# --- the table: per run and checkpoint, dev loss and BLEU (run.json), test and val BLEU, and
# val_other: BLEU on the val captions of neither domain (val holds both domains' captions too,
# so its BLEU can rise with the domain while the rest is forgotten) ---
"$BIN/python" - "$OUT" "$DOMAIN_PATTERNS" $DOMAINS -- $RECIPES <<'EOF'
import json, os, re, sys
import sacrebleu

out, patterns = sys.argv[1], json.loads(sys.argv[2])
split = sys.argv.index("--")
domains, recipes = sys.argv[3:split], sys.argv[split + 1:]
read = lambda path: open(path, encoding="utf-8").read().splitlines()  # noqa: E731
other = [i for i, line in enumerate(read(os.path.join(out, "text", "val.en")))
         if not any(re.search(p, line, re.IGNORECASE) for p in patterns.values())]
references = read(os.path.join(out, "text", "val.de"))
def other_bleu(path):
    hypotheses = read(path)
    return sacrebleu.corpus_bleu([hypotheses[i] for i in other], [[references[i] for i in other]]).score
print(f"val_other: the {len(other)} of {len(references)} val captions in neither domain")
print("domain   recipe   step  dev_loss  dev_bleu  test_bleu  val_bleu  val_other")
for domain in domains:
    for recipe in recipes:
        run = os.path.join(out, domain, recipe)
        evaluations = {e["step"]: e for e in json.load(open(os.path.join(run, "run.json")))["evaluations"]}
        for step in sorted(evaluations):
            e = evaluations[step]
            scores = [open(os.path.join(run, f"{s}.ckpt-{step}.de.bleu")).readline().strip() for s in ("test", "val")]
            print(f"{domain:8} {recipe:8} {step:4}  {e.get('loss', float('nan')):8.4f}  {e.get('bleu', float('nan')):8.2f}  "
                  f"{scores[0]:>9}  {scores[1]:>8}  {other_bleu(os.path.join(run, f'val.ckpt-{step}.de')):9.2f}")
EOF
