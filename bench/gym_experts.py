"""Scripted experts of external gymnasium envs, for `expert.path=bench.gym_experts:<name>` (demonstrations for
docs/results/gymnasium_envs.md). They live in bench/, not in the library: a user brings their own the same way.

    robot-rl-collect backend=gymnasium env.gym.id=FetchPickAndPlace-v4 env.gym.modules=[gymnasium_robotics] \
        expert.path=bench.gym_experts:fetch_pick_and_place expert.noise=0.1 episodes=100 out=data/fetch.zarr

Each takes our observation dict (env.backend=gymnasium's mapping of the env's) and returns actions [N, A] in
[-1, 1] (the env's own units for these two envs).
"""

from __future__ import annotations

import numpy as np


def fetch_pick_and_place(obs: dict) -> np.ndarray:
    """FetchPickAndPlace-v4: over the block, down, close, carry it to the goal. Reads obs["observation"] (grip pos
    0:3, block pos 3:6, block - grip 6:9, finger positions 9:11) and obs["desired_goal"]; an action moves the
    gripper by 5 cm per unit, its last entry opens (+1) or closes (-1) the fingers."""
    o, goal = np.asarray(obs["observation"], np.float64), np.asarray(obs["desired_goal"], np.float64)
    rel, width = o[:, 6:9], o[:, 9] + o[:, 10]
    near = np.linalg.norm(rel, axis=1) < 0.015
    holding = near & (width < 0.06)  # closed on the block (5 cm wide), which is then between the fingers
    above = np.linalg.norm(rel[:, :2], axis=1) < 0.01
    move = np.where(above[:, None], rel, rel + np.array([0.0, 0.0, 0.05]))  # line up 5 cm above, then go down
    move = np.where(holding[:, None], goal - o[:, 3:6], move)  # carry the block to the goal
    move = np.where((near & ~holding)[:, None], 0.0, move)  # at the block: hold still while the fingers close
    grip = np.where(near, -1.0, 1.0)
    return np.clip(np.concatenate([move * 10.0, grip[:, None]], axis=1), -1.0, 1.0)


_METAWORLD = {}


def metaworld_peg_insert_side(obs: dict) -> np.ndarray:
    """Meta-World MT1 peg-insert-side-v3: Meta-World's own scripted policy (SawyerPegInsertionSideV3Policy), per env
    on the 39-dim state (obs["state"])."""
    if "peg" not in _METAWORLD:
        from metaworld.policies import SawyerPegInsertionSideV3Policy

        _METAWORLD["peg"] = SawyerPegInsertionSideV3Policy()
    policy = _METAWORLD["peg"]
    return np.stack([policy.get_action(s) for s in np.asarray(obs["state"], np.float64)])
