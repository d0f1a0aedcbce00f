"""color_lift: two cubes of different colours on the table; the instruction names one, lift that one.

Language matters here: the state observation lists both cubes in a fixed order (cube A, then cube B) with
neither their colours nor which one is named, so only the instruction together with the camera images
says which cube to lift. Per episode the cubes get two different colours from PALETTE (set in the
rendering models through `episode_colors`), one cube is named, and the instruction is one of TEMPLATES
filled with the named cube's colour (`instruction`, drawn from the seed like every reset sample).
The cubes start on opposite sides of y = 0, at least 2 * cube_y[0] apart, so the open fingers fit
around either one without touching the other.

Observation keys:
  proprio [20]  arm qpos (7), arm qvel (7), gripper width (1), ee pos (3), cos/sin ee yaw (2)
  object  [22]  per cube, A then B: pos (3), quat wxyz (4), pos - ee pos (3), height still to go (1)
Target (the per-episode task vector; not observed): named cube (0 = A, 1 = B), palette index of A's
  colour, of B's colour, height (m) the named cube's centre must reach.
Success: the named cube's centre is `lift_height` above its resting height (lifting the other one is not).
Reward (dense, in [0, 1]): as lift, for the named cube: 0.25 reach + 0.25 grasp + 0.5 grasp * lift
  fraction; 1 on success.
Progress (ground truth, evaluation only): 0.3 reach + 0.2 grasp + 0.5 lift fraction of the named cube.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robot_rl.sim import kinematics as kin
from robot_rl.sim import robot
from robot_rl.sim.task import Task, TaskConfig, lerp

PALETTE = {  # colour word -> rgba; distinct enough to stay apart under randomization.color_jitter <= 0.1
    "red": (0.85, 0.15, 0.15, 1.0),
    "blue": (0.15, 0.3, 0.9, 1.0),
    "green": (0.15, 0.7, 0.2, 1.0),
    "yellow": (0.95, 0.8, 0.1, 1.0),
}
TEMPLATES = (
    "lift the {} cube",
    "pick up the {} block",
    "raise the {} one",
    "grasp the {} cube and lift it off the table",
    "pick the {} cube up",
    "lift up the {} block",
)
CUBES = ("cube_a", "cube_b")


@dataclasses.dataclass
class ColorLiftConfig(TaskConfig):
    episode_steps: int = 80  # control steps per episode (4 s at 20 Hz)
    cube_half: float = 0.02  # m, half edge of each cube
    cube_mass: float = 0.1  # kg, each cube
    lift_height: float = 0.10  # m the named cube's centre must rise above its resting height
    object_x: tuple[float, float] = (0.40, 0.55)  # m, range of each cube's reset x
    cube_y: tuple[float, float] = (0.05, 0.16)  # m, range of |y| of each cube's centre; one cube per side
    object_yaw: tuple[float, float] = (-0.6, 0.6)  # rad, range of each cube's reset yaw
    # Name the other cube than the seed's draw: the same scenes (positions, colours) with the other target, for
    # the instruction-swap evaluation (robot-rl-eval ... +env.task_config.swap_named=true)
    swap_named: bool = False

    def validate(self, name: str) -> None:
        super().validate(name)
        for key in ("cube_half", "cube_mass", "lift_height"):
            if not getattr(self, key) > 0:
                raise ValueError(f"task {name}: {key}={getattr(self, key)} must be > 0")
        # The open fingers reach ~5 cm from the grasped cube's centre; 2 * cube_y[0] keeps them off the other.
        if self.cube_y[0] < 0.04:
            raise ValueError(f"task {name}: cube_y={list(self.cube_y)} must start at >= 0.04 m (the cubes must be "
                             ">= 8 cm apart so the open gripper fits around one without touching the other)")


def default_config() -> ColorLiftConfig:
    return ColorLiftConfig()


class ColorLiftTask(Task):
    name = "color_lift"
    # per cube: cube - ee, height to go; gripper width (labels compare states of the same instruction)
    # per cube (a, b): position, quaternion, cube - ee, height to go
    object_fields = tuple((f"{c}_{f}", n) for c in "ab" for f, n in (("pos", 3), ("quat", 4), ("minus_ee", 3),
                                                                     ("height_to_go", 1)))
    progress_features = ("object.a_minus_ee", "object.a_height_to_go", "object.b_minus_ee", "object.b_height_to_go",
                         "proprio.gripper_width")
    config_cls = ColorLiftConfig
    target_dim = 4
    object_body = "cube_a"
    object_geoms = CUBES
    colored_geoms = CUBES
    n_reset_uniforms = 17

    @property
    def object_bodies(self) -> tuple[str, ...]:
        return CUBES

    def objects_xml(self) -> str:
        c = self.cfg
        return "".join(
            f"<body name='{b}' pos='0.5 {y} {c.cube_half}'><freejoint/>"
            f"<geom name='{b}' type='box' size='{c.cube_half} {c.cube_half} {c.cube_half}' "
            f"mass='{c.cube_mass}' class='object' rgba='0.6 0.6 0.6 1'/></body>"
            for b, y in zip(CUBES, (0.1, -0.1))
        )

    def pairs_xml(self) -> str:
        xml = "".join(f"<pair geom1='{b}' geom2='table' condim='3'/>" + robot.pad_pairs_xml(b) for b in CUBES)
        return xml + "<pair geom1='cube_a' geom2='cube_b' condim='3'/>"

    def bind(self, model) -> None:
        super().bind(model)
        self.qpos_b = int(model.jnt_qposadr[model.body("cube_b").jntadr[0]])
        # sample_reset writes qpos as [robot, cube A (7), cube B (7)]
        assert self.obj_qpos == self.layout.robot_nq and self.qpos_b == self.obj_qpos + 7 == model.nq - 7

    # ---- helpers -----------------------------------------------------------------------------------
    def cube_pos(self, phys, k: int):
        adr = (self.obj_qpos, self.qpos_b)[k]
        return phys.qpos[..., adr : adr + 3]

    def cube_quat(self, phys, k: int):
        adr = (self.obj_qpos, self.qpos_b)[k]
        return phys.qpos[..., adr + 3 : adr + 7]

    def named_pos(self, xp, phys, target):
        """Position [..., 3] of the cube the instruction names."""
        return xp.where(target[..., 0:1] > 0.5, self.cube_pos(phys, 1), self.cube_pos(phys, 0))

    # ---- task functions ------------------------------------------------------------------------------
    def sample_reset(self, xp, u, params):
        c = self.cfg
        arm = self.arm_reset_qpos(xp, u)
        half = self.obj_half[2] * params["size"]
        one = xp.ones_like(u[..., 13])
        side = xp.where(u[..., 13] < 0.5, one, -one)  # cube A's side of y = 0; B takes the other
        cubes = []
        for k, sign in enumerate((side, -side)):
            x = lerp(u[..., 7 + 3 * k], c.object_x)
            y = sign * lerp(u[..., 8 + 3 * k], c.cube_y)
            pos = xp.stack([x, y, half * xp.ones_like(x)], axis=-1)
            cubes += [pos, kin.yaw_quat(xp, lerp(u[..., 9 + 3 * k], c.object_yaw))]
        qpos = xp.concatenate([arm] + cubes, axis=-1)
        n = len(PALETTE)
        named = xp.floor(2.0 * u[..., 14])
        if c.swap_named:
            named = 1.0 - named
        color_a = xp.floor(n * u[..., 15])
        color_b = (color_a + 1.0 + xp.floor((n - 1) * u[..., 16])) % n  # never A's colour
        target = xp.stack([named, color_a, color_b, half + c.lift_height], axis=-1)
        mocap = xp.zeros(u.shape[:-1] + (0, 3), dtype=u.dtype)
        return qpos, mocap, target

    def observe(self, xp, phys, target, params):
        ee = self.ee(phys)
        parts = []
        for k in range(2):
            pos = self.cube_pos(phys, k)
            parts += [pos, self.cube_quat(phys, k), pos - ee, (target[..., 3] - pos[..., 2])[..., None]]
        return {"proprio": self.proprio(xp, phys), "object": xp.concatenate(parts, axis=-1)}

    def evaluate(self, xp, phys, target, params):
        pos = self.named_pos(xp, phys, target)
        rest = self.obj_half[2] * params["size"]
        reach = 1.0 - xp.tanh(10.0 * xp.sqrt(xp.sum((pos - self.ee(phys)) ** 2, axis=-1)))
        grasp = self.grasped_at(xp, phys, params, pos).astype(pos.dtype)
        lift = xp.clip((pos[..., 2] - rest) / self.cfg.lift_height, 0.0, 1.0)
        success = pos[..., 2] >= target[..., 3]
        reward = xp.where(success, 1.0, 0.25 * reach + 0.25 * grasp + 0.5 * grasp * lift)
        progress = xp.where(success, 1.0, 0.3 * reach + 0.2 * grasp + 0.5 * lift)
        return reward, success, progress

    # ---- language and colours (host side, numpy) -------------------------------------------------------
    @staticmethod
    def colors(target) -> tuple[str, str]:
        """Colour words of cube A and cube B for task vector `target` [target_dim]."""
        names = list(PALETTE)
        return names[int(round(float(target[1])))], names[int(round(float(target[2])))]

    def named_color(self, target) -> str:
        return self.colors(target)[int(float(target[0]) > 0.5)]

    def goal(self, target) -> str:
        return f"{self.named_color(target)} cube"

    def instruction(self, target, u: float) -> str:
        return TEMPLATES[min(int(u * len(TEMPLATES)), len(TEMPLATES) - 1)].format(self.named_color(target))

    def instructions(self) -> list[str]:
        return [t.format(c) for c in PALETTE for t in TEMPLATES]

    def episode_colors(self, target) -> dict:
        return {b: np.asarray(PALETTE[c]) for b, c in zip(CUBES, self.colors(target))}
