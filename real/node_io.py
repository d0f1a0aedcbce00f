"""The control node's I/O: its topics in and out, and every message to the recorder.

In: joint states (checked by the safety layer; velocities by differencing when none are published), e-stop,
reset, teleop, object pose, episode events, camera images; each kept as the latest measured value with its
receipt time (time.monotonic()) and header stamp. Every input is validated before anything reads it: a malformed
message is dropped and counted as rejected_<topic>_<kind> (status, metrics), the first of each kind logged; every
message is counted per topic in `received`. Reset and episode events are handed to the node's callbacks in
arrival order.

E-stop: every sample is read (a deep transient-local reader, real/qos.py), so a press and a release that arrive
together still latch, and a node that starts while the e-stop is pressed hears the publisher's last value. A
writer whose QoS cannot match that reader (volatile or best effort: its presses would never arrive) latches a stop
that names the fix. Reset: a std_msgs/String carrying this run's token (real/reset_token.py); anything else is
refused, counted and logged once. The operator's local reset (robot-rl-deploy: SIGUSR1) needs no token. Resets are
handled before the e-stop samples of the same drain, so a press never loses to a reset that came with it.

Out: every command passes the safety filter here, at the moment it is sent (against the last command sent, over
the real time since), so no path (tick, late chunk, hold) sends an unfiltered one; the safe-stop command; status.
The latency from a state's header stamp (and its receipt) to the command computed from it is measured here, where
both ends are.
"""

from __future__ import annotations

import collections
import hmac
import json
import time

import numpy as np

from robot_rl.real import episode_events
from robot_rl.real.config import DeployConfig
from robot_rl.real.messages import (
    Bool, Float64MultiArray, Image, JointState, JointTrajectory, JointTrajectoryPoint, PoseStamped, String,
    duration, float_array, stamp_ns,
)
from robot_rl.real.observation import ros_quat_to_mujoco
from robot_rl.real.qos import ESTOP_READER, LATEST, RELIABLE, SENSOR_DATA


def bag_topics(cfg: DeployConfig) -> dict[str, type]:
    """Topic -> message type of everything the node records into a rosbag."""
    t = cfg.topics
    cmd = Float64MultiArray if cfg.command_type == "position_array" else JointTrajectory
    return {t.joint_states: JointState, t.estop: Bool, t.reset: String, t.teleop: Float64MultiArray,
            t.object_pose: PoseStamped, t.episode: String, cfg.command_topic: cmd, t.status: String}


class NodeIO:
    def __init__(self, cfg: DeployConfig, transport, spec, safety, recorder, counts: collections.Counter,
                 object_pose: np.ndarray | None, *, target_dim: int, reset_token: str):
        """object_pose: the pose to observe when the policy reads no object (None: wait for the topic); target_dim:
        length of an episode's task vector; reset_token: what a reset message must carry."""
        self.cfg, self.spec, self.safety, self.recorder, self.counts = cfg, spec, safety, recorder, counts
        self.target_dim = target_dim
        self._token = reset_token.encode()
        t = cfg.topics
        self.sub_state = transport.subscribe(t.joint_states, JointState, SENSOR_DATA)
        self.sub_estop = transport.subscribe(t.estop, Bool, ESTOP_READER)
        self.sub_reset = transport.subscribe(t.reset, String, RELIABLE)
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
        self.received: collections.Counter = collections.Counter()  # messages taken, per topic
        self.local_reset = False  # the operator's local reset, set from a signal handler (robot-rl-deploy)
        self._incompatible_estop = 0
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
            self.received["joint_states"] += 1
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
        if self.local_reset:
            self.local_reset = False
            self.counts["local_resets"] += 1
            on_reset(now)
        for msg, t in self.sub_reset.take():
            self.received["reset"] += 1
            ok = hmac.compare_digest(msg.data.strip().encode("utf-8", "replace"), self._token)
            self.record("reset", String(data="token accepted" if ok else "token refused"), wall)  # never the token
            if not ok:
                self.safety.reject("rejected_reset_token", "a reset without this run's token (printed by robot-rl-deploy "
                                   "at start-up, in <run dir>/reset_token) is refused")
                continue
            on_reset(now)
        incompatible = self.sub_estop.incompatible_writers()
        if incompatible > self._incompatible_estop:
            self._incompatible_estop = incompatible
            self.safety.latch(f"an e-stop publisher on {self.cfg.topics.estop} offers QoS the node cannot hear (its "
                              "presses would be lost): publish reliable + transient-local (ros2 topic pub "
                              "--qos-reliability reliable --qos-durability transient_local)")
        for msg, t in self.sub_estop.take():
            self.received["estop"] += 1
            self.record("estop", msg, wall)
            self.safety.on_estop(msg.data, t)
        for msg, t in self.sub_teleop.take():
            self.received["teleop"] += 1
            self.record("teleop", msg, wall)
            a = self.safety.check_vector("teleop", msg.data, self.spec.action_dim)
            if a is not None:
                self.teleop_action, self.teleop_t = a, t
        for msg, t in self.sub_object.take():
            self.received["object_pose"] += 1
            self.record("object_pose", msg, wall)
            p, o = msg.pose.position, msg.pose.orientation
            v = self.safety.check_vector("object_pose", [p.x, p.y, p.z, o.x, o.y, o.z, o.w], 7)
            if v is None:
                continue
            if abs(np.linalg.norm(v[3:]) - 1.0) > 0.1:
                self.safety.reject("rejected_object_pose_quaternion",
                                   f"object pose orientation has norm {np.linalg.norm(v[3:]):.3g}, expected a unit quaternion")
                continue
            self.object_pose, self.object_t = np.concatenate([v[:3], ros_quat_to_mujoco(*v[3:])]), t
            self.object_stamp_ns = stamp_ns(msg.header.stamp)
        for cam, sub in self.sub_cameras.items():
            for msg, t in sub.take():
                self.received[f"camera_{cam}"] += 1
                img = self._image(cam, msg)
                if img is not None:
                    self.images[cam] = img
        for msg, t in self.sub_episode.take():
            self.received["episode"] += 1
            self.record("episode", msg, wall)
            try:
                ev = episode_events.parse(msg, self.target_dim)
            except episode_events.EpisodeEventError as e:
                self.safety.reject(f"rejected_episode_event_{e.kind}", str(e))
                continue
            on_episode(ev, t)

    def _image(self, cam: str, msg: Image) -> np.ndarray | None:
        if msg.encoding != "rgb8":
            self.safety.reject("rejected_image_encoding", f"camera {cam}: image must be rgb8, got {msg.encoding[:20]!r}")
            return None
        if msg.height == 0 or msg.width == 0 or msg.step != 3 * msg.width or len(msg.data) != msg.step * msg.height:
            self.safety.reject("rejected_image_size", f"camera {cam}: image {msg.height}x{msg.width}, step {msg.step}, "
                               f"{len(msg.data)} bytes; expected step = 3 * width and step * height bytes")
            return None
        shape = self.spec.image_shapes.get(f"images/{cam}")
        if shape is not None and tuple(shape) != (msg.height, msg.width, 3):
            self.safety.reject("rejected_image_shape", f"camera {cam}: the policy reads {tuple(shape)} images, got "
                               f"{(msg.height, msg.width, 3)}")
            return None
        return np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)

    def teleop_live(self, now: float) -> bool:
        """Whether a human's teleop command is recent enough to act on."""
        return now - self.teleop_t <= self.cfg.teleop_timeout_s

    def object_stale(self, now: float) -> bool:
        return self.object_t is None or now - self.object_t > self.cfg.watchdog.object_timeout_s

    # ---- out ---------------------------------------------------------------------------------------
    def send(self, candidate: np.ndarray, measure: bool) -> None:
        """Filter joint targets [n] (wire order) against the last command sent, now, and send the result; `measure`:
        count the state -> command latency of this one."""
        self._publish(self.safety.filter(candidate, self.q, time.monotonic()), measure)

    def send_hold(self, measure: bool) -> None:
        """Send the last command again."""
        self._publish(self.safety.hold(time.monotonic()), measure)

    def _publish(self, q: np.ndarray, measure: bool) -> None:
        if self.cfg.command_type == "position_array":
            msg = float_array(q)
        else:
            msg = JointTrajectory(joint_names=list(self.cfg.joints), points=[JointTrajectoryPoint(
                positions=[float(x) for x in q], time_from_start=duration(self.cfg.trajectory_time_s))])
        self.pub_cmd.publish(msg)
        self.safety.sent(time.monotonic())
        wall = time.time_ns()
        if measure:
            self.obs_to_cmd.append((wall - self.state_stamp_ns) * 1e-9)
            self.recv_to_cmd.append(time.monotonic() - self.state_t)
        self.counts["commands"] += 1
        self.record("command", msg, wall)

    def send_stop(self) -> None:
        """The safe-stop command: hold where the robot is."""
        hold = self.safety.hold(time.monotonic())
        if self.cfg.command_type == "joint_trajectory":
            # an empty trajectory makes joint_trajectory_controller stop and hold where it is
            self.pub_cmd.publish(JointTrajectory(joint_names=list(self.cfg.joints)))
        else:
            self.pub_cmd.publish(float_array(hold))
        self.safety.sent(time.monotonic())

    def publish_status(self, status: dict, sent) -> None:
        """Send the status; `sent()` runs right after it went out (before it is recorded)."""
        msg = String(data=json.dumps(status))
        self.pub_status.publish(msg)
        sent()
        self.record("status", msg, time.time_ns())

    def record(self, what: str, msg, wall_ns: int) -> None:
        if self.recorder is not None:
            self.recorder.record(self._bag_topic[what], msg, wall_ns)
