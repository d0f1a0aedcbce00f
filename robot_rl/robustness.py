"""The robustness report card: what a policy survives, as its success over one-factor sweeps of the sim.

    robot-rl-eval sweep=robustness policy=expert task=lift
    robot-rl-eval sweep=robustness task=lift \\
        policy="{expert: expert, BC: runs/train_bc/<run>/policy, BC+residual: runs/train_residual/<run>/policy}"

A factor is one key of the sim's randomization (sim/config.py RandomizationConfig); a level sets that key to a
single value (a degenerate range [v, v]) and leaves every other key as env.randomization gives it (nominal unless a
randomization preset is selected). Every level of every policy runs the same episodes: one env seed, so the same
reset poses and noise draws. Levels whose randomization is the same (each factor's nominal level) are evaluated
once. `write_card` puts robustness.json (the card), robustness.md, robustness.png (a panel per factor: success vs
level with 95% CIs, a line per policy) and robustness.html (robot_rl/report.py) into the run directory.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Factor:
    """One sweepable factor: the randomization key it sets and how a level (in `unit`) becomes that key's value."""

    name: str
    key: str  # field of sim.config.RandomizationConfig
    unit: str  # of the levels as the user gives them
    scale: float = 1.0  # sim value = level * scale (mm -> m)
    ranged: bool = True  # the key is a [min, max] range (level -> [v, v]), not one number
    cameras: bool = False  # changes camera images only: applies to policies that read cameras

    def value(self, level: float):
        v = level * self.scale
        return (v, v) if self.ranged else v

    @property
    def label(self) -> str:
        return f"{self.name.replace('_', ' ')} ({self.unit})"


FACTORS = {f.name: f for f in (
    Factor("latency", "action_latency", "ticks"),
    Factor("obs_noise", "obs_noise_std", "mm", scale=1e-3, ranged=False),
    Factor("object_mass", "object_mass", "x nominal"),
    Factor("friction", "friction", "x nominal"),
    Factor("actuator_gain", "actuator_gain", "x nominal"),
    Factor("camera_pos", "camera_pos_jitter", "mm", scale=1e-3, ranged=False, cameras=True),
    Factor("camera_rot", "camera_rot_jitter", "deg", ranged=False, cameras=True),
)}


@dataclasses.dataclass
class RobustnessConfig:
    """robot-rl-eval sweep=robustness: the factors swept, their levels, and the episodes per level."""

    factors: list[str] | None = None  # factors to sweep, in this order; null: every factor below that applies
    # (camera_pos and camera_rot only when a policy reads cameras)
    episodes: int = 50  # per level and policy (95% CI about +-0.14 at a success rate of 0.5, +-0.07 at 0.95)
    latency: list[int] = dataclasses.field(default_factory=lambda: [0, 1, 2, 3])  # control ticks each action is
    # delayed (a tick is 1 / env.control_hz: 50 ms at 20 Hz)
    obs_noise: list[float] = dataclasses.field(default_factory=lambda: [0.0, 2.5, 5.0, 10.0])  # mm: std of Gaussian
    # noise on every observation entry (1e-3 of its unit on entries that are not positions)
    object_mass: list[float] = dataclasses.field(default_factory=lambda: [0.5, 1.0, 2.0, 3.0])  # x the objects' mass
    friction: list[float] = dataclasses.field(default_factory=lambda: [0.5, 0.75, 1.0, 1.25, 1.5])  # x the objects'
    # sliding friction
    actuator_gain: list[float] = dataclasses.field(default_factory=lambda: [0.8, 0.9, 1.0, 1.1, 1.2])  # x the arm's
    # position-servo stiffness kp
    camera_pos: list[float] = dataclasses.field(default_factory=lambda: [0.0, 5.0, 10.0, 20.0])  # mm: offset in
    # [-j, j] on each axis of each camera's position, drawn per episode
    camera_rot: list[float] = dataclasses.field(default_factory=lambda: [0.0, 1.0, 2.0, 5.0])  # deg: rotation of
    # each camera up to this about each axis, drawn per episode


@dataclasses.dataclass(frozen=True)
class Level:
    factor: Factor
    level: float
    randomization: object  # sim.config.RandomizationConfig with the level applied


def plan(cfg: RobustnessConfig, base, cameras: bool) -> list[Level]:
    """The levels to evaluate, factor by factor; `base` is the RandomizationConfig every other key keeps and
    `cameras` whether any policy reads camera images. ConfigError naming the key and the fix."""
    from robot_rl.sim.config import ConfigError

    if not (isinstance(cfg.episodes, int) and cfg.episodes >= 1):
        raise ConfigError(f"sweep.episodes={cfg.episodes!r} must be a whole number >= 1 (per level and policy)")
    valid = ", ".join(FACTORS)
    if cfg.factors is None:
        names = [n for n, f in FACTORS.items() if cameras or not f.cameras]
    else:
        names = list(cfg.factors)
        if not names:
            raise ConfigError(f"sweep.factors=[] sweeps nothing; name at least one of: {valid} (null: all that apply)")
        for n in names:
            if n not in FACTORS:
                raise ConfigError(f"sweep.factors: unknown factor {n!r}; valid factors: {valid}")
            if FACTORS[n].cameras and not cameras:
                raise ConfigError(f"sweep.factors: {n} jitters camera images and no policy here reads cameras; "
                                  f"drop {n} from sweep.factors (the default sweeps it only for camera policies)")
        if len(set(names)) != len(names):
            raise ConfigError(f"sweep.factors={names} names a factor twice; name each once")
    out = []
    for n in names:
        f, levels = FACTORS[n], list(getattr(cfg, n))
        if not levels:
            raise ConfigError(f"sweep.{n}=[] has no levels; give at least one, e.g. sweep.{n}=[{_num(1.0)}]")
        if len(set(levels)) != len(levels):
            raise ConfigError(f"sweep.{n}={levels} lists a level twice; list each once")
        for v in levels:
            rand = dataclasses.replace(base, **{f.key: f.value(v)})
            try:
                rand.validate()
            except ConfigError as e:
                raise ConfigError(f"sweep.{n}: level {_num(v)} {f.unit} is outside what the sim supports ({e}); "
                                  f"change that level") from None
            out.append(Level(f, v, rand))
    return out


def sweep(levels: list[Level], policies: list[str], evaluate: Callable, applies: Callable[[str, Factor], bool]
          ) -> list[dict]:
    """One record per (policy, factor, level) that applies: `evaluate(label, randomization)` -> robot_rl.evaluation
    metrics. Levels with the same randomization (each factor's nominal one) are evaluated once per policy."""
    done: dict[tuple, dict] = {}
    records = []
    for lv in levels:
        key = _key(lv)
        for label in policies:
            if not applies(label, lv.factor):
                continue
            m = done.get((label, key))
            if m is None:
                m = done[(label, key)] = evaluate(label, lv.randomization)
            records.append({
                "policy": label, "factor": lv.factor.name, "level": lv.level, "unit": lv.factor.unit,
                "successes": m["successes"], "episodes": m["episodes"], "success_rate": m["success_rate"],
                "success_ci95": list(m["success_ci95"]), "mean_return": m["mean_return"],
                "mean_length": m["mean_length"],
            })
    return records


def episodes_to_run(levels: list[Level], policies: list[str], episodes: int, applies) -> int:
    """How many episodes `sweep` runs (identical levels once): the progress bar's total."""
    return len({(label, _key(lv)) for lv in levels for label in policies if applies(label, lv.factor)}) * episodes


def _key(lv: Level) -> tuple:
    return tuple(sorted(dataclasses.asdict(lv.randomization).items()))


# ---- the card ---------------------------------------------------------------------------------------------------
def card(records: list[dict], levels: list[Level], policies: dict[str, str], meta: dict) -> dict:
    """The card as plain data (robustness.json): the setting, each factor's levels and the records."""
    factors = {}
    for lv in levels:
        f = factors.setdefault(lv.factor.name, {"key": lv.factor.key, "unit": lv.factor.unit, "levels": []})
        f["levels"].append(lv.level)
    return {**meta, "policies": policies, "factors": factors, "results": records}


def _num(v: float) -> str:
    return f"{v:g}"


def _cell(r: dict | None) -> str:
    if r is None:
        return "n/a"
    lo, hi = r["success_ci95"]
    return f"{r['success_rate']:.2f} ({lo:.2f}-{hi:.2f})"


def table(c: dict) -> tuple[list[list], list[str]]:
    """(rows, header): one row per factor level, per policy its success rate and 95% CI ("n/a": does not apply)."""
    by = {(r["policy"], r["factor"], r["level"]): r for r in c["results"]}
    rows = []
    for name, f in c["factors"].items():
        for v in f["levels"]:
            rows.append([FACTORS[name].label, _num(v), *(_cell(by.get((p, name, v))) for p in c["policies"])])
    return rows, ["factor", "level", *c["policies"]]


def figure(c: dict):
    """The card's figure: one panel per factor, success rate vs level with 95% CI bars, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(c["factors"])
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    policies = list(c["policies"])
    for ax, name in zip(axes.flat, names):
        levels = c["factors"][name]["levels"]
        span = (max(levels) - min(levels)) or 1.0
        for i, p in enumerate(policies):
            pts = sorted((r["level"], r) for r in c["results"] if r["policy"] == p and r["factor"] == name)
            if not pts:
                continue
            dx = (i - (len(policies) - 1) / 2) * 0.012 * span  # a little apart, so equal rates stay readable
            xs = [x + dx for x, _ in pts]
            ys = [r["success_rate"] for _, r in pts]
            err = [[y - r["success_ci95"][0] for y, (_, r) in zip(ys, pts)],
                   [r["success_ci95"][1] - y for y, (_, r) in zip(ys, pts)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=3, label=p, color=f"C{i}")
        ax.set_title(FACTORS[name].label, fontsize=10)
        ax.set_xticks(levels)
        ax.set_xticklabels([_num(v) for v in levels], fontsize=8)
        ax.set_ylim(-0.03, 1.03)
        ax.set_ylabel("success (95% CI)", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def write_card(run_dir: str | Path, c: dict) -> dict[str, Path]:
    """robustness.json, .md, .png and .html in run_dir (each written atomically); their paths by suffix."""
    from robot_rl.common.atomic import atomic_write_text, save_figure
    from robot_rl.report import write_page

    run_dir = Path(run_dir)
    out = {"json": atomic_write_text(run_dir / "robustness.json", json.dumps(c, indent=2) + "\n"),
           "png": save_figure(figure(c), run_dir / "robustness.png")}
    rows, header = table(c)
    meta = {("episodes per level" if k == "episodes" else k): c[k]
            for k in ("task", "backend", "episodes", "seed", "randomization", "generated") if k in c}
    base = c.get("randomization", "nominal")
    note = ("Success rate with its 95% Wilson interval per level; each factor is set alone, every other randomization "
            f"key {'nominal' if base == 'nominal' else f'as randomization={base} gives it'}; every level runs the "
            f"same episodes (seed {c.get('seed')}).")
    if any("n/a" in r for r in rows):
        note += " n/a: the factor changes camera images only and the policy reads none."
    out["html"], out["md"] = write_page(run_dir, "robustness", f"Robustness card: {c.get('task', '')}", meta,
                                        [("Success per factor level", out["png"], rows, header, note)])
    return out
