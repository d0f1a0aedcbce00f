"""robot-rl-import-rosbag: a rosbag2 of joint states and joint commands becomes episodes.

The bag is written with rosbags from a sim episode of the scripted expert, as a ros2_control robot would
have logged it (joint states and JointTrajectory commands at the control rate, object poses, episode
events, a short teleop take-over). Importing must give back the episode: the observations sim produced, and
actions that reproduce the expert's ee_delta actions up to the IK's tracking error.
"""

from __future__ import annotations

import json

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from robot_rl.real import messages as M
from tests.conftest import assert_one_line_error, run_cli

DT_NS = 50_000_000  # 20 Hz
TELEOP_STEPS = range(6, 9)


def write_expert_bag(path, seed: int = 3):
    from robot_rl import sim
    from robot_rl.policies.expert import ExpertPolicy
    from robot_rl.sim import robot

    env = sim.make("lift", backend="mujoco", num_envs=1)
    policy = ExpertPolicy(env)
    joints = list(robot.ARM_JOINTS + robot.FINGER_JOINTS)
    m = env.model
    qa = [m.jnt_qposadr[m.joint(j).id] for j in joints]
    da = [m.jnt_dofadr[m.joint(j).id] for j in joints]
    o = env.task.obj_qpos
    obs = env.reset(seed)
    ts = get_typestore(Stores.ROS2_HUMBLE)
    w = Writer(path, version=8, storage_plugin=StoragePlugin.MCAP)
    w.open()
    topics = {"/joint_states": M.JointState, "/joint_trajectory_controller/joint_trajectory": M.JointTrajectory,
              "/robot_rl/object_pose": M.PoseStamped, "/robot_rl/episode": M.String, "/robot_rl/teleop": M.Float64MultiArray}
    conns = {t: w.add_connection(t, M.ros_type_name(c), typestore=ts) for t, c in topics.items()}
    t0 = 1_700_000_000_000_000_000
    w.write(conns["/robot_rl/episode"], t0 - 1000, M.String(json.dumps(
        {"event": "start", "index": 0, "seed": seed, "target": env.target[0].tolist()})).serialize())
    observations, actions, k = [], [], 0
    while True:
        t = t0 + k * DT_NS
        q, qd = env.qpos[0, qa], env.qvel[0, da]
        w.write(conns["/joint_states"], t, M.JointState(name=joints, position=q.tolist(), velocity=qd.tolist()).serialize())
        pos, quat = env.qpos[0, o : o + 3], env.qpos[0, o + 3 : o + 7]
        pose = M.PoseStamped(pose=M.Pose(M.Point(*map(float, pos)), M.Quaternion(*map(float, quat[1:]), float(quat[0]))))
        w.write(conns["/robot_rl/object_pose"], t, pose.serialize())
        a = policy.act({key: v[:, None] for key, v in obs.items()})[:, 0]
        if k in TELEOP_STEPS:
            w.write(conns["/robot_rl/teleop"], t + 100_000, M.float_array(a[0], label="teleop").serialize())
        observations.append({key: v.copy() for key, v in obs.items()})
        actions.append(a[0].copy())
        obs, _, done, info = env.step(a)
        ctrl = env.ctrl[0]  # the joint targets the step ran with, in actuator order = joints order
        traj = M.JointTrajectory(joint_names=joints[::-1], points=[M.JointTrajectoryPoint(
            positions=ctrl[::-1].tolist(), time_from_start=M.duration(0.01))])
        w.write(conns["/joint_trajectory_controller/joint_trajectory"], t + 1_000_000, traj.serialize())
        k += 1
        if done[0]:
            success = bool(info["success"][0])
            break
    w.write(conns["/joint_states"], t0 + k * DT_NS, M.JointState(name=joints, position=q.tolist(), velocity=qd.tolist()).serialize())
    w.write(conns["/robot_rl/episode"], t0 + k * DT_NS + 1000, M.String(json.dumps(
        {"event": "end", "index": 0, "success": success, "steps": k})).serialize())
    w.close()
    env.close()
    return observations, np.array(actions), success


def test_import_rosbag_turns_joint_states_and_trajectory_commands_into_the_episode(tmp_path):
    from robot_rl.data.episode_store import EpisodeStore

    observations, actions, success = write_expert_bag(tmp_path / "bag")
    proc = run_cli("robot-rl-import-rosbag", str(tmp_path / "bag"), str(tmp_path / "out.zarr"),
                   "deploy.command_type=joint_trajectory", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = EpisodeStore.open(tmp_path / "out.zarr")
    assert store.n_episodes == 1 and store.n_steps == len(actions)
    assert bool(store.episode_attr("success")[0]) == success
    assert store.episode_attr("source")[0] == "intervention"
    assert json.loads(store.episode_attr("metadata")[0])["start_event"]["seed"] == 3
    # a human is in control from the first teleop message until teleop_timeout_s (0.2 s = 4 steps) after the last
    np.testing.assert_array_equal(np.nonzero(store.read("intervention"))[0], np.arange(TELEOP_STEPS[0], TELEOP_STEPS[-1] + 5))
    # observations: what sim observed, up to the sim's one-physics-step sensor lag
    for key in ("proprio", "object"):
        rec = np.concatenate([o[key] for o in observations])
        np.testing.assert_allclose(store.read(f"obs/{key}")[:, :7], rec[:, :7], atol=2e-3)
    # actions: the expert's, up to the IK's tracking error (its steps rarely reach the full target)
    got = store.read("action")
    np.testing.assert_array_equal(np.sign(got[:, -1]), np.sign(actions[:, -1]))
    err = np.abs(got[:, :3] - actions[:, :3])
    assert np.median(err) < 0.05 and np.mean(err) < 0.15, err.mean(0)


def test_import_rosbag_refuses_missing_bags_and_bags_without_commands(tmp_path, cli_here):
    proc = run_cli("robot-rl-import-rosbag", str(tmp_path / "nope"), str(tmp_path / "out.zarr"), timeout=120)
    assert_one_line_error(proc, "does not exist")
    w = Writer(tmp_path / "states_only", version=8, storage_plugin=StoragePlugin.MCAP)
    w.open()
    c = w.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=get_typestore(Stores.ROS2_HUMBLE))
    w.write(c, 1, M.JointState(name=["joint1"], position=[0.0]).serialize())
    w.close()
    proc = cli_here("robot-rl-import-rosbag", str(tmp_path / "states_only"), str(tmp_path / "out.zarr"))
    assert_one_line_error(proc, "no commands on /forward_position_controller/commands")
    assert not (tmp_path / "out.zarr").exists()


def test_a_start_the_driver_repeated_until_the_node_acknowledged_is_one_episode():
    """The sim driver (and a robot's) repeats an episode's start event until the node acknowledges it; the node
    restarts on each repeat, so the bag's episode begins at the last repeat, and no partial episode is invented."""
    from robot_rl.real.rosbag_import import _segments

    def ev(t, **d):
        return (t, M.String(data=json.dumps(d)))

    starts = [ev(t, event="start", index=0, target=[0.5, 0.0, 0.02]) for t in (10, 20, 30)]
    msgs = {"episode": [*starts, ev(90, event="end", index=0, success=True, steps=4),
                        ev(100, event="start", index=1), ev(110, event="start", index=2)],
            "command": []}
    segs = _segments(msgs)
    assert [(s["t0"], s["t1"], s["success"], s.get("partial", False)) for s in segs] == [
        (30, 90, True, False), (100, 110, False, True), (110, None, False, True)]
