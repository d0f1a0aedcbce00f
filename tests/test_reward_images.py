"""Image + language reward models: robot-rl-train-reward with cameras and instructions (run dir, checkpoint that
reproduces its metrics, Phi that follows the named object), the store errors (missing camera, empty
instructions), and residual RL computing the learned reward from frames and instructions (Collector, demo
relabelling, an env without the cameras)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies.base import SpecMismatch
from robot_rl.data import EpisodeStore
from robot_rl.data.episode_store import Episode
from robot_rl.reward import LearnedReward, RewardModel, RewardSpec, load_reward_model
from robot_rl.reward.episodes import RewardDataError, load_episodes

torch.set_num_threads(1)
SIZE = 32
RED, BLUE = "lift the red cube", "lift the blue cube"
TINY_IMAGES = {"channels": [8, 8, 8], "groups": 4, "downsample": 1}  # a 32x32 frame costs ~nothing


def _frames(h_red: np.ndarray, h_blue: np.ndarray, rng) -> np.ndarray:
    """uint8 [T, SIZE, SIZE, 3] frames whose red / blue channels show the two 'cube heights' (in [0, 1])."""
    t = len(h_red)
    f = rng.integers(0, 40, (t, SIZE, SIZE, 3))
    f[..., 0] += (200 * h_red)[:, None, None].astype(int)
    f[..., 2] += (200 * h_blue)[:, None, None].astype(int)
    return f.astype(np.uint8)


def _synthetic_episodes(n: int = 24, length: int = 10, instruction: bool = True, seed: int = 0) -> list[Episode]:
    """Two 'cubes' whose heights are the vector observation (unnamed order, as color_lift's object key) and the
    frames' colours; the instruction names one. Successes raise the named cube; failures raise the other one
    (the wrong cube), so only frames + instruction together say how far the task is."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        named_red, won = i % 2 == 0, i % 4 < 2  # red won, blue won, red failed, blue failed, ...
        rise, low = np.linspace(0.0, 1.0, length), np.full(length, rng.uniform(0.0, 0.2))
        named, other = (rise, low) if won else (low, rise)
        h_red, h_blue = (named, other) if named_red else (other, named)
        success = np.zeros(length, bool)
        success[-1] = won
        out.append(Episode(steps={
            "obs/heights": np.stack([h_red, h_blue], 1).astype(np.float32),
            "obs/images/front": _frames(h_red, h_blue, rng),
            "action": np.zeros((length, 4), np.float32), "reward": success.astype(np.float32),
            "success": success, "terminated": success, "progress": named.astype(np.float32),
            "intervention": np.zeros(length, bool)},
            task="color_lift", source="expert" if won else "policy", success=won,
            instruction=(RED if named_red else BLUE) if instruction else "", seed=i))
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("reward_images")
    with EpisodeStore.open(root / "synthetic.zarr", mode="a") as store:
        store.append(_synthetic_episodes())
    with EpisodeStore.open(root / "no_instructions.zarr", mode="a") as store:
        store.append(_synthetic_episodes(6, instruction=False))
    return root / "synthetic.zarr", root / "no_instructions.zarr"


@pytest.fixture(scope="module")
def trained(stores, tmp_path_factory):
    """robot-rl-train-reward's main, in this process (the sentence encoder is loaded once for the whole file)."""
    import sys

    from robot_rl.cli.train_reward import main

    run = tmp_path_factory.mktemp("reward_run") / "run"
    argv = ["robot-rl-train-reward", "task=color_lift", f"data={stores[0]}", "inputs.cameras=[front]",
            "inputs.state=[]", "inputs.instruction=auto", "steps=100", "batch_size=32", "lr=3e-3", "hidden=[32]",
            "log_every=50", "image_encoder.channels=[8,8,8]", "image_encoder.groups=4", "image_encoder.downsample=1",
            "val_fraction=0.25", "test_fraction=0.25", "failure_neighbors=3", "positive_frames=1", "gap_frames=1",
            f"hydra.run.dir={run}"]
    saved = sys.argv
    sys.argv = argv
    try:
        main()
    finally:
        sys.argv = saved
    return run


def test_train_reward_with_cameras_writes_metrics_and_a_checkpoint_that_reproduces_them(trained, stores):
    from robot_rl.reward import labels as L
    from robot_rl.reward.metrics import spearman

    m = json.loads((trained / "metrics.json").read_text())
    assert m["inputs"] == {"state": [], "cameras": ["images/front"], "instruction": True}  # auto: color_lift
    assert m["failure_neighbor_features"] == ["heights"]  # the stores' vector keys, though the model reads none
    assert m["steps_per_network"] == 100 and m["batch_size"] == 32
    for k in ("spearman", "failed_time_spearman_mean"):
        assert k in m["progress"]
    assert 0.0 <= m["classifier"]["auroc"] <= 1.0 and 0.0 <= m["classifier"]["fpr"] <= 1.0
    model = load_reward_model(trained)
    assert model.spec.image_shapes == {"images/front": [SIZE, SIZE, 3]} and model.spec.obs_dims == {}
    assert model.image_encoder["channels"] == [8, 8, 8]
    with EpisodeStore.open(stores[0]) as store:
        data = load_episodes([store], model.spec)
    # the held-out Spearman of metrics.json, recomputed from the reloaded checkpoint's outputs
    splits = L.split_episodes(data.success, {"val": 0.25, "test": 0.25}, seed=0)
    test = np.isin(L.episode_index(data.ends)[0], splits["test"])
    phi = model.progress({k: v[test] for k, v in data.obs.items()}, data.step_instructions()[test])
    assert spearman(phi, data.gt_progress[test]) == pytest.approx(m["progress"]["spearman"], abs=1e-6)
    again = load_reward_model(model.save(trained / "copy"))
    obs = {"images/front": data.obs["images/front"][:20]}
    np.testing.assert_array_equal(again.progress(obs, RED), model.progress(obs, RED))
    np.testing.assert_array_equal(again.success_prob(obs, BLUE), model.success_prob(obs, BLUE))


def test_phi_follows_the_cube_the_instruction_names(trained):
    model = load_reward_model(trained)
    rng = np.random.default_rng(5)
    red_up = {"images/front": _frames(np.full(8, 0.9), np.full(8, 0.1), rng)}
    blue_up = {"images/front": _frames(np.full(8, 0.1), np.full(8, 0.9), rng)}
    # same frames, other words: the red cube raised is progress for "red", not for "blue"
    assert model.progress(red_up, RED).mean() > model.progress(red_up, BLUE).mean() + 0.2
    assert model.progress(blue_up, BLUE).mean() > model.progress(blue_up, RED).mean() + 0.2


def test_a_store_without_the_camera_is_refused_naming_the_key_and_how_to_record_it(stores, capsys):
    from robot_rl.cli.train_reward import build_spec

    with EpisodeStore.open(stores[0]) as store:
        with pytest.raises(SystemExit) as e:  # the command's one-line error
            build_spec("color_lift", {"proprio": 20}, None, [store], [], ["front", "wrist"], "false")
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1
        for needle in ("lacks obs/images/wrist", "its cameras: ['front']", "robot-rl-collect task=color_lift",
                       "env.cameras=[front,wrist]"):
            assert needle in err, (needle, err)
        spec = RewardSpec(task="color_lift", obs_dims={}, image_shapes={"wrist": [SIZE, SIZE, 3]})
        with pytest.raises(RewardDataError, match=r"lacks obs/images/wrist.*env.cameras=\[wrist\]"):
            load_episodes([store], spec)


def test_instruction_true_refuses_a_store_with_empty_instructions(stores):
    spec = RewardSpec(task="color_lift", obs_dims={}, image_shapes={"front": [SIZE, SIZE, 3]}, instruction=True)
    with EpisodeStore.open(stores[1]) as store:
        with pytest.raises(RewardDataError, match=r"6 of 6 episodes have an empty instruction.*"
                                                  r"inputs.instruction=false"):
            load_episodes([store], spec)
        load_episodes([store], RewardSpec(task="color_lift", obs_dims={}, image_shapes={"front": [SIZE, SIZE, 3]}))


def test_a_failed_state_at_another_instructions_goal_is_not_near_success():
    from robot_rl.reward import labels as L

    # "red" succeeds through states 0, 1; "blue" through 10..13; a failed "red" episode ends at blue's goal (13)
    feats = np.array([[0.0], [1.0], [10.0], [11.0], [12.0], [13.0], [0.0], [0.4], [1.0], [0.2], [13.0]], np.float32)
    ends, success, groups = np.array([2, 6, 11]), np.array([True, True, False]), np.array([0, 1, 0])
    pooled = L.progress_targets(ends, success, feats, np.ones(11, bool), k=1, distance_scale=0.1)
    grouped = L.progress_targets(ends, success, feats, np.ones(11, bool), k=1, distance_scale=0.1, groups=groups)
    assert pooled[-1] == pytest.approx(0.75)  # blue's successful state: progress, for the wrong instruction
    assert grouped[-1] < 1e-6  # far from every successful "red" state
    assert grouped[8] == pytest.approx(0.5)  # red's own last successful state keeps its label


def test_stores_without_vector_observations_search_neighbours_in_pooled_frames(tmp_path):
    episodes = _synthetic_episodes(4)
    for e in episodes:
        del e.steps["obs/heights"]
    with EpisodeStore.open(tmp_path / "frames_only.zarr", mode="a") as store:
        store.append(episodes)
        data = load_episodes([store], RewardSpec(task="color_lift", obs_dims={},
                                                 image_shapes={"front": [SIZE, SIZE, 3]}))
    assert data.feature_keys == ("images/front@8x8",) and data.features.shape == (40, 8 * 8 * 3)
    # the pooled red channel follows the red cube's height (rising in episode 0, the named red one)
    red = data.features[:10].reshape(10, 3, 8, 8)[:, 0].mean((1, 2))  # channel-major per camera
    assert np.all(np.diff(red) > 0)


# ---- residual RL with an image + language reward model ----------------------------------------------------
@pytest.fixture(scope="module")
def env():
    e = sim.make("color_lift", num_envs=2, cameras=["front"], image_size=[SIZE, SIZE],
                 task_config={"episode_steps": 5})
    yield e
    e.close()


def _image_model(seed: int = 0, task: str = "color_lift") -> RewardModel:
    torch.manual_seed(seed)
    spec = RewardSpec(task=task, obs_dims={}, image_shapes={"front": [SIZE, SIZE, 3]}, instruction=True)
    return RewardModel.build(spec, hidden=(16,), image_encoder=TINY_IMAGES)


def test_collector_computes_the_learned_reward_from_frames_and_episode_instructions(env):
    from robot_rl.rl.replay import Replay
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
    from robot_rl.rl.rollout import Collector

    model = _image_model()
    obs0 = env.reset(0)
    model.threshold = float(np.quantile(model.success_prob(obs0, env.instruction), 0.5))
    gamma, lam = 0.9, 0.5
    policy = ResidualPolicy.build(None, ResidualConfig(), env=env)
    replay = Replay(100, env.num_envs, sum(env.obs_dims.values()), env.action_dim)
    col = Collector(env, policy, replay, reward="learned", explore_std=0.5, seed=0,
                    learned=LearnedReward(model, gamma, lam, success="classifier"), classifier_success="every")
    col.start(seed=0)
    seen, orig_step = [], env.step

    def spy(action):  # the frames the step starts from and reaches, and the episode's words, as the env gave them
        before, text = col.obs_dict, list(env.instruction)
        out = orig_step(action)
        seen.append((before, out[3]["final_obs"], text))
        return out

    env.step = spy
    try:
        for _ in range(8):
            col.step()
    finally:
        del env.step
    assert len({t for _, _, text in seen for t in text}) > 1  # episodes ended and new instructions came
    hits = 0
    for t, (obs, final, text) in enumerate(seen):
        hit = model.success(final, text)
        hits += hit.sum()
        expected = hit + lam * (gamma * np.where(hit, 1.0, model.progress(final, text)) - model.progress(obs, text))
        np.testing.assert_allclose(replay.data["reward"][t], expected, atol=1e-5)
        assert replay.data["terminated"][t].tolist() == hit.tolist()
    assert 0 < hits < 16  # both cases exercised


def test_an_env_without_the_reward_models_camera_is_refused_naming_env_cameras(env, tmp_path):
    from robot_rl.reward.shaping import from_config

    _image_model().save(tmp_path / "rm" / "reward_model")
    assert from_config(str(tmp_path / "rm"), "learned", 1.0, 0.99, [env]).reads_frames
    bare = sim.make("color_lift", num_envs=1)
    try:
        with pytest.raises(SpecMismatch, match=r"'images/front': the reward model reads this camera, env has "
                                               r"cameras \[\] \(set env.cameras=\[front\]\)"):
            from_config(str(tmp_path / "rm"), "learned", 1.0, 0.99, [bare])
    finally:
        bare.close()


def test_demo_transitions_are_relabeled_from_the_stores_frames_and_instructions(stores):
    from robot_rl.reward.shaping import relabel_replay
    from robot_rl.rl.replay import demo_replay

    model = _image_model(seed=1)
    keys, dims = ("heights",), {"heights": 2}
    with EpisodeStore.open(stores[0]) as store:
        demos = demo_replay(store, None, keys)
        frames = store.read("obs/images/front")
        words = np.array([str(x) for x in store.episode_attr("instruction")], dtype=object)
        step_words = words[np.repeat(np.arange(store.n_episodes), np.diff(np.concatenate([[0], store.episode_ends])))]
        reward = LearnedReward(model, 0.9, 1.0)
        with pytest.raises(ValueError, match="reads camera frames and instructions, which a replay does not keep"):
            relabel_replay(demos, reward, keys, dims)
        n = demos.written
        s, ns = demos.demo_steps[:n, 0], demos.demo_steps[:n, 1]
        model.threshold = float(np.median(model.success_prob({"images/front": frames[ns]}, step_words[s])))
        relabel_replay(demos, reward, keys, dims, store=store, chunk=64)  # several chunks
    hit = model.success({"images/front": frames[ns]}, step_words[s])
    phi, phi2 = model.progress({"images/front": frames[s]}, step_words[s]), model.progress(
        {"images/front": frames[ns]}, step_words[s])
    np.testing.assert_allclose(demos.data["reward"][:n, 0], hit + 0.9 * np.where(hit, 1.0, phi2) - phi, atol=1e-5)
    assert demos.data["terminated"][:n, 0].tolist() == hit.tolist() and 0 < hit.sum() < n
