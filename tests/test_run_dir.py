"""Run directories of the training commands: one seed gives one model, a killed run resumes with its whole history,
one training at a time per run dir, what an interrupted checkpoint write left is cleaned, latest.json stays inside."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import TINY_BC, checkpoint_step, run_main, running, wait_for


def _bc(tiny, run: Path, *extra: str) -> list[str]:
    return [f"data={tiny.store}", *TINY_BC, *extra, f"hydra.run.dir={run}"]


def _tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_same_train_bc_command_twice_trains_identical_weights(tiny, tmp_path, capsys, monkeypatch):
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        torch.rand(7)  # whatever ran before in the process must not matter
        code, out, err = run_main("robot-rl-train-bc", _bc(tiny, run, "steps=3"), capsys, monkeypatch)
        assert code == 0, out + err
    a, b = (_tensors(r / "policy/model.safetensors") for r in runs)
    assert _same_weights(a, b)
    losses = [json.loads((r / "metrics.json").read_text())["history"]["train/loss"] for r in runs]
    assert losses[0] == losses[1]


def _state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("kind", ["residual", "hil", "distributed"])
def test_residual_hil_and_distributed_learners_start_from_the_same_weights_for_one_seed(kind, tiny, tmp_path):
    from robot_rl import sim
    from robot_rl.policies import load_policy
    from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace

    cfg = ResidualRLConfig(residual={"hidden": [16]},
                           learner={"num_critics": 2, "critic_hidden": [16]},
                           interventions="scripted" if kind == "hil" else "none")
    env = sim.make("lift", num_envs=2)
    base = load_policy(tiny.policy)
    built = []
    for i in range(2):
        torch.rand(7)
        if kind == "distributed":
            from robot_rl.rl.distributed import DistributedConfig, DistributedWorkspace

            ws = DistributedWorkspace(tmp_path / str(i), cfg, env, base, DistributedConfig(actors=1),
                                      base_path=str(tiny.policy))
        else:
            ws = ResidualWorkspace(tmp_path / str(i), cfg, env, base)
        built.append((_state(ws.policy.actor), ws.learner.state()))
    env.close()
    (actor_a, learner_a), (actor_b, learner_b) = built
    assert _same_weights(actor_a, actor_b)
    assert any(v.abs().sum() > 0 for v in actor_a.values())
    flat_a, flat_b = {}, {}
    from robot_rl.common.checkpoint import flatten

    flatten(learner_a, "l", flat_a)
    flatten(learner_b, "l", flat_b)
    assert _same_weights(flat_a, flat_b)


def test_reward_models_trained_twice_from_one_seed_are_identical(tmp_path):
    from robot_rl.common.run_log import RunLog
    from robot_rl.reward.model import RewardSpec
    from robot_rl.reward.train import Episodes, RewardTrainConfig, train_reward

    rng = np.random.default_rng(0)
    n, length = 12, 6
    success = np.array([True, False] * (n // 2))
    data = Episodes({"proprio": rng.normal(size=(n * length, 3)).astype(np.float32)}, np.arange(1, n + 1) * length,
                    success, np.array(["expert"] * n), np.zeros(n, int), None, None)
    spec = RewardSpec(task="lift", obs_dims={"proprio": 3})
    cfg = RewardTrainConfig(steps=3, batch_size=8, hidden=(8,), failure_neighbors=2, log_every=1,
                            failure_neighbor_keys=None)
    weights = []
    for i in range(2):
        torch.rand(7)
        log = RunLog(tmp_path / str(i))
        model, _ = train_reward(tmp_path / str(i), cfg, data, spec, log)
        log.close()
        weights.append({f"{name}.{k}": v for name in ("progress_net", "success_net")
                        for k, v in _state(getattr(model, name)).items()})
    assert _same_weights(*weights)


def test_a_killed_bc_run_is_locked_while_it_runs_and_resumes_with_its_whole_history(tiny, tmp_path, capsys,
                                                                                    monkeypatch):
    run = tmp_path / "run"
    with running("robot-rl-train-bc", *_bc(tiny, run, "steps=100000", "ckpt_every=3")) as proc:
        wait_for(lambda: (checkpoint_step(run) or 0) >= 6, "the training's second checkpoint")
        # a second training on the same run dir stops at once, naming the one that holds it (whatever its budget)
        code, out, err = run_main("robot-rl-train-bc", _bc(tiny, run, "steps=4", "ckpt_every=3"), capsys, monkeypatch)
        assert code == 2 and err.strip() == (f"robot-rl-train-bc: error: run directory {run} is in use by another "
                                             f"process (pid {proc.pid}); wait for it to finish, stop it, or pass "
                                             "another hydra.run.dir")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert (run / ".lock").read_text().strip() == str(proc.pid)  # the dead holder's lock, taken over below
    step = checkpoint_step(run)
    assert not (run / "metrics.json").exists() and not (run / "curves.png").exists()  # written at the end only
    code, out, err = run_main("robot-rl-train-bc", _bc(tiny, run, f"steps={step + 2}", "ckpt_every=3"), capsys,
                              monkeypatch)
    assert code == 0, out + err
    assert f"from step {step}" in out
    history = json.loads((run / "metrics.json").read_text())["history"]
    assert [s for s, _ in history["train/loss"]] == list(range(1, step + 3))  # every step once, the killed run's too
    assert [s for s, _ in history["train/lr"]] == list(range(1, step + 3))
    # TensorBoard shows the same run (the killed run's points past its checkpoint are purged)
    from robot_rl.common.run_log import read_events

    assert read_events(run / "tb")["train/loss"] == [tuple(p) for p in history["train/loss"]]
    assert (run / "curves.png").is_file()  # drawn from that history


def test_an_interrupted_checkpoint_write_is_cleaned_up_when_the_run_is_next_opened(tiny, tmp_path, capsys,
                                                                                   monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(tiny.bc_run, run)
    ckpts = run / "checkpoints"
    # what checkpoint.save / atomic_put leave when killed mid-write (temp dir, replaced dir, latest.json temp)
    (ckpts / ".step_0000003.k2j3x.tmp").mkdir()
    (ckpts / ".step_0000003.k2j3x.tmp/model.safetensors").write_bytes(b"\0" * 64)
    shutil.copytree(ckpts / "step_0000002", ckpts / ".step_0000002.old-4242")
    (ckpts / ".latest.json.9f8e7d.tmp").write_text('{"step": 3, "pa')
    code, out, err = run_main("robot-rl-train-bc", _bc(tiny, run, "steps=3"), capsys, monkeypatch)
    assert code == 0, out + err
    assert "from step 2" in out
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest.json", "step_0000002", "step_0000003"]


def test_latest_json_cannot_lead_out_of_the_checkpoint_directory(tiny, tmp_path):
    from robot_rl.common.checkpoint import CheckpointError, load_training

    outside = tmp_path / "elsewhere"
    shutil.copytree(tiny.bc_run / "checkpoints/step_0000002", outside)
    ckpts = tmp_path / "run/checkpoints"
    ckpts.mkdir(parents=True)
    (ckpts / "step_0000009").symlink_to(outside, target_is_directory=True)
    (ckpts / "latest.json").write_text(json.dumps({"step": 9, "path": "step_0000009"}))
    with pytest.raises(CheckpointError, match="may only name a step_<N> directory inside"):
        load_training(ckpts, {})
    for name in (str(outside), "../../elsewhere", "step_0000002/../../../elsewhere"):
        (ckpts / "latest.json").write_text(json.dumps({"step": 9, "path": name}))
        with pytest.raises(CheckpointError, match="may only name a step_<N> directory inside"):
            load_training(ckpts, {})


def test_bc_config_checks_its_own_values_once_for_every_caller():
    from robot_rl.common.config import ConfigError, from_mapping
    from robot_rl.train_bc import BCConfig

    for kwargs, message in [
        ({"steps": 0}, "steps=0 must be a whole number >= 1"),
        ({"lr": 0.0}, "lr=0.0 must be a number > 0"),
        ({"seed": -1}, "seed=-1 must be a whole number >= 0"),
        ({"data_weights": [1, 2]}, "data_weights=[1, 2] must list 1 number(s)"),
        ({"source_weights": {"robot": 1.0}}, "source_weights={'robot': 1.0} must map episode sources"),
        ({"data_mode": "fast"}, "data_mode='fast'; valid: memory, lazy"),
        ({"init": ""}, "init='' must be a policy checkpoint directory"),
    ]:
        with pytest.raises(ValueError) as e:
            BCConfig(data="demos.zarr", **kwargs)
        assert message in str(e.value)
    with pytest.raises(ValueError, match="data=PATH"):
        BCConfig(data=[])
    with pytest.raises(ConfigError, match="lr='fast' must be a number"):
        from_mapping(BCConfig, {"data": "demos.zarr", "lr": "fast"})
    assert BCConfig(data=["one.zarr"]).data == "one.zarr"
