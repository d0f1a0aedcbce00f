"""LeRobot base policies through the BasePolicy interface (policies/external.py): the missing-extra error, the
mapping of our observation keys to LeRobot's names and shapes, and its checks.

lerobot itself is too large to install here, so `FakeLeRobotPolicy` stands in for a loaded LeRobot
PreTrainedPolicy: the same `config` fields (input_features, output_features, n_obs_steps, n_action_steps) and
`predict_action_chunk(batch)`. This is the only stand-in for a third-party model in the test suite; the loading
code itself (`load_lerobot`) is exercised only up to the import error.
"""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies import SpecMismatch, load_policy
from robot_rl.policies.external import LEROBOT_EXTRA, LeRobotPolicy, import_lerobot
from robot_rl.policies.runner import PolicyRunner
from robot_rl.common.checkpoint import CheckpointError

SIZE = 24


def _feature(*shape):
    return types.SimpleNamespace(shape=shape)


class FakeLeRobotPolicy:
    """A loaded LeRobot policy as far as the adapter sees it; records the batches it is given."""

    def __init__(self, state_dim=31, image_key="observation.images.top", n_obs_steps=1, action_dim=4):
        inputs = {"observation.state": _feature(state_dim), image_key: _feature(3, SIZE, SIZE)}
        self.config = types.SimpleNamespace(type="act", input_features=inputs,
                                            output_features={"action": _feature(action_dim)},
                                            n_obs_steps=n_obs_steps, n_action_steps=3, chunk_size=10)
        self.batches = []

    def predict_action_chunk(self, batch):
        self.batches.append(batch)
        b = batch["observation.state"].shape[0]
        # action 0: the mean state (to see which rows came in), 1: mean pixel, 2..: out of range, to be clipped
        out = torch.full((b, 10, 4), 5.0)
        out[:, :, 0] = batch["observation.state"].mean(-1, keepdim=True)
        out[:, :, 1] = batch["observation.images.top"].mean((1, 2, 3))[:, None]
        return out

    def reset(self):
        pass


@pytest.fixture(scope="module")
def env():
    env = sim.make("lift", num_envs=2)
    yield env
    env.close()


def _env_with_camera(env):
    """The lift env's spec surface plus a camera and instructions, as the sim's camera envs report them."""
    return types.SimpleNamespace(task_name=env.task_name, robot=env.robot, control_hz=env.control_hz,
                                 action_space=env.action_space, action_dim=env.action_dim, obs_dims=dict(env.obs_dims),
                                 image_shapes={"images/front": (SIZE, SIZE, 3)}, num_envs=2,
                                 instruction=["lift the cube", "lift the cube gently"])


def _wrap(env, fake=None, **kw):
    fake = fake or FakeLeRobotPolicy()
    kw.setdefault("cameras", {"front": "observation.images.top"})
    return LeRobotPolicy.from_pretrained("/nonexistent/lerobot_model", _env_with_camera(env),
                                         loaded=(fake, None, None), **kw), fake


def test_missing_lerobot_names_the_extra(monkeypatch, env, tmp_path):
    monkeypatch.setitem(sys.modules, "lerobot", None)  # as if not installed (it is not, but be sure)
    with pytest.raises(ImportError, match=r"pip install 'robot_rl\[lerobot\]'"):
        import_lerobot()
    policy, _ = _wrap(env)
    path = policy.save(tmp_path / "ckpt")
    (tmp_path / "lerobot_model").mkdir()
    (tmp_path / "lerobot_model" / "config.json").write_text("{}")
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["kind"] == "lerobot" and cfg["config"]["cameras"] == {"front": "observation.images.top"}
    cfg["config"]["path"] = str(tmp_path / "lerobot_model")
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="lerobot_model.*" + LEROBOT_EXTRA.replace("[", r"\[").replace("]", r"\]")):
        load_policy(path)


def test_observations_become_lerobot_names_and_shapes(env):
    policy, fake = _wrap(env)
    assert policy.spec.obs_dims == {"object": 11, "proprio": 20} and policy.spec.action_horizon == 3
    assert policy.spec.image_shapes == {"images/front": [SIZE, SIZE, 3]} and policy.spec.instruction
    rng = np.random.default_rng(0)
    runner = PolicyRunner(policy, num_envs=2, env=_env_with_camera(env))
    obs = {"proprio": rng.normal(size=(2, 20)).astype(np.float32), "object": rng.normal(size=(2, 11)).astype(np.float32),
           "images/front": rng.integers(0, 256, (2, SIZE, SIZE, 3), dtype=np.uint8)}
    a = runner.act(obs)
    batch = fake.batches[-1]
    state = np.concatenate([obs["object"], obs["proprio"]], -1)  # state_keys: the env's vector keys, sorted
    np.testing.assert_allclose(batch["observation.state"].numpy(), state, rtol=1e-6)
    img = batch["observation.images.top"]
    assert img.shape == (2, 3, SIZE, SIZE) and img.dtype == torch.float32 and 0.0 <= img.min() <= img.max() <= 1.0
    np.testing.assert_allclose(img.permute(0, 2, 3, 1).numpy() * 255.0, obs["images/front"], atol=1e-3)
    assert batch["task"] == ["lift the cube", "lift the cube gently"]
    np.testing.assert_allclose(a[:, 0], state.mean(-1), rtol=1e-5)
    assert a.shape == (2, 4) and np.all(a[:, 2:] == 1.0)  # clipped to the action range


def test_mapping_mismatches_are_named(env):
    with pytest.raises(SpecMismatch, match=r"observation.state: it expects \[12\], state_keys .* give \[31\]"):
        _wrap(env, FakeLeRobotPolicy(state_dim=12))
    with pytest.raises(SpecMismatch, match=r"it reads observation.images.side: map one of our cameras"):
        _wrap(env, FakeLeRobotPolicy(image_key="observation.images.side"))
    with pytest.raises(SpecMismatch, match="n_obs_steps=2"):
        _wrap(env, FakeLeRobotPolicy(n_obs_steps=2))
    with pytest.raises(SpecMismatch, match=r"action: it emits \[7\], the env takes \[4\]"):
        _wrap(env, FakeLeRobotPolicy(action_dim=7))
    policy, _ = _wrap(env, state_keys=["proprio", "object"])  # an explicit order is kept
    assert policy.mapping.state_keys == ("proprio", "object")
