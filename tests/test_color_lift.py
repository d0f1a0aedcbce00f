"""color_lift: the instruction names the cube to lift; the state observation does not say which."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.experts import make_expert, run_episodes
from robot_rl.sim.task import Phys, neutral_params
from robot_rl.sim.tasks.color_lift import PALETTE


def test_state_observation_does_not_reveal_the_named_cube():
    env = sim.make("color_lift", num_envs=3)
    env.reset(0)
    assert env.obs_dims == {"proprio": 20, "object": 22}
    task, phys = env.task, env.phys()
    params = {k: np.asarray(v) for k, v in env.params.items()}
    target = env.task_target.astype(np.float64)
    other = target.copy()
    other[:, 0] = 1.0 - other[:, 0]  # the other cube named
    other[:, 1:3] = other[:, 2:0:-1]  # and the colours swapped
    a, b = task.observe(np, phys, target, params), task.observe(np, phys, other, params)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_cubes_differ_in_colour_and_the_instruction_names_the_named_ones():
    env = sim.make("color_lift", num_envs=64)
    env.reset(3)
    target, instructions = env.task_target, env.instruction
    assert len(instructions) == 64 and set(instructions) <= set(env.instructions())
    assert (target[:, 1] != target[:, 2]).all()
    assert 0.3 < target[:, 0].mean() < 0.7  # both cubes get named
    words = list(PALETTE)
    for t, text in zip(target, instructions):
        named, other = words[int(t[1 + int(t[0])])], words[int(t[2 - int(t[0])])]
        assert named in text.split() and other not in text.split(), (t, text)
    assert len(set(instructions)) > 10  # colours and paraphrases both vary
    # the render models carry the colours the instruction talks about
    for i in range(3):
        rgba = env.models[i].geom_rgba[[env.model.geom("cube_a").id, env.model.geom("cube_b").id]]
        np.testing.assert_allclose(rgba, [PALETTE[words[int(target[i, 1])]], PALETTE[words[int(target[i, 2])]]])


def test_instruction_is_fixed_by_the_seed_and_redrawn_at_auto_reset():
    def run(seed):
        env = sim.make("color_lift", num_envs=8, task_config={"episode_steps": 2})
        env.reset(seed)
        out = [env.instruction]
        for _ in range(2):
            env.step(np.zeros((8, env.action_dim), np.float32))
            out.append(env.instruction)
        return out

    a, b, c = run(7), run(7), run(8)
    assert a == b and a[0] != c[0]
    assert a[0] == a[1], "the instruction holds for the whole episode"
    assert a[2] != a[1], "the auto-reset's new episode draws a new instruction"


def test_only_lifting_the_named_cube_succeeds():
    env = sim.make("color_lift", num_envs=2)
    env.reset(0)
    task = env.task
    params = neutral_params(np, (2,))
    qpos = env.qpos.copy()
    qpos[:, task.qpos_b + 2] += 0.15  # cube B raised well above lift_height, cube A on the table
    phys = Phys(qpos, env.qvel, env.sensordata, env.mocap_pos)
    target = env.task_target.astype(np.float64)
    for named, expected in ((0.0, False), (1.0, True)):
        target[:, 0] = named
        reward, success, progress = task.evaluate(np, phys, target, params)
        assert (success == expected).all(), (named, success)
        assert ((reward == 1.0) == expected).all() and ((progress == 1.0) == expected).all()


def test_expert_lifts_the_named_cube():
    env = sim.make("color_lift", num_envs=4)
    result = run_episodes(env, make_expert(env), episodes=8, seed=1)
    assert result["success_rate"] >= 0.9, result


def test_collect_records_images_and_each_episodes_instruction(tmp_path):
    from robot_rl.data.collect import collect
    from robot_rl.data.episode_store import EpisodeStore

    env = sim.make("color_lift", num_envs=2, cameras=["front", "wrist"], image_size=[32, 32])
    env.reset(4)
    first = env.instruction  # the episodes collect(seed=4) records first, one per env
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        result = collect(env, make_expert(env), store, episodes=3, seed=4)
    assert result["episodes"] == 3
    store = EpisodeStore.open(tmp_path / "s.zarr")
    meta = [store.episode(i).metadata for i in range(3)]
    instr = list(store.episode_attr("instruction"))
    for i, m in enumerate(meta):
        if m["env_episode"] == 0:
            assert instr[i] == first[m["env_index"]]
        assert any(w in instr[i].split() for w in PALETTE)
    assert {"obs/images/front", "obs/images/wrist"} <= set(store.keys)
    assert store.episode_attr("success").all()
    env.close()


@pytest.mark.mjx
def test_runs_on_mjx_like_on_mujoco_c():
    cpu = sim.make("color_lift", backend="mujoco", num_envs=2)
    mjx = sim.make("color_lift", backend="mjx", num_envs=2)
    oc, om = cpu.reset(2), mjx.reset(2)
    assert cpu.instruction == mjx.instruction
    np.testing.assert_allclose(cpu.task_target, mjx.task_target)
    expert = make_expert(cpu)
    for _ in range(12):  # the same actions in both, short of the lift (no auto-reset to tell apart)
        a = expert.act(oc)
        oc, _, _, _ = cpu.step(a)
        om, _, _, _ = mjx.step(a)
    np.testing.assert_allclose(om["object"], oc["object"], atol=5e-3)
    result = run_episodes(mjx, make_expert(mjx), episodes=2, seed=2)
    assert result["success_rate"] == 1.0, result


def test_evaluation_reports_success_per_goal_and_swap_names_the_other_cube():
    """robot-rl-eval's by_goal: success per named colour; swap_named keeps the scenes and names the other cube."""
    from robot_rl.policies.expert import ExpertPolicy
    from robot_rl.evaluation import evaluate_policy
    from robot_rl.sim import make

    results = {}
    for swap in (False, True):
        env = make("color_lift", num_envs=2, task_config={"swap_named": swap})
        try:
            env.reset(7)
            results[swap] = (env.goals, env.task_target.copy())
            if not swap:
                m = evaluate_policy(env, ExpertPolicy(env), 4, seed=7)
        finally:
            env.close()
    goals, target = results[False]
    swapped_goals, swapped_target = results[True]
    assert all(g.endswith(" cube") for g in goals)
    np.testing.assert_array_equal(target[:, 1:], swapped_target[:, 1:])  # same colours and heights
    np.testing.assert_array_equal(target[:, 0], 1 - swapped_target[:, 0])  # the other cube is named
    assert goals != swapped_goals
    assert sum(v["episodes"] for v in m["by_goal"].values()) == 4
    assert all(k.endswith(" cube") for k in m["by_goal"])
