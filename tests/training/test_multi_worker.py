"""Two worker processes on 127.0.0.1 under MultiWorkerMirroredStrategy agree with one process."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests.testing import build_train_step, global_batch, train_updates, aggregation_hparams

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi_worker_job.py")


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_match_one_process(tmp_path):
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    initial = build_train_step(one, aggregation_hparams())[0].get_weights()
    np.savez(tmp_path / "initial.npz", **{f"w{i}": w for i, w in enumerate(initial)})
    reference, reference_losses, _ = train_updates(one, aggregation_hparams(), initial, [global_batch()])

    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    processes = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        processes.append(subprocess.Popen(
            [sys.executable, JOB, f"--initial={tmp_path / 'initial.npz'}", f"--out={tmp_path / f'worker{index}.npz'}"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        ))
    for process in processes:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output[-3000:]

    for index in range(2):
        result = np.load(tmp_path / f"worker{index}.npz")
        np.testing.assert_allclose(result["losses"], reference_losses, atol=1e-5)
        for i, want in enumerate(reference):
            np.testing.assert_allclose(result[f"w{i}"], want, atol=1e-5)
