"""t2t-keras-visualize: PNG heatmaps of a trained model's attention for one sentence.

    t2t-keras-visualize --output_dir=~/t2t_train/tiny --sentence="A dog runs in the snow." --plot_dir=attention/

Writes encoder self-attention, decoder self-attention and encoder-decoder attention, one
PNG per layer with a panel per head, tokens on the axes. The target is the model's own
translation (the problem's beam search), or --target.
"""

from absl import flags

from t2t_keras.bin import flags as common_flags
from t2t_keras.errors import UsageError


def define_flags() -> None:
    common_flags.define_registry_flags()
    common_flags.define_trained_run_flags("draw")
    flags.DEFINE_string("sentence", None, "The source sentence.")
    flags.DEFINE_string("target", None, "The target to attend over (default: the model's translation).")
    flags.DEFINE_string("plot_dir", None, "Where the PNGs go.")


def main(argv) -> int:
    del argv
    if common_flags.load_registrations():
        return 0
    FLAGS = flags.FLAGS
    for name in ("sentence", "plot_dir"):
        if not getattr(FLAGS, name) or not getattr(FLAGS, name).strip():
            raise UsageError(f"--{name} is required (see --helpfull).")
    run = common_flags.load_trained_run()

    from t2t_keras.decoding import attention_plots  # TensorFlow loads here
    from t2t_keras.translator import Translator

    translator = Translator.from_run(run)  # the decoder's engine, kernels and settings
    target = FLAGS.target
    if target is None:
        target = translator.generate([FLAGS.sentence])[0]
        print(f"translation: {target}")
    weights, source_tokens, target_tokens = attention_plots.attention_for_pair(
        translator.model, translator.vocabularies, FLAGS.sentence, target
    )
    paths = attention_plots.write_attention_pngs(weights, source_tokens, target_tokens, FLAGS.plot_dir)
    print(f"wrote {len(paths)} PNGs to {FLAGS.plot_dir}")
    return 0


def run() -> None:
    common_flags.run(main, define_flags)


if __name__ == "__main__":
    run()
