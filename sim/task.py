"""The Task interface: one definition, run by both backends.

A task is pure array functions of the physics state, written against an array namespace `xp` so the
same code runs batched under numpy (MuJoCo C backend, arrays [N, ...]) and per env under jax.numpy
(MJX backend, inside vmap). Every function indexes with `[..., k]`, never with a leading batch axis.

Physics state is read only through `Phys` (qpos, qvel, sensordata, mocap_pos); robot quantities come from
frame sensors defined in robot.py, evaluated at the same state as qpos (after a step's last integration).
`target` is a per-episode task vector (goal, hole pose, ...) sampled at reset; `params` are the per-episode
domain-randomization draws (see randomization.py). Two host-side (numpy) functions of `target` describe an
episode beyond physics: `instruction` (its words; e.g. which cube to lift) and `episode_colors` (the rgba of
geoms the episode colours, for the rendering models).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import mujoco
import numpy as np

from robot_rl.sim import kinematics as kin
from robot_rl.sim import robot


# reset uniforms 0..6 are the arm's (its joints' noise); a task's own start at index 7. An arm of more joints takes
# the extra ones past the task's (Task.__init__ adds them).
ARM_UNIFORMS = 7


class Phys(NamedTuple):
    """The physics state a task may read. Shapes [..., nq], [..., nv], [..., nsensordata], [..., nmocap, 3]."""

    qpos: Any
    qvel: Any
    sensordata: Any
    mocap_pos: Any


# Sensor types that forward kinematics alone determines. Both backends recompute sensors after a control step's
# last physics step with a kinematics pass only (mj_step's own sensordata is one physics step behind qpos).
KINEMATIC_SENSORS = frozenset(
    int(getattr(mujoco.mjtSensor, f"mjSENS_FRAME{k}")) for k in ("POS", "QUAT", "XAXIS", "YAXIS", "ZAXIS")
)


class Layout:
    """Static indices into the compiled model (sensor slices, joint addresses), shared by both backends."""

    def __init__(self, model: mujoco.MjModel, task_robot: robot.Robot):
        self.sensors: dict[str, slice] = {}
        other = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i) for i in range(model.nsensor)
                 if int(model.sensor_type[i]) not in KINEMATIC_SENSORS]
        if other:
            raise ValueError(f"sensor(s) {other} are not frame sensors (framepos/framequat/frame[xyz]axis); "
                             "task observations read only sensors that forward kinematics determines")
        for i in range(model.nsensor):
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_SENSOR, i)
            adr, dim = int(model.sensor_adr[i]), int(model.sensor_dim[i])
            self.sensors[name] = slice(adr, adr + dim)
        robot = task_robot
        self.arm_qpos = np.array([model.jnt_qposadr[model.joint(j).id] for j in robot.arm_joints])
        self.arm_dof = np.array([model.jnt_dofadr[model.joint(j).id] for j in robot.arm_joints])
        self.finger_qpos = np.array([model.jnt_qposadr[model.joint(j).id] for j in robot.gripper.joints])
        # the robot's joints come first in the scene; its qpos block [robot_nq] is assembled from the arm's, the
        # gripper's and its other joints' (a linkage's) model defaults by one static gather (Task.arm_reset_qpos)
        root = model.body_rootid[model.jnt_bodyid[model.joint(robot.arm_joints[0]).id]]
        own = [j for j in range(model.njnt) if model.body_rootid[model.jnt_bodyid[j]] == root]
        self.robot_nq = len(own)  # the qpos of every joint in the robot's body tree (a linkage's too)
        if sorted(model.jnt_qposadr[own]) != list(range(self.robot_nq)) or \
                not np.isin(model.jnt_type[own], [int(mujoco.mjtJoint.mjJNT_SLIDE), int(mujoco.mjtJoint.mjJNT_HINGE)]).all():
            raise ValueError("the robot's joints must be hinges or slides that come first in the scene's qpos")
        free = np.setdiff1d(np.arange(self.robot_nq), np.concatenate([self.arm_qpos, self.finger_qpos]))
        self.robot_qpos_rest = np.asarray(model.qpos0[free], dtype=np.float64)  # the other joints' defaults
        self.robot_qpos_order = np.argsort(np.concatenate([self.arm_qpos, self.finger_qpos, free]))
        # Gather indices [n_arm, 3] of joint anchors / axes in sensordata: one fancy index instead of 2 n slices.
        self.anchor_idx = np.array([np.arange(self.sensors[f"anchor_{j}"].start, self.sensors[f"anchor_{j}"].stop)
                                    for j in robot.arm_joints])
        self.axis_idx = np.array([np.arange(self.sensors[f"axis_{j}"].start, self.sensors[f"axis_{j}"].stop)
                                  for j in robot.arm_joints])
        # [3, 3] gather of the grip site's x, y, z axes: the current ee frame (rows = axes) in one index.
        self.ee_frame_idx = np.array([np.arange(self.sensors[f"ee_{a}axis"].start, self.sensors[f"ee_{a}axis"].stop)
                                      for a in "xyz"])
        self.nq, self.nv, self.nu, self.nmocap = model.nq, model.nv, model.nu, model.nmocap
        self.nsensordata = model.nsensordata

    def sensor(self, phys: Phys, name: str):
        return phys.sensordata[..., self.sensors[name]]

    def joint_anchors_axes(self, xp, phys: Phys):
        return phys.sensordata[..., self.anchor_idx], phys.sensordata[..., self.axis_idx]

    def ee_frame(self, phys: Phys):
        """The grip site's frame [..., 3, 3], rows = its x, y, z axes in world coordinates."""
        return phys.sensordata[..., self.ee_frame_idx]


@dataclasses.dataclass
class TaskConfig:
    """Numbers every task has. Task files subclass this and list their own with comments."""

    episode_steps: int = 100  # control steps per episode (time limit)
    arm_qpos_noise: float = 0.05  # rad, uniform +- noise on each arm joint at reset
    object_x: tuple[float, float] = (0.40, 0.55)  # m, range of the object's reset x
    object_y: tuple[float, float] = (-0.15, 0.15)  # m, range of the object's reset y
    object_yaw: tuple[float, float] = (-0.5, 0.5)  # rad, range of the object's reset yaw
    use_yaw: bool = False  # ee_delta actions carry a yaw command (5-D instead of 4-D)

    def validate(self, name: str) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
                if v[0] > v[1]:
                    raise ValueError(f"task {name}: {f.name}={list(v)} has min > max; give [min, max] with min <= max")
        if self.episode_steps < 1:
            raise ValueError(f"task {name}: episode_steps={self.episode_steps} must be >= 1")
        if self.arm_qpos_noise < 0:
            raise ValueError(f"task {name}: arm_qpos_noise={self.arm_qpos_noise} must be >= 0")


def fields_of(sizes) -> dict[str, slice]:
    """{field: column slice} of a vector observation made of the fields `sizes` ((name, columns), in order)."""
    out, at = {}, 0
    for name, n in sizes:
        out[name] = slice(at, at + int(n))
        at += int(n)
    return out


def proprio_fields(n_arm: int) -> dict[str, slice]:
    """obs["proprio"]'s fields for an arm of n_arm joints (Task.proprio)."""
    return fields_of((("arm_q", n_arm), ("arm_qd", n_arm), ("gripper_width", 1), ("ee_pos", 3), ("ee_yaw", 2)))


def held(dist, width, half):
    """The pads' grasp test of a cube of half edge `half`: its centre within 0.6 half + 1 cm of the grip site
    (`dist`) and the fingers closed on a cube-sized gap (`width`); works on numpy and JAX arrays alike."""
    return (dist < 0.6 * half + 0.01) & (width < 2.0 * half * 1.42 + 0.002) & (width > 2.0 * half - 0.012)


def lerp(u, lo_hi):
    """Map uniforms u in [0,1) onto [lo, hi)."""
    return lo_hi[0] + u * (lo_hi[1] - lo_hi[0])


class Task:
    """Base class: robot model glue, proprioception and the reset of the arm. Subclasses add objects."""

    name: str = ""
    config_cls: type[TaskConfig] = TaskConfig
    target_dim: int = 3
    object_body: str = "object"  # free body that domain randomization scales (mass)
    object_geoms: tuple[str, ...] = ("object",)  # geoms whose size / pair friction are randomized
    size_randomizable: bool = True
    n_reset_uniforms: int = 16  # uniforms per reset: the arm's noise takes the first ARM_UNIFORMS (arm_reset_qpos)
    default_instruction: str = ""
    visual_bodies: tuple[str, ...] = ()  # other bodies whose colours visual randomization jitters (markers)
    colored_geoms: tuple[str, ...] = ()  # geoms whose rgba `episode_colors` sets per episode
    # obs["object"]'s fields in order: (name, columns); Task.obs_fields names them for experts and tests
    object_fields: tuple[tuple[str, int], ...] = ()
    # observation fields ("key.field", or columns "key[i:j]") that describe the task's state, not the arm's: where the object is relative to
    # the gripper and the goal, how open the gripper is. The reward model's labels compare failed states with
    # successful ones in these columns (robot_rl/reward/episodes.py); () = every vector observation
    progress_features: tuple[str, ...] = ()
    # Training settings the task needs, which every command applies where its command line does not set the key
    # (robot_rl/cli/common.py apply_recommended): {"bc": robot-rl-train-bc keys, "policy": the BC policy's keys,
    # "rl": robot-rl-train-residual's rl.* keys}. {}: the commands' own defaults
    recommended: dict = {}

    @property
    def object_bodies(self) -> tuple[str, ...]:
        """The free bodies that mass randomization scales, one per object."""
        return (self.object_body,)

    def __init__(self, config: TaskConfig | None = None, robot_name: str = "primitive"):
        self.cfg = config if config is not None else self.config_cls()
        self.cfg.validate(self.name)
        self.robot = robot.get_robot(robot_name)  # the arm the scene is built with (EnvConfig.robot)
        self.n_reset_uniforms = type(self).n_reset_uniforms + max(0, self.robot.n_arm - ARM_UNIFORMS)
        self.layout: Layout | None = None

    # ---- model -----------------------------------------------------------------------------------
    def objects_xml(self) -> str:
        raise NotImplementedError

    def sensors_xml(self) -> str:
        return ""

    def pairs_xml(self) -> str:
        return ""

    def model_xml(self, timestep: float, solver_iterations: int = 4, ls_iterations: int = 8) -> str:
        return robot.build_scene_xml(
            objects_xml=self.objects_xml(),
            sensors_xml=self.sensors_xml(),
            pairs_xml=self.pairs_xml() + robot.table_pairs_xml(),
            timestep=timestep,
            solver_iterations=solver_iterations,
            ls_iterations=ls_iterations,
            robot=self.robot,
        )

    def bind(self, model: mujoco.MjModel) -> None:
        """Read static indices and nominal sizes from the compiled model."""
        self.layout = Layout(model, self.robot)
        self.obj_qpos = int(model.jnt_qposadr[model.body(self.object_body).jntadr[0]])
        self.obj_dof = int(model.jnt_dofadr[model.body(self.object_body).jntadr[0]])
        self.obj_half = np.array(model.geom_size[model.geom(self.object_geoms[0]).id], dtype=np.float64)

    # ---- shared robot parts ------------------------------------------------------------------------
    def arm_reset_qpos(self, xp, u):
        """The robot's qpos at reset [..., robot_nq] from the reset uniforms u [..., n_reset_uniforms]: the home
        posture with noise on each arm joint (uniforms 0-6, then the last ones for arms of more than 7 joints), the
        gripper open, other joints (a linkage's) at the model's defaults."""
        n, lay, g = self.robot.n_arm, self.layout, self.robot.gripper
        ua = u[..., :n] if n <= ARM_UNIFORMS else xp.concatenate([u[..., :ARM_UNIFORMS], u[..., -(n - ARM_UNIFORMS):]],
                                                                  axis=-1)
        arm = xp.asarray(self.robot.home_qpos, dtype=u.dtype) + self.cfg.arm_qpos_noise * (2.0 * ua - 1.0)
        batch = u.shape[:-1]
        fingers = xp.full(batch + (len(g.joints),), g.open, dtype=u.dtype)
        rest = xp.broadcast_to(xp.asarray(lay.robot_qpos_rest, dtype=u.dtype), batch + lay.robot_qpos_rest.shape)
        return xp.concatenate([arm, fingers, rest], axis=-1)[..., lay.robot_qpos_order]

    def ee(self, phys: Phys):
        return self.layout.sensor(phys, "ee_pos")

    def gripper_width(self, phys: Phys):
        """Distance between the finger pads' inner faces (m)."""
        g = self.robot.gripper
        if g.pad_thickness is not None:
            gap = self.layout.sensor(phys, "left_pad_pos") - self.layout.sensor(phys, "right_pad_pos")
            return (gap ** 2).sum(axis=-1) ** 0.5 - g.pad_thickness
        q = phys.qpos[..., self.layout.finger_qpos]
        return q.sum(axis=-1) + g.pad_gap

    def object_pos(self, phys: Phys):
        return phys.qpos[..., self.obj_qpos : self.obj_qpos + 3]

    def object_quat(self, phys: Phys):
        return phys.qpos[..., self.obj_qpos + 3 : self.obj_qpos + 7]

    def proprio(self, xp, phys: Phys):
        """proprio [..., 2 n_arm + 6]: arm qpos (n_arm), arm qvel (n_arm), gripper width (1), ee pos (3), cos/sin ee
        yaw (2): its fields, PROPRIO_FIELDS."""
        lay = self.layout
        yaw = kin.gripper_yaw(xp, lay.sensor(phys, "ee_xaxis"))
        return xp.concatenate(
            [
                phys.qpos[..., lay.arm_qpos],
                phys.qvel[..., lay.arm_dof],
                self.gripper_width(phys)[..., None],
                self.ee(phys),
                xp.cos(yaw)[..., None],
                xp.sin(yaw)[..., None],
            ],
            axis=-1,
        )

    def grasped(self, xp, phys: Phys, params):
        """Object held between the pads: near the grip site and the fingers closed on it."""
        return self.grasped_at(xp, phys, params, self.object_pos(phys))

    def grasped_at(self, xp, phys: Phys, params, pos):
        """A cube of the object's size centred at `pos` [..., 3] is held between the pads."""
        dist = xp.sqrt(xp.sum((pos - self.ee(phys)) ** 2, axis=-1))
        return held(dist, self.gripper_width(phys), self.obj_half[1] * params["size"])

    # ---- the task's own functions (subclasses) -----------------------------------------------------
    def sample_reset(self, xp, u, params):
        """(qpos [..., nq], mocap_pos [..., nmocap, 3], target [..., target_dim]) from uniforms u."""
        raise NotImplementedError

    def observe(self, xp, phys: Phys, target, params) -> dict:
        raise NotImplementedError

    def evaluate(self, xp, phys: Phys, target, params):
        """(reward, success, progress) for the current state, computed together since they share terms."""
        raise NotImplementedError

    def reward(self, xp, phys: Phys, target, params):
        """Dense shaped reward in [0, 1]."""
        return self.evaluate(xp, phys, target, params)[0]

    def success(self, xp, phys: Phys, target, params):
        """Sparse success flag (bool)."""
        return self.evaluate(xp, phys, target, params)[1]

    def progress(self, xp, phys: Phys, target, params):
        """Ground-truth progress in [0, 1], for evaluating learned reward models only."""
        return self.evaluate(xp, phys, target, params)[2]

    def instructions(self) -> list[str]:
        """Every instruction the task gives (paraphrases of its goal)."""
        raise NotImplementedError

    def instruction(self, target, u: float) -> str:
        """The instruction of an episode with task vector `target` [target_dim] (numpy), from a uniform u in [0, 1).

        Single-goal tasks pick one of their paraphrases; a task whose goal depends on the episode names it."""
        options = self.instructions()
        return options[min(int(u * len(options)), len(options) - 1)]

    def goal(self, target) -> str | None:
        """Which of the task's goals an episode with task vector `target` (numpy) pursues, for per-goal success
        rates (robot-rl-eval's `by_goal`); None for single-goal tasks."""
        return None

    def episode_colors(self, target) -> dict:
        """{geom name: rgba [4]} an episode with task vector `target` (numpy) gives its `colored_geoms`."""
        return {}

    def obs_fields(self) -> dict[str, dict[str, slice]]:
        """{observation key: {field: column slice}}: proprio's (the robot's arm sets its size) and the task's object
        fields. Code reads observations by these names (`field`), never by column number."""
        out = {"proprio": proprio_fields(self.robot.n_arm)}
        if self.object_fields:
            out["object"] = fields_of(self.object_fields)
        return out

    def field(self, obs: dict, key: str, name: str):
        """Columns [..., n] of field `name` of obs[key] (a field of one column keeps its axis: [..., 1])."""
        return obs[key][..., self.obs_fields()[key][name]]

    def obs_dims(self) -> dict[str, int]:
        """Sizes of each observation key, by calling observe on a neutral state."""
        lay = self.layout
        phys = Phys(
            np.zeros(lay.nq), np.zeros(lay.nv), np.zeros(lay.nsensordata), np.zeros((lay.nmocap, 3))
        )
        obs = self.observe(np, phys, np.zeros(self.target_dim), neutral_params(np, ()))
        return {k: int(v.shape[-1]) for k, v in obs.items()}


def neutral_params(xp, shape) -> dict:
    """Domain-randomization draws that leave the nominal model unchanged."""
    ones = xp.ones(shape, dtype=xp.float32)
    return {
        "friction": ones, "mass": ones, "size": ones, "damping": ones, "armature": ones, "gain": ones,
        "latency": xp.zeros(shape, dtype=xp.int32),
    }
