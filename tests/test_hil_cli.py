"""robot-rl-teleop end to end (headless, scripted human) and BC fine-tuning on a weighted mix of demos and
interventions (robot-rl-train-bc data=[...] init=...)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.data import EpisodeStore
from tests.conftest import assert_one_line_error, run_cli

TINY = dict(obs_horizon=2, pred_horizon=8, action_horizon=4, dims=(16, 32), step_embed_dim=16, train_steps=20,
            inference_steps=3)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    path = tmp_path_factory.mktemp("demos") / "lift.zarr"
    env = sim.make("lift", num_envs=2)
    with EpisodeStore.open(path, mode="a") as store:
        collect(env, make_expert(env, noise=0.1), store, episodes=4, seed=0, source="expert")
    env.close()
    return path


@pytest.fixture(scope="module")
def untrained(demos, tmp_path_factory):
    """An untrained tiny diffusion checkpoint: its actions are off-plan, so the scripted human takes over."""
    from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy

    env = sim.make("lift", num_envs=1)
    spec = dict(task="lift", obs_dims=dict(env.obs_dims), action_dim=env.action_dim, action_space="ee_delta",
                control_hz=env.cfg.control_hz)
    keys = [f"obs/{k}" for k in env.obs_dims] + ["action"]
    env.close()
    policy = DiffusionPolicy.from_stats(spec, DiffusionConfig(**TINY), EpisodeStore.open(demos).stats(keys))
    return policy.save(tmp_path_factory.mktemp("ckpt") / "policy")


@pytest.fixture(scope="module")
def supervised(untrained, tmp_path_factory):
    d = tmp_path_factory.mktemp("teleop")
    proc = run_cli("robot-rl-teleop", "device=scripted", f"policy={untrained}", f"out={d / 'hil.zarr'}", "episodes=2",
                   "hil.max_fraction=0.5", "hil.patience=2", "frame_every=10",
                   "+env.task_config.episode_steps=40", f"hydra.run.dir={d / 'run'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return d, proc


def test_teleop_supervising_a_policy_records_interventions_masks_metadata_and_frames(supervised):
    d, proc = supervised
    store = EpisodeStore.open(d / "hil.zarr")
    assert store.n_episodes == 2 and set(store.episode_attr("source")) == {"intervention"}
    m = json.loads((d / "run/metrics.json").read_text())
    human = store.read("intervention")
    assert 0 < human.sum() <= 0.5 * store.n_steps  # the budget holds
    assert m["intervention_steps"] == int(human.sum()) and m["intervention_fraction"] == pytest.approx(human.mean())
    for i in range(2):
        ep = store.episode(i)
        assert ep.metadata["intervention_steps"] == int(ep.steps["intervention"].sum()) and ep.seed == i
        assert ep.metadata["device"] == "scripted" and ep.metadata["takeovers"] >= 1
    assert (d / "run/frames/latest.png").is_file() and len(list((d / "run/frames").glob("episode_*.png"))) >= 2
    assert "under human control" in proc.stdout


def test_teleop_without_a_policy_records_scripted_teleop_demos(tmp_path):
    proc = run_cli("robot-rl-teleop", "device=scripted", f"out={tmp_path / 'demo.zarr'}", "episodes=2", "frame_every=0",
                   f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = EpisodeStore.open(tmp_path / "demo.zarr")
    assert list(store.episode_attr("source")) == ["teleop", "teleop"] and store.read("intervention").all()
    assert store.episode_attr("success").all()
    assert not (tmp_path / "run/frames").exists()


@pytest.mark.parametrize("args, needles, own_process", [
    (["device=joystick"], ["device='joystick'", "keyboard, spacemouse, gamepad, scripted"], True),
    (["device=gamepad", "gamepad.backend=evdev"], ["device=gamepad:", "device=keyboard", "device=scripted"], False),
    (["device=scripted", "env.num_envs=2"], ["env.num_envs=2", "env.num_envs=1"], False),
    (["device=scripted", "hil.max_fraction=2"], ["hil.max_fraction=2"], False),
])
def test_teleop_bad_input_is_one_clear_line(tmp_path, cli_here, args, needles, own_process):
    proc = (run_cli if own_process else cli_here)("robot-rl-teleop", *args, f"out={tmp_path / 's.zarr'}",
                                                  "viewer=false", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "s.zarr").exists()  # nothing was opened for writing


def test_mixture_sampler_draws_windows_in_proportion_to_their_weights(demos, supervised):
    from robot_rl.data.sampler import MixtureSampler, SequenceSampler
    from robot_rl.train_bc import BCConfig, window_weights

    a, b = EpisodeStore.open(demos), EpisodeStore.open(supervised[0] / "hil.zarr")
    sa, sb = SequenceSampler(a, action_horizon=4), SequenceSampler(b, action_horizon=4)
    cfg = BCConfig(data=["a", "b"], intervention_weight=3.0, autonomous_weight=0.0)
    wa, wb = window_weights(a, sa, cfg, share=0.25), window_weights(b, sb, cfg, share=0.75)
    human = b.read("intervention")[sb.anchor_step]
    assert np.allclose(wb[~human], 0) and wa.sum() == pytest.approx(0.25) and wb.sum() == pytest.approx(0.75)
    mix = MixtureSampler([sa, sb], [wa, wb])
    batch = mix.sample(4000, np.random.default_rng(0))
    assert abs((batch["source"] == 1).mean() - 0.75) < 0.03
    picked = mix.offsets[1] + np.arange(len(sb))
    # every window drawn from the intervention store is anchored at a human step
    got = batch["step"][batch["source"] == 1], batch["episode"][batch["source"] == 1]
    starts = np.concatenate([[0], b.episode_ends[:-1]])
    assert b.read("intervention")[starts[got[1]] + got[0]].all() and len(picked) == len(sb)
    w = mix.windows([0, int(mix.offsets[1])])
    assert w["source"].tolist() == [0, 1] and w["obs/proprio"].shape[:2] == (2, 2)


def test_bc_fine_tunes_a_checkpoint_on_demos_plus_interventions(demos, supervised, untrained, tmp_path):
    hil = supervised[0] / "hil.zarr"
    args = [f"data=[{demos},{hil}]", f"init={untrained}", "data_weights=[1,3]", "intervention_weight=2",
            "autonomous_weight=0", "steps=3", "batch_size=8", "warmup_steps=1", "log_every=1", "eval_episodes=1",
            "env.num_envs=1", "videos=0", "final_eval=false"]
    proc = run_cli("robot-rl-train-bc", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = json.loads((tmp_path / "run/metrics.json").read_text())
    assert m["steps"] == 3 and m["init"] == str(untrained) and m["data"] == [str(demos), str(hil)]
    assert m["mixture"]["store_share"] == pytest.approx([0.25, 0.75])
    assert m["mixture"]["human_step_share"] == pytest.approx(0.75)  # autonomous_weight=0: only human steps of hil
    cfg = json.loads((tmp_path / "run/policy/config.json").read_text())
    assert cfg["config"]["dims"] == [16, 32] and cfg["config"]["pred_horizon"] == 8  # the init's architecture
    bad = run_cli("robot-rl-train-bc", f"data=[{demos},{hil}]", "data_weights=[1]", f"hydra.run.dir={tmp_path / 'bad'}")
    assert_one_line_error(bad, "data_weights=[1]", "2 number(s)")


def test_correction_windows_weight_only_the_humans_action_steps(demos, supervised):
    """autonomous_weight=0: in a window anchored at a human step, the policy's own actions after the hand-back
    (or before the take-over) in its chunk get loss weight 0; demo windows keep weight 1 everywhere."""
    import torch

    from robot_rl.policies.losses import weighted_mse
    from robot_rl.data.sampler import MixtureSampler, SequenceSampler
    from robot_rl.train_bc import BCConfig, correction_step_weights, window_weights

    a, b = EpisodeStore.open(demos), EpisodeStore.open(supervised[0] / "hil.zarr")
    keys = ("action", "intervention")
    sa, sb = SequenceSampler(a, action_keys=keys, action_horizon=8), SequenceSampler(b, action_keys=keys, action_horizon=8)
    cfg = BCConfig(data=["a", "b"], autonomous_weight=0.0)
    mix = MixtureSampler([sa, sb], [window_weights(a, sa, cfg, 0.5), window_weights(b, sb, cfg, 0.5)])
    corrections = [np.array([str(s) == "intervention" for s in st.episode_attr("source")]) for st in (a, b)]
    w = mix.sample(2000, np.random.default_rng(0))
    weight = correction_step_weights(w, corrections, 0.0)
    hil_rows = w["source"] == 1
    assert (weight[~hil_rows] == 1).all()
    human = w["intervention"].astype(bool)
    assert (weight[hil_rows] == human[hil_rows]).all() and weight[hil_rows][:, 0].all()  # anchors are human steps
    assert (weight[hil_rows] == 0).any()  # some chunks run past the hand-back
    # weight-0 steps do not enter the loss: changing their targets changes nothing
    pred, target = torch.zeros(len(weight), 8, 3), torch.randn(len(weight), 8, 3)
    moved = target.clone()
    moved[torch.from_numpy(weight == 0)] += 5.0
    wt = torch.from_numpy(weight)
    assert weighted_mse(pred, target, wt).item() == pytest.approx(weighted_mse(pred, moved, wt).item())
    assert weighted_mse(pred, target, torch.ones(len(weight), 8)).item() == pytest.approx(
        torch.nn.functional.mse_loss(pred, target).item())
