"""Training logs of a run directory: TensorBoard events, the scalar history (kept in metrics.json) and PNG curves.

    log = RunLog(run_dir)                 # events in run_dir/tb/
    log.scalars({"loss": 0.1, "lr": 1e-4}, step, prefix="train/")
    log.plot(run_dir / "curves.png", ["train/loss", "eval/success_rate"])
    log.close()

The history survives a resume: it is reloaded from metrics.json and points past the resumed step are
dropped, so curves and TensorBoard show one continuous run.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from robot_rl.common.atomic import save_figure


class RunLog:
    def __init__(self, run_dir: str | Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.history: dict[str, list[tuple[int, float]]] = defaultdict(list)
        metrics = self.run_dir / "metrics.json"
        if resume_step is not None and metrics.is_file():
            old = json.loads(metrics.read_text()).get("history", {})
            for tag, points in old.items():
                self.history[tag] = [(int(s), float(v)) for s, v in points if s <= resume_step]
        self.tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=resume_step + 1 if resume_step is not None else None)

    def scalar(self, tag: str, value: float, step: int) -> None:
        value = float(value)
        self.tb.add_scalar(tag, value, step)
        self.history[tag].append((int(step), value))

    def scalars(self, values: dict, step: int, prefix: str = "") -> None:
        for k, v in values.items():
            self.scalar(prefix + k, v, step)

    def last(self, tag: str, default=None):
        points = self.history.get(tag)
        return points[-1][1] if points else default

    def history_json(self) -> dict:
        return {k: [[s, v] for s, v in pts] for k, pts in self.history.items()}

    def plot(self, path: str | Path, tags: list[str], title: str = "") -> Path | None:
        """One subplot per tag that has points; PNG at `path` (written atomically)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        tags = [t for t in tags if self.history.get(t)]
        if not tags:
            return None
        fig, axes = plt.subplots(len(tags), 1, figsize=(7, 2.4 * len(tags)), squeeze=False)
        for ax, tag in zip(axes[:, 0], tags):
            steps, values = zip(*self.history[tag])
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3)
            ax.set_ylabel(tag)
            ax.grid(alpha=0.3)
            if "loss" in tag and min(values) > 0 and max(values) / max(min(values), 1e-12) > 20:
                ax.set_yscale("log")
            if math.isclose(min(values), 0.0) and max(values) <= 1.0 and "rate" in tag:
                ax.set_ylim(-0.02, 1.02)
        axes[-1, 0].set_xlabel("step")
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        return save_figure(fig, path)

    def close(self) -> None:
        self.tb.flush()
        self.tb.close()
