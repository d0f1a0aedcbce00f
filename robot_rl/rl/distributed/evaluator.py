"""The learner's handle on the evaluation actor (EvalActor): periodic evaluations next to training, the final
one blocking."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from robot_rl.rl.distributed.actors import EvalActor, actor_weights

if TYPE_CHECKING:
    from robot_rl.rl.distributed.workspace import DistributedWorkspace


class Evaluator:
    """The evaluation actor: periodic evaluations run while training goes on (one at a time), the final one
    blocks."""

    def __init__(self, ws: "DistributedWorkspace"):
        import ray

        self.ray, self.ws = ray, ws
        self.ref, self.at = None, None
        self._start()

    def _start(self) -> None:
        ws, d = self.ws, self.ws.dist
        self.handle = self.ray.remote(EvalActor).options(num_cpus=d.actor_cpus, max_restarts=0).remote(
            ws.eval_env_cfg, ws.base_path, d.actor_device, dataclasses.asdict(ws.cfg.residual), d.actor_threads)

    def submit(self, step: int, train_time: float) -> bool:
        """Start an evaluation of the current weights (logged at `step`); False when one is still running."""
        if self.ref is not None:
            return False
        cfg = self.ws.cfg
        weights = actor_weights(self.ws.policy.actor)
        self.ref = self.handle.evaluate.remote(self.ray.put(weights), cfg.eval_episodes, cfg.eval_seed, 0)
        self.at = (step, train_time, weights)
        return True

    def poll(self, log, block: bool = False) -> None:
        """Log a finished periodic evaluation (waiting for it when `block`)."""
        if self.ref is None:
            return
        if not self.ray.wait([self.ref], timeout=None if block else 0)[0]:
            return
        ref, (step, train_time, weights), self.ref = self.ref, self.at, None
        try:
            m = self.ray.get(ref)
        except self.ray.exceptions.RayActorError:
            print(f"distributed: the evaluation actor died; evaluation at env step {step} skipped", flush=True)
            self._start()
            return
        log.evaluation(m, step, train_time)
        self.ws.note_eval(m, step, {k: torch.as_tensor(v) for k, v in weights.items()})

    def final(self, episodes: int, videos: int) -> dict:
        cfg = self.ws.cfg
        weights = self.ray.put(actor_weights(self.ws.policy.actor))
        try:
            m = self.ray.get(self.handle.evaluate.remote(weights, episodes, cfg.eval_seed, videos))
        except self.ray.exceptions.RayActorError:  # one more try on a fresh actor
            self._start()
            m = self.ray.get(self.handle.evaluate.remote(weights, episodes, cfg.eval_seed, videos))
        if videos:
            out = self.ws.run_dir / "videos"
            out.mkdir(parents=True, exist_ok=True)
            files = m.pop("video_bytes")
            for name, data in files.items():
                (out / name).write_bytes(data)
            m["videos"] = [str(out / name) for name in sorted(files)]
        return m

    def close(self) -> None:
        try:
            self.ray.kill(self.handle, no_restart=True)
        except Exception:
            pass
