"""Training logs of a run directory: TensorBoard events, the scalar history (kept in metrics.json) and PNG curves.

    log = RunLog(run_dir)                 # events in run_dir/tb/
    log.scalars({"loss": 0.1, "lr": 1e-4}, step, prefix="train/")
    log.plot(run_dir / "curves.png", ["train/loss", "eval/success_rate"])
    log.close()

The history survives a resume, a killed run's included: every point is on disk in the TensorBoard events once
scalars() returns (float64, flushed), a resumed RunLog rebuilds the history from them as TensorBoard shows it
(`read_events`) and drops the points past the resumed step, so metrics.json, curves.png and TensorBoard show one
continuous run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from robot_rl.common.atomic import save_figure


class RunLog:
    def __init__(self, run_dir: str | Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.history: dict[str, list[tuple[int, float]]] = defaultdict(list)
        if resume_step is not None:
            for tag, points in read_events(self.run_dir / "tb").items():
                self.history[tag] = [(s, v) for s, v in points if s <= resume_step]
        self.tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=resume_step + 1 if resume_step is not None else None)

    def _add(self, tag: str, value: float, step: int) -> None:
        value = float(value)
        self.tb.add_scalar(tag, value, step, new_style=True, double_precision=True)  # exact on a resume
        self.history[tag].append((int(step), value))

    def scalar(self, tag: str, value: float, step: int) -> None:
        self._add(tag, value, step)
        self.tb.flush()

    def scalars(self, values: dict, step: int, prefix: str = "") -> None:
        for k, v in values.items():
            self._add(prefix + k, v, step)
        self.tb.flush()  # in the events file now: a killed run loses none of it

    def evaluation(self, m: dict, step: int, train_time_s: float | None = None) -> None:
        """An evaluation's eval/success_rate and eval/mean_return (robot_rl.evaluation metrics `m`) at `step`, with
        eval/train_time_s when given (the x of time-axis comparisons)."""
        values = {"success_rate": m["success_rate"], "mean_return": m["mean_return"]}
        if train_time_s is not None:
            values["train_time_s"] = train_time_s
        self.scalars(values, step, prefix="eval/")

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


def read_events(tb_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Scalar history {tag: [(step, value)]} of a TensorBoard directory as TensorBoard shows it: event files in the
    order they were written, a file started with purge_step=N (a resumed run) dropping earlier points at steps >= N.
    A torn last record (a killed writer) is skipped."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog

    files = []
    for f in Path(tb_dir).glob("events.out.tfevents.*"):
        events = list(EventFileLoader(str(f)).Load())
        if events:
            files.append((events[0].wall_time, f.name, events))
    history: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for _, _, events in sorted(files, key=lambda x: x[:2]):
        for ev in events:
            if ev.HasField("session_log") and ev.session_log.status == SessionLog.START:
                for tag in history:
                    history[tag] = [(s, v) for s, v in history[tag] if s < ev.step]
            for v in ev.summary.value:
                t = v.tensor
                value = t.double_val[0] if t.double_val else t.float_val[0] if t.float_val else v.simple_value
                history[v.tag].append((int(ev.step), float(value)))
    return dict(history)
