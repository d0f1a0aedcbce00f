"""Residual RL on a robot: a robot actor drives robot-rl-sim-driver (a subprocess speaking ROS 2 over loopback DDS)
through the deploy node, and its transitions reach the learner with learned rewards while weights reach the node."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
import uuid

import numpy as np
import pytest
import ray
import torch
from omegaconf import OmegaConf

from robot_rl import sim
from conftest import BIN, assert_one_line_error, run_cli
from robot_rl.rl.distributed import DistributedConfig, DistributedWorkspace
from robot_rl.rl.learner import LearnerConfig
from robot_rl.policies.residual import ResidualConfig
from robot_rl.real.robot_actor import RobotActor
from robot_rl.rl.train import ResidualRLConfig
from robot_rl.common.run_log import RunLog
from test_distributed import _assert_each_transition_once, _row_tags
from test_real_config import compose
from test_real_node import topic_overrides
from test_rl_cli import _checkpoint

BATCH_STEPS = 4  # x 2 learner envs: 8 robot steps per batch
TELEOP = np.array([0.0, 0.0, 0.5, -1.0])  # the operator's take-over action (lift, ee_delta: up, gripper open)


@pytest.fixture(scope="module")
def robot_ray():
    """A local Ray instance whose node advertises the robot's resource, as the robot's computer would."""
    ray.init(address="local", num_cpus=2, resources={"robot_arm1": 1}, include_dashboard=False,
             object_store_memory=100 * 2**20, namespace="robot_rl", logging_level="WARNING",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}},
             _system_config={"worker_niceness": 0})
    yield
    ray.shutdown()


def _reward_model(env, path):
    """An untrained tiny reward model whose classifier fires on about half the states (both cases occur)."""
    from robot_rl.reward import RewardModel, RewardSpec

    torch.manual_seed(0)
    model = RewardModel.build(RewardSpec(task="lift", obs_dims=dict(env.obs_dims)), hidden=(16,))
    model.threshold = float(np.median(model.success_prob(env.reset(0))))
    model.save(path)
    return path


def test_robot_actor_trains_through_the_deploy_node_on_a_sim_driver_over_dds(robot_ray, tmp_path):
    from robot_rl.reward import load_reward_model

    ns = "r" + uuid.uuid4().hex[:10]
    deploy_args = [f"deploy.domain_id={random.randint(1, 99)}", *topic_overrides(ns)]
    driver = subprocess.Popen(
        [str(BIN / "robot-rl-sim-driver"), "episodes=1000", "seed=0", "wait_for_node_s=120", "realtime_priority=0",
         "+env.task_config.episode_steps=10", f"hydra.run.dir={tmp_path / 'driver'}", *deploy_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    operator = None
    try:
        env = sim.make("lift", num_envs=2, threads=1, task_config={"episode_steps": 10})
        base_path = _checkpoint("lift", tmp_path / "base")
        from robot_rl.policies import load_policy

        base = load_policy(base_path)
        rm_path = _reward_model(env, tmp_path / "reward_model")
        # the robot's deploy config: the training command's `deploy` group; a loaded 2-core machine gets a lenient
        # watchdog and no real-time priorities
        deploy = OmegaConf.to_container(compose(
            *deploy_args, "deploy.realtime_priority=0", "deploy.inference.realtime_priority=0",
            "deploy.inference.worker=thread", "deploy.watchdog.hold_after_s=0.3", "deploy.watchdog.stop_after_s=5.0",
            config="train_residual").deploy, resolve=True)
        cfg = ResidualRLConfig(
            env_steps=2000, time_budget_s=90, learning_starts=16, utd=0.5, reward="learned", reward_model=str(rm_path),
            shaping=1.0, explore_std=0.0, eval_every=0, final_eval=False, log_every=16, ckpt_every=100_000,
            classifier_success="every",  # every fire pays: the rows below check the reward model's formula
            residual=ResidualConfig(hidden=(16,), scale=0.5),
            learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=16, critic_warmup=2, policy_delay=1))
        dist = DistributedConfig(actors=0, robots=[{"name": "arm1", "store": str(tmp_path / "arm1.zarr")}], batch_steps=BATCH_STEPS, weight_sync_every=2,
                                 actor_timeout_s=120)
        ws = DistributedWorkspace(tmp_path / "run", cfg, env, base, dist, base_path=base_path, deploy=deploy,
                                  robot_actor=RobotActor)

        # An operator holds the teleop dead-man switch for 0.6 s once the second batch is in: those steps are the
        # human's.
        from robot_rl.real.teleop import TeleopPublisher
        from robot_rl.real.transport_dds import DdsTransport

        operator = DdsTransport(int(deploy["domain_id"]), loopback=True)
        teleop = TeleopPublisher(operator, deploy["topics"]["teleop"])
        window = threading.Event()

        def hold_teleop():
            window.wait()
            end = time.monotonic() + 0.6
            while time.monotonic() < end:
                teleop.send(TELEOP)
                time.sleep(0.05)

        threading.Thread(target=hold_teleop, daemon=True).start()

        batches, probe = [], {}
        ingest = ws.ingest

        def spy(batch):
            batches.append(batch)
            return ingest(batch)

        ws.ingest = spy

        def progress(steps):
            if len(batches) >= 2:
                window.set()
            # stop once the node acted with weights pushed after actor updates, and a human step came through
            trained = sum(int(b["residual_applied"].sum()) for b in batches
                          if b["weights_version"] > cfg.learner.critic_warmup)
            human = sum(int(b["rows"]["intervention"].sum()) for b in batches)
            if trained >= 8 and human and not probe:
                h = ws.pool.handles[0]
                probe["info"] = ray.get(h.info.remote(), timeout=60)
                probe["weights"] = ray.get(h.residual_weights.remote(), timeout=60)
                ws.stop_requested = True

        log = RunLog(ws.run_dir)
        t0 = time.monotonic()
        result = ws.run(log, progress)
        log.close()
        elapsed = time.monotonic() - t0
    finally:
        if operator is not None:
            operator.close()
        driver.kill()
        out, _ = driver.communicate(timeout=30)
    assert probe, f"stopped without weights reaching the node (run {elapsed:.0f} s, {len(batches)} batches); " \
                  f"driver: {out[-2000:]}"

    # transitions of the right shapes from the robot's slot, each in the replay once
    n, obs_dim, a_dim = env.num_envs, ws.replay.obs_dim, env.action_dim
    assert all(b["rows"]["obs"].shape == (BATCH_STEPS, n, obs_dim) and b["rows"]["action"].shape == (BATCH_STEPS, n,
               a_dim) and b["robot"] == "arm1" for b in batches)
    _assert_each_transition_once(ws)
    assert ws.duplicates == 0 and ws.lost == 0 and set(_row_tags(ws)[:, 0]) == {0}
    kept = ws.replay.written
    first = batches[0]["rows"]
    assert np.array_equal(ws.replay.data["obs"][:BATCH_STEPS], first["obs"])

    # rewards and terminations are the reward model's: classifier success on next_obs + potential shaping
    model = load_reward_model(rm_path)
    keys, dims = ws.policy.obs_keys, dict(env.obs_dims)

    def unflatten(x):
        return dict(zip(keys, np.split(x, np.cumsum([dims[k] for k in keys])[:-1], axis=-1)))

    d = {k: v[:kept].reshape(kept * n, *v.shape[2:]) for k, v in ws.replay.data.items()}
    hit = model.success(unflatten(d["next_obs"]))
    phi, phi_next = model.progress(unflatten(d["obs"])), model.progress(unflatten(d["next_obs"]))
    expected = hit + 1.0 * (cfg.learner.gamma * np.where(hit, 1.0, phi_next) - phi)
    assert np.allclose(d["reward"], expected, atol=1e-5)
    assert (d["terminated"] == hit).all() and 0 < hit.sum() < len(hit)

    # teleop on the node's topic made steps the human's: flagged, with the operator's action executed
    human = d["intervention"]
    assert human.any() and not human.all()
    assert np.allclose(d["action"][human], TELEOP, atol=1e-6)
    assert log.history["hil/intervention_rate"] and result["distributed"]["interventions"] == int(human.sum())

    # weights reached the node: it acted with versions pushed after actor updates, and its residual moved off its
    # zero start. explore_std=0, so a step the node's residual computed executed clip(base + residual): equal to
    # the base under the initial weights, off it under trained ones.
    assert probe["info"]["node_weights_version"] > cfg.learner.critic_warmup and probe["info"]["node_error"] is None
    last = max((k for k in probe["weights"] if k.endswith(".weight")), key=lambda k: int(k.split(".")[1]))
    assert np.abs(probe["weights"][last]).max() > 0
    version = np.concatenate([b["row_versions"] for b in batches]).reshape(-1)
    applied = np.concatenate([b["residual_applied"] for b in batches]).reshape(-1)
    moved = np.abs(d["action"] - np.clip(d["base_action"], -1, 1)).max(-1) > 1e-5
    initial, trained = applied & (version <= 0), applied & (version > cfg.learner.critic_warmup)
    assert initial.any() and not moved[initial].any()
    assert trained.any() and moved[trained].all()
    assert log.history["rollout/episodes"] and result["distributed"]["robots"] == ["arm1"]

    # the node's recording path kept the robot's episodes in its store too (the data outlives the run)
    from robot_rl.data import EpisodeStore

    store = EpisodeStore.open(tmp_path / "arm1.zarr")
    assert store.n_episodes >= probe["info"]["episodes"] >= 1
    assert store.read("intervention").any()  # the operator's steps, flagged as in the replay


def test_robot_actors_refuse_simulator_rewards_naming_the_reward_model_fix(tmp_path):
    proc = run_cli("robot-rl-train-residual", "task=lift", f"base={tmp_path}", "rl.reward=success",
                   "distributed.robots=[{name: arm1}]", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert_one_line_error(proc, "rl.reward=success", "robot-rl-train-reward", "rl.reward=learned rl.reward_model=")


class _WindowBase:
    """A base whose first action is (newest, oldest) of its 2-step observation window."""

    spec = type("Spec", (), {"obs_horizon": 2, "obs_dims": {"x": 1}})

    def reset(self, env_ids):
        pass

    def act(self, w):
        return np.concatenate([w["x"][:, -1], w["x"][:, 0]], -1)[:, None]


class _NextXReward:
    """A LearnedReward stand-in: reward = next x, potential = x / 10."""

    @staticmethod
    def label(obs, nxt, success, terminated, truncated, eligible=None):
        return nxt["x"][:, 0], terminated, truncated, obs["x"][:, 0] / 10, nxt["x"][:, 0] / 10


_next_x_reward = _NextXReward()


def test_recorded_episodes_become_transitions_with_relabeled_base_actions_and_cut_partial_ends():
    from robot_rl.real.robot_actor import episode_transitions

    def step(x, base, human=False):
        return {"x": np.array([x], np.float32)}, np.array([x, -x], np.float32), human, base

    steps = [step(0, np.array([9, 9], np.float32)), step(1, None, human=True), step(2, np.array([8, 8], np.float32))]
    rows = episode_transitions({"steps": steps, "final": {"x": np.array([3.0])}, "success": True}, ("x",),
                               _WindowBase(), _next_x_reward)
    assert rows["obs"][:, 0].tolist() == [0, 1, 2] and rows["next_obs"][:, 0].tolist() == [1, 2, 3]
    # the node's base actions where it ran the residual, the base's on the episode's history where it did not
    assert rows["base_action"].tolist() == [[9, 9], [1, 0], [8, 8]]
    assert rows["next_base_action"].tolist() == [[1, 0], [8, 8], [3, 2]]
    assert rows["reward"].tolist() == [1, 2, 3] and rows["intervention"].tolist() == [False, True, False]
    np.testing.assert_allclose(rows["potential"], [0.0, 0.1, 0.2])
    np.testing.assert_allclose(rows["next_potential"], [0.1, 0.2, 0.3])
    assert rows["terminated"].tolist() == [False, False, True] and not rows["truncated"].any()
    # cut short (no final observation): the last step is dropped, the one before ends in a cut, never a success
    cut = episode_transitions({"steps": steps, "final": None, "success": True}, ("x",), _WindowBase(),
                              _next_x_reward)
    assert cut["obs"][:, 0].tolist() == [0, 1] and cut["next_base_action"].tolist() == [[1, 0], [8, 8]]
    assert cut["truncated"].tolist() == [False, True] and not cut["terminated"].any()
