"""A trained run as the commands that decode it see it: resolved once, where the command line is read.

    run = TrainedRun.resolve("out/demo/train_avg", "beam_size=5", ensemble=["out/b"])
    Translator.from_run(run)                  # the decoder, the Python API and visualize
    exporter.export_run(run.for_export(), "export/")   # SavedModel or CTranslate2

One object carries what every decoding path needs of a run, each piece decided here and
nowhere else: the run dir; its problem, configured as it was trained; the vocabularies; the
decode settings, with the precision decision (`system.decode_precision`: decoding here, bf16
falls back to fp32 without bfloat16 units; an export keeps it for the serving machine); the
checkpoints (the run's, then each --ensemble member's, whose vocabularies must be the run's, then a
--reverse_model's, a run of the other direction that reranks the hypotheses);
and the shortlist. The parts that load TensorFlow (the checkpoints: finding the latest reads
the state file through tf.train) and the large files (vocabularies, shortlist) are read on first
use, once, so that a command checks its own flags before TensorFlow loads.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

from t2t_keras.checkpoints import RunDir, resolve_checkpoint, restore_model
from t2t_keras.data import target_languages
from t2t_keras.decoding.kernel_choices import forced_choices
from t2t_keras.decoding.shortlist import load_run_shortlist
from t2t_keras.errors import UsageError
from t2t_keras.hparams_lib import DecodeHParams, parse_overrides, replace_fields
from t2t_keras.system import decode_precision


class TrainedRun:
    """A trained run dir with the checkpoints and decode settings a command decodes it with.

    Args:
      run_dir: a trainer's output_dir, or an averaged or best one.
      decode_hparams: a DecodeHParams, or overrides of the run's decode defaults (the problem's, with
        those the trainer recorded: its alpha): "beam_size=5" (the decoder's --decode_hparams) or
        {"beam_size": 5} (the Python API's keywords).
      checkpoint_path: the checkpoint to decode instead of the run's latest.
      ensemble: more run dirs or checkpoints decoding with it (the mean of their probabilities).
      reverse: a run dir or checkpoint of a model trained in the other direction (target -> source),
        which reranks each sentence's hypotheses (DecodeHParams.reverse_weight).
      for_export: the precision is the serving machine's (bf16 is kept where this one has no units).
      source: what a bad setting's one line names (a flag, or the Python method it was given to).
    """

    def __init__(self, run_dir: RunDir, decode_hparams: DecodeHParams | str | dict | None = None,
                 checkpoint_path: str | None = None, ensemble=(), for_export: bool = False, reverse: str | None = None,
                 source: str = "--decode_hparams"):
        run_dir.hparams()  # a one-line error for a directory the trainer did not write
        self.run_dir = run_dir
        self.problem = run_dir.problem()
        run_info = run_dir.run_info()
        run_defaults = {**guided_alignment_defaults(run_dir.hparams()),
                        **run_info.get("decode_defaults", {})}  # the alpha the trainer chose on the dev set
        if not isinstance(decode_hparams, DecodeHParams):
            given = (decode_hparams if isinstance(decode_hparams, dict)
                     else parse_overrides(DecodeHParams, decode_hparams or "", source))
            decode_hparams = replace_fields(self.problem.decode_settings(run_defaults=run_defaults), given, source)
            self.default_stop_alpha = default_stop_alpha(run_info, given)
            check_alpha_search(self.default_stop_alpha, decode_hparams, given, source)
        else:
            self.default_stop_alpha = None  # settings given whole, the alpha with them
        forced_choices(decode_hparams.kernel_choices, source)  # a bad one is one line before TensorFlow loads
        # a language the model was not trained for, too
        target_languages.check_language(self.problem.target_languages, decode_hparams.target_language)
        self.requested_hparams = decode_hparams  # before the precision decision: what an export of this run keeps
        self.decode_hparams = decode_precision(decode_hparams, for_export)
        self.checkpoint_path = checkpoint_path
        self.ensemble = tuple(ensemble)
        self.is_export = for_export
        self.reverse = reverse
        if reverse and for_export:
            raise UsageError("a reverse model reranks in the decoder only; an export has none.")
        if reverse and self.problem.multilingual:
            raise UsageError(f"--reverse_model reranks one direction's hypotheses; {self.problem.name} translates into "
                             f"{', '.join(self.problem.target_languages)}: decode without it.")
        if reverse and self.decode_hparams.sampling:
            raise UsageError("--reverse_model reranks beam search's hypotheses; with sampling (sampling_top_k) there is nothing to rerank.")

    @classmethod
    def resolve(cls, output_dir: str, decode_hparams: DecodeHParams | str | dict | None = None,
                checkpoint_path: str | None = None, ensemble=(), for_export: bool = False,
                reverse: str | None = None, source: str = "--decode_hparams") -> "TrainedRun":
        return cls(RunDir(output_dir), decode_hparams, checkpoint_path, ensemble, for_export, reverse, source)

    def with_settings(self, **changes) -> "TrainedRun":
        """The same run (what it has resolved is kept) with some decode settings changed."""
        changed = copy.copy(self)
        changed.decode_hparams = dataclasses.replace(self.decode_hparams, **changes)
        changed.requested_hparams = dataclasses.replace(self.requested_hparams, **changes)
        changed.__dict__.pop("shortlist", None)  # it depends on the settings
        return changed

    def for_export(self) -> "TrainedRun":
        """This run as an export decodes it: the precision asked, for the serving machine."""
        if self.is_export:
            return self
        return TrainedRun(self.run_dir, self.requested_hparams, self.checkpoint_path, self.ensemble, for_export=True)

    @functools.cached_property
    def vocabularies(self):
        return self.run_dir.vocabularies()

    @functools.cached_property
    def members(self) -> tuple[tuple[RunDir, str], ...]:
        """(run dir, checkpoint path) of each model that decodes: the run's, then each --ensemble
        member's (a run dir's latest, or the checkpoint named), each member's vocabularies checked."""
        members = [(self.run_dir, self.run_dir.require_checkpoint(self.checkpoint_path))]
        for member in self.ensemble:
            resolved = resolve_checkpoint(member, "--ensemble")
            difference = resolved.run_dir.vocabularies().difference(self.vocabularies)
            if difference:
                raise UsageError(f"--ensemble={member}: {difference} is not the first model's; ensembled models must "
                                 "share their vocabularies.")
            members.append((resolved.run_dir, resolved.path))
        return tuple(members)

    @functools.cached_property
    def reverse_run(self) -> "TrainedRun | None":
        """The reverse model's run (its checkpoint resolved, its direction checked), or None."""
        if not self.reverse:
            return None
        reverse = resolve_checkpoint(self.reverse, "--reverse_model")
        reverse_problem = reverse.run_dir.problem()
        ours = (getattr(self.problem, "source_language", ""), getattr(self.problem, "target_language", ""))
        theirs = (getattr(reverse_problem, "source_language", ""), getattr(reverse_problem, "target_language", ""))
        if all(ours + theirs) and theirs != ours[::-1]:
            raise UsageError(f"--reverse_model={self.reverse} translates {theirs[0]} -> {theirs[1]}; reranking "
                             f"{ours[0]} -> {ours[1]} needs a {ours[1]} -> {ours[0]} model.")
        # The reverse model only scores (log P(source | hypothesis)): it needs no shortlist or search product of its own.
        return TrainedRun(reverse.run_dir, dataclasses.replace(self.decode_hparams, shortlist=0, int8_logits=False),
                          reverse.path)

    @property
    def checkpoints(self) -> list[str]:
        """The checkpoints that decode, the run's first (then the reverse model's, if any)."""
        return [path for _, path in self.members] + (self.reverse_run.checkpoints if self.reverse_run else [])

    def restore_model(self):
        """The model that decodes, in the decode precision: the run's, or the `Ensemble` of all."""
        models = [restore_model(run_dir, path, self.decode_hparams.precision)[0] for run_dir, path in self.members]
        if len(models) == 1:
            return models[0]
        from t2t_keras.decoding.ensemble import Ensemble

        return Ensemble(models)

    @functools.cached_property
    def shortlist(self):
        """The run's `Shortlist` cut to the shortlist settings, or None when they ask for none."""
        hp = self.decode_hparams
        return load_run_shortlist(self.run_dir).limited(hp.shortlist, hp.shortlist_frequent) if hp.shortlist else None

    def token_filter(self):
        """The problem's constraints on the outputs (parsing's tree filter), or None."""
        return self.problem.token_filter(self.vocabularies)


def default_stop_alpha(run_info: dict, given: dict) -> float | None:
    """The alpha the trainer chose for this run under the default stop (run.json's alpha_choice),
    when the settings decode with it (`given` sets no alpha); else None."""
    choice = run_info.get("alpha_choice")
    if not choice or choice.get("exact_search", False) or "alpha" in given:
        return None
    return run_info.get("decode_defaults", {}).get("alpha")


def check_alpha_search(chosen_alpha: float | None, settings: DecodeHParams, given: dict, source: str):
    """Refuses, in one line, exact search with the alpha the trainer chose under the default
    stop (`chosen_alpha`, `default_stop_alpha`'s): a large alpha suits the default stop, which
    ends a sentence before the length bonus pays for more words, but exact search follows it
    into run-on outputs (docs/decoding.md, "When the search stops"). Alpha given with it decodes
    as asked."""
    if chosen_alpha is None or "alpha" in given or not settings.exact_search:
        return
    raise UsageError(
        f"{source}: exact_search=true with alpha {chosen_alpha:g}, the alpha the trainer chose for the default stop "
        f"(run.json), lengthens outputs into run-on text; give the alpha too, e.g. alpha=1.5 (the Multi30k "
        f"recipe's with exact search).")


def guided_alignment_defaults(hparams) -> dict:
    """A run trained with guided alignment reads its alignments from the head it taught."""
    if not hparams.guided_alignment_weight:
        return {}
    return {"alignment_layer": hparams.guided_alignment_layer, "alignment_head": hparams.guided_alignment_head}
