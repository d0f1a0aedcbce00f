"""Both backends: determinism by seed, equivalence, auto-reset, randomization landing in the models."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.experts import make_expert
from tests.conftest import DR, N_ENVS


def _rollout(env, seed, steps, actions=None):
    obs = env.reset(seed)
    expert = make_expert(env, noise=0.3, seed=7) if actions is None else None
    trace, acts = [obs], []
    for t in range(steps):
        a = expert.act(obs) if actions is None else actions[t]
        obs, reward, done, info = env.step(a)
        trace.append(obs)
        acts.append(a)
    return trace, acts


def test_same_seed_gives_the_same_trajectory_on_mujoco_c(cpu_env):
    a, acts = _rollout(cpu_env, 11, 12)
    b, _ = _rollout(cpu_env, 11, 12, acts)
    c, _ = _rollout(cpu_env, 12, 12, acts)
    for x, y in zip(a, b):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])
    assert not np.allclose(a[0]["object"], c[0]["object"]), "another seed must give another reset"


def test_same_seed_gives_the_same_trajectory_on_mjx(mjx_env):
    a, acts = _rollout(mjx_env, 11, 6)
    b, _ = _rollout(mjx_env, 11, 6, acts)
    for x, y in zip(a, b):
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


def test_mjx_and_mujoco_c_give_the_same_trajectory(cpu_env, mjx_env):
    """Same seed and actions: same resets, randomization, noise and physics (float32 vs float64).

    Measured: the two agree to ~1e-5 for the 19 steps of reaching; when the fingers close on the cube
    (step ~20 for this seed) float32 and float64 contact resolution bifurcate, as any two contact
    solvers of different precision do. So the comparison covers the steps before the grasp.
    """
    cpu_trace, acts = _rollout(cpu_env, 5, 15)
    mjx_trace, _ = _rollout(mjx_env, 5, 15, acts)
    for t, (x, y) in enumerate(zip(cpu_trace, mjx_trace)):
        tol = 1e-4 if t == 0 else 1e-3
        for k in x:
            np.testing.assert_allclose(x[k], y[k], atol=tol, err_msg=f"obs[{k!r}] at step {t}")
    np.testing.assert_allclose(cpu_env.params["mass"], mjx_env.params["mass"], rtol=1e-6)
    # phys(): the state the next step starts from, on both (a joint_pos expert's IK step reads it)
    cpu, mjx = cpu_env.phys(), mjx_env.phys()
    assert cpu.qpos.shape == mjx.qpos.shape and isinstance(mjx.qpos, np.ndarray)
    np.testing.assert_allclose(cpu.qpos[:, :7], mjx.qpos[:, :7], atol=1e-3)


def test_done_env_auto_resets_and_reports_its_final_observation():
    env = sim.make("lift", num_envs=2, task_config={"episode_steps": 3})
    obs = env.reset(0)
    hold = np.tile(env.action_space.neutral, (2, 1))
    for _ in range(2):
        obs, _, done, info = env.step(hold)
        assert not done.any()
    obs, _, done, info = env.step(hold)
    assert done.all() and info["truncated"].all() and not info["terminated"].any()
    assert (info["episode_length"] == 3).all()
    # the returned obs is the next episode's first: the cube moved to a new random pose
    assert not np.allclose(info["final_obs"]["object"][:, :3], obs["object"][:, :3])
    obs2, _, done, _ = env.step(hold)
    assert not done.any()


def test_randomization_gives_each_env_its_own_model_within_ranges(cpu_env):
    cpu_env.reset(3)
    f = cpu_env.fields
    mass = np.array([m.body_mass[f.body] for m in cpu_env.models]) / f.nominal["body_mass"]
    size = np.array([m.geom_size[f.geoms[0], 0] for m in cpu_env.models]) / f.nominal["geom_size"][0, 0]
    fric = np.array([m.pair_friction[f.pairs[0], 0] for m in cpu_env.models]) / f.nominal["pair_friction"][0]
    damp = np.array([m.dof_damping[f.dofs[0]] for m in cpu_env.models]) / f.nominal["dof_damping"][0]
    kp = np.array([m.actuator_gainprm[0, 0] for m in cpu_env.models]) / f.nominal["kp"][0]
    for vals, (lo, hi) in [(mass, DR["object_mass"]), (size, DR["object_size"]), (fric, DR["friction"]),
                           (damp, DR["joint_damping"]), (kp, DR["actuator_gain"])]:
        assert ((vals >= lo - 1e-6) & (vals <= hi + 1e-6)).all()
        assert len(np.unique(np.round(vals, 6))) == N_ENVS, "each env draws its own value"
    lat = cpu_env.params["latency"]
    assert ((lat >= 0) & (lat <= 2)).all()
    # a resting cube sits on the table at its randomized half size
    np.testing.assert_allclose(cpu_env.qpos[:, cpu_env.task.obj_qpos + 2], 0.02 * size, rtol=1e-5)


def test_randomization_is_redrawn_for_each_episode():
    env = sim.make("lift", num_envs=2, task_config={"episode_steps": 2}, randomization={"object_mass": [0.5, 2.0]})
    env.reset(0)
    before = env.params["mass"].copy()
    hold = np.tile(env.action_space.neutral, (2, 1))
    env.step(hold)
    env.step(hold)
    assert not np.allclose(before, env.params["mass"])


def test_mjx_randomizes_inside_jit_within_ranges(mjx_env):
    mjx_env.reset(3)
    p = mjx_env.params
    assert len(np.unique(p["mass"])) == N_ENVS
    for k, key in [("mass", "object_mass"), ("friction", "friction"), ("size", "object_size")]:
        lo, hi = DR[key]
        assert ((p[k] >= lo) & (p[k] <= hi)).all()


def test_action_latency_delays_the_executed_action():
    def ee_z_after(latency):
        env = sim.make("lift", num_envs=1, randomization={"action_latency": [latency, latency]},
                       task_config={"arm_qpos_noise": 0.0})
        obs = env.reset(0)
        z0 = env.task.field(obs, "proprio", "ee_pos")[0, 2]
        obs, *_ = env.step(np.array([[0, 0, -1, 1]], np.float32))
        return env.task.field(obs, "proprio", "ee_pos")[0, 2] - z0

    assert ee_z_after(0) < -0.01  # moved down at once
    assert abs(ee_z_after(2)) < 0.002  # still holding: the command is two ticks old


def test_observation_noise_is_added_with_the_configured_std():
    clean = sim.make("lift", num_envs=64).reset(1)
    noisy = sim.make("lift", num_envs=64, randomization={"obs_noise_std": 0.01}).reset(1)
    diff = noisy["proprio"] - clean["proprio"]
    assert 0.008 < diff.std() < 0.012
    assert abs(diff.mean()) < 0.002


@pytest.mark.parametrize("task", sorted(sim.TASKS))
def test_observations_have_documented_keys_and_finite_values(task):
    env = sim.make(task, num_envs=2)
    obs = env.reset(0)
    assert set(obs) == {"proprio", "object"}
    assert obs["proprio"].shape == (2, 20)
    for v in obs.values():
        assert v.dtype == np.float32 and np.isfinite(v).all()
    assert env.instructions() and all(isinstance(s, str) and s for s in env.instructions())


def test_mass_randomization_keeps_the_model_constants_mujoco_derives_from_mass():
    """What mj_setConst would compute from the randomized masses must match what we wrote (subtree mass
    feeds the subtree centre of mass; a stale one blew up pushes under object_mass randomization)."""
    import mujoco

    env = sim.make("push", num_envs=6, randomization={"object_mass": [0.5, 2.0]})
    env.reset(0)
    for m in env.models:
        written = (m.body_subtreemass.copy(), m.body_invweight0[env.fields.body].copy())
        mujoco.mj_setConst(m, mujoco.MjData(m))
        np.testing.assert_allclose(written[0], m.body_subtreemass, rtol=1e-9)
        np.testing.assert_allclose(written[1], m.body_invweight0[env.fields.body], rtol=1e-6)


def _observation_by_fresh_forward(env, qpos, qvel, mocap_pos, target, params, key, episode, step):
    """The env's observation [N] recomputed from its state vectors with mj_forward of the nominal model (the arm's
    kinematics does not depend on the randomized fields), with the env's own noise draws."""
    import mujoco

    from robot_rl.sim import core
    from robot_rl.sim.task import Phys

    d = mujoco.MjData(env.model)
    sens = []
    for i in range(len(qpos)):
        d.qpos[:], d.mocap_pos[:] = qpos[i], mocap_pos[i]
        mujoco.mj_forward(env.model, d)
        sens.append(d.sensordata.copy())
    phys = Phys(np.asarray(qpos, np.float64), np.asarray(qvel, np.float64), np.stack(sens),
                np.asarray(mocap_pos, np.float64))
    return core.observe(np, env.task, phys, np.asarray(target, np.float64), params,
                        env.cfg.randomization.obs_noise_std, key, episode, step)


@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_observation_after_a_step_describes_the_final_physics_state(backend, mjx_env):
    """End-effector frame and joint anchors come from frame sensors; mj_step / mjx.step evaluate those before they
    integrate, so unless the env recomputes them they describe the state one physics step (5 ms, ~1 mm of
    end-effector travel here) before qpos."""
    env = mjx_env if backend == "mjx" else sim.make("lift", backend="mujoco", num_envs=N_ENVS, randomization=DR)
    env.reset(2)
    move = np.tile(np.array([[0.8, -0.6, -1.0, 1.0]], np.float32), (N_ENVS, 1))
    for _ in range(5):
        obs, _, done, _ = env.step(move)
    assert not done.any()
    if backend == "mjx":
        import jax

        s = jax.device_get(env.state)
        d, i = s.data, s.info
        args = (d.qpos, d.qvel, d.mocap_pos, i["target"], {k: np.asarray(v) for k, v in i["params"].items()},
                np.asarray(i["key"]), np.asarray(i["episode"]), np.asarray(i["step"]))
        tol = 2e-5  # float32 physics
    else:
        args = (env.qpos, env.qvel, env.mocap_pos, env.target, env.params, env.key, env.episode, env.steps)
        tol = 1e-6
    ref = _observation_by_fresh_forward(env, *args)
    assert (np.abs(np.asarray(args[1])[:, :7]).max(axis=1) > 0.1).all()  # the arm is moving: a lag would show
    for k in obs:
        np.testing.assert_allclose(obs[k], ref[k], atol=tol, err_msg=f"obs[{k!r}]")


def test_start_episode_gives_the_initial_state_of_the_envs_kth_episode():
    """The sim driver starts its episodes with this: episode k must be the one the env itself runs k-th."""
    import mujoco

    env = sim.make("lift", num_envs=2, task_config={"episode_steps": 2}, randomization={"object_mass": [0.5, 2.0]})
    env.reset(4)
    hold = np.tile(env.action_space.neutral, (2, 1))
    for _ in range(2):
        env.step(hold)  # auto-reset: env 1 is now at the start of its episode 1
    qpos, mass, target = env.qpos[1].copy(), env.models[1].body_mass.copy(), env.target[1].copy()
    d = mujoco.MjData(env.models[1])
    params, start_target = env.start_episode(1, 1, d)
    np.testing.assert_array_equal(d.qpos, qpos)
    np.testing.assert_array_equal(env.models[1].body_mass, mass)
    np.testing.assert_allclose(start_target, target, rtol=1e-6)
    np.testing.assert_allclose(params["mass"], env.params["mass"][1:2])
    env.start_episode(1, 0, d)
    assert not np.allclose(d.qpos, qpos), "another episode starts elsewhere"


@pytest.mark.mjx
@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_restart_puts_envs_back_at_their_episode_start_and_leaves_the_others(backend, cpu_env, mjx_env):
    env = cpu_env if backend == "mujoco" else mjx_env
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (4, N_ENVS, env.action_dim)).astype(np.float32)
    start = env.reset(7)
    for a in acts[:3]:
        env.step(a)
    fresh = env.restart([1, 3])
    for k in start:
        np.testing.assert_array_equal(fresh[k], start[k][[1, 3]])  # DR draws and observation noise included
    after, *_ = env.step(acts[3])
    env.reset(7)
    ref, *_ = env.step(acts[3])  # envs 1 and 3 from their start, latency buffer and step count included
    moved_on, *_ = _rollout(env, 7, 4, acts)
    for k in start:
        np.testing.assert_array_equal(after[k][[1, 3]], ref[k][[1, 3]])
        np.testing.assert_array_equal(after[k][[0, 2]], moved_on[-1][k][[0, 2]])  # the others never noticed


@pytest.mark.mjx
@pytest.mark.parametrize("backend", ["mujoco", "mjx"])
def test_end_episodes_starts_the_next_episode_as_auto_reset_would_and_leaves_the_others(backend, cpu_env, mjx_env):
    env = cpu_env if backend == "mujoco" else mjx_env
    acts = np.random.default_rng(1).uniform(-1, 1, (4, N_ENVS, env.action_dim)).astype(np.float32)
    # the reference: every env's episode 1, as auto-reset starts it after a 3-step time limit
    short = sim.make("lift", num_envs=N_ENVS, randomization=DR, task_config={"episode_steps": 3})
    short.reset(7)
    for a in acts[:3]:
        auto, _, done, _ = short.step(a)
    assert done.all()
    short.close()
    env.reset(7)
    for a in acts[:2]:
        env.step(a)
    fresh = env.end_episodes([1, 3])
    tol = 0.0 if backend == "mujoco" else 1e-4  # float32 MJX against float64 MuJoCo C at a reset
    for k in fresh:
        np.testing.assert_allclose(fresh[k], auto[k][[1, 3]], atol=tol, err_msg=k)  # draws and noise of episode 1
    after, _, done, info = env.step(acts[2])
    assert not done.any() and list(info["episode_length"]) == [3, 1, 3, 1]  # a fresh step count in envs 1 and 3
    env.reset(7)
    for a in acts[:3]:
        ref, *_ = env.step(a)
    for k in after:
        np.testing.assert_array_equal(after[k][[0, 2]], ref[k][[0, 2]])  # the others never noticed
    with pytest.raises(ValueError, match="out of range"):
        env.end_episodes([N_ENVS])


def test_a_seed_list_starts_each_env_as_a_one_env_reset_with_its_seed(cpu_env):
    obs = cpu_env.reset([3, 1, 4, 1])
    one = sim.make("lift", num_envs=1, randomization=DR)
    for i, s in enumerate([3, 1, 4, 1]):
        single = one.reset(s)
        for k in obs:
            np.testing.assert_array_equal(obs[k][i], single[k][0])
    one.close()
    for bad in ([1, 2], [1, 2, 3, 4.5], "1234"):
        with pytest.raises(ValueError, match="one per env"):
            cpu_env.reset(bad)


@pytest.mark.parametrize("final_obs", ["same dict", "own dict"])
def test_action_history_holds_the_commanded_actions_and_starts_each_episode_neutral(final_obs):
    from robot_rl.sim.config import ConfigError

    env = sim.make("lift", num_envs=2, threads=1, action_history=2, task_config={"episode_steps": 3})
    if final_obs == "own dict":  # as the MJX backend returns it (MuJoCo C hands back obs itself)
        backend_step = env._step

        def _step(action):
            obs, reward, done, info = backend_step(action)
            return obs, reward, done, {**info, "final_obs": dict(info["final_obs"])}

        env._step = _step
    try:
        a_dim, neutral = env.action_dim, env.action_space.neutral
        assert env.obs_dims["prev_actions"] == 2 * a_dim
        obs = env.reset(0)
        np.testing.assert_array_equal(obs["prev_actions"], np.tile(neutral, (2, 2)))
        sent = []
        for t in range(3):
            a = np.full((2, a_dim), 0.1 * (t + 1), np.float32)
            a[1, 0] = 5.0  # clipped as the action space applies it
            sent.append(np.clip(a, -1, 1))
            obs, _, done, info = env.step(a)
            if t < 2:
                assert not done.any()
                older = sent[-2] if t else np.tile(neutral, (2, 1))
                np.testing.assert_array_equal(obs["prev_actions"], np.concatenate([older, sent[-1]], axis=1))
        assert done.all()  # the episode ended: its last observation keeps the history, the next starts neutral
        np.testing.assert_array_equal(info["final_obs"]["prev_actions"], np.concatenate(sent[1:], axis=1))
        np.testing.assert_array_equal(obs["prev_actions"], np.tile(neutral, (2, 2)))
        assert set(sim.make("lift", num_envs=1).obs_dims) == {"proprio", "object"}  # off by default
        with pytest.raises(ConfigError, match=r"action_history=-1 must be a whole number >= 0"):
            sim.make("lift", num_envs=1, action_history=-1)
    finally:
        env.close()
