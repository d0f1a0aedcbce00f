"""The quickstart pipeline: scripted expert -> noisy demonstrations -> diffusion BC -> evaluation -> BC rollouts
-> progress model + success classifier -> residual RL on the BC policy with the learned rewards and scripted-
human interventions -> evaluation of base + residual on the same episodes -> the deployment node against the
simulated robot over DDS -> report.html / report.md.

Each stage writes into its own folder of the run directory and, when it finished, a `done.json` with its
results; a rerun in the same run directory reuses finished stages (`force=true` redoes them). A stage
that fails stops the pipeline with its message and leaves the earlier stages' outputs in place.

    <run>/expert/metrics.json       the scripted expert's success (the ceiling)
    <run>/demos/episodes.zarr       noisy expert demonstrations (episode store)
    <run>/bc/                       the BC training run (policy/, checkpoints/, tb/, curves.png, videos/)
    <run>/eval_bc/metrics.json      the BC policy, evaluated on held-out seeds, and its videos
    <run>/rollouts/episodes.zarr    BC-policy rollouts (successes and failures) for the reward models
    <run>/reward/                   robot-rl-train-reward's outputs: reward_model/, metrics, curves
    <run>/residual/                 the residual RL run (policy/ = BC base + residual, tb/, curves.png)
    <run>/eval_residual/            base + residual on the eval_bc episodes, and its videos
    <run>/deploy/{driver,node}/     the dry run: robot-rl-sim-driver and robot-rl-deploy runs (latency, success)
    <run>/report.html, report.md    the report
    <run>/metrics.json              every stage's summary
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Callable

from robot_rl.common.atomic import atomic_write_text
from robot_rl.common.checkpoint import has_training_checkpoint
from robot_rl.common.run_dir import write_metrics

STAGES = ("expert", "demos", "bc", "eval_bc", "rollouts", "reward", "residual", "eval_residual", "deploy")


class StageFailed(RuntimeError):
    """A stage could not finish; earlier stages' outputs are kept."""


class Pipeline:
    def __init__(self, run_dir: Path, force: bool = False, bar=None):
        self.run_dir, self.force, self.bar = Path(run_dir), force, bar
        self.results: dict[str, dict] = {}

    def stage(self, name: str, fn: Callable[[Path], dict], resumable: bool = False) -> dict:
        """Run fn(stage_dir) -> summary unless the stage finished before; record its summary. A `resumable` stage
        (a training that checkpoints) killed part-way keeps its folder when it holds a checkpoint, and fn continues
        from it; any other unfinished stage starts over in an empty folder, as does every stage with force=true."""
        out = self.run_dir / name
        done = out / "done.json"
        if done.is_file() and not self.force:
            result = json.loads(done.read_text())
            result["reused"] = True
        else:
            keep = resumable and not self.force and has_training_checkpoint(out)
            if out.exists() and not keep:
                shutil.rmtree(out)
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            try:
                result = fn(out)
            except StageFailed:
                raise
            except Exception as e:  # noqa: BLE001 - any failure becomes one message naming the stage
                raise StageFailed(f"stage {name!r} failed: {type(e).__name__}: {e} (outputs of earlier stages are "
                                  f"kept in {self.run_dir})") from e
            result["stage_time_s"] = time.perf_counter() - t0
            atomic_write_text(done, json.dumps(result, indent=2) + "\n")
            result["reused"] = False
        self.results[name] = result
        write_metrics(self.run_dir, {"stages": self.results})
        return result
