"""robot-rl-train-reward and robot-rl-collect policy=... end to end: run directory, metrics, bad inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.data import EpisodeStore
from tests.conftest import assert_one_line_error, run_cli

# A tiny budget: the plumbing, not the learning, is under test here.
TINY = ["steps=30", "log_every=10", "batch_size=64", "hidden=[32]", "val_fraction=0.25", "test_fraction=0.25",
        "failure_neighbors=3"]


class Still:
    """Holds the arm still: every episode fails (a stand-in for a weak policy's rollouts)."""

    def __init__(self, env):
        self.n, self.a = env.num_envs, env.action_dim

    def act(self, obs):
        return np.zeros((self.n, self.a), np.float32)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    root = tmp_path_factory.mktemp("reward_data")
    env = sim.make("lift", num_envs=4, task_config={"episode_steps": 40})
    with EpisodeStore.open(root / "demos.zarr", mode="a") as store:
        collect(env, make_expert(env, noise=0.0, seed=0), store, episodes=8, seed=0, source="expert")
    with EpisodeStore.open(root / "rollouts.zarr", mode="a") as store:
        collect(env, Still(env), store, episodes=8, seed=1, source="policy")
    env.close()
    return root / "demos.zarr", root / "rollouts.zarr"


@pytest.fixture(scope="module")
def trained(stores, tmp_path_factory):
    demos, rollouts = stores
    run = tmp_path_factory.mktemp("reward") / "run"
    proc = run_cli("robot-rl-train-reward", f"data={demos}", f"rollouts={rollouts}", *TINY, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run, proc


def test_train_reward_writes_the_model_metrics_and_plots(trained):
    run, proc = trained
    for name in ("config.yaml", "metrics.json", "curves.png", "progress.png", "reward_model/model.safetensors",
                 "reward_model/config.json"):
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*")), "TensorBoard events"
    m = json.loads((run / "metrics.json").read_text())
    assert m["episodes"] == 16 and m["failed_episodes"] >= 8
    for k in ("spearman", "spearman_demos", "spearman_rollouts", "failed_time_spearman_mean"):
        assert k in m["progress"]
    assert -1.0 <= m["progress"]["spearman"] <= 1.0
    c = m["classifier"]
    assert 0.0 <= c["auroc"] <= 1.0 and 0.0 <= c["fpr"] <= 1.0 and 0.0 < c["threshold"] < 1.0
    assert m["splits"]["test"]["episodes"] >= 2 and m["splits"]["test"]["successful"] >= 1
    assert [s for s, _ in m["history"]["train/progress_loss"]] == [10, 20, 30]
    assert all(math.isfinite(v) for _, v in m["history"]["train/success_loss"])
    assert "Spearman" in proc.stdout and "AUROC" in proc.stdout


def test_the_trained_model_loads_and_fits_the_lift_env(trained):
    from robot_rl.reward import load_reward_model

    model = load_reward_model(trained[0])
    env = sim.make("lift", num_envs=2)
    try:
        model.spec.check_env(env)
        obs = env.reset(0)
        phi = model.progress(obs)
        assert phi.shape == (2,) and ((phi >= 0) & (phi <= 1)).all()
        assert model.threshold == json.loads((trained[0] / "metrics.json").read_text())["classifier"]["threshold"]
    finally:
        env.close()


def test_train_reward_without_failures_says_how_to_collect_them(stores, tmp_path):
    demos, _ = stores
    proc = run_cli("robot-rl-train-reward", f"data={demos}", *TINY, f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "failed episode", "robot-rl-collect task=lift policy=", "rollouts=")


def test_train_reward_refuses_a_store_of_another_task(stores, tmp_path, cli_here):
    demos, rollouts = stores
    proc = cli_here("robot-rl-train-reward", "task=push", f"data={demos}", f"rollouts={rollouts}", *TINY,
                    f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "holds task(s) ['lift']", "task 'push'")


def test_collect_policy_records_rollouts_with_source_policy(stores, tmp_path):
    from robot_rl.policies import load_policy
    from robot_rl.reward import load_reward_model
    from robot_rl.reward.model import rollout_mismatch
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy

    env = sim.make("lift", num_envs=2)
    ResidualPolicy.build(None, ResidualConfig(), env=env).save(tmp_path / "policy")  # zero actions: failures
    env.close()
    out = tmp_path / "rollouts.zarr"
    proc = run_cli("robot-rl-collect", f"policy={tmp_path / 'policy'}", "episodes=3", "env.num_envs=2",
                   "+env.task_config.episode_steps=10", f"out={out}", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = EpisodeStore.open(out)
    assert store.n_episodes == 3 and store.n_steps == 30
    assert set(map(str, store.episode_attr("source"))) == {"policy"}
    assert not store.episode_attr("success").any()
    policy = load_policy(tmp_path / "policy")
    meta = json.loads(str(store.episode_attr("metadata")[0]))
    assert meta["policy"] == str(tmp_path / "policy") and meta["policy_sha256"] == policy.weights_sha256()
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["source"] == "policy" and m["episodes"] == 3
    store.close()

    # the reward model keeps whose failures it saw; residual RL on that policy has nothing to warn about
    proc = run_cli("robot-rl-train-reward", f"data={stores[0]}", f"rollouts={out}", *TINY, "positive_frames=1",
                   f"hydra.run.dir={tmp_path / 'reward'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = load_reward_model(tmp_path / "reward")
    from robot_rl.reward.online import success_frames  # refits label as the model was trained
    assert model.info["success_labels"] == {"positive_frames": 1, "gap_frames": 3, "min_tpr": 0.9}
    assert success_frames(model) == (1, 3, 0.9)
    model.info.pop("success_labels")
    assert success_frames(model) == (2, 3, 0.9)  # a model saved before they were recorded: the defaults
    assert model.info["rollout_policies"] == [{"policy": str(tmp_path / "policy"), "sha256": policy.weights_sha256(),
                                               "episodes": 3, "failed": 3}]
    assert json.loads((tmp_path / "reward" / "metrics.json").read_text())["rollout_policies"][0]["episodes"] == 3
    # matched by weights, not by path
    assert rollout_mismatch(model, policy.weights_sha256(), "anywhere/policy") is None


def test_failed_states_are_compared_in_the_tasks_progress_columns(stores, trained):
    """auto (default): lift's progress_features (cube - ee, height to go, gripper width); selectors pick columns;
    a selector past a key's size or of a missing key is refused naming both."""
    from robot_rl.reward.model import RewardSpec
    from robot_rl.reward.episodes import RewardDataError, load_episodes

    run, _ = trained
    m = json.loads((run / "metrics.json").read_text())
    assert m["failure_neighbor_features"] == ["object.minus_ee", "object.height_to_go", "proprio.gripper_width"]
    opened = [EpisodeStore.open(p) for p in stores]
    try:
        spec = RewardSpec(task="lift", obs_dims={"proprio": 20, "object": 11})
        auto = load_episodes(opened, spec)
        np.testing.assert_array_equal(auto.features, np.concatenate([auto.obs["object"][:, 7:11],
                                                                     auto.obs["proprio"][:, 14:15]], axis=1))
        every = load_episodes(opened, spec, None)
        assert every.feature_keys == ("object", "proprio") and every.features.shape[1] == 31
        with pytest.raises(RewardDataError, match=r"'object\[9:12\]' selects columns 9:12 of 'object', which has 11"):
            load_episodes(opened, spec, ["object[9:12]"])
        with pytest.raises(RewardDataError, match=r"\['lidar'\] are not vector observations.*'object', 'proprio'"):
            load_episodes(opened, spec, ["lidar[0]"])
        with pytest.raises(RewardDataError, match="is not a selector"):
            load_episodes(opened, spec, ["object[7:"])
        named = load_episodes(opened, spec, ["object.minus_ee", "proprio.ee_pos"])  # fields by name: the same columns
        np.testing.assert_array_equal(named.features, np.concatenate([auto.obs["object"][:, 7:10],
                                                                      auto.obs["proprio"][:, 15:18]], axis=1))
        with pytest.raises(RewardDataError, match=r"'object' has no field 'hole'.*'height_to_go', 'minus_ee'"):
            load_episodes(opened, spec, ["object.hole"])
    finally:
        for s in opened:
            s.close()


@pytest.mark.parametrize("task", sorted(sim.TASKS))
def test_every_tasks_progress_columns_fit_its_observations(task):
    from robot_rl.reward.episodes import parse_selectors
    from robot_rl.sim.tasks import TASKS

    env = sim.make(task, num_envs=1)
    try:
        cols = parse_selectors(TASKS[task].progress_features, dict(env.obs_dims), env.obs_fields)
    finally:
        env.close()
    assert cols and all(c.stop - c.start >= 1 for _, _, c in cols)
