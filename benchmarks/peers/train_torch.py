"""PyTorch's `nn.Transformer`: the training step of the shapes in shapes.py, the peer the
training headline is measured against.

    benchmarks/peers/.venvs/torch/bin/python benchmarks/peers/train_torch.py --size tiny [--compile] [--precision bf16]

The model: one embedding for both sides and the output layer (scaled by sqrt(d_model)),
tensor2tensor's sinusoids (sines then cosines), dropout on the embeddings and inside
`nn.Transformer` (post-norm, ReLU; it adds a final norm after each stack, a negligible cost).
Loss: cross-entropy with label smoothing, averaged over the target tokens; Adam. bf16 is
`torch.autocast` (float32 weights, bfloat16 products); --compile is `torch.compile` (inductor:
its first step compiles, cached under the system's temporary folder). One JSON line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

STARTED = time.perf_counter()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


def sinusoids(length: int, depth: int) -> torch.Tensor:
    """tensor2tensor's position signal: [length, depth], the sines' half then the cosines'."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    channels = depth // 2
    rates = torch.exp(-math.log(1e4) * torch.arange(channels, dtype=torch.float32) / (channels - 1))
    return torch.cat([torch.sin(position * rates), torch.cos(position * rates)], dim=1)


class SharedEmbeddingTransformer(nn.Module):
    def __init__(self, shape: shapes.Shape, max_length: int = 256):
        super().__init__()
        self.scale = math.sqrt(shape.d_model)
        self.embedding = nn.Embedding(shape.vocab, shape.d_model)
        nn.init.normal_(self.embedding.weight, 0.0, shape.d_model ** -0.5)
        self.register_buffer("positions", sinusoids(max_length, shape.d_model), persistent=False)
        self.dropout = nn.Dropout(shape.dropout)
        self.transformer = nn.Transformer(
            d_model=shape.d_model, nhead=shape.num_heads, num_encoder_layers=shape.num_layers,
            num_decoder_layers=shape.num_layers, dim_feedforward=shape.d_ff, dropout=shape.dropout,
            activation="relu", layer_norm_eps=shape.layer_norm_eps, batch_first=True, norm_first=False)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, sources: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        memory = self.transformer.encoder(self.embed(sources))
        causal = nn.Transformer.generate_square_subsequent_mask(inputs.shape[1])
        states = self.transformer.decoder(self.embed(inputs), memory, tgt_mask=causal, tgt_is_causal=True)
        return states @ self.embedding.weight.t()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=list(shapes.SHAPES), default="tiny")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile (inductor)")
    args = parser.parse_args()
    shape = shapes.SHAPES[args.size]
    torch.manual_seed(shapes.SEED)
    model = SharedEmbeddingTransformer(shape).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=shape.learning_rate,
                                 betas=(shape.adam_beta1, shape.adam_beta2), eps=shape.adam_eps)
    forward = torch.compile(model) if args.compile else model
    sources, inputs, targets = (torch.from_numpy(array).long() for array in shapes.train_batch(shape))

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = forward(sources, inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, shape.vocab), targets.reshape(-1),
                               label_smoothing=shape.label_smoothing)
        loss.backward()
        optimizer.step()
        return loss

    times, first = shapes.time_steps(step, sync=lambda loss: loss.item())
    peer = "torch_nn_transformer_" + ("compile" if args.compile else "eager") + ("" if args.precision == "fp32" else "_bf16")
    shapes.emit(shapes.train_result(peer, shape, times, first, {
        "framework": "torch " + torch.__version__, "threads": torch.get_num_threads(), "precision": args.precision,
        "model_params": sum(parameter.numel() for parameter in model.parameters())}), STARTED)


if __name__ == "__main__":
    main()
