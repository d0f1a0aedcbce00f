"""reach: bring the hand to a point hovering above a cube.

An example of a task kept outside robot_rl (docs/own_task.md walks through it). The task is pure array functions of
the physics state written against `xp` (numpy for the MuJoCo C backend, jax.numpy for MJX); the expert is a batched
feedback controller over observations, used for demonstrations and as the scripted human of interventions.

Observation keys:
  proprio [20]  the arm's own (sim.task.Task.proprio)
  object  [6]   cube pos (3), target point - hand (3)
Success: the grip site within `tolerance` of the target point.
Reward and progress (in [0, 1]): 1 - tanh(10 distance), 1 on success.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robot_rl.sim import kinematics as kin
from robot_rl.sim import robot
from robot_rl.sim.experts import Expert
from robot_rl.sim.task import Task, TaskConfig, lerp


@dataclasses.dataclass
class ReachConfig(TaskConfig):
    episode_steps: int = 50  # control steps per episode (2.5 s at 20 Hz)
    cube_half: float = 0.02  # m, half edge of the cube
    height: tuple[float, float] = (0.04, 0.12)  # m, range of the target's height above the cube's top
    tolerance: float = 0.015  # m from the target that counts as there


class ReachTask(Task):
    name = "reach"  # the name the entry point registers it under (robot_rl checks they agree)
    config_cls = ReachConfig
    target_dim = 3
    object_fields = (("pos", 3), ("target_minus_ee", 3))  # obs["object"]'s fields, by name
    progress_features = ("object[3:6]",)  # what the reward models compare: target - hand

    def objects_xml(self) -> str:
        h = self.cfg.cube_half
        return (f"<body name='object' pos='0.5 0 {h}'><freejoint/>"
                f"<geom name='object' type='box' size='{h} {h} {h}' mass='0.1' class='object' rgba='0.2 0.4 0.85 1'/>"
                "</body>")

    def pairs_xml(self) -> str:
        return "<pair geom1='object' geom2='table' condim='3'/>" + robot.pad_pairs_xml("object")

    def sample_reset(self, xp, u, params):
        c = self.cfg
        half = self.obj_half[2] * params["size"]
        x, y = lerp(u[..., 7], c.object_x), lerp(u[..., 8], c.object_y)
        cube = xp.stack([x, y, half], axis=-1)
        qpos = xp.concatenate([self.arm_reset_qpos(xp, u), cube,
                               kin.yaw_quat(xp, lerp(u[..., 9], c.object_yaw))], axis=-1)
        target = xp.stack([x, y, 2.0 * half + lerp(u[..., 10], c.height)], axis=-1)
        return qpos, xp.zeros(u.shape[:-1] + (0, 3), dtype=u.dtype), target

    def observe(self, xp, phys, target, params):
        obj = xp.concatenate([self.object_pos(phys), target - self.ee(phys)], axis=-1)
        return {"proprio": self.proprio(xp, phys), "object": obj}

    def evaluate(self, xp, phys, target, params):
        dist = xp.sqrt(xp.sum((target - self.ee(phys)) ** 2, axis=-1))
        success = dist < self.cfg.tolerance
        shaped = xp.where(success, 1.0, 1.0 - xp.tanh(10.0 * dist))
        return shaped, success, shaped

    def instructions(self) -> list[str]:
        return ["reach above the blue cube", "hold your hand over the cube"]


class ReachExpert(Expert):
    """Move a fraction of the way to the target each tick, fingers open. The target point is still for the whole
    episode, so its world position is estimated from the episode's readings (the mean damps observation noise)."""

    gain = 0.4  # fraction of the position error corrected per tick

    def clean_action(self, obs):
        ee = self.ee_pos(obs)
        target = self.smooth("target", ee + self.obs(obs, "object", "target_minus_ee"), 0.3)
        return self.pack(self.move(self.gain * (target - ee)), np.ones(len(ee)))
