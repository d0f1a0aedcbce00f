"""Base-chunk inference off the control loop: the policy runs in a worker, the loop only sends requests.

The worker (a spawned process by default, so the model never holds the control loop's GIL; a thread for
tests) loads the policy, reports its spec, then answers requests

    ("act", request_id, step, obs_history {key: [1, obs_horizon, dim]})  ->  ("chunk", request_id, step, chunk [H, A], seconds)
    ("reset",)                                                            ->  (policy.reset(None))

A policy exception comes back as ("error", request_id, message); a dead worker shows as EOF. The control
loop polls the pipe (non-blocking) while a request is in flight, so a tick never waits for the model, and
no other Python thread in the node's process can hold the GIL when the real-time loop needs it.

Policy sources: "expert" (the task's scripted expert through the BasePolicy interface), a checkpoint
directory (policies.load_policy), or "module:function" returning a BasePolicy for the env.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import threading
import time
import traceback
from pathlib import Path


class PolicyLoadError(RuntimeError):
    """The policy could not be loaded or does not fit the env; the message says which and why."""


def build_policy(source: str, env, expert_noise: float = 0.0, seed: int = 0):
    """A BasePolicy from a source string (see the module docstring)."""
    if source == "expert":
        from robot_rl.policies.expert import ExpertPolicy

        if env.action_space.kind != "ee_delta":  # its IK step would read the (unstepped) sim env, not the robot
            raise PolicyLoadError(f"the scripted expert drives a robot in ee_delta only; this deploy uses "
                                  f"action_space={env.action_space.kind!r}: deploy it with env.action_space=ee_delta")
        return ExpertPolicy(env, noise=expert_noise, seed=seed)
    if Path(source).exists():
        from robot_rl.policies import load_policy

        return load_policy(source)
    if ":" in source:
        module, name = source.split(":", 1)
        try:
            factory = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise PolicyLoadError(f"policy={source!r}: cannot import {name} from {module} ({e})") from None
        return factory(env)
    raise PolicyLoadError(
        f"policy={source!r} is neither 'expert', an existing checkpoint directory, nor 'module:function'"
    )


def _serve(conn, source: str, env_cfg_dict: dict, expert_noise: float, seed: int, torch_threads: int, nice: int,
           realtime_priority: int = 0) -> None:
    """Worker main loop (process or thread)."""
    if mp.current_process().name != "MainProcess":
        if nice:
            try:
                os.nice(nice)
            except OSError:
                pass
        if realtime_priority:
            from robot_rl.real.realtime import make_realtime

            make_realtime(realtime_priority, log=lambda m: None)
    try:
        if torch_threads > 0 and mp.current_process().name != "MainProcess":
            try:
                import torch

                torch.set_num_threads(torch_threads)
            except ImportError:
                pass
        from robot_rl.sim.config import from_mapping
        from robot_rl.sim.make import make_from_config

        env = make_from_config(from_mapping(env_cfg_dict))
        policy = build_policy(source, env, expert_noise, seed)
        conn.send(("ready", policy.spec.to_dict()))
    except Exception as e:  # noqa: BLE001 - reported to the node, which refuses to start
        conn.send(("load_error", f"{type(e).__name__}: {e}"))
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "stop":
            return
        if msg[0] == "reset":
            policy.reset(None)
            continue
        _, rid, step, hist = msg
        t0 = time.perf_counter()
        try:
            chunk = policy.act(hist)[0]
            conn.send(("chunk", rid, step, chunk, time.perf_counter() - t0))
        except Exception as e:  # noqa: BLE001 - a policy exception latches a safe stop in the node
            conn.send(("error", rid, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))


class InferenceWorker:
    def __init__(self, source: str, env_cfg_dict: dict, *, mode: str = "process", expert_noise: float = 0.0,
                 seed: int = 0, torch_threads: int = 1, nice: int = 0, realtime_priority: int = 0,
                 load_timeout_s: float = 300.0):
        self.busy = False  # a request is in flight
        self._next_id = 0
        parent, child = mp.Pipe()
        self._conn = parent
        args = (child, source, env_cfg_dict, expert_noise, seed, torch_threads, nice, realtime_priority)
        if mode == "process":
            # spawn, not fork: the parent may already run DDS threads, which a fork would copy half-way
            self._proc = mp.get_context("spawn").Process(target=_serve, args=args, name="robot-rl-inference", daemon=True)
        else:
            self._proc = threading.Thread(target=_serve, args=args, name="robot-rl-inference", daemon=True)
        self._proc.start()
        if not parent.poll(load_timeout_s):
            self.close()
            raise PolicyLoadError(f"the policy worker did not load {source!r} within {load_timeout_s:.0f} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            raise PolicyLoadError(f"the policy worker died while loading {source!r}") from None
        if kind != "ready":
            self.close()
            raise PolicyLoadError(f"cannot load policy {source!r}: {payload}")
        from robot_rl.policies.base import PolicySpec

        self.spec = PolicySpec.from_dict(payload)
        self.dead = False

    def request(self, obs_history: dict, step: int) -> int:
        """Send a chunk request for the observation history taken at policy step `step`; returns its id."""
        self._next_id += 1
        self.busy = True
        try:
            self._conn.send(("act", self._next_id, step, obs_history))
        except (OSError, ValueError):
            self.dead = True
        return self._next_id

    def reset(self) -> None:
        try:
            self._conn.send(("reset",))
        except (OSError, ValueError):
            self.dead = True

    def poll(self) -> list[tuple]:
        """Results received so far, without blocking: ("chunk", id, step, chunk, s) | ("error", id, msg) | ("died", ...)."""
        out = []
        if self.dead:
            return out
        try:
            while self._conn.poll():
                out.append(self._conn.recv())
        except (EOFError, OSError):
            self.dead = True
            out.append(("died", None, None, "the policy worker exited"))
        if any(r[0] in ("chunk", "error") for r in out):
            self.busy = False
        return out

    def close(self) -> None:
        try:
            self._conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self._proc.join(timeout=5)
        if isinstance(self._proc, mp.process.BaseProcess) and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=5)
