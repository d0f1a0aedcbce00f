"""Domain randomization: per-episode draws (shared array code) and how they land in each backend's model.

Draws come from the counter-based RNG, so both backends randomize identically for one seed. MuJoCo C
writes them into each env's own MjModel copy; MJX builds the env's model inside vmap with
`model.replace`, so the randomized fields are batched without copying the whole model.
"""

from __future__ import annotations

import numpy as np

from sim import rng
from sim.config import ConfigError, RandomizationConfig

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
        self.body = model.body(task.object_body).id
        self.subtree = self._subtree_bodies(model)
        self.pairs = np.array(
            [p for p in range(model.npair) if model.pair_geom1[p] in geoms or model.pair_geom2[p] in geoms]
        )
        lay = task.layout
        # The object's free-joint dofs: their invweight0 (constraint regularization scale) is 1/m and 1/I
        # for a free body, so scaling mass / size must scale them too (mj_setConst would, MJX has none).
        adr = int(model.jnt_dofadr[model.body(task.object_body).jntadr[0]])
        self.obj_dofs = np.arange(adr, adr + 6)
        self.dofs = lay.arm_dof
        self.acts = np.arange(7)
        self.nominal = {
            "pair_friction": np.array(model.pair_friction[self.pairs, 0]),
            "body_mass": float(model.body_mass[self.body]),
            # MuJoCo C reads body_subtreemass (set by mj_setConst at compile time) for the subtree centre of
            # mass; leaving it nominal while body_mass changes blows up the CPU sim under mass randomization.
            "subtree_mass": np.array(model.body_subtreemass[self.subtree]),
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

    def _subtree_bodies(self, model) -> np.ndarray:
        """The object's body and its ancestors: every subtree whose mass contains the object's."""
        chain, b = [], self.body
        while True:
            chain.append(b)
            if b == 0:
                return np.array(chain)
            b = int(model.body_parentid[b])

    @staticmethod
    def _invweight_scale(p: dict, xp=np):
        """Scale of (translational, rotational) inverse weight: 1/mass and 1/(mass * size^2)."""
        return xp.stack([1.0 / p["mass"], 1.0 / (p["mass"] * p["size"] ** 2)])

    def apply_mujoco(self, model, p: dict) -> None:
        """Write one env's draws (python floats) into its own MjModel."""
        n = self.nominal
        model.pair_friction[self.pairs, 0] = n["pair_friction"] * p["friction"]
        model.body_mass[self.body] = n["body_mass"] * p["mass"]
        model.body_subtreemass[self.subtree] = n["subtree_mass"] + n["body_mass"] * (p["mass"] - 1.0)
        model.body_inertia[self.body] = n["body_inertia"] * p["mass"] * p["size"] ** 2
        model.body_invweight0[self.body] = n["body_invweight0"] * self._invweight_scale(p)
        model.dof_invweight0[self.obj_dofs] = n["dof_invweight0"] * np.repeat(self._invweight_scale(p), 3)
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
                f(n["subtree_mass"]) + f(n["body_mass"]) * (p["mass"] - 1.0)
            ),
            body_inertia=model.body_inertia.at[self.body].set(f(n["body_inertia"]) * p["mass"] * p["size"] ** 2),
            body_invweight0=model.body_invweight0.at[self.body].set(
                f(n["body_invweight0"]) * self._invweight_scale(p, jnp)
            ),
            dof_invweight0=model.dof_invweight0.at[self.obj_dofs].set(
                f(n["dof_invweight0"]) * jnp.repeat(self._invweight_scale(p, jnp), 3)
            ),
            geom_size=model.geom_size.at[self.geoms].set(f(n["geom_size"]) * p["size"]),
            geom_rbound=model.geom_rbound.at[self.geoms].set(f(n["geom_rbound"]) * p["size"]),
            dof_damping=model.dof_damping.at[self.dofs].set(f(n["dof_damping"]) * p["damping"]),
            dof_armature=model.dof_armature.at[self.dofs].set(f(n["dof_armature"]) * p["armature"]),
            actuator_gainprm=model.actuator_gainprm.at[self.acts, 0].set(f(n["kp"]) * p["gain"]),
            actuator_biasprm=model.actuator_biasprm.at[self.acts, 1].set(-f(n["kp"]) * p["gain"]),
        )


def check_task_support(cfg: RandomizationConfig, task) -> None:
    if not task.size_randomizable and tuple(cfg.object_size) != (1.0, 1.0):
        raise ConfigError(
            f"randomization.object_size={list(cfg.object_size)} is not supported by task {task.name!r} "
            "(its fit tolerance is fixed); set randomization.object_size=[1,1]"
        )
