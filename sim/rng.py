"""Counter-based random numbers written against an array namespace (numpy or jax.numpy).

Both backends draw the same bits for the same (seed, env, episode, purpose) so that a seed fixes a
trajectory on either backend, and MJX can auto-reset inside jit without threading PRNG keys through
host code. The hash is PCG's output permutation (O'Neill 2014), applied to uint32 counters.
"""

from __future__ import annotations

import numpy as np

# Purposes: separate streams so that, e.g., adding observation noise never shifts the reset samples.
RESET, PARAMS, OBS_NOISE, LATENCY, VISUAL, INSTRUCTION = 1, 2, 3, 4, 5, 6


def _u32(xp, x):
    return xp.asarray(x, dtype=xp.uint32)


def pcg_hash(xp, x):
    """PCG-RXS-M-XS permutation of uint32 values (same bits on numpy and jax)."""
    x = _u32(xp, x)
    state = x * _u32(xp, 747796405) + _u32(xp, 2891336453)
    word = ((state >> ((state >> _u32(xp, 28)) + _u32(xp, 4))) ^ state) * _u32(xp, 277803737)
    return (word >> _u32(xp, 22)) ^ word


def env_key(xp, seed, env_ids):
    """Per-env stream key from a user seed and env indices, shape of env_ids."""
    seed = pcg_hash(xp, _u32(xp, np.uint32(int(seed) & 0xFFFFFFFF)))
    return pcg_hash(xp, seed ^ pcg_hash(xp, _u32(xp, env_ids) + _u32(xp, 0x9E3779B9)))


def uniform(xp, key, counter, purpose: int, n: int):
    """n uniforms in [0, 1), shape key.shape + (n,); key/counter broadcast (e.g. [N] or scalars)."""
    with np.errstate(over="ignore"):
        base = pcg_hash(xp, _u32(xp, key) ^ pcg_hash(xp, _u32(xp, counter) * _u32(xp, 0x85EBCA6B) + _u32(xp, purpose)))
        idx = xp.arange(n, dtype=xp.uint32)
        bits = pcg_hash(xp, base[..., None] + pcg_hash(xp, idx + _u32(xp, 0x632BE5AB)))
    return (bits >> _u32(xp, 8)).astype(xp.float32) * xp.float32(1.0 / 16777216.0)


def normal(xp, key, counter, purpose: int, n: int):
    """n standard normals (Box-Muller), shape key.shape + (n,)."""
    u = uniform(xp, key, counter, purpose, 2 * n)
    u1 = xp.maximum(u[..., :n], xp.float32(1e-7))
    return xp.sqrt(-2.0 * xp.log(u1)) * xp.cos(xp.float32(2.0 * np.pi) * u[..., n:])
