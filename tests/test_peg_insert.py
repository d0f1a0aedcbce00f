"""peg_insert: config validation, shapes, numpy = jax task functions, the scripted expert inserts the peg."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.config import ConfigError
from robot_rl.sim.experts import make_expert, run_episodes


@pytest.mark.parametrize("clearance", [0.0, -0.001, 0.004])
def test_clearance_outside_the_fit_is_rejected_by_name(clearance):
    with pytest.raises(ConfigError, match="clearance"):
        sim.make("peg_insert", num_envs=1, task_config={"clearance": clearance})


def test_size_randomization_is_rejected():
    with pytest.raises(ConfigError, match="object_size"):
        sim.make("peg_insert", num_envs=1, randomization={"object_size": [0.9, 1.1]})


def test_shapes_and_reset_regions():
    env = sim.make("peg_insert", num_envs=16)
    assert env.action_dim == 5
    assert env.obs_dims == {"proprio": 20, "object": 17}
    assert len(env.instructions()) >= 4
    obs = env.reset(0)
    o = obs["object"]
    peg, hole = o[:, 0:3], o[:, 8:11]
    assert (peg[:, 1] < -0.02).all() and (hole[:, 1] > 0.04).all()
    np.testing.assert_allclose(hole, env.target, atol=1e-6)
    np.testing.assert_allclose(env.mocap_pos[:, 0, :2], env.target[:, :2], atol=1e-6)
    _, reward, _, info = env.step(np.tile(env.action_space.neutral, (16, 1)))
    assert ((reward >= 0) & (reward <= 1)).all() and not info["success"].any()


def test_task_functions_match_under_jax_vmap():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from robot_rl.sim.task import Phys

    env = sim.make("peg_insert", num_envs=4)
    task = env.task
    expert = make_expert(env)
    obs = env.reset(3)
    for _ in range(40):  # mid-carry: peg in the air, every term non-trivial
        obs, *_ = env.step(expert.act(obs))
    params = {k: np.asarray(v) for k, v in env.params.items()}

    def fns(xp, phys, target, p):
        o = task.observe(xp, phys, target, p)
        return (o["proprio"], o["object"], task.reward(xp, phys, target, p), task.success(xp, phys, target, p),
                task.progress(xp, phys, target, p))

    ref = fns(np, env.phys(), env.target.astype(np.float64), params)
    f32 = lambda x: jnp.asarray(x, dtype=jnp.float32)  # noqa: E731
    out = jax.vmap(lambda ph, t, p: fns(jnp, ph, t, p))(
        Phys(*(f32(x) for x in env.phys())), f32(env.target), {k: jnp.asarray(v) for k, v in params.items()}
    )
    for a, b in zip(ref, out):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), atol=1e-5)
    u = np.random.default_rng(0).random((4, task.n_reset_uniforms)).astype(np.float32)
    jax_reset = jax.vmap(lambda x, p: task.sample_reset(jnp, x, p))(f32(u), params)
    for a, b in zip(task.sample_reset(np, u, params), jax_reset):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_expert_inserts_the_peg():
    env = sim.make("peg_insert", num_envs=10)
    res = run_episodes(env, make_expert(env, noise=0.0), 10, seed=1)
    assert res["success_rate"] >= 0.9, res
