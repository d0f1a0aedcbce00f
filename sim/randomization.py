"""Domain randomization: per-episode draws (shared array code) and how they land in each backend's model.

Draws come from the counter-based RNG, so both backends randomize identically for one seed. MuJoCo C
writes them into each env's own MjModel copy; MJX builds the env's model inside vmap with
`model.replace`, so the randomized fields are batched without copying the whole model.

Visual randomization (lights, colours, camera poses) changes only what cameras see. Both backends render
through MuJoCo C, so its draws are made on the host with numpy (`sample_visuals`, same counter-based RNG)
and written into the per-env MjModel that renders the env (`VisualFields`), together with the episode's
task colours (e.g. which cube is red in color_lift).
"""

from __future__ import annotations

import numpy as np

from robot_rl.sim import rng
from robot_rl.sim.config import ConfigError, RandomizationConfig

SCALES = ("friction", "mass", "size", "damping", "armature", "gain")
_CFG_FIELD = {
    "friction": "friction", "mass": "object_mass", "size": "object_size",
    "damping": "joint_damping", "armature": "armature", "gain": "actuator_gain",
}


def sample_params(xp, cfg: RandomizationConfig, key, episode) -> dict:
    """Draws for one episode per env: scale factors (float32) and action latency (int32 ticks)."""
    u = rng.uniform(xp, key, episode, rng.PARAMS, len(SCALES) + 1)
    out = {}
    for i, name in enumerate(SCALES):
        lo, hi = getattr(cfg, _CFG_FIELD[name])
        out[name] = xp.float32(lo) + u[..., i] * xp.float32(hi - lo)
    lo, hi = cfg.action_latency
    lat = xp.floor(xp.float32(lo) + u[..., len(SCALES)] * xp.float32(hi - lo + 1)).astype(xp.int32)
    out["latency"] = xp.minimum(lat, hi)
    return out


class ModelFields:
    """Indices and nominal values of the fields that randomization touches, read from the base model."""

    def __init__(self, model, task):
        geoms = [model.geom(g).id for g in task.object_geoms]
        self.geoms = np.array(geoms)
        # The free bodies whose mass (and inertia) the scales touch: one per task object.
        self.body = np.array([model.body(b).id for b in task.object_bodies])
        chains = [self._chain(model, int(b)) for b in self.body]
        self.subtree = np.array(sorted(set().union(*chains)))
        self.pairs = np.array(
            [p for p in range(model.npair) if model.pair_geom1[p] in geoms or model.pair_geom2[p] in geoms]
        )
        lay = task.layout
        # The objects' free-joint dofs: their invweight0 (constraint regularization scale) is 1/m and 1/I
        # for a free body, so scaling mass / size must scale them too (mj_setConst would, MJX has none).
        adr = [int(model.jnt_dofadr[model.body_jntadr[b]]) for b in self.body]
        self.obj_dofs = np.concatenate([np.arange(a, a + 6) for a in adr])
        self.dofs = lay.arm_dof
        self.acts = np.arange(7)
        mass = np.array(model.body_mass[self.body])
        self.nominal = {
            "pair_friction": np.array(model.pair_friction[self.pairs, 0]),
            "body_mass": mass,
            # MuJoCo C reads body_subtreemass (set by mj_setConst at compile time) for the subtree centre of
            # mass; leaving it nominal while body_mass changes blows up the CPU sim under mass randomization.
            "subtree_mass": np.array(model.body_subtreemass[self.subtree]),
            # per subtree body: the nominal mass of the objects inside it (what a mass scale changes)
            "subtree_object_mass": np.array([sum(m for m, c in zip(mass, chains) if b in c) for b in self.subtree]),
            "body_inertia": np.array(model.body_inertia[self.body]),
            "body_invweight0": np.array(model.body_invweight0[self.body]),
            "dof_invweight0": np.array(model.dof_invweight0[self.obj_dofs]),
            "geom_size": np.array(model.geom_size[self.geoms]),
            "geom_rbound": np.array(model.geom_rbound[self.geoms]),
            "geom_aabb": np.array(model.geom_aabb[self.geoms]),
            "dof_damping": np.array(model.dof_damping[self.dofs]),
            "dof_armature": np.array(model.dof_armature[self.dofs]),
            "kp": np.array(model.actuator_gainprm[self.acts, 0]),
        }

    @staticmethod
    def _chain(model, b: int) -> set[int]:
        """Body b and its ancestors: every subtree whose mass contains b's."""
        chain = {b}
        while b != 0:
            b = int(model.body_parentid[b])
            chain.add(b)
        return chain

    @staticmethod
    def _invweight_scale(p: dict, xp=np):
        """Scale of (translational, rotational) inverse weight: 1/mass and 1/(mass * size^2)."""
        return xp.stack([1.0 / p["mass"], 1.0 / (p["mass"] * p["size"] ** 2)])

    def apply_mujoco(self, model, p: dict) -> None:
        """Write one env's draws (python floats) into its own MjModel."""
        n = self.nominal
        model.pair_friction[self.pairs, 0] = n["pair_friction"] * p["friction"]
        model.body_mass[self.body] = n["body_mass"] * p["mass"]
        model.body_subtreemass[self.subtree] = n["subtree_mass"] + n["subtree_object_mass"] * (p["mass"] - 1.0)
        model.body_inertia[self.body] = n["body_inertia"] * p["mass"] * p["size"] ** 2
        model.body_invweight0[self.body] = n["body_invweight0"] * self._invweight_scale(p)
        model.dof_invweight0[self.obj_dofs] = n["dof_invweight0"] * np.tile(
            np.repeat(self._invweight_scale(p), 3), len(self.body))
        model.geom_size[self.geoms] = n["geom_size"] * p["size"]
        model.geom_rbound[self.geoms] = n["geom_rbound"] * p["size"]
        model.geom_aabb[self.geoms] = n["geom_aabb"] * p["size"]
        model.dof_damping[self.dofs] = n["dof_damping"] * p["damping"]
        model.dof_armature[self.dofs] = n["dof_armature"] * p["armature"]
        model.actuator_gainprm[self.acts, 0] = n["kp"] * p["gain"]
        model.actuator_biasprm[self.acts, 1] = -n["kp"] * p["gain"]

    def apply_mjx(self, model, p: dict):
        """One env's mjx.Model with its draws (jax scalars); called inside vmap."""
        import jax.numpy as jnp

        n = self.nominal
        f = lambda a: jnp.asarray(a, dtype=jnp.float32)  # noqa: E731
        return model.replace(
            pair_friction=model.pair_friction.at[self.pairs, 0].set(f(n["pair_friction"]) * p["friction"]),
            body_mass=model.body_mass.at[self.body].set(f(n["body_mass"]) * p["mass"]),
            body_subtreemass=model.body_subtreemass.at[self.subtree].set(
                f(n["subtree_mass"]) + f(n["subtree_object_mass"]) * (p["mass"] - 1.0)
            ),
            body_inertia=model.body_inertia.at[self.body].set(f(n["body_inertia"]) * p["mass"] * p["size"] ** 2),
            body_invweight0=model.body_invweight0.at[self.body].set(
                f(n["body_invweight0"]) * self._invweight_scale(p, jnp)
            ),
            dof_invweight0=model.dof_invweight0.at[self.obj_dofs].set(
                f(n["dof_invweight0"]) * jnp.tile(jnp.repeat(self._invweight_scale(p, jnp), 3), len(self.body))
            ),
            geom_size=model.geom_size.at[self.geoms].set(f(n["geom_size"]) * p["size"]),
            geom_rbound=model.geom_rbound.at[self.geoms].set(f(n["geom_rbound"]) * p["size"]),
            dof_damping=model.dof_damping.at[self.dofs].set(f(n["dof_damping"]) * p["damping"]),
            dof_armature=model.dof_armature.at[self.dofs].set(f(n["dof_armature"]) * p["armature"]),
            actuator_gainprm=model.actuator_gainprm.at[self.acts, 0].set(f(n["kp"]) * p["gain"]),
            actuator_biasprm=model.actuator_biasprm.at[self.acts, 1].set(-f(n["kp"]) * p["gain"]),
        )


def sample_visuals(cfg: RandomizationConfig, key, episode, n_lights: int, n_colors: int, n_cams: int) -> dict:
    """Visual draws of one episode per env (numpy, host side), shapes [N, ...]; all zero offsets when off.

    light [N] scale; light_tilt [N, n_lights, 2] (tangents of the tilt about two axes); color [N, n_colors, 3]
    RGB offsets; cam_pos [N, n_cams, 3] (m) and cam_rot [N, n_cams, 3] (rad, rotation vector)."""
    key, episode = np.atleast_1d(key), np.atleast_1d(episode)
    sizes = {"light_tilt": 2 * n_lights, "color": 3 * n_colors, "cam_pos": 3 * n_cams, "cam_rot": 3 * n_cams}
    u = rng.uniform(np, key, episode, rng.VISUAL, 1 + sum(sizes.values())).astype(np.float64)
    lo, hi = cfg.light
    out, i = {"light": lo + u[:, 0] * (hi - lo)}, 1
    scale = {"light_tilt": np.tan(np.radians(cfg.light_dir_jitter)), "color": cfg.color_jitter,
             "cam_pos": cfg.camera_pos_jitter, "cam_rot": np.radians(cfg.camera_rot_jitter)}
    for name, n in sizes.items():
        width = 2 if name == "light_tilt" else 3
        out[name] = (scale[name] * (2.0 * u[:, i : i + n] - 1.0)).reshape(len(key), -1, width)
        i += n
    return out


class VisualFields:
    """What visual randomization and task colours write into a rendering MjModel: lights, colours, cameras.

    Colour groups: the table (its material, which tints the checker texture) and each task object body (its
    geoms' rgba, or their material's). Task colours (`task.episode_colors`) replace a geom's nominal rgba
    before the jitter is added."""

    def __init__(self, model, task, cfg: RandomizationConfig):
        import mujoco

        self.task = task
        # Whether episodes can look different at all; if not, the models keep their nominal visuals.
        jitters = ("light_dir_jitter", "color_jitter", "camera_pos_jitter", "camera_rot_jitter")
        self.active = (bool(task.colored_geoms) or tuple(cfg.light) != (1.0, 1.0)
                       or any(getattr(cfg, k) > 0 for k in jitters))
        self.lights = np.arange(model.nlight)
        self.cams = np.arange(model.ncam)
        self.nominal = {
            "light_diffuse": np.array(model.light_diffuse), "light_pos": np.array(model.light_pos),
            "light_dir": np.array(model.light_dir),
            "cam_pos": np.array(model.cam_pos), "cam_quat": np.array(model.cam_quat),
            "geom_rgba": np.array(model.geom_rgba), "mat_rgba": np.array(model.mat_rgba),
        }
        # A light tilts by moving sideways and re-aiming at the point its nominal beam hits the table: turning a
        # shadow-casting spotlight in place leaves shadow-map speckles on the table at 96 px.
        pos, d = self.nominal["light_pos"], self.nominal["light_dir"]
        self.light_range = pos[:, 2] / np.maximum(-d[:, 2], 0.1)  # distance along the beam to z = 0
        self.light_aim = pos + self.light_range[:, None] * d
        side = np.cross(d, [0.0, 0.0, 1.0])
        side = np.where(np.linalg.norm(side, axis=1, keepdims=True) < 1e-6, [[1.0, 0.0, 0.0]], side)
        side /= np.linalg.norm(side, axis=1, keepdims=True)
        self.light_axes = np.stack([side, np.cross(d, side)], axis=1)  # [n_lights, 2, 3], across the beam
        table = model.geom("table").id
        # (kind, index array) per colour group: kind "mat" writes mat_rgba, "geom" writes geom_rgba.
        self.groups: list[tuple[str, np.ndarray]] = [("mat", np.array([model.geom_matid[table]]))]
        for b in task.object_bodies + task.visual_bodies:
            geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == model.body(b).id]
            mats = sorted({int(model.geom_matid[g]) for g in geoms if model.geom_matid[g] >= 0})
            plain = [g for g in geoms if model.geom_matid[g] < 0]
            if mats:
                self.groups.append(("mat", np.array(mats)))
            if plain:
                self.groups.append(("geom", np.array(plain)))
        self.task_geoms = {n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n) for n in task.colored_geoms}

    @property
    def counts(self) -> tuple[int, int, int]:
        """(lights, colour groups, cameras): the sizes sample_visuals needs."""
        return len(self.lights), len(self.groups), len(self.cams)

    def apply(self, model, v: dict, target) -> None:
        """Write one env's visual draws (`sample_visuals` row) and its episode's task colours into `model`."""
        n = self.nominal
        model.light_diffuse[:] = np.clip(n["light_diffuse"] * v["light"], 0.0, 1.0)
        pos = n["light_pos"] + self.light_range[:, None] * np.einsum("lk,lkc->lc", v["light_tilt"], self.light_axes)
        d = self.light_aim - pos
        model.light_pos[:] = pos
        model.light_dir[:] = d / np.linalg.norm(d, axis=-1, keepdims=True)
        geom_rgba = n["geom_rgba"].copy()
        for name, rgba in self.task.episode_colors(np.asarray(target)).items():
            geom_rgba[self.task_geoms[name]] = rgba
        model.geom_rgba[:] = geom_rgba
        model.mat_rgba[:] = n["mat_rgba"]
        for (kind, idx), dc in zip(self.groups, v["color"]):
            field = model.mat_rgba if kind == "mat" else model.geom_rgba
            field[idx, :3] = np.clip(field[idx, :3] + dc, 0.0, 1.0)
        model.cam_pos[:] = n["cam_pos"] + v["cam_pos"]
        model.cam_quat[:] = [_quat_mul(q, _rotvec_quat(r)) for q, r in zip(n["cam_quat"], v["cam_rot"])]


def _rotvec_quat(r: np.ndarray) -> np.ndarray:
    """Unit quaternion (w x y z) of rotation vector r (rad)."""
    angle = float(np.linalg.norm(r))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * r / angle])


def _quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def check_task_support(cfg: RandomizationConfig, task) -> None:
    if not task.size_randomizable and tuple(cfg.object_size) != (1.0, 1.0):
        raise ConfigError(
            f"randomization.object_size={list(cfg.object_size)} is not supported by task {task.name!r} "
            "(its fit tolerance is fixed); set randomization.object_size=[1,1]"
        )
