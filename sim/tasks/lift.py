"""lift: grasp a cube on the table and lift it above a height.

Observation keys:
  proprio [20]  arm qpos (7), arm qvel (7), gripper width (1), ee pos (3), cos/sin ee yaw (2)
  object  [11]  cube pos (3), cube quat wxyz (4), cube pos - ee pos (3), height still to go (1)
Success: the cube's centre is `lift_height` above its resting height.
Reward (dense, in [0, 1]): 0.25 reach + 0.25 grasp + 0.5 grasp * lift fraction; 1 on success.
Progress (ground truth, evaluation only): 0.3 reach + 0.2 grasp + 0.5 lift fraction; 1 on success.
"""

from __future__ import annotations

import dataclasses

from robot_rl.sim import kinematics as kin
from robot_rl.sim import robot
from robot_rl.sim.task import Task, TaskConfig, lerp


@dataclasses.dataclass
class LiftConfig(TaskConfig):
    episode_steps: int = 80  # control steps per episode (4 s at 20 Hz)
    cube_half: float = 0.02  # m, half edge of the cube
    cube_mass: float = 0.1  # kg
    lift_height: float = 0.10  # m the cube's centre must rise above its resting height
    object_x: tuple[float, float] = (0.40, 0.55)  # m, range of the cube's reset x
    object_y: tuple[float, float] = (-0.15, 0.15)  # m, range of the cube's reset y
    object_yaw: tuple[float, float] = (-0.6, 0.6)  # rad, range of the cube's reset yaw


def default_config() -> LiftConfig:
    return LiftConfig()


def reach_term(xp, dist):
    """Reach in (0, 1]: 1 - tanh(10 |cube - grip site|)."""
    return 1.0 - xp.tanh(10.0 * dist)


def progress_of(xp, success, reach, grasp, lift):
    """Ground-truth progress: 0.3 reach + 0.2 grasp + 0.5 lift fraction, 1 on success."""
    return xp.where(success, 1.0, 0.3 * reach + 0.2 * grasp + 0.5 * lift)


class LiftTask(Task):
    name = "lift"
    object_fields = (("pos", 3), ("quat", 4), ("minus_ee", 3), ("height_to_go", 1))  # the cube; minus_ee: cube - ee
    progress_features = ("object.minus_ee", "object.height_to_go", "proprio.gripper_width")
    config_cls = LiftConfig
    target_dim = 3

    def objects_xml(self) -> str:
        c = self.cfg
        return (
            f"<body name='object' pos='0.5 0 {c.cube_half}'><freejoint/>"
            f"<geom name='object' type='box' size='{c.cube_half} {c.cube_half} {c.cube_half}' "
            f"mass='{c.cube_mass}' class='object' rgba='0.85 0.2 0.2 1'/></body>"
        )

    def pairs_xml(self) -> str:
        return "<pair geom1='object' geom2='table' condim='3'/>" + robot.pad_pairs_xml("object")

    def sample_reset(self, xp, u, params):
        c = self.cfg
        arm = self.arm_reset_qpos(xp, u)
        half = self.obj_half[2] * params["size"]
        x, y = lerp(u[..., 7], c.object_x), lerp(u[..., 8], c.object_y)
        quat = kin.yaw_quat(xp, lerp(u[..., 9], c.object_yaw))
        pos = xp.stack([x, y, half], axis=-1)
        qpos = xp.concatenate([arm, pos, quat], axis=-1)
        target = xp.stack([x, y, half + c.lift_height], axis=-1)
        mocap = xp.zeros(u.shape[:-1] + (0, 3), dtype=u.dtype)
        return qpos, mocap, target

    def _terms(self, xp, phys, target, params):
        pos = self.object_pos(phys)
        rest = self.obj_half[2] * params["size"]
        reach = reach_term(xp, xp.sqrt(xp.sum((pos - self.ee(phys)) ** 2, axis=-1)))
        grasp = self.grasped(xp, phys, params).astype(pos.dtype)
        lift = xp.clip((pos[..., 2] - rest) / self.cfg.lift_height, 0.0, 1.0)
        return reach, grasp, lift

    def observe(self, xp, phys, target, params):
        pos = self.object_pos(phys)
        obj = xp.concatenate(
            [pos, self.object_quat(phys), pos - self.ee(phys), (target[..., 2] - pos[..., 2])[..., None]], axis=-1
        )
        return {"proprio": self.proprio(xp, phys), "object": obj}

    def evaluate(self, xp, phys, target, params):
        reach, grasp, lift = self._terms(xp, phys, target, params)
        success = self.object_pos(phys)[..., 2] >= target[..., 2]
        reward = xp.where(success, 1.0, 0.25 * reach + 0.25 * grasp + 0.5 * grasp * lift)
        progress = progress_of(xp, success, reach, grasp, lift)
        return reward, success, progress

    def instructions(self) -> list[str]:
        return [
            "lift the red cube",
            "pick up the red cube",
            "grasp the red block and raise it off the table",
            "pick the cube up",
        ]
