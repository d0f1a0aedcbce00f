"""The actor processes (Ray actors) and their setup: BatchActor, the sequence-numbered batch protocol every actor
kind shares (real/robot_actor.py builds the robot actor on it), EnvActor (env + base + residual copy +
Collector) and EvalActor (evaluation on weights sent by the learner)."""

from __future__ import annotations

import collections
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
from robot_rl.common.config import from_mapping
from robot_rl.rl.replay import Replay
from robot_rl.rl.rollout import Collector


def actor_weights(actor: torch.nn.Module) -> dict[str, np.ndarray]:
    """The residual actor's state (weights and frozen observation statistics) as numpy arrays."""
    return {k: v.detach().cpu().numpy().copy() for k, v in actor.state_dict().items()}


def process_setup(threads: int) -> None:
    """Torch (and OpenMP) threads of an actor process."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)


def make_actor_env(env_cfg: dict):
    """An actor's env from an env config dict (dataclasses.asdict of an EnvConfig)."""
    from robot_rl import sim
    from robot_rl.sim.config import from_mapping

    return sim.make_from_config(from_mapping(env_cfg))


def make_actor_policy(env, base_path: str | None, device: str, residual: dict) -> ResidualPolicy:
    """A fresh residual policy on the base loaded from `base_path` (None: no base), checked against `env`."""
    from robot_rl.policies import load_policy

    base = load_policy(base_path, device=device) if base_path else None
    if base is not None:
        base.spec.check_env(env)
    return ResidualPolicy.build(base, from_mapping(ResidualConfig, residual, "residual"), env=env, device=device)


def load_weights(policy: ResidualPolicy, weights: dict) -> None:
    """Load actor_weights() output into a policy's residual actor."""
    policy.actor.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})


class BatchActor:
    """What every actor kind shares: sequence-numbered batches, the last `retain` of them kept, and a cursor per
    learner session: a session that attaches gets the retained batches first, oldest first, then fresh ones; its
    dedup drops what it has. A subclass's `_collect()` returns a new batch's fields, or None when it has nothing
    yet (a robot between episodes): the learner then gets a heartbeat, which keeps the actor from looking dead."""

    def _init_batches(self, slot: int, start_seq: int, retain: int) -> None:
        self.slot, self.seq = int(slot), int(start_seq)
        self.outbox: collections.deque = collections.deque(maxlen=int(retain))
        self.cursors: collections.OrderedDict = collections.OrderedDict()  # session -> next seq it gets

    def collect(self, session: str) -> dict:
        """The next batch for learner `session`: a retained one it has not had, else a new one (or a heartbeat)."""
        oldest = self.outbox[0]["seq"] if self.outbox else self.seq
        cur = max(self.cursors.pop(session, oldest), oldest)
        batch = self.outbox[cur - oldest] if cur < self.seq else self._new_batch()
        self.cursors[session] = cur if batch.get("heartbeat") else batch["seq"] + 1
        while len(self.cursors) > 8:  # sessions of learners long gone
            self.cursors.popitem(last=False)
        return batch

    def _new_batch(self) -> dict:
        fields = self._collect()
        if fields is None:
            return {"slot": self.slot, "heartbeat": True, "pid": os.getpid()}
        batch = {"slot": self.slot, "seq": self.seq, "pid": os.getpid(), **fields}
        self.seq += 1
        if self.outbox.maxlen:
            self.outbox.append(batch)
        return batch

    def _collect(self) -> dict | None:
        raise NotImplementedError


class EnvActor(BatchActor):
    """One collection process: env + base + residual copy + Collector (+ its own scripted human with
    rl.interventions=scripted, budget per actor); sends `batch_steps` vector steps at a time."""

    def __init__(self, slot: int, env_cfg: dict, base_path: str | None, device: str, residual: dict, reward: dict,
                 explore_std: float, batch_steps: int, seed: int, start_seq: int, retain: int, threads: int = 1,
                 hil: dict | None = None):
        """reward: {"reward", "reward_model", "shaping", "gamma"} of the ResidualRLConfig (a learned reward model is
        loaded here, so rewards and shaping are computed next to the env, as in single-process training).
        hil: the scripted human's settings (ScriptedHumanConfig fields), None without interventions."""
        process_setup(threads)
        self._init_batches(slot, start_seq, retain)
        self.batch_steps, self.version = int(batch_steps), -1
        self.env = make_actor_env(env_cfg)
        self.policy = make_actor_policy(self.env, base_path, device, residual)
        learned = None
        if reward["reward_model"]:
            from robot_rl.reward.shaping import from_config

            learned = from_config(reward["reward_model"], reward["reward"], reward["shaping"], reward["gamma"],
                                  [self.env])
        n = self.env.num_envs
        self.hil = None
        if hil is not None:
            from robot_rl.hil import InterventionController
            from robot_rl.hil.scripted import ScriptedHuman, ScriptedHumanConfig

            self.hil = InterventionController(n, ScriptedHuman(self.env, ScriptedHumanConfig(**hil)))
        self.local = Replay(self.batch_steps * n, n, self.policy.actor.obs_dim, self.env.action_dim)
        self.collector = Collector(self.env, self.policy, self.local, reward["reward"], explore_std, seed=seed + 1,
                                   learned=learned, hil=self.hil, classifier_success=reward["classifier_success"])
        self.collector.start(seed=seed)

    def set_weights(self, weights: dict, version: int) -> None:
        load_weights(self.policy, weights)
        self.version = int(version)

    def _collect(self) -> dict:
        t = time.perf_counter()
        self.local.written = 0
        for _ in range(self.batch_steps):
            self.collector.step(explore=True)
        rows = {k: v[: self.batch_steps].copy() for k, v in self.local.data.items()}
        rows["truncated"][-1] |= ~rows["terminated"][-1]  # the cut: n-step walks stop at the batch's end
        return {"weights_version": self.version, "rows": rows, "finished": self.collector.pop_finished(),
                "hil_episodes": self.hil.pop_finished() if self.hil is not None else [],
                "interventions": int(rows["intervention"].sum()), "collect_s": time.perf_counter() - t}

    def info(self) -> dict:
        return {"pid": os.getpid(), "slot": self.slot, "seq": self.seq, "version": self.version}


class EvalActor:
    """Evaluation in its own process: robot_rl.evaluation.evaluate_policy on weights sent by the learner."""

    def __init__(self, env_cfg: dict, base_path: str | None, device: str, residual: dict, threads: int = 1):
        process_setup(threads)
        self.env = make_actor_env(env_cfg)
        self.policy = make_actor_policy(self.env, base_path, device, residual)

    def evaluate(self, weights: dict, episodes: int, seed: int, videos: int = 0) -> dict:
        """Metrics of evaluate_policy; videos come back as bytes ({file name: mp4}) for the learner to write."""
        from robot_rl.evaluation import evaluate_policy

        load_weights(self.policy, weights)
        with tempfile.TemporaryDirectory() as d:
            m = evaluate_policy(self.env, self.policy, episodes, seed=seed, videos=videos,
                                video_dir=d if videos else None)
            if videos:
                m["video_bytes"] = {Path(p).name: Path(p).read_bytes() for p in m.pop("videos")}
        return m
