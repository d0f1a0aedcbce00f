"""The env interface: everything the layers above sim (data, policies, rl, reward, hil, real) may read from or call
on an env. Our backends implement it (sim.env.BatchedEnv: mujoco, mjx), and so does env.backend=gymnasium
(sim/backends/gymnasium.py, any gymnasium env); the layers above run the same code on each. Nothing above sim reads an
env's config (`env.cfg`): what it needs is a member here.

    env.task_name        "peg_insert": the name policies, episode stores and reward models are checked against
    env.num_envs         N, the batch every array has first
    env.robot            "primitive": the robot description it simulates (sim/robot.py; None: an env without one)
    env.obs_dims         {"proprio": 20, "object": 16, ...}: vector observation keys and their sizes
    env.obs_fields       {"proprio": {"ee_pos": slice(15, 18), ...}, ...}: the named fields of vector observations
                         (keys without named fields are absent)
    env.cameras          ("front", "wrist"): cameras whose frames are observations
    env.image_shapes     {"images/front": (96, 96, 3), ...}: uint8 image observations
    env.action_dim       A; actions are float32 [N, A] in [action_space.low, action_space.high]
    env.action_space     .kind ("ee_delta" | "joint_pos"), .low, .high, .neutral (hold still), .max_ee_delta (m),
                         .max_yaw_delta (rad): what one unit of an ee_delta action means
    env.action_history   past actions the observations carry (obs key "prev_actions"; 0: none)
    env.control_hz       control ticks per second (one step() per tick)
    env.episode_steps    the time limit of an episode, in ticks
    env.terminate_on_success  an episode ends at its first success (else at the time limit only)
    env.backend          "mujoco" | "mjx": which simulator steps it (reports only)
    env.instruction      each env's current-episode instruction, in words
    env.instruction_names_goal  the instruction says which goal an episode has (a reward model must read it)
    env.episode_ids      [N, 2] (env key, episode index): changes exactly where an env starts an episode
    env.config_dict()    the settings that build the same env in another process (env actors, inference workers)
    reset(seed) -> obs      seed: an int for the batch or one per env
    step(action) -> obs, reward, done, info
                         auto-reset: where done, obs is the next episode's first; info holds success, terminated,
                         truncated, final_obs (the finished episode's last obs), episode_return, episode_length,
                         progress (ground truth where the env knows it, else NaN), intervention (False)
    end_episodes(env_ids) -> obs of env_ids: their episodes end now, the next ones start
    render(env_ids, camera) -> frames; close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Env(Protocol):
    """The members listed in this module's docstring (isinstance checks that they are there)."""

    num_envs: int
    cameras: tuple[str, ...]
    action_dim: int
    action_space: Any

    @property
    def task_name(self) -> str: ...

    @property
    def robot(self) -> str | None: ...

    @property
    def obs_dims(self) -> dict[str, int]: ...

    @property
    def obs_fields(self) -> dict[str, dict[str, slice]]: ...

    @property
    def image_shapes(self) -> dict[str, tuple[int, int, int]]: ...

    @property
    def action_history(self) -> int: ...

    @property
    def control_hz(self) -> float: ...

    @property
    def episode_steps(self) -> int: ...

    @property
    def terminate_on_success(self) -> bool: ...

    @property
    def backend(self) -> str: ...

    @property
    def instruction(self) -> list[str]: ...

    @property
    def instruction_names_goal(self) -> bool: ...

    @property
    def episode_ids(self) -> np.ndarray: ...

    def reset(self, seed: int | Sequence[int] = 0) -> dict: ...

    def step(self, action) -> tuple: ...

    def end_episodes(self, env_ids) -> dict: ...

    def render(self, env_ids, camera: str = "front", width: int = 320, height: int = 240,
               quality: str = "high") -> np.ndarray: ...

    def config_dict(self) -> dict: ...

    def close(self) -> None: ...
