"""rosbag2 -> episodes: a robot recording with joint states and joint commands becomes training data.

Read with `rosbags` (MCAP or SQLite3, any ROS 2 distro). Topics and joint order come from the deploy
config. Episodes are the spans between episode start/end events (real/episode_events.py) when the bag has
them, otherwise the whole span from the first to the last command is one episode.

Each episode is resampled at the policy rate: step k at t_k = t_0 + k / control_hz has
  observation  the task observation of the latest joint state (and object pose) at t_k, assembled by the
               same code as the control node (real/observation.py);
  action       the joint command in force at t_k + 1 / control_hz (the target the step ended up with),
               mapped back into the action space: joint_pos normalizes the arm targets; ee_delta takes the
               forward kinematics of the commanded arm posture minus the observed end-effector position,
               divided by max_ee_delta (and the yaw change by max_yaw_delta), clipped to [-1, 1]; the grip is
               the commanded finger opening. This inverts sim's one-step IK up to its tracking error.
  intervention a teleop message arrived within teleop_timeout_s before t_k or during the step.
Reward and progress are 0; success comes from the end event (false without one). Source: "teleop" when a
human drove every step, "intervention" when some, "policy" when none (unless given).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from robot_rl.real import messages as M
from robot_rl.real.config import DeployConfig
from robot_rl.real.message_convert import convert_from
from robot_rl.real.observation import ObservationModel, ros_quat_to_mujoco
from robot_rl.sim import kinematics as kin


class BagImportError(ValueError):
    """The bag lacks what the import needs; the message names the topic or value."""


def _latest(times: np.ndarray, t: float) -> int:
    """Index of the last entry with time <= t (-1 if none)."""
    return int(np.searchsorted(times, t, side="right")) - 1


def read_bag(path: str | Path, cfg: DeployConfig) -> dict[str, list]:
    """{role: [(t_ns, IDL message), ...]} for the roles the import uses, sorted by time."""
    from rosbags.highlevel import AnyReader

    t = cfg.topics
    roles = {t.joint_states: ("state", M.JointState), t.object_pose: ("object", M.PoseStamped),
             t.teleop: ("teleop", M.Float64MultiArray), t.episode: ("episode", M.String),
             t.position_commands: ("command", M.Float64MultiArray), t.trajectory_commands: ("command", M.JointTrajectory)}
    out: dict[str, list] = {r: [] for r, _ in roles.values()}
    path = Path(path)
    if not path.exists():
        raise BagImportError(f"rosbag {path} does not exist")
    try:
        reader = AnyReader([path])
        reader.open()
    except Exception as e:  # noqa: BLE001 - rosbags raises several types for unreadable bags
        raise BagImportError(f"cannot read rosbag {path}: {e}") from None
    try:
        conns = []
        for c in reader.connections:
            if c.topic in roles and M.ros_type_name(roles[c.topic][1]) == c.msgtype:
                conns.append(c)
        for conn, t_ns, raw in reader.messages(connections=conns):
            role, cls = roles[conn.topic]
            out[role].append((t_ns, convert_from(reader.deserialize(raw, conn.msgtype), cls)))
    finally:
        reader.close()
    for v in out.values():
        v.sort(key=lambda x: x[0])
    return out


def _segments(msgs: dict) -> list[dict]:
    events = []
    for t, m in msgs["episode"]:
        try:
            events.append((t, json.loads(m.data)))
        except json.JSONDecodeError:
            continue
    segs = []
    for i, (t, ev) in enumerate(events):
        if ev.get("event") != "start":
            continue
        end = next(((t2, e2) for t2, e2 in events[i + 1 :] if e2.get("event") in ("start", "end")), None)
        if end is not None and end[1].get("event") == "start" and end[1].get("index") == ev.get("index"):
            continue  # a driver repeats a start until the node acknowledges it: the episode begins at the last one
        if end is not None and end[1].get("event") == "end" and end[1].get("index") == ev.get("index"):
            segs.append({"t0": t, "t1": end[0], "start": ev, "success": bool(end[1].get("success", False))})
        else:
            segs.append({"t0": t, "t1": end[0] if end else None, "start": ev, "success": False, "partial": True})
    if not segs and msgs["command"]:
        segs.append({"t0": msgs["command"][0][0], "t1": msgs["command"][-1][0], "start": {}, "success": False})
    return segs


def bag_to_episodes(msgs: dict, env, cfg: DeployConfig, *, target=None, source: str | None = None,
                    task_target=None) -> list:
    """Episodes (robot_rl.data.Episode) from the messages of read_bag."""
    from robot_rl.data.episode_store import Episode

    if not msgs["state"]:
        raise BagImportError(f"the bag has no sensor_msgs/JointState on {cfg.topics.joint_states}")
    if not msgs["command"]:
        raise BagImportError(
            f"the bag has no commands on {cfg.topics.position_commands} (Float64MultiArray) or "
            f"{cfg.topics.trajectory_commands} (JointTrajectory)"
        )
    om = ObservationModel(env, cfg.joints)
    space = env.action_space
    dt_ns = int(round(1e9 / env.control_hz))
    joints = list(cfg.joints)
    index = {j: i for i, j in enumerate(joints)}

    st_t, st_q, st_qd = [], [], []
    for t, m in msgs["state"]:
        names = list(m.name)
        if sorted(names) != sorted(joints) or len(m.position) != len(names):
            continue
        order = [names.index(j) for j in joints]
        q = np.asarray(m.position)[order]
        qd = np.asarray(m.velocity)[order] if len(m.velocity) == len(names) else np.zeros(len(joints))
        if np.isfinite(q).all() and np.isfinite(qd).all():
            st_t.append(t), st_q.append(q), st_qd.append(qd)
    if not st_t:
        raise BagImportError(f"no joint state on {cfg.topics.joint_states} names exactly the joints {joints}")
    st_t = np.asarray(st_t)
    cmd_t, cmd_q = [], []
    for t, m in msgs["command"]:
        if isinstance(m, M.JointTrajectory):
            if not m.points or sorted(m.joint_names) != sorted(joints):
                continue
            q = np.asarray(m.points[-1].positions)[[list(m.joint_names).index(j) for j in joints]]
        else:
            q = np.asarray(m.data)
        if q.shape == (len(joints),) and np.isfinite(q).all():
            cmd_t.append(t), cmd_q.append(q)
    cmd_t = np.asarray(cmd_t)
    obj_t = np.asarray([t for t, _ in msgs["object"]])
    obj = [np.concatenate([[m.pose.position.x, m.pose.position.y, m.pose.position.z],
                           ros_quat_to_mujoco(m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z,
                                              m.pose.orientation.w)]) for _, m in msgs["object"]]
    tele_t = np.asarray([t for t, _ in msgs["teleop"]])
    needs_object = "object" in env.obs_dims
    timeout_ns = int(cfg.teleop_timeout_s * 1e9)
    rob = env.task.robot
    arm = np.array([index[j] for j in rob.arm_joints])
    fingers = np.array([index[j] for j in rob.gripper.joints])

    episodes = []
    for seg in _segments(msgs):
        tgt = seg["start"].get("target", target if target is not None else task_target)
        if tgt is None:
            raise BagImportError("an episode has no task target: the bag's episode start events carry none; pass --target")
        tgt = np.asarray(tgt, dtype=np.float64)
        t_begin = max(seg["t0"], int(st_t[0]))
        t_end = seg["t1"] if seg["t1"] is not None else int(max(st_t[-1], cmd_t[-1]))
        steps: dict[str, list] = {"action": [], "intervention": []}
        obs_rows: list[dict] = []
        om.actions.reset()  # with env.action_history, obs["prev_actions"]: this episode's actions so far
        k = 0
        while t_begin + (k + 1) * dt_ns <= t_end:
            tk = t_begin + k * dt_ns
            k += 1
            i = _latest(st_t, tk)
            c = _latest(cmd_t, tk + dt_ns)
            if i < 0 or c < 0 or cmd_t[c] < seg["t0"]:
                continue
            pose = None
            if needs_object:
                j = _latest(obj_t, tk)
                if j < 0:
                    continue
                pose = obj[j]
            phys = om.phys(st_q[i], st_qd[i], pose)
            obs = om.observe(phys, tgt)
            q_cmd = cmd_q[c]
            grip = rob.gripper.grip(np, q_cmd[fingers].mean())
            if space.kind == "joint_pos":
                a = space.joint_pos_action(np, np.append(q_cmd[arm], q_cmd[fingers].mean()))  # its grip: `grip`
            else:
                ee = env.task.field(obs, "proprio", "ee_pos")[0].astype(np.float64)
                ee_cmd = om.ee_pos(q_cmd)
                parts = [(ee_cmd - ee) / env.action_space.max_ee_delta]
                if space.use_yaw:
                    cos_sin = env.task.field(obs, "proprio", "ee_yaw")[0]
                    yaw = np.arctan2(cos_sin[1], cos_sin[0])
                    yaw_cmd = om.ee_yaw(q_cmd)
                    parts.append([kin.wrap_angle(np, yaw_cmd - yaw) / env.action_space.max_yaw_delta])
                a = np.concatenate([*parts, [grip]])
            steps["action"].append(np.clip(a, -1.0, 1.0).astype(np.float32))
            om.actions.push(steps["action"][-1][None])
            lo_i = np.searchsorted(tele_t, tk - timeout_ns, side="right")
            hi_i = np.searchsorted(tele_t, tk + dt_ns, side="right")
            steps["intervention"].append(bool(hi_i > lo_i))
            obs_rows.append(obs)
        if not obs_rows:
            continue
        n = len(obs_rows)
        data = {f"obs/{key}": np.concatenate([o[key] for o in obs_rows]) for key in obs_rows[0]}
        data["action"] = np.stack(steps["action"])
        data["intervention"] = np.asarray(steps["intervention"], dtype=bool)
        last = np.arange(n) == n - 1
        data["success"] = last & seg["success"]
        data["terminated"] = data["success"].copy()
        data["truncated"] = last & (not seg["success"])
        data["reward"] = np.zeros(n, np.float32)
        data["progress"] = np.zeros(n, np.float32)
        inter = data["intervention"]
        src = source or ("teleop" if inter.all() else "intervention" if inter.any() else "policy")
        meta = {"imported_from": "rosbag2", "start_event": seg["start"]}
        if seg.get("partial"):
            meta["partial"] = True
        episodes.append(Episode(steps=data, task=env.task_name, source=src, success=seg["success"],
                                instruction=env.instructions()[0], seed=int(seg["start"].get("seed", -1)), metadata=meta))
    return episodes
