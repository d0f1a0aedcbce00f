"""The control node's I/O: its topics in and out, and every message to the recorder.

In: joint states (checked by the safety layer; velocities by differencing when none are published), e-stop,
reset, teleop, object pose, episode events, camera images; each kept as the latest measured value with its
receipt time (time.monotonic()) and header stamp. Reset and episode events are handed to the node's callbacks
in arrival order. Out: commands (Float64MultiArray or JointTrajectory), the safe-stop command, status. The
latency from a state's header stamp (and its receipt) to the command computed from it is measured here, where
both ends are.
"""

from __future__ import annotations

import collections
import json
import time

import numpy as np

from real import episode_events
from real.config import DeployConfig
from real.messages import (
    Bool, Empty, Float64MultiArray, Image, JointState, JointTrajectory, JointTrajectoryPoint, PoseStamped, String,
    duration, float_array, stamp_ns,
)
from real.observation import ros_quat_to_mujoco
from real.qos import LATEST, RELIABLE, SENSOR_DATA


def bag_topics(cfg: DeployConfig) -> dict[str, type]:
    """Topic -> message type of everything the node records into a rosbag."""
    t = cfg.topics
    cmd = Float64MultiArray if cfg.command_type == "position_array" else JointTrajectory
    return {t.joint_states: JointState, t.estop: Bool, t.reset: Empty, t.teleop: Float64MultiArray,
            t.object_pose: PoseStamped, t.episode: String, cfg.command_topic: cmd, t.status: String}


class NodeIO:
    def __init__(self, cfg: DeployConfig, transport, spec, safety, recorder, counts: collections.Counter,
                 object_pose: np.ndarray | None):
        """object_pose: the pose to observe when the policy reads no object (None: wait for the topic)."""
        self.cfg, self.spec, self.safety, self.recorder, self.counts = cfg, spec, safety, recorder, counts
        t = cfg.topics
        self.sub_state = transport.subscribe(t.joint_states, JointState, SENSOR_DATA)
        self.sub_estop = transport.subscribe(t.estop, Bool, LATEST)
        self.sub_reset = transport.subscribe(t.reset, Empty, LATEST)
        self.sub_teleop = transport.subscribe(t.teleop, Float64MultiArray, RELIABLE)
        self.sub_object = transport.subscribe(t.object_pose, PoseStamped, SENSOR_DATA)
        self.sub_episode = transport.subscribe(t.episode, String, RELIABLE)
        self.sub_cameras = {c: transport.subscribe(topic, Image, SENSOR_DATA) for c, topic in t.cameras.items()}
        cmd_type = Float64MultiArray if cfg.command_type == "position_array" else JointTrajectory
        self.pub_cmd = transport.publisher(cfg.command_topic, cmd_type, RELIABLE)
        self.pub_status = transport.publisher(t.status, String, LATEST)
        self._bag_topic = {"joint_states": t.joint_states, "estop": t.estop, "reset": t.reset, "teleop": t.teleop,
                           "object_pose": t.object_pose, "episode": t.episode, "command": cfg.command_topic,
                           "status": t.status}
        # measured state
        self.q = self.qd = None
        self.state_t: float | None = None  # receipt, time.monotonic()
        self.state_stamp_ns = 0
        self._prev_state: tuple[int, np.ndarray] | None = None
        self.object_pose = object_pose
        self.object_t = None
        self.object_stamp_ns = 0
        self.images: dict[str, np.ndarray] = {}
        self.teleop_action = None
        self.teleop_t = -np.inf
        self.obs_to_cmd = collections.deque(maxlen=360_000)  # s, header stamp of the state -> command publish
        self.recv_to_cmd = collections.deque(maxlen=360_000)  # s, receipt of the state -> command publish

    # ---- in ----------------------------------------------------------------------------------------
    def drain(self, now: float, clock, on_reset, on_episode) -> None:
        """Take every message that arrived; `on_reset(now)`, `on_episode(event, t)` in arrival order."""
        wall = time.time_ns()
        for msg, t in self.sub_state.take():
            self.record("joint_states", msg, wall)
            ok = self.safety.check_joint_state(msg.name, msg.position, msg.velocity)
            if ok is None:
                continue
            q, qd = ok
            stamp = stamp_ns(msg.header.stamp)
            if qd is None:  # no velocities published: difference successive positions over their stamps
                prev = self._prev_state
                qd = (q - prev[1]) / ((stamp - prev[0]) * 1e-9) if prev is not None and stamp > prev[0] else np.zeros_like(q)
            self._prev_state = (stamp, q)
            self.q, self.qd, self.state_t, self.state_stamp_ns = q, qd, t, stamp
            clock.arrival(t)
        for msg, t in self.sub_estop.take():
            self.record("estop", msg, wall)
            self.safety.on_estop(msg.data)
        for msg, t in self.sub_reset.take():
            self.record("reset", msg, wall)
            on_reset(now)
        for msg, t in self.sub_teleop.take():
            self.record("teleop", msg, wall)
            a = self.safety.check_vector("teleop", msg.data, self.spec.action_dim)
            if a is not None:
                self.teleop_action, self.teleop_t = a, t
        for msg, t in self.sub_object.take():
            self.record("object_pose", msg, wall)
            p, o = msg.pose.position, msg.pose.orientation
            v = self.safety.check_vector("object_pose", [p.x, p.y, p.z, o.x, o.y, o.z, o.w], 7)
            if v is not None:
                self.object_pose, self.object_t = np.concatenate([v[:3], ros_quat_to_mujoco(*v[3:])]), t
                self.object_stamp_ns = stamp_ns(msg.header.stamp)
        for cam, sub in self.sub_cameras.items():
            for msg, t in sub.take():
                img = self._image(cam, msg)
                if img is not None:
                    self.images[cam] = img
        for msg, t in self.sub_episode.take():
            self.record("episode", msg, wall)
            try:
                ev = episode_events.parse(msg)
            except episode_events.EpisodeEventError as e:
                self.safety.reject("rejected_episode_event", str(e))
                continue
            on_episode(ev, t)

    def _image(self, cam: str, msg: Image) -> np.ndarray | None:
        if msg.encoding != "rgb8" or msg.step != 3 * msg.width or len(msg.data) != msg.step * msg.height:
            self.safety.reject("rejected_image", f"image must be rgb8 with step = 3 * width, got {msg.encoding}")
            return None
        shape = self.spec.image_shapes.get(f"images/{cam}")
        if shape is not None and tuple(shape) != (msg.height, msg.width, 3):
            self.safety.reject("rejected_image", f"camera {cam}: the policy reads {tuple(shape)} images, got "
                               f"{(msg.height, msg.width, 3)}")
            return None
        return np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)

    def teleop_live(self, now: float) -> bool:
        """Whether a human's teleop command is recent enough to act on."""
        return now - self.teleop_t <= self.cfg.teleop_timeout_s

    def object_stale(self, now: float) -> bool:
        return self.object_t is None or now - self.object_t > self.cfg.watchdog.object_timeout_s

    # ---- out ---------------------------------------------------------------------------------------
    def publish_command(self, q: np.ndarray, measure: bool) -> None:
        """Send joint targets q (wire order); `measure`: count the state -> command latency of this one."""
        if self.cfg.command_type == "position_array":
            msg = float_array(q)
        else:
            msg = JointTrajectory(joint_names=list(self.cfg.joints), points=[JointTrajectoryPoint(
                positions=[float(x) for x in q], time_from_start=duration(self.cfg.trajectory_time_s))])
        self.pub_cmd.publish(msg)
        wall = time.time_ns()
        if measure:
            self.obs_to_cmd.append((wall - self.state_stamp_ns) * 1e-9)
            self.recv_to_cmd.append(time.monotonic() - self.state_t)
        self.counts["commands"] += 1
        self.record("command", msg, wall)

    def publish_stop(self, hold: np.ndarray) -> None:
        """The safe-stop command: hold where the robot is."""
        if self.cfg.command_type == "joint_trajectory":
            # an empty trajectory makes joint_trajectory_controller stop and hold where it is
            self.pub_cmd.publish(JointTrajectory(joint_names=list(self.cfg.joints)))
        else:
            self.pub_cmd.publish(float_array(hold))

    def publish_status(self, status: dict, sent) -> None:
        """Send the status; `sent()` runs right after it went out (before it is recorded)."""
        msg = String(data=json.dumps(status))
        self.pub_status.publish(msg)
        sent()
        self.record("status", msg, time.time_ns())

    def record(self, what: str, msg, wall_ns: int) -> None:
        if self.recorder is not None:
            self.recorder.record(self._bag_topic[what], msg, wall_ns)
