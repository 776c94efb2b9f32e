"""t2t-keras-trainer: train a registered problem with a registered hparams set.

    t2t-keras-trainer --problem=translate_ende_wmt14 --hparams_set=transformer_big \
        --data_dir=~/t2t_data --output_dir=~/t2t_train/big --train_steps=300000

On several hosts, run the same command on every worker with TF_CONFIG set and
--distribution_strategy=multi_worker_mirrored.
"""

import os
import sys

from absl import flags

from t2t_keras import files, registry
from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_hparams_flags()
    flags.DEFINE_string("problem", None, "Registered problem, e.g. translate_ende_wmt14.")
    flags.DEFINE_string("data_dir", None, "Where t2t-keras-datagen wrote the problem's data.")
    flags.DEFINE_string("output_dir", None, "Checkpoints, hparams.json and TensorBoard events go here.")
    flags.DEFINE_integer("train_steps", 100000, "Optimizer updates to reach (the paper: 100000 base, 300000 big).")
    flags.DEFINE_integer("eval_steps", 0, "Dev batches per evaluation; 0 = the whole dev split.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Save (and evaluate) every this many steps.")
    flags.DEFINE_integer("keep_checkpoint_max", 20, "Checkpoints kept (the paper averages the last 5 or 20).")
    flags.DEFINE_integer("log_steps", 100, "Progress line and TensorBoard scalars every this many steps.")
    flags.DEFINE_integer(
        "eval_sentences", 100,
        "Dev sentences decoded and scored with the problem's metric (BLEU, parsing F1) at each evaluation; 0 = none.",
    )
    flags.DEFINE_string(
        "decode_hparams", "",
        "Overrides of the problem's decode defaults for the --eval_sentences decoding and --export_saved_model, "
        "e.g. \"beam_size=4,alpha=0.6\".",
    )
    flags.DEFINE_bool("evaluate", True, "Evaluate on the dev split after each checkpoint.")
    flags.DEFINE_string(
        "keep_best", "auto",
        "Keep the checkpoint with the best dev metric as OUTPUT_DIR/best (recorded in run.json): loss (lowest), "
        "the problem's score (highest: bleu, or f1 for parsing), none, or auto = the score when --eval_sentences > 0, "
        "else loss.",
    )
    flags.DEFINE_enum(
        "distribution_strategy", "auto", ["auto", "mirrored", "multi_worker_mirrored", "one_device"],
        "auto = MirroredStrategy over all local GPUs, or one device (GPU or CPU).",
    )
    flags.DEFINE_integer(
        "early_stopping_patience", 0,
        "Stop after this many evaluations in a row without a better --keep_best metric (recorded in run.json); 0 = never.",
    )
    flags.DEFINE_string(
        "warm_start_from", None,
        "Fine-tune: start from the model weights of this run dir (trained, averaged or best) or checkpoint "
        "(DIR/ckpt-N), at step 0 with a fresh optimizer and schedule. Same architecture and vocabulary "
        "(t2t-keras-datagen --vocab_model=THAT_RUN, or --update_vocabulary); training hparams may differ.",
    )
    flags.DEFINE_bool(
        "update_vocabulary", False,
        "With --warm_start_from: the --data_dir's vocabulary (say, one trained on the new data) replaces the "
        "parent's; pieces both have keep the parent's embeddings and output rows, new ones start as the paper "
        "initialises them.",
    )
    flags.DEFINE_enum(
        "new_pieces", "paper", ["paper", "parent_pieces"],
        "With --update_vocabulary, a new piece's embedding: the paper's initialisation, or the mean of the parent's "
        "embeddings of the pieces its vocabulary splits the new piece's text into.",
    )
    flags.DEFINE_string(
        "branch_from", None,
        "Branch another run: continue its training state at this checkpoint (DIR/ckpt-N, or a run dir's latest) - weights, "
        "Adam's state and step - in a new --output_dir, on to --train_steps under this run's schedule (e.g. the same run "
        "with its cooldown ending earlier). The other run is left as it was. Same architecture and vocabulary.",
    )
    flags.DEFINE_integer("seed", None, "Random seed for initialisation, dropout and the data order (reproducible across resumes).")
    flags.DEFINE_bool("start_over", False, "Delete the checkpoints already in --output_dir and start from step 0.")
    flags.DEFINE_string(
        "kernel_choices", "",
        "Force kernel alternatives instead of timing them on this machine at start, e.g. loss_layout=columns "
        "(the same values, another speed; the choice is recorded in run.json).",
    )
    flags.DEFINE_list(
        "alpha_grid", ["0.6", "1.0", "1.4", "2.0", "2.6"],
        "At the end of training (with --eval_sentences > 0), decode the first --alpha_sentences dev sentences with each "
        "of these length-penalty alphas; the best becomes the run's decode default (run.json), which "
        "--decode_hparams=alpha=... still overrides. Empty: keep the problem's.",
    )
    flags.DEFINE_integer(
        "alpha_sentences", 1000,
        "Dev sentences (the first ones, at most the dev set) the --alpha_grid choice decodes; 0 = the --eval_sentences "
        "ones. On the demo, 100 sentences chose alphas from 1.0 to 2.6 by chance where the whole dev set and a second "
        "held-out one agreed on 2.0.",
    )
    flags.DEFINE_bool("export_saved_model", False, "After training, export the last checkpoint for TF Serving (see t2t-keras-exporter).")
    flags.DEFINE_string("export_dir", None, "Where --export_saved_model writes <step>/ (default: OUTPUT_DIR/export).")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    for name in ("problem", "data_dir", "output_dir"):
        if not getattr(FLAGS, name):
            raise UsageError(f"--{name} is required (see --helpfull).")
    if FLAGS.train_steps <= 0 or FLAGS.save_checkpoints_steps <= 0 or FLAGS.log_steps <= 0:
        raise UsageError("--train_steps, --save_checkpoints_steps and --log_steps must be positive.")
    try:
        alpha_grid = tuple(float(alpha) for alpha in FLAGS.alpha_grid)
    except ValueError:
        raise UsageError(f"--alpha_grid={','.join(FLAGS.alpha_grid)}: give non-negative numbers, e.g. 0.6,1.0,1.4,2.0.") from None
    if any(alpha < 0 for alpha in alpha_grid):
        raise UsageError(f"--alpha_grid={','.join(FLAGS.alpha_grid)}: alphas are non-negative.")
    if FLAGS.alpha_sentences < 0:
        raise UsageError(f"--alpha_sentences={FLAGS.alpha_sentences}: give a count of dev sentences, or 0 for the --eval_sentences ones.")
    hparams = common_flags.resolve_hparams()
    problem = registry.problem(FLAGS.problem)

    import keras  # TensorFlow loads here, once the flags are known to be good

    from t2t_keras.training import distribution, kernel_choices, trainer

    forced_kernels = kernel_choices.parse(FLAGS.kernel_choices)

    strategy = distribution.make_strategy(FLAGS.distribution_strategy)
    if FLAGS.seed is not None:
        keras.utils.set_random_seed(FLAGS.seed)
    settings = trainer.RunSettings(
        output_dir=FLAGS.output_dir, data_dir=FLAGS.data_dir, train_steps=FLAGS.train_steps,
        eval_steps=FLAGS.eval_steps, save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max, log_steps=FLAGS.log_steps,
        eval_sentences=FLAGS.eval_sentences, decode_hparams=FLAGS.decode_hparams, evaluate=FLAGS.evaluate, keep_best=FLAGS.keep_best, seed=FLAGS.seed,
        early_stopping_patience=FLAGS.early_stopping_patience, warm_start_from=FLAGS.warm_start_from,
        update_vocabulary=FLAGS.update_vocabulary, new_pieces=FLAGS.new_pieces, branch_from=FLAGS.branch_from, start_over=FLAGS.start_over, kernel_choices=forced_kernels, alpha_grid=alpha_grid,
        alpha_sentences=FLAGS.alpha_sentences,
    )
    try:
        result = trainer.train(problem, hparams, settings, strategy)
    except trainer.TrainingStopped as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if result.get("early_stopped"):
        stopped = result["early_stopped"]
        print(f"stopped early at step {stopped['step']}: the best dev {stopped['metric']} is step {stopped['best_step']}'s "
              f"({FLAGS.output_dir}/best)")
    elif result.get("already_done"):
        print(f"{FLAGS.output_dir} is already at step {result['step']} (--train_steps={FLAGS.train_steps}); nothing to do.")
    else:
        print(f"trained to step {result['step']}: loss {result['loss']:.4f}; checkpoint {result['checkpoint']}")
    if FLAGS.export_saved_model:
        from t2t_keras.decoding.trained_run import TrainedRun
        from t2t_keras.serving.exporter import export_run

        export_dir = FLAGS.export_dir or os.path.join(FLAGS.output_dir, "export")
        version_path = os.path.join(export_dir, str(result["step"]))
        if files.exists(version_path):  # a rerun of a finished job
            print(f"{version_path} is already exported.")
        else:
            run = TrainedRun.resolve(FLAGS.output_dir, FLAGS.decode_hparams, for_export=True)
            print(f"exported {export_run(run, export_dir)}")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()
