"""Two worker processes on 127.0.0.1 under MultiWorkerMirroredStrategy agree with one process."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import tensorflow as tf

from tests.testing import aggregation_hparams, build_train_step, global_batch, interrupt_while, train_updates

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


def _trainer_workers(output_dirs, data_dir, log_dir):
    """The same t2t-keras-trainer command on two workers over 127.0.0.1 (worker 0 is the chief),
    worker i with --output_dir=output_dirs[i]; their processes, stderr to log_dir/worker{i}.log."""
    from tests.training.test_trainer import SMALL

    workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
    processes = []
    for index, output_dir in enumerate(output_dirs):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
        command = [sys.executable, "-m", "t2t_keras.bin.trainer", "--problem=translate_ende_multi30k",
                   "--hparams_set=transformer_tiny", f"--hparams={SMALL}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                   "--distribution_strategy=multi_worker_mirrored", "--train_steps=8", "--save_checkpoints_steps=2",
                   "--log_steps=1", "--noevaluate"]
        log = open(os.path.join(log_dir, f"worker{index}.log"), "w")
        processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
    return processes


def test_two_workers_killed_and_restarted_resume_together(multi30k_data_dir, tmp_path):
    """Both workers killed after a checkpoint, both restarted: they resume at the same step with
    the same weights (the chief's checkpoint, in the folder they share); SIGTERM to one of them
    stops both at the same step, saved; restarted, they finish. A worker whose output_dir
    cannot see the chief's checkpoints stops them both with one line."""
    import signal
    import time

    shared = tmp_path / "shared"
    processes = _trainer_workers([shared, shared], multi30k_data_dir, tmp_path)
    deadline = time.time() + 300
    while time.time() < deadline and all(p.poll() is None for p in processes):
        if (shared / "ckpt-4.index").exists():
            break
        time.sleep(0.01)
    for process in processes:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert (shared / "ckpt-4.index").exists(), (tmp_path / "worker0.log").read_text()[-3000:]

    # A worker that sees no checkpoint where the chief sees one: both stop, one line each.
    stray = _trainer_workers([shared, tmp_path / "elsewhere"], multi30k_data_dir, tmp_path)
    for index, process in enumerate(stray):
        assert process.wait(timeout=300) == 2
        lines = (tmp_path / f"worker{index}.log").read_text().strip().splitlines()
        assert lines[-1].startswith("error: the workers disagree on --output_dir="), lines[-5:]
        assert "one sees no checkpoint, another step" in lines[-1]

    # Restarted, then preempted: SIGTERM to the second worker alone between checkpoints. Both save
    # the same step (the chief into the shared folder) and stop, status 143.
    restarted = _trainer_workers([shared, shared], multi30k_data_dir, tmp_path)
    chief_log = tmp_path / "worker0.log"
    while time.time() < deadline and all(p.poll() is None for p in restarted) and "step 5/8" not in chief_log.read_text():
        time.sleep(0.01)
    assert interrupt_while(restarted[1], lambda: not (shared / "ckpt-8.index").exists(), signal.SIGTERM), chief_log.read_text()[-3000:]
    stops = []
    for index, process in enumerate(restarted):
        log = (tmp_path / f"worker{index}.log")
        assert process.wait(timeout=300) == 143, log.read_text()[-3000:]
        stops.append(log.read_text().strip().splitlines()[-1])
    assert stops[0] == stops[1] and stops[0].startswith(f"SIGTERM: stopped at step "), stops
    step = int(stops[0].split("stopped at step ")[1].split()[0])
    assert 5 <= step < 8 and stops[0].endswith(f"saved as {shared}/ckpt-{step}; the same command continues from there.")
    assert (shared / f"ckpt-{step}.index").exists()

    again = _trainer_workers([shared, shared], multi30k_data_dir, tmp_path)
    resumed = []
    for index, process in enumerate(again):
        log = (tmp_path / f"worker{index}.log")
        assert process.wait(timeout=300) == 0, log.read_text()[-3000:]
        resumed += [line for line in log.read_text().splitlines() if line.startswith("Resuming from ")]
    assert len(resumed) == 2 and resumed[0] == resumed[1], resumed  # same checkpoint, same weights checksum
    assert resumed[0].startswith(f"Resuming from {shared}/ckpt-{step} (step {step}") and "weights checksum" in resumed[0]
    assert (shared / "ckpt-8.index").exists()
