"""Deployment configuration (the `deploy` Hydra group): one dataclass tree, validated before anything starts.

`deploy_config(mapping)` builds it from the `deploy` node (unknown keys are named), checks every value,
and `check_against_model(cfg, model_joints)` refuses joint names the robot model does not have and
command joints without limits, naming them.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from robot_rl.real.transport import TRANSPORTS, check_topic_name
from robot_rl.common.config import ConfigError, from_mapping
from robot_rl.sim.robot import ROBOTS, Robot

COMMAND_TYPES = ("position_array", "joint_trajectory")  # std_msgs/Float64MultiArray | trajectory_msgs/JointTrajectory
BLENDING_MODES = ("none", "temporal_ensemble", "crossfade")
INTERPOLATIONS = ("hold", "linear")
WORKERS = ("process", "thread")


class DeployConfigError(ConfigError):
    """A deployment config value is invalid; the message names the key and the fix."""


@dataclasses.dataclass
class JointLimit:
    lower: float  # rad (m for the fingers): commands never leave [lower, upper]
    upper: float
    velocity: float  # rad/s (m/s): largest change of the command per second (per tick: velocity / rate_hz)
    max_step: float  # rad (m): largest gap between the command and the measured position
    # rad/s^2 (m/s^2): largest growth of the command's speed per second (None: not limited). Slowing down is never
    # limited (a stop is not delayed, a target is not overshot). Policies that step and stop every control step
    # (interpolation=hold) move much slower under it: set it where the robot needs it (real/safety.py)
    acceleration: float | None = None


@dataclasses.dataclass
class Topics:
    joint_states: str = "/joint_states"  # sensor_msgs/JointState in
    position_commands: str = "/forward_position_controller/commands"  # std_msgs/Float64MultiArray out
    trajectory_commands: str = "/joint_trajectory_controller/joint_trajectory"  # trajectory_msgs/JointTrajectory out
    estop: str = "/robot_rl/estop"  # std_msgs/Bool in (reliable, transient-local): true latches a stop
    reset: str = "/robot_rl/reset"  # std_msgs/String in: this run's reset token clears a latched stop
    teleop: str = "/robot_rl/teleop"  # std_msgs/Float64MultiArray in: a human's action (take-over)
    object_pose: str = "/robot_rl/object_pose"  # geometry_msgs/PoseStamped in: perception (task object)
    episode: str = "/robot_rl/episode"  # std_msgs/String in: JSON episode start/end events
    status: str = "/robot_rl/status"  # std_msgs/String out: JSON node status
    cameras: dict[str, str] = dataclasses.field(default_factory=dict)  # camera -> sensor_msgs/Image topic


@dataclasses.dataclass
class Watchdog:
    hold_after_s: float = 0.05  # joint states older than this: hold the last command, pause the policy
    stop_after_s: float = 0.5  # older than this: latched stop (needs a reset)
    object_timeout_s: float = 0.25  # object pose older than this: hold (perception is slower than joints)


@dataclasses.dataclass
class Blending:
    mode: str = "none"  # none | temporal_ensemble | crossfade
    ensemble_k: float = 0.01  # temporal_ensemble: weight exp(-k * i) of the i-th oldest prediction (ACT)
    crossfade_steps: int = 3  # crossfade: policy steps over which a new chunk takes over from the old one
    # Request the next chunk this many steps (plus the measured latency in steps) before the queue ends. 0: at the
    # step it ends, from that step's observation, as sim evaluation does; 1 plans every chunk from an observation a
    # step old (measured: lift BC 29/200 vs 46/200 in a lockstep emulation with common random numbers).
    lead_steps: int = 0


@dataclasses.dataclass
class Inference:
    worker: str = "process"  # process (no GIL shared with the control loop) | thread (tests)
    nice: int = 0  # process worker niceness (the real-time loop preempts it anyway; raise it without realtime_priority)
    realtime_priority: int = 40  # SCHED_FIFO priority of the process worker (0: off), below the loop's: a chunk
    # request is served at once
    torch_threads: int = 1  # intra-op threads of the worker's torch


@dataclasses.dataclass
class DdsSecurity:
    # DDS Security (OMG) for transport=dds: Cyclone's plugins admit only participants whose certificate identity_ca
    # signed and whose permissions allow the topic, and encrypt as the governance says. All six paths or none (off);
    # the files `ros2 security create_enclave` writes serve as they are. rclpy: SROS2 instead. docs/security.md
    identity_ca: str | None = None  # identity_ca.cert.pem: the CA that signs every participant's identity
    certificate: str | None = None  # cert.pem: this node's identity certificate (signed by identity_ca)
    private_key: str | None = None  # key.pem: its private key
    permissions_ca: str | None = None  # permissions_ca.cert.pem: the CA that signs governance and permissions
    governance: str | None = None  # governance.p7s: the domain's rules (authentication, encryption per topic)
    permissions: str | None = None  # permissions.p7s: what this node may publish and subscribe

    def paths(self) -> dict[str, str | None]:
        """{field: path or None} ('' counts as unset)."""
        return {f.name: getattr(self, f.name) or None for f in dataclasses.fields(self)}

    def files(self) -> dict[str, str] | None:
        """{field: path} when DDS Security is on, else None."""
        files = self.paths()
        return files if any(files.values()) else None


@dataclasses.dataclass
class DeployConfig:
    transport: str = "dds"  # dds (Cyclone DDS, no ROS needed) | rclpy (ROS 2 installed)
    domain_id: int = 0  # DDS domain (ROS_DOMAIN_ID)
    loopback: bool = True  # dds: pin Cyclone DDS to 127.0.0.1, no multicast (dry runs, CI)
    node_name: str = "robot_rl_deploy"
    rate_hz: float = 100.0  # control ticks per second; a whole multiple of the policy's control_hz
    realtime_priority: int = 50  # SCHED_FIFO priority of the loop thread (0: normal scheduling); see real/realtime.py
    phase_lock: bool = True  # shift ticks to just after joint-state arrivals when both run at the same rate
    phase_margin_s: float = 0.0005  # tick this long after the expected joint-state arrival
    command_type: str = "position_array"  # position_array | joint_trajectory
    trajectory_time_s: float = 0.01  # joint_trajectory: time_from_start of the single point
    # joint order on the wire (commands, state); null: the robot's (env.robot's description: its arm's, then its
    # gripper's joints)
    joints: list[str] | None = None
    # {joint: limits} over the robot's own (its description's deploy_limits file, configs/deploy/limits/<name>.yaml),
    # per joint and field: e.g. +deploy.limits.joint1.velocity=1.0; deploy/limits=<file> sets a whole file's
    limits: dict[str, JointLimit] = dataclasses.field(default_factory=dict)
    limits_file: str | None = None  # YAML {joint: {lower, upper, velocity, max_step[, acceleration]}} replacing `limits`
    workspace_low: tuple[float, float, float] = (0.2, -0.4, 0.0)  # m, end-effector bounds of commands
    workspace_high: tuple[float, float, float] = (0.8, 0.4, 0.5)
    interpolation: str = "hold"  # hold (the policy step's target, as sim) | linear (ramp over the step)
    # m: the IK of an ee_delta action starts from the last command sent, held within this distance (end effector) of
    # the measured pose (real/observation.py ik_anchor). Under k steps of command latency the arm then moves as sim's
    # latency model has it (each action runs on from where the earlier ones lead, at full speed) and a blocked arm's
    # command runs at most this far ahead. 0: from the measured pose (under latency the arm moves at 1/(k+1) speed)
    ik_lead_m: float = 0.04
    teleop_timeout_s: float = 0.2  # a human is in control while teleop messages are younger than this
    task_target: list[float] | None = None  # task goal vector when episode events carry none
    instruction: str = ""  # the language instruction for policies that read one (VLA); launch: instruction:=...
    status_hz: float = 10.0
    # s: with an e-stop publisher that sends its state periodically (a button bridge's heartbeat), no e-stop message
    # for this long latches a stop (the bridge died, the network split). null: off, the e-stop topic may stay silent
    estop_heartbeat_s: float | None = None
    # s: before its first command the node listens this long on the e-stop topic (less once an e-stop message has
    # arrived), so a node started while the e-stop is pressed hears the publisher's last value before it moves
    estop_listen_s: float = 0.5
    topics: Topics = dataclasses.field(default_factory=Topics)
    watchdog: Watchdog = dataclasses.field(default_factory=Watchdog)
    blending: Blending = dataclasses.field(default_factory=Blending)
    inference: Inference = dataclasses.field(default_factory=Inference)
    dds_security: DdsSecurity = dataclasses.field(default_factory=DdsSecurity)  # off unless all six files are set

    @property
    def dt(self) -> float:
        return 1.0 / self.rate_hz

    @property
    def command_topic(self) -> str:
        return self.topics.position_commands if self.command_type == "position_array" else self.topics.trajectory_commands


def _num(where: str, v, *, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise DeployConfigError(f"{where}={v!r} must be a finite number")
    if positive and v <= 0:
        raise DeployConfigError(f"{where}={v!r} must be > 0")
    if nonneg and v < 0:
        raise DeployConfigError(f"{where}={v!r} must be >= 0")
    return float(v)


def _choice(where: str, v, options) -> str:
    if v not in options:
        raise DeployConfigError(f"{where}={v!r} is not valid; choose one of: {', '.join(options)}")
    return v


def load_limits_file(path: str) -> dict:
    """The `limits` mapping of a limits YAML file (either {joint: {...}} or {limits: {joint: {...}}})."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise DeployConfigError(f"deploy.limits_file={path!r} does not exist; give the path of a limits YAML file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise DeployConfigError(f"deploy.limits_file={path!r} is not valid YAML ({e})") from None
    if isinstance(data, dict) and set(data) == {"limits"}:
        data = data["limits"]
    if not isinstance(data, dict):
        raise DeployConfigError(f"deploy.limits_file={path!r} must map joint names to {{lower, upper, velocity, max_step}}")
    return data


def robot_limits_file(robot: Robot) -> str:
    """The path of the robot's deploy limits: its description's deploy_limits, a name under configs/deploy/limits/
    or a YAML path of its own."""
    name = robot.deploy_limits
    if name.endswith((".yaml", ".yml")) or "/" in name:
        return name
    from importlib import resources

    return str(resources.files("robot_rl.configs") / "deploy" / "limits" / f"{name}.yaml")


def deploy_config(data: Any, robot: Robot | None = None) -> DeployConfig:
    """Validated DeployConfig from the `deploy` node (dict or OmegaConf) for `robot` (env.robot's description;
    None: the default robot): joints and limits the node does not set are the robot's."""
    from omegaconf import DictConfig, OmegaConf

    robot = robot if robot is not None else ROBOTS["primitive"]
    if not isinstance(data, DictConfig):
        data = OmegaConf.create(dict(data or {}))  # also turns nested OmegaConf nodes into plain values below
    data = OmegaConf.to_container(data, resolve=True)
    if data.get("joints") is None:
        data["joints"] = list(robot.joints)
    limits_file = data.get("limits_file")
    if limits_file in ("", None):
        data["limits_file"] = None
        merged = load_limits_file(robot_limits_file(robot))
        for joint, lim in (data.get("limits") or {}).items():
            own = merged.get(joint)
            merged[joint] = {**own, **lim} if isinstance(own, dict) and isinstance(lim, dict) else lim
        data["limits"] = merged
    else:
        data["limits"] = load_limits_file(str(limits_file))
    raw_limits = data.pop("limits", {}) or {}
    try:
        cfg = from_mapping(DeployConfig, data, "deploy")
    except ConfigError as e:  # unknown keys, wrong types: the deploy side's callers catch DeployConfigError
        raise DeployConfigError(str(e)) from None
    if not isinstance(raw_limits, dict):
        raise DeployConfigError("deploy.limits must map joint names to {lower, upper, velocity, max_step}")
    limits = {}
    for name, lim in raw_limits.items():
        where = f"deploy.limits.{name}"
        if not isinstance(lim, dict):
            raise DeployConfigError(f"{where} must be a mapping {{lower, upper, velocity, max_step}}")
        keys = {f.name for f in dataclasses.fields(JointLimit)}
        required = {f.name for f in dataclasses.fields(JointLimit) if f.default is dataclasses.MISSING}
        if not required <= set(lim) <= keys:
            missing, extra = sorted(required - set(lim)), sorted(set(lim) - keys)
            raise DeployConfigError(
                f"{where} must have {sorted(required)} (and optionally {sorted(keys - required)})"
                + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else "")
            )
        lo, hi = _num(f"{where}.lower", lim["lower"]), _num(f"{where}.upper", lim["upper"])
        if lo >= hi:
            raise DeployConfigError(f"{where}: lower={lo} must be below upper={hi}")
        acc = lim.get("acceleration")
        limits[str(name)] = JointLimit(lo, hi, _num(f"{where}.velocity", lim["velocity"], positive=True),
                                       _num(f"{where}.max_step", lim["max_step"], positive=True),
                                       None if acc is None else _num(f"{where}.acceleration", acc, positive=True))
    cfg.limits = limits
    validate(cfg)
    return cfg


def validate(cfg: DeployConfig) -> None:
    _choice("deploy.transport", cfg.transport, TRANSPORTS)
    _choice("deploy.command_type", cfg.command_type, COMMAND_TYPES)
    _choice("deploy.interpolation", cfg.interpolation, INTERPOLATIONS)
    _choice("deploy.blending.mode", cfg.blending.mode, BLENDING_MODES)
    _choice("deploy.inference.worker", cfg.inference.worker, WORKERS)
    if not (isinstance(cfg.domain_id, int) and 0 <= cfg.domain_id <= 232):
        raise DeployConfigError(f"deploy.domain_id={cfg.domain_id!r} must be a whole number in [0, 232]")
    for name in ("loopback", "phase_lock"):
        if not isinstance(getattr(cfg, name), bool):
            raise DeployConfigError(f"deploy.{name}={getattr(cfg, name)!r} must be true or false")
    _num("deploy.rate_hz", cfg.rate_hz, positive=True)
    _num("deploy.ik_lead_m", cfg.ik_lead_m, nonneg=True)
    if not (isinstance(cfg.realtime_priority, int) and not isinstance(cfg.realtime_priority, bool)
            and 0 <= cfg.realtime_priority <= 99):
        raise DeployConfigError(f"deploy.realtime_priority={cfg.realtime_priority!r} must be a whole number in [0, 99] (0: off)")
    _num("deploy.phase_margin_s", cfg.phase_margin_s, nonneg=True)
    if cfg.phase_margin_s >= cfg.dt / 2:
        raise DeployConfigError(f"deploy.phase_margin_s={cfg.phase_margin_s} must be below half a tick ({cfg.dt / 2:.4f} s)")
    _num("deploy.trajectory_time_s", cfg.trajectory_time_s, positive=True)
    _num("deploy.teleop_timeout_s", cfg.teleop_timeout_s, positive=True)
    _num("deploy.status_hz", cfg.status_hz, positive=True)
    if cfg.estop_heartbeat_s is not None:
        _num("deploy.estop_heartbeat_s", cfg.estop_heartbeat_s, positive=True)
    _num("deploy.estop_listen_s", cfg.estop_listen_s, nonneg=True)
    w = cfg.watchdog
    _num("deploy.watchdog.hold_after_s", w.hold_after_s, positive=True)
    _num("deploy.watchdog.stop_after_s", w.stop_after_s, positive=True)
    _num("deploy.watchdog.object_timeout_s", w.object_timeout_s, positive=True)
    if w.stop_after_s <= w.hold_after_s:
        raise DeployConfigError(
            f"deploy.watchdog.stop_after_s={w.stop_after_s} must exceed hold_after_s={w.hold_after_s} (hold first, then stop)"
        )
    b = cfg.blending
    _num("deploy.blending.ensemble_k", b.ensemble_k, nonneg=True)
    for name in ("crossfade_steps", "lead_steps"):
        v = getattr(b, name)
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            raise DeployConfigError(f"deploy.blending.{name}={v!r} must be a whole number >= 0")
    if not (isinstance(cfg.inference.nice, int) and 0 <= cfg.inference.nice <= 19):
        raise DeployConfigError(f"deploy.inference.nice={cfg.inference.nice!r} must be a whole number in [0, 19]")
    rp = cfg.inference.realtime_priority
    if not (isinstance(rp, int) and not isinstance(rp, bool) and 0 <= rp <= 99):
        raise DeployConfigError(f"deploy.inference.realtime_priority={rp!r} must be a whole number in [0, 99] (0: off)")
    if rp and cfg.realtime_priority and rp >= cfg.realtime_priority:
        raise DeployConfigError(
            f"deploy.inference.realtime_priority={rp} must be below deploy.realtime_priority={cfg.realtime_priority}: "
            "the control loop must preempt inference"
        )
    if not (isinstance(cfg.inference.torch_threads, int) and cfg.inference.torch_threads >= 0):
        raise DeployConfigError(f"deploy.inference.torch_threads={cfg.inference.torch_threads!r} must be >= 0")
    for f in dataclasses.fields(Topics):
        if f.name != "cameras":
            check_topic_name_cfg(f"deploy.topics.{f.name}", getattr(cfg.topics, f.name))
    if not isinstance(cfg.topics.cameras, dict):
        raise DeployConfigError("deploy.topics.cameras must map camera names to sensor_msgs/Image topics")
    for cam, topic in cfg.topics.cameras.items():
        check_topic_name_cfg(f"deploy.topics.cameras.{cam}", topic)
    try:
        cfg.workspace_low = tuple(_num("deploy.workspace_low", float(v)) for v in cfg.workspace_low)
        cfg.workspace_high = tuple(_num("deploy.workspace_high", float(v)) for v in cfg.workspace_high)
    except (TypeError, ValueError) as e:
        raise DeployConfigError(f"deploy.workspace_low/high must be [x, y, z] numbers ({e})") from None
    if len(cfg.workspace_low) != 3 or len(cfg.workspace_high) != 3 or any(
        lo >= hi for lo, hi in zip(cfg.workspace_low, cfg.workspace_high)
    ):
        raise DeployConfigError(
            f"deploy.workspace_low={list(cfg.workspace_low)} must be 3 numbers each below workspace_high="
            f"{list(cfg.workspace_high)}"
        )
    if not isinstance(cfg.joints, list) or not cfg.joints or not all(isinstance(j, str) for j in cfg.joints):
        raise DeployConfigError("deploy.joints must list the robot's joint names in wire order")
    dup = sorted({j for j in cfg.joints if cfg.joints.count(j) > 1})
    if dup:
        raise DeployConfigError(f"deploy.joints names {dup} more than once")
    if cfg.task_target is not None:
        cfg.task_target = [_num("deploy.task_target", v) for v in cfg.task_target]
    check_dds_security(cfg)


def check_dds_security(cfg: DeployConfig) -> None:
    """All six deploy.dds_security files or none ('' counts as unset), each an existing file, on transport=dds."""
    files = cfg.dds_security.paths()
    missing = [k for k, v in files.items() if v is None]
    if len(missing) == len(files):
        return
    if missing:
        raise DeployConfigError(
            f"deploy.dds_security sets {[k for k in files if k not in missing]} but not {missing}; DDS Security needs "
            "all six files (docs/security.md)"
        )
    if cfg.transport != "dds":
        raise DeployConfigError(
            f"deploy.dds_security is for transport=dds, not {cfg.transport}; with rclpy use SROS2 (ROS_SECURITY_ENABLE, "
            "ROS_SECURITY_KEYSTORE: docs/security.md)"
        )
    for k, v in files.items():
        if not Path(v).is_file():
            raise DeployConfigError(f"deploy.dds_security.{k}={v!r} is not a file; give the path of the {k.replace('_', ' ')} file")


def check_topic_name_cfg(where: str, name) -> None:
    try:
        check_topic_name(name, where)
    except ValueError as e:
        raise DeployConfigError(str(e)) from None


def check_against_model(cfg: DeployConfig, model_joints: dict[str, tuple[float, float]]) -> None:
    """Refuse joints the model lacks and model joints without limits (or limits outside the model's range)."""
    unknown = [j for j in cfg.joints if j not in model_joints]
    unknown_lim = [j for j in cfg.limits if j not in model_joints]
    if unknown or unknown_lim:
        names = sorted(set(unknown) | set(unknown_lim))
        raise DeployConfigError(
            f"the deploy config names joint(s) {names} that the robot model does not have; model joints: "
            f"{list(model_joints)}. Fix deploy.joints / deploy.limits"
        )
    missing = [j for j in model_joints if j not in cfg.joints]
    if missing:
        raise DeployConfigError(
            f"deploy.joints lacks the model joint(s) {missing}; list every joint the policy commands: {list(model_joints)}"
        )
    no_limits = [j for j in cfg.joints if j not in cfg.limits]
    if no_limits:
        raise DeployConfigError(
            f"no limits for joint(s) {no_limits}; add deploy.limits.<joint>: {{lower, upper, velocity, max_step}} "
            "for each (or a limits_file that has them)"
        )
    for j in cfg.joints:
        lo, hi = model_joints[j]
        lim = cfg.limits[j]
        if lim.lower < lo - 1e-9 or lim.upper > hi + 1e-9:
            raise DeployConfigError(
                f"deploy.limits.{j}=[{lim.lower}, {lim.upper}] reaches outside the model's range [{lo}, {hi}]; "
                "limits may only narrow it"
            )
