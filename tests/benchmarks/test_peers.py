"""The peers' benchmark protocol (benchmarks/peers): its FLOP count against the parameters of a
built model, and CTranslate2's random model decoding exactly the protocol's forced steps."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

PEERS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks", "peers")
sys.path.insert(0, PEERS)
import decode_ct2  # noqa: E402
import shapes  # noqa: E402


@pytest.mark.parametrize("size", ["tiny", "base"])
def test_a_steps_flops_are_six_per_parameter_and_token_plus_attention(size):
    """With equal source and target lengths the formula is 6 x (layer parameters + output
    layer) x target tokens + attention's products; the layer parameters are those of PyTorch's
    nn.Transformer layers (biases everywhere), counted here from the shapes alone."""
    shape = shapes.SHAPES[size]
    d, f, n = shape.d_model, shape.d_ff, shape.num_layers
    linear = lambda rows, columns: rows * columns + rows  # noqa: E731
    attention = 4 * linear(d, d)
    encoder_layer = attention + linear(f, d) + linear(d, f) + 2 * 2 * d
    decoder_layer = 2 * attention + linear(f, d) + linear(d, f) + 3 * 2 * d
    flops = shapes.flops_per_step(shape)
    assert flops["nonembedding_params"] == n * (encoder_layer + decoder_layer)
    tokens = shape.batch * shape.tgt_len
    attention_flops = 12 * n * shape.batch * d * 3 * shape.tgt_len ** 2
    assert flops["flops_per_step"] == 6 * (flops["nonembedding_params"] + shape.vocab * d) * tokens + attention_flops
    assert round(flops["flops_per_step"] / 1e9, 1) == {"tiny": 72.3, "base": 300.6}[size]


def test_ctranslate2s_random_model_decodes_the_forced_steps(tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    shape = dataclasses.replace(shapes.SHAPES["tiny"], vocab=512, d_model=64, d_ff=128)
    spec = decode_ct2.random_model_spec(shape, np.random.default_rng(0))
    spec.validate()
    spec.optimize()
    spec.save(str(tmp_path))
    translator = ctranslate2.Translator(str(tmp_path), device="cpu", intra_threads=1)
    pieces = decode_ct2.vocabulary(shape.vocab)
    sources = shapes.decode_sources(shapes.DECODE, shape.vocab)[:3]
    results = translator.translate_batch(
        [[pieces[i] for i in row] + ["</s>"] for row in sources.tolist()], beam_size=4, length_penalty=0.6,
        min_decoding_length=shapes.DECODE.forced_steps, max_decoding_length=shapes.DECODE.forced_steps,
        return_end_token=False)
    assert [len(result.hypotheses[0]) for result in results] == [shapes.DECODE.forced_steps] * 3
    assert not {"</s>", "<s>"} & {piece for result in results for piece in result.hypotheses[0]}


def test_a_record_names_its_cpu_commit_and_command_without_machine_paths(tmp_path):
    """A benchmark run from another tree (paired.sh --against's temporary worktree) records its
    command from the tree's benchmarks/ folder on, and the commit paired.sh names."""
    script = tmp_path / "worktree" / "benchmarks" / "probe.py"
    script.parent.mkdir(parents=True)
    script.write_text(f"import sys; sys.path.insert(0, {PEERS!r}); import shapes; shapes.emit({{'bench': 'probe'}})\n")
    record = tmp_path / "records.jsonl"
    subprocess.run([sys.executable, str(script), "--size", "tiny"], check=True, capture_output=True,
                   env={**os.environ, "BENCH_RESULTS": str(record), "BENCH_COMMIT": "HEAD~1 (abc1234)"})
    line = json.loads(record.read_text())
    assert line["command"] == "python benchmarks/probe.py --size tiny"
    assert line["commit"] == "HEAD~1 (abc1234)" and "family" in line["cpu"] and line["date"][:2] == "20"
