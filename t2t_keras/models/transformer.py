"""The Transformer encoder-decoder (section 3), built from an HParams and vocabulary sizes."""

from typing import NamedTuple

import keras
import tensorflow as tf
from keras import ops

from t2t_keras import registry
from t2t_keras.hparams_lib import HParams, field_names, replace_fields
from t2t_keras.layers import masks
from t2t_keras.layers.block_config import BlockConfig
from t2t_keras.layers.decoder_block import DecoderBlock
from t2t_keras.layers.dropout import Dropout
from t2t_keras.layers.embedding import SharedEmbedding
from t2t_keras.layers.encoder_block import EncoderBlock
from t2t_keras.layers.normalization import LayerNorm
from t2t_keras.layers.position import CopyPositionEncoding, LearnedPositionEmbedding, SinusoidalPositionEncoding
from t2t_keras.optimization.losses import LabelSmoothedCrossEntropy, real_tokens
from t2t_keras.optimization.recipe import make_optimizer
from t2t_keras.registry import register_model
from t2t_keras.token_ids import START_ID

SUM = tf.distribute.ReduceOp.SUM

HPARAMS_FIELDS = frozenset(field_names())


class Encoded(NamedTuple):
    """What the decoder needs from the encoder."""

    outputs: object  # [B, S, d_model]
    mask: object  # [B, 1, S] bool, True on real source tokens


class DecoderMemory(NamedTuple):
    """What every decoding step reads of its sentence and none changes, prepared once per
    search: the encoder output's cross-attention keys and values, one row per sentence (shared
    by its hypotheses). Beam search drops the rows of the
    sentences that settle (its `sentence_state`); the output projection, the same for all,
    is prepared once (`output_weights`) and captured by the step function: a [V, d] tensor
    carried through the search's loop cost default decoding 15% on an AVX-512 EPYC (issue 39).
    """

    keys: tuple  # per layer [B, h, S, d_k]: cross-attention keys of the encoder output
    values: tuple  # per layer [B, h, S, d_v]
    mask: object  # [B, 1, S] bool


class DecoderCache(NamedTuple):
    """State of incremental decoding that grows and follows its hypothesis: every field is a
    tensor or a tuple of one per layer, each with a row per hypothesis, so that tf.while_loop
    and beam search can carry and reorder it with `tf.nest`; the self-attention caches grow by
    one position per step."""

    keys: tuple  # per layer [B * K, h, t, d_k]: self-attention keys of the t positions fed so far
    values: tuple  # per layer [B * K, h, t, d_v]
    copied: object  # [B * K] int32: copied tokens fed so far (see CopyPositionEncoding; 0 without it)


def shift_right(targets):
    """Decoder inputs for teacher forcing: the start symbol, then targets[:-1]."""
    return ops.pad(targets, [[0, 0], [1, 0]], constant_values=START_ID)[:, :-1]


@register_model("transformer")
@keras.saving.register_keras_serializable(package="t2t_keras")
class Transformer(keras.Model):
    """The paper's encoder-decoder Transformer.

    Three separate entry points, each with one return type:
      * `call({"inputs": src, "targets": tgt})`: teacher-forced logits [B, T, V] in float32,
        where logits[:, i] predict targets[:, i] from targets[:, :i];
      * `encode(src)` -> `Encoded`, then `init_decoding(encoded, beam_size)` -> (`DecoderMemory`,
        `DecoderCache`) and `output_weights()`;
      * `decode_step(ids, index, cache, memory, output_weights)` -> (logits [B * K, V], cache):
        one cached step that feeds token `ids` [B * K] at position `index` and predicts the
        next token.

    Token id 0 is padding (and the decoder's start symbol, as in tensor2tensor); source
    padding is masked everywhere, target padding only needs the causal mask.

    The Keras way: `Transformer("transformer_base", vocab_size=37000, num_hidden_layers=4)`
    builds the model (every weight created; `summary()` works); `compile()` with no
    arguments sets the paper's optimizer, schedule and label-smoothed loss per real target
    token, so `fit(problem.dataset("train", ...), steps_per_epoch=...)` trains it on a
    problem's batches (the targets are read from the features); `save("m.keras")` and
    `keras.models.load_model` round-trip it. The t2t-keras-trainer trains the same model with
    its own loop (see `training.trainer`).

    Args:
      hparams: a registered hparams set's name ("transformer_base"), an `HParams` or its dict.
      vocab_size: source vocabulary size (and target size unless `target_vocab_size`).
      target_vocab_size: target vocabulary size when it differs; requires unshared weights.
      structure_tokens: the problem's `structure_tokens` (target ids that are not copies of
        the source), required by hparams.copy_position_encoding.
      **kwargs: `HParams` fields (overriding the set's: `num_hidden_layers=4`) and Keras'
        own (`name`, `dtype`: a dtype policy such as "mixed_bfloat16").
    """

    def __init__(self, hparams: HParams | dict | str = "transformer_base", vocab_size: int | None = None,
                 target_vocab_size: int | None = None, structure_tokens=None, **kwargs):
        overrides = {name: kwargs.pop(name) for name in list(kwargs) if name in HPARAMS_FIELDS}
        super().__init__(**kwargs)
        self._fused_loss, self._forced_kernels = False, ""  # set by `compile`
        self.kernel_choices = None  # what the first `fit` after `compile` chose (the trainer's run.json record)
        if vocab_size is None:
            raise TypeError("Transformer needs vocab_size: the number of ids of the (source) vocabulary.")
        self.hparams = _resolve_hparams(hparams, overrides)
        self.vocab_size = int(vocab_size)
        self.target_vocab_size = int(target_vocab_size or vocab_size)
        hp = self.hparams
        if hp.shared_embedding_and_softmax_weights and self.target_vocab_size != self.vocab_size:
            raise ValueError(
                f"shared_embedding_and_softmax_weights needs one vocabulary, got source {self.vocab_size} "
                f"and target {self.target_vocab_size}; set shared_embedding_and_softmax_weights=false."
            )
        if hp.copy_position_encoding and structure_tokens is None:
            raise ValueError(
                "copy_position_encoding needs a problem whose targets copy the source in order "
                "(one with structure_tokens, e.g. parsing_english_ptb_sample_words)."
            )
        self.structure_tokens = list(structure_tokens) if hp.copy_position_encoding else None
        dtype = self.dtype_policy
        self.source_embedding = SharedEmbedding(self.vocab_size, hp.hidden_size, dtype=dtype, name="shared_embedding" if hp.shared_embedding_and_softmax_weights else "source_embedding")
        if hp.shared_embedding_and_softmax_weights:
            self.target_embedding = self.source_embedding
            self.softmax_projection = self.source_embedding
        else:
            self.target_embedding = SharedEmbedding(self.target_vocab_size, hp.hidden_size, dtype=dtype, name="target_embedding")
            self.softmax_projection = SharedEmbedding(self.target_vocab_size, hp.hidden_size, dtype=dtype, name="softmax")
        if hp.positional_encoding == "learned":
            self.source_position = LearnedPositionEmbedding(hp.max_position, dtype=dtype, name="source_position")
            self.target_position = LearnedPositionEmbedding(hp.max_position, dtype=dtype, name="target_position")
        else:
            self.source_position = self.target_position = SinusoidalPositionEncoding(dtype=dtype, name="position")
        # P_drop's layers are built at the highest rate the trainer's ResidualDropoutSchedule sets
        # (Keras gives a layer built at rate 0 no random state); it sets each update's rate.
        p_drop = max(hp.layer_prepostprocess_dropout,
                     hp.layer_prepostprocess_dropout_early if hp.layer_prepostprocess_dropout_early_steps else 0.0)
        block = BlockConfig(
            num_heads=hp.num_heads,
            key_depth=hp.key_depth,
            value_depth=hp.value_depth,
            filter_size=hp.filter_size,
            dropout=p_drop,
            attention_dropout=hp.attention_dropout,
            relu_dropout=hp.relu_dropout,
            norm_type=hp.norm_type,
            layer_norm_epsilon=hp.layer_norm_epsilon,
        )
        # One attribute per block: tf.train.Checkpoint and SavedModel follow attributes, but not
        # the TrackedList Keras makes of a list attribute (its blocks would be left out).
        for i in range(hp.num_hidden_layers):
            setattr(self, f"encoder_{i}", EncoderBlock(block, dtype=dtype, name=f"encoder_{i}"))
            setattr(self, f"decoder_{i}", DecoderBlock(block, dtype=dtype, name=f"decoder_{i}"))
        self.copy_position = None
        if hp.copy_position_encoding:
            self.copy_position = CopyPositionEncoding(self.structure_tokens, self.target_vocab_size, dtype=dtype, name="copy_position")
        self.embedding_dropout = Dropout(p_drop, dtype=dtype)
        # Where the norm goes is chosen here, once: post-norm blocks end normalised (ResidualNorm),
        # pre-norm stacks end unnormalised and get one final LayerNorm each; None: nothing to add.
        self.encoder_norm = self.decoder_norm = None
        if hp.norm_type == "pre":
            self.encoder_norm = LayerNorm(epsilon=hp.layer_norm_epsilon, dtype=dtype, name="encoder_norm")
            self.decoder_norm = LayerNorm(epsilon=hp.layer_norm_epsilon, dtype=dtype, name="decoder_norm")
        self.build()  # the weights' shapes depend on the hparams only: usable (and loadable) as constructed

    @classmethod
    def from_hparams(
        cls, hparams: HParams, vocab_size: int, target_vocab_size: int | None = None, dtype=None, structure_tokens=None
    ) -> "Transformer":
        """A built model for `hparams` (weights created, so `count_params()` works).

        `dtype` is a Keras dtype policy name ("mixed_bfloat16"...); default: the global policy.
        `structure_tokens`: the problem's, used with hparams.copy_position_encoding.
        """
        return cls(hparams.validated(), vocab_size, target_vocab_size, structure_tokens, dtype=dtype)

    def build(self, input_shape=None):
        """Creates every weight; the shapes depend on the hparams only, not on the input."""
        stream_shape = (None, None, self.hparams.hidden_size)
        for layer in {id(l): l for l in (self.source_embedding, self.target_embedding, self.softmax_projection)}.values():
            layer.build()
        self.source_position.build(stream_shape)
        self.target_position.build(stream_shape)
        if self.copy_position is not None:
            self.copy_position.build(stream_shape)
        for block in (*self.encoder_blocks, *self.decoder_blocks):
            block.build(stream_shape)
        for norm in (self.encoder_norm, self.decoder_norm):
            if norm is not None:
                norm.build(stream_shape)

    def compile(self, optimizer="auto", loss="auto", *, train_steps: int = 0, weighted_metrics=None,
                kernel_choices: str = "", **kwargs):
        """Keras' compile, with the paper's recipe for "auto": Adam with the warmup / inverse
        square root schedule of the hparams (`make_optimizer`; `train_steps` places a
        learning_rate_cooldown_steps cooldown at the end) and the label-smoothed cross-entropy
        per real target token (`LabelSmoothedCrossEntropy`). Anything else is passed to Keras
        as given.

        With that loss and no metrics, `fit` and `evaluate` run the trainer's step: the fused
        output layer (`token_losses`: no [tokens, vocabulary] logits leave it) with the kernels
        `fit` times on this machine at its start, as the trainer does (`kernel_choices` forces
        any, in the trainer flag's form: "loss_layout=rows_copy,..."). A metric that reads the
        logits (`weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()]`: token accuracy,
        padding weighing 0) makes them compute the logits and the loss from them instead, a
        slower step."""
        if optimizer == "auto":
            if self.hparams.learning_rate_cooldown_steps and not train_steps:
                raise ValueError(
                    f"these hparams cool the learning rate down over the last {self.hparams.learning_rate_cooldown_steps} "
                    "steps: pass compile(train_steps=N), N the steps fit will run (or learning_rate_cooldown_steps=0)."
                )
            optimizer = make_optimizer(self.hparams, train_steps)
        if loss == "auto":
            loss = LabelSmoothedCrossEntropy(self.hparams.label_smoothing)
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs)
        self.optimizer.build(self.trainable_variables)  # the model is built: its state exists (and saves) from here
        self._fused_loss = (isinstance(self.loss, LabelSmoothedCrossEntropy) and not weighted_metrics
                            and not kwargs.get("metrics") and not kwargs.get("loss_weights"))
        self._forced_kernels, self.kernel_choices = kernel_choices, None

    def compile_from_config(self, config):
        """`compile` again with the saved settings, as `keras.models.load_model` restores a
        compiled model (Keras skips models whose compile it does not know)."""
        self.compile(**keras.saving.deserialize_keras_object(config))

    def fit(self, x=None, y=None, *args, **kwargs):
        """Keras' fit; the first one times the kernel alternatives here (`compile`). A tf.data
        dataset is iterated as it comes (a problem's training batches are shuffled already)."""
        if isinstance(x, tf.data.Dataset) and not args:
            kwargs.setdefault("shuffle", False)
        if self._fused_loss and self.kernel_choices is None:
            from t2t_keras.training import kernel_choices

            self.kernel_choices = kernel_choices.choose(self, self.hparams, kernel_choices.parse(self._forced_kernels))
        return super().fit(x, y, *args, **kwargs)

    def train_step(self, data):
        """Keras' step, or with the recipe's loss and no metrics (`compile`) the trainer's: the
        gradients of the fused output layer's loss per real target token of the whole batch,
        all replicas' tokens counted together (as the trainer does: 2 replicas step as 1)."""
        features, targets, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if not self._takes_fused_step(features, targets):
            return super().train_step(data)
        with tf.GradientTape() as tape:
            loss_sum, global_weight = self._fused_loss_sum(features, sample_weight, training=True)
            # this replica's share of the global mean: the optimizer sums the replicas' gradients
            share = self.optimizer.scale_loss(loss_sum / global_weight)
        self.optimizer.apply(tape.gradient(share, self.trainable_variables), self.trainable_variables)
        return self._logs_with_loss(loss_sum, global_weight, features)

    def test_step(self, data):
        """Keras' evaluation step, or the fused loss as `train_step` computes it."""
        features, targets, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if not self._takes_fused_step(features, targets):
            return super().test_step(data)
        return self._logs_with_loss(*self._fused_loss_sum(features, sample_weight, training=False), features)

    def _takes_fused_step(self, features, targets) -> bool:
        """Whether a batch goes through the fused loss: compiled for it, the targets in the features."""
        return self._fused_loss and targets is None and isinstance(features, dict)

    def _fused_loss_sum(self, features, sample_weight, training):
        """(The label-smoothed cross-entropy summed over this replica's real target tokens, each
        weighted by `sample_weight` too if given; the weights' sum over all replicas, at least 1),
        by `token_losses`."""
        losses = self.token_losses(features, self.loss.label_smoothing, training=training)
        weights = real_tokens(features["targets"])
        if sample_weight is not None:  # a weight per sentence [B] or per token [B, T]
            sample_weight = tf.cast(sample_weight, weights.dtype)
            weights *= sample_weight[:, None] if sample_weight.shape.rank == 1 else sample_weight
        global_weight = tf.distribute.get_replica_context().all_reduce(SUM, tf.reduce_sum(weights))
        return tf.reduce_sum(losses * weights), tf.maximum(global_weight, 1.0)

    def _logs_with_loss(self, loss_sum, global_weight, features):
        """Keras' loss tracker given the global batch's mean loss (each replica adds its
        sentences' part of it: the tracker sums the replicas), and the logs."""
        loss = tf.distribute.get_replica_context().all_reduce(SUM, loss_sum) / global_weight
        self._loss_tracker.update_state(loss, sample_weight=tf.shape(features["targets"])[0])
        return self.get_metrics_result()

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras' loss of a batch, `fit`'s and `evaluate`'s (see `_targets_of`)."""
        y, sample_weight = _targets_of(x, y, sample_weight)
        return super().compute_loss(x, y, y_pred, sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        y, sample_weight = _targets_of(x, y, sample_weight)
        return super().compute_metrics(x, y, y_pred, sample_weight)

    @property
    def num_layers(self) -> int:
        return self.hparams.num_hidden_layers

    @property
    def encoder_blocks(self) -> list:
        return [getattr(self, f"encoder_{i}") for i in range(self.num_layers)]

    @property
    def decoder_blocks(self) -> list:
        return [getattr(self, f"decoder_{i}") for i in range(self.num_layers)]

    def residual_dropouts(self) -> list:
        """The Dropout layers of P_drop (section 5.4): the embedding sums' and each sub-layer's output's."""
        residuals = [
            getattr(block, name)
            for block in (*self.encoder_blocks, *self.decoder_blocks)
            for name in ("self_attention_residual", "cross_attention_residual", "feed_forward_residual")
            if hasattr(block, name)
        ]
        return [self.embedding_dropout, *(residual.dropout_layer for residual in residuals)]

    def call(self, features, training=None):
        encoded = self.encode(features["inputs"], training=training)
        return self.decode(features["targets"], encoded, training=training)

    def encode(self, inputs, training=None) -> Encoded:
        """Encoder outputs for source ids [B, S] (0 = padding)."""
        mask = masks.key_padding_mask(inputs)
        x = self._embed_sources(inputs, training)
        for block in self.encoder_blocks:
            x = block(x, attention_mask=mask, training=training)
        return Encoded(_end_of_stack(self.encoder_norm, x), mask)

    def decode(self, targets, encoded: Encoded, training=None):
        """Teacher-forced logits [B, T, V] (float32) for target ids [B, T]."""
        return self._logits(self._decoder_states(targets, encoded, training)[0], training)

    def token_losses(self, features, label_smoothing: float, training=None, rdrop_alpha: float = 0.0):
        """Label-smoothed cross-entropy [B, T] (float32) of each teacher-forced target token:
        `smoothed_cross_entropy(targets, self(features))` without the logits leaving the output
        layer, whose fused kernel multiplies in the layout chosen for this CPU
        (SharedEmbedding.loss_layout). What a training step differentiates. With `rdrop_alpha`
        (R-Drop), `features` hold every sentence twice (rows b and b + B, run under independent
        dropout) and each token adds alpha / 2 times its divergence from its twin."""
        targets = features["targets"]
        hp = self.hparams
        guided = bool(hp.guided_alignment_weight) and "alignment" in features
        taught = hp.guided_alignment_layer % hp.num_hidden_layers if guided else None
        states, weights = self._decoder_states(targets, self.encode(features["inputs"], training=training), training,
                                               taught)
        losses = self.softmax_projection.token_losses(states, targets, label_smoothing, rdrop_alpha)
        if guided:
            losses += hp.guided_alignment_weight * guided_alignment_losses(
                weights[:, hp.guided_alignment_head], features["alignment"])
        return losses

    def _decoder_states(self, targets, encoded: Encoded, training, weights_of: int | None = None):
        """The decoder stack's normalised outputs [B, T, d_model], the input of the softmax, and
        layer `weights_of`'s cross-attention weights [B, h, T, S] (None if not asked)."""
        x, _ = self._embed_targets(shift_right(targets), 0, training=training)
        causal = masks.causal_mask(ops.shape(targets)[1])
        weights = None
        for layer, block in enumerate(self.decoder_blocks):
            if layer == weights_of:
                x, attention = block(x, encoded.outputs, self_attention_mask=causal, memory_mask=encoded.mask,
                                     training=training, return_attention_scores=True)
                weights = attention["encoder_decoder"]
            else:
                x = block(x, encoded.outputs, self_attention_mask=causal, memory_mask=encoded.mask, training=training)
        return _end_of_stack(self.decoder_norm, x), weights

    def attention_weights(self, inputs, targets) -> dict:
        """Attention weights of a teacher-forced pass (the paper's Figures 3-5).

        Returns {"encoder_self": [B, h, S, S], "decoder_self": [B, h, T, T],
        "encoder_decoder": [B, h, T, S]} lists, one entry per layer; row t of the decoder's
        weights is the query that predicts target token t.
        """
        mask = masks.key_padding_mask(inputs)
        x = self._embed_sources(inputs, training=False)
        weights = {"encoder_self": [], "decoder_self": [], "encoder_decoder": []}
        for block in self.encoder_blocks:
            x, layer_weights = block(x, attention_mask=mask, return_attention_scores=True)
            weights["encoder_self"].append(layer_weights)
        x = _end_of_stack(self.encoder_norm, x)
        y, _ = self._embed_targets(shift_right(targets), 0, training=False)
        causal = masks.causal_mask(ops.shape(targets)[1])
        for block in self.decoder_blocks:
            y, layer_weights = block(y, x, self_attention_mask=causal, memory_mask=mask, return_attention_scores=True)
            weights["decoder_self"].append(layer_weights["self"])
            weights["encoder_decoder"].append(layer_weights["encoder_decoder"])
        return weights

    def init_decoding(self, encoded: Encoded, beam_size: int = 1) -> tuple[DecoderMemory, DecoderCache]:
        """The memory and the cache before the first decoding step of `beam_size` hypotheses
        per sentence (one cache row per hypothesis, beam-major within a sentence): the
        cross-attention keys and values of the encoder output, and empty self-attention caches."""
        batch_size = ops.shape(encoded.outputs)[0] * beam_size
        projected = [block.project_memory(encoded.outputs) for block in self.decoder_blocks]
        memory = DecoderMemory(
            keys=tuple(k for k, _ in projected),
            values=tuple(v for _, v in projected),
            mask=encoded.mask,
        )
        keys, values = zip(*(block.self_attention.init_cache(batch_size) for block in self.decoder_blocks))
        return memory, DecoderCache(keys=tuple(keys), values=tuple(values), copied=ops.zeros((batch_size,), "int32"))

    def output_weights(self, vocabulary=None, product: str = "nn"):
        """The output projection of `vocabulary` (token ids [V'], a shortlist; [G, V'], a
        shortlist's groups; None: all tokens) as `decode_step` multiplies by it, prepared once
        per search for `product` (the float product's orientation, or "int8" for the native int8
        product: `SharedEmbedding.output_weights`)."""
        return self.softmax_projection.output_weights(vocabulary, product)

    def decode_step(self, ids, index, cache: DecoderCache, memory: DecoderMemory, output_weights,
                    float32_logits: bool = True, group_rows=None, native_attention: bool = False):
        """Feeds `ids` [N] at position `index` (= the cache's length), N = B * K hypotheses of
        the memory's B sentences; returns (next-token logits [N, V'] over the columns of
        `output_weights` (`output_weights()`), the cache one position longer). The logits are
        float32, or with `float32_logits=False` in the output product's dtype (bfloat16 in a
        bf16 model: for a consumer that reads them as they are, the native beam kernel). With
        grouped output weights, `group_rows` [G] says how many of the N rows, in order, are
        each group's: a row's columns are its group's tokens. `native_attention`: each
        attention as one native kernel (decoding in this process; the same values)."""
        x, copied = self._embed_targets(ids[:, None], index, training=False, copied_before=cache.copied)
        x = ops.reshape(x, (-1, self.hparams.hidden_size))  # [N, d]: the step runs on rank-2 tensors
        keys, values = [], []
        for layer, block in enumerate(self.decoder_blocks):
            x, layer_keys, layer_values = block.call_with_cache(
                x, memory.keys[layer], memory.values[layer], memory.mask, cache.keys[layer], cache.values[layer],
                native_attention,
            )
            keys.append(layer_keys)
            values.append(layer_values)
        logits = self.softmax_projection.step_logits(_end_of_stack(self.decoder_norm, x), output_weights, float32_logits,
                                                     group_rows)
        return logits, DecoderCache(keys=tuple(keys), values=tuple(values), copied=copied)

    def _embed_sources(self, ids, training):
        x = self.source_embedding(ids)
        x = x + self.source_position(x)
        return self.embedding_dropout(x, training=training)

    def _embed_targets(self, ids, start_index, training, copied_before=None):
        """Decoder inputs for target ids [B, T] at positions start_index..., and the copied
        tokens fed up to the last of them [B] (`copied_before` unchanged without
        copy_position_encoding)."""
        x = self.target_embedding(ids)
        x = x + self.target_position(x, start_index=start_index)
        copied = copied_before
        if self.copy_position is not None:
            encodings, copied = self.copy_position(ids, copied_before)
            x = x + encodings
        return self.embedding_dropout(x, training=training), copied

    def _logits(self, states, training=None):
        return ops.cast(self.softmax_projection.logits(states, training), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            hparams=self.hparams.to_dict(), vocab_size=self.vocab_size, target_vocab_size=self.target_vocab_size,
            structure_tokens=self.structure_tokens,
        )
        return config


def guided_alignment_losses(weights, links):
    """Each target token's guided-alignment loss [B, T] (Garg et al., 2019): the cross-entropy
    from its aligned source pieces (uniform over them) to one head's attention `weights`
    [B, T, S]; 0 for a token with no link. `links` [B, 2L]: (source + 1, target + 1) pairs,
    0-padded (tfrecords.ALIGNMENT)."""
    pairs = tf.reshape(links, [tf.shape(links)[0], -1, 2])
    real = pairs[:, :, 0] > 0
    rows = tf.broadcast_to(tf.range(tf.shape(links)[0])[:, None], tf.shape(real))
    indices = tf.stack([tf.boolean_mask(rows, real), tf.boolean_mask(pairs[:, :, 1], real) - 1,
                        tf.boolean_mask(pairs[:, :, 0], real) - 1], axis=1)
    shape = tf.shape(weights)
    aligned = tf.scatter_nd(indices, tf.ones([tf.shape(indices)[0]], tf.float32), shape)
    aligned = tf.minimum(aligned, 1.0)  # a link stored twice counts once
    aligned /= tf.maximum(tf.reduce_sum(aligned, axis=-1, keepdims=True), 1.0)
    return -tf.reduce_sum(aligned * tf.math.log(tf.cast(weights, tf.float32) + 1e-9), axis=-1)


def _targets_of(x, y, sample_weight):
    """(targets, weights) of a batch as Keras gives it to the loss and metrics: a problem's
    batches hold their targets in the features (`{"inputs", "targets"}`, no separate y), and
    padding weighs 0 (times any sample weights given)."""
    if y is None and isinstance(x, dict):
        y = x["targets"]
    if y is not None:
        real = real_tokens(y)
        sample_weight = real if sample_weight is None else real * ops.cast(sample_weight, "float32")
    return y, sample_weight


def _resolve_hparams(hparams: HParams | dict | str, overrides: dict) -> HParams:
    """The model's HParams: a registered set by name, an HParams or its dict, with `overrides`."""
    if isinstance(hparams, str):
        hparams = registry.hparams(hparams)
    elif isinstance(hparams, dict):
        hparams = HParams.from_dict(hparams, source="Transformer's hparams")
    return replace_fields(hparams, overrides, "Transformer's hparams") if overrides else hparams


def _end_of_stack(norm, x):
    """A stack's output: through its final LayerNorm (pre-norm), or as it is (post-norm)."""
    return x if norm is None else norm(x)
