"""Environment configuration: one dataclass tree, validated before any simulation starts."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

BACKENDS = ("mujoco", "mjx", "gymnasium")
ACTION_SPACES = ("ee_delta", "joint_pos")
IMAGE_QUALITIES = ("fast", "high")  # see sim.render


from robot_rl.common.config import ConfigError, from_mapping as _from_mapping
from robot_rl.sim.robot import ROBOTS


def _range(name: str, v, *, positive: bool = False, nonneg: bool = False) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in v)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={v!r} must be a [min, max] pair of numbers") from None
    if lo > hi:
        raise ConfigError(f"{name}=[{lo}, {hi}] has min > max; give [min, max] with min <= max")
    if positive and lo <= 0:
        raise ConfigError(f"{name}=[{lo}, {hi}] must be > 0 (it scales a physical quantity)")
    if nonneg and lo < 0:
        raise ConfigError(f"{name}=[{lo}, {hi}] must be >= 0")
    return lo, hi


@dataclasses.dataclass
class RandomizationConfig:
    """Per-episode domain randomization. Scales multiply the nominal model value; [1, 1] turns one off."""

    friction: tuple[float, float] = (1.0, 1.0)  # scale on sliding friction of the object's contacts
    object_mass: tuple[float, float] = (1.0, 1.0)  # scale on the object's mass (and inertia)
    object_size: tuple[float, float] = (1.0, 1.0)  # scale on the object's geometry (lift/push)
    joint_damping: tuple[float, float] = (1.0, 1.0)  # scale on arm joint damping
    armature: tuple[float, float] = (1.0, 1.0)  # scale on arm joint armature
    actuator_gain: tuple[float, float] = (1.0, 1.0)  # scale on arm position-servo stiffness kp
    obs_noise_std: float = 0.0  # std of Gaussian noise added to every observation entry
    action_latency: tuple[int, int] = (0, 0)  # control ticks an action is delayed, drawn per episode
    # Visual randomization (rendered cameras and videos only; physics and vector observations never see it).
    light: tuple[float, float] = (1.0, 1.0)  # scale on the diffuse intensity of the scene lights
    light_dir_jitter: float = 0.0  # deg, tilt of each light's direction, up to this about each axis
    color_jitter: float = 0.0  # offset in [-c, c] on each RGB channel of the table and of each object body
    camera_pos_jitter: float = 0.0  # m, offset in [-j, j] on each axis of each camera's position
    camera_rot_jitter: float = 0.0  # deg, rotation of each camera, up to this about each axis

    def validate(self) -> None:
        for name in ("friction", "object_mass", "object_size", "joint_damping", "armature", "actuator_gain", "light"):
            setattr(self, name, _range(f"randomization.{name}", getattr(self, name), positive=True))
        for name, hi in (("light_dir_jitter", 30.0), ("color_jitter", 1.0), ("camera_pos_jitter", 0.1),
                         ("camera_rot_jitter", 30.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0.0 <= v <= hi):
                raise ConfigError(f"randomization.{name}={v!r} must be a number in [0, {hi:g}] (0 turns it off)")
            setattr(self, name, float(v))
        lat = _range("randomization.action_latency", self.action_latency, nonneg=True)
        if any(x != int(x) for x in lat):
            raise ConfigError(f"randomization.action_latency={list(lat)} must be whole control ticks")
        self.action_latency = (int(lat[0]), int(lat[1]))
        if not (self.obs_noise_std >= 0 and math.isfinite(self.obs_noise_std)):
            raise ConfigError(f"randomization.obs_noise_std={self.obs_noise_std} must be a finite number >= 0")

    @property
    def max_latency(self) -> int:
        return self.action_latency[1]

    def overrides(self) -> dict[str, Any]:
        """The keys set away from their defaults (none: no randomization), e.g. {"action_latency": (0, 2)}."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if _norm(getattr(self, f.name)) != _norm(f.default)}


def _norm(v):
    return tuple(float(x) for x in v) if isinstance(v, (tuple, list)) else float(v)


@dataclasses.dataclass
class GymConfig:
    """env.backend=gymnasium: a gymnasium env of yours, N copies batched (sim/backends/gymnasium.py)."""

    id: str = ""  # its registered gymnasium id, e.g. MountainCarContinuous-v0 (the task name of stores and policies)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)  # keyword arguments of gymnasium.make
    modules: tuple[str, ...] = ()  # modules imported first, to register the id (e.g. [gymnasium_robotics])
    # our observation key -> the env's: a Dict space's key ("a/b" inside nested Dicts); {}: every Box of the space under
    # its own name, a flat Box as "state"; uint8 Boxes [H, W, 3] become camera images "images/<key>"
    obs: dict[str, str] = dataclasses.field(default_factory=dict)
    # where success is read: an info key ("" = is_success, else success, whichever the env sets), or "terminated"
    # (an episode that ends before its time limit succeeded)
    success: str = ""
    vectorization: str = "sync"  # gymnasium.make_vec's mode: sync (one process) | async (a process per env)
    instruction: str = ""  # the task in words, for policies that read one ("" = the id)


@dataclasses.dataclass
class EnvConfig:
    """Everything that defines a batched environment except the task's own numbers (task_config)."""

    task: str = "lift"
    backend: str = "mujoco"  # mujoco (MuJoCo C, CPU threads) | mjx (JAX, jit + vmap; GPUs)
    # the robot description (sim/robot.py ROBOTS): primitive (our Panda-like arm of capsules and boxes: faster) |
    # panda_menagerie (MuJoCo Menagerie's Franka Panda, meshes and all; `python -m robot_rl.sim.menagerie` installs
    # its files) | a robot an installed package registers (docs/own_robot.md)
    robot: str = "primitive"
    num_envs: int = 16
    control_hz: float = 20.0  # policy / action rate
    physics_dt: float = 0.005  # s per physics step; control_hz * physics_dt * substeps == 1
    action_space: str = "ee_delta"  # ee_delta | joint_pos
    max_ee_delta: float = 0.02  # m per control step for a full-scale ee_delta action
    max_yaw_delta: float = 0.15  # rad per control step for a full-scale yaw action
    ik_damping: float = 0.05  # damped-least-squares lambda
    ik_null_gain: float = 0.2  # pull toward the home posture in the Jacobian's null space
    workspace_low: tuple[float, float, float] = (0.25, -0.35, 0.005)  # m, clip of ee targets
    workspace_high: tuple[float, float, float] = (0.75, 0.35, 0.45)
    terminate_on_success: bool = True  # end the episode at the first success
    solver_iterations: int = 4
    ls_iterations: int = 8
    threads: int = 0  # MuJoCo C worker threads; 0 = one per core
    device: str = "cpu"  # MJX device: cpu | gpu | cuda | cuda:1 ...
    cameras: tuple[str, ...] = ()  # cameras rendered into obs["images/<camera>"], e.g. (front, wrist); () = none
    image_size: tuple[int, int] = (96, 96)  # (height, width) in pixels of those images
    image_quality: str = "fast"  # fast: no shadows, reflections or anti-aliasing (~10x cheaper on CPU GL) | high
    action_history: int = 0  # the last N commanded actions in the observation, obs["prev_actions"] [N * action_dim]
    # (oldest first, the neutral action before an episode's first steps, no observation noise): with action latency
    # the state lags the commands already sent, and a robot knows what it sent (the deploy node supplies the same)
    randomization: RandomizationConfig = dataclasses.field(default_factory=RandomizationConfig)
    task_config: dict[str, Any] = dataclasses.field(default_factory=dict)  # overrides of the task's defaults
    gym: GymConfig = dataclasses.field(default_factory=GymConfig)  # backend=gymnasium only

    @property
    def task_name(self) -> str:
        """What the env's episodes, policies and reward models are of: the task, or a gymnasium env's id."""
        return self.gym.id if self.backend == "gymnasium" else self.task

    @property
    def substeps(self) -> int:
        return int(round(1.0 / (self.control_hz * self.physics_dt)))

    def validate(self, task_names) -> None:
        if isinstance(self.gym, dict):
            self.gym = GymConfig(**self.gym)
        if isinstance(self.randomization, dict):
            self.randomization = RandomizationConfig(**self.randomization)
        if int(self.num_envs) != self.num_envs or self.num_envs < 1:
            raise ConfigError(f"num_envs={self.num_envs} must be a whole number >= 1")
        if not (self.control_hz > 0 and self.physics_dt > 0):
            raise ConfigError("control_hz and physics_dt must be > 0")
        if self.backend == "gymnasium":
            self._validate_gym()
            return
        if self.task not in task_names:
            raise ConfigError(f"unknown task {self.task!r}; valid tasks: {', '.join(sorted(task_names))}")
        if self.robot not in ROBOTS:
            raise ConfigError(f"unknown robot {self.robot!r}; valid robots: {', '.join(ROBOTS)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r}; valid backends: {', '.join(BACKENDS)}")
        if self.action_space not in ACTION_SPACES:
            raise ConfigError(
                f"unknown action_space {self.action_space!r}; valid action spaces: {', '.join(ACTION_SPACES)}"
            )
        n = 1.0 / (self.control_hz * self.physics_dt)
        if n < 1 - 1e-6 or abs(n - round(n)) > 1e-6:
            raise ConfigError(
                f"control_hz={self.control_hz} and physics_dt={self.physics_dt} give {n:.3f} physics steps per "
                "control step; choose them so 1 / (control_hz * physics_dt) is a whole number"
            )
        for name in ("max_ee_delta", "max_yaw_delta", "ik_damping"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0")
        if any(lo >= hi for lo, hi in zip(self.workspace_low, self.workspace_high)):
            raise ConfigError(f"workspace_low={list(self.workspace_low)} must be below workspace_high")
        if self.threads < 0:
            raise ConfigError(f"threads={self.threads} must be >= 0 (0 = one per core)")
        if isinstance(self.action_history, bool) or int(self.action_history) != self.action_history \
                or self.action_history < 0:
            raise ConfigError(f"action_history={self.action_history!r} must be a whole number >= 0 (the commanded "
                              "actions in the observation; 0: none)")
        self.action_history = int(self.action_history)
        if isinstance(self.cameras, str) or not all(isinstance(c, str) and c for c in self.cameras):
            raise ConfigError(f"cameras={self.cameras!r} must be a list of camera names, e.g. [front, wrist]")
        if len(set(self.cameras)) != len(self.cameras):
            raise ConfigError(f"cameras={list(self.cameras)} names a camera twice")
        self.cameras = tuple(self.cameras)
        size = tuple(self.image_size) if isinstance(self.image_size, (list, tuple)) else ()
        if len(size) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in size):
            raise ConfigError(f"image_size={self.image_size!r} must be [height, width], two whole numbers >= 1")
        self.image_size = size
        if self.image_quality not in IMAGE_QUALITIES:
            raise ConfigError(f"unknown image_quality {self.image_quality!r}; valid: {', '.join(IMAGE_QUALITIES)}")
        self.randomization.validate()

    def _validate_gym(self) -> None:
        g = self.gym
        if not isinstance(g.id, str) or not g.id:
            raise ConfigError("env.backend=gymnasium needs env.gym.id, a registered gymnasium id (e.g. "
                              "env.gym.id=MountainCarContinuous-v0)")
        if g.vectorization not in ("sync", "async"):
            raise ConfigError(f"env.gym.vectorization={g.vectorization!r}; valid: sync, async")
        if self.action_history or self.cameras or self.randomization.overrides():
            raise ConfigError("env.action_history, env.cameras and env.randomization are settings of our own tasks; "
                              "a gymnasium env brings its own (map its image keys with env.gym.obs)")
        g.modules = tuple(g.modules)


def from_mapping(node: Any) -> EnvConfig:
    """EnvConfig from a dict / OmegaConf `env` node (robot_rl.common.config.from_mapping: unknown keys named,
    types checked); EnvConfig.validate(task names) checks the values."""
    return _from_mapping(EnvConfig, node, "env")
