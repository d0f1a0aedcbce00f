"""One figure of several runs' evaluation success: residual RL, RL from scratch and the base alone.

    python -m robot_rl.rl.compare residual=runs/train_residual/<a> scratch=runs/train_residual/<b> \
        base=runs/train_residual/<c> --out compare.png [--x time] [--reach 0.8]

A seed sweep (`robot-rl-train-residual -m rl.seed=0,1,2 ...`) is one argument: `residual=<the sweep directory>`
(runs/train_residual/multirun/<date>/<time>, holding multirun.yaml) stands for its job directories; jobs that differ
in more than a seed (`-m rl.seed=0,1 rl.utd=1,2`) become one label per setting, `residual[rl.utd=1]`, ...
A label given more than once (seeds: `sparse=<s0> sparse=<s1> ...`) is drawn as the mean over its runs at the
evaluations they share, with their min-max as a band. `--reach LEVEL` also prints one JSON line per run: the first evaluation at or above LEVEL (env steps, or
training seconds with --x time; null when none reached it) and the best success (for a label of several runs: of their mean curve, with each run's first step too).

Reads each run directory's metrics.json (`history["eval/success_rate"]`, and `eval/train_time_s` for a time
axis; a residual run's curve starts at its base's success, `eval/base_success_rate`, at step 0). A run with a single point (mode=base: a policy that does not train) is drawn as a horizontal line
across the figure, with its 95% interval as a band when metrics.json has one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robot_rl.common.atomic import save_figure

X_AXES = ("steps", "time")


def load_curve(run_dir: str | Path, x: str = "steps") -> dict:
    """{"x": [...], "y": [...], "ci": (lo, hi) | None} of a run's evaluation success (x: env steps or training s)."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r}; valid: {', '.join(X_AXES)}")
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a finished run directory?")
    metrics = json.loads(path.read_text())
    hist = metrics.get("history", {})
    points = hist.get("eval/success_rate", [])
    if not points:
        raise ValueError(f"{path} has no eval/success_rate history (was the run evaluated?)")
    base = hist.get("eval/base_success_rate")
    if base and points[0][0] > 0:  # a residual run starts as its base: its curve starts at the base's success
        points = [[0, base[0][1]]] + points
    steps, ys = [p[0] for p in points], [p[1] for p in points]
    if x == "time" and len(points) > 1:
        times = {0: 0.0} | dict((s, t) for s, t in hist.get("eval/train_time_s", []))
        missing = [s for s in steps if s not in times]
        if missing:
            raise ValueError(f"{path}: no eval/train_time_s at env steps {missing[:3]}; plot with x=steps")
        xs = [times[s] for s in steps]
    else:
        xs = steps
    ci = metrics.get("success_ci95")
    return {"x": xs, "y": ys, "ci": tuple(ci) if ci else None}


def sweep_runs(label: str, path: str | Path) -> dict[str, list[Path]]:
    """{label: [run dirs]} of one label=RUN_DIR argument: the run itself, or the jobs of a Hydra sweep directory (-m;
    multirun.yaml in it), one label per setting of the keys the jobs differ in besides seeds (each job's command line
    is its .hydra/overrides.yaml)."""
    path = Path(path)
    if not (path / "multirun.yaml").is_file():
        return {label: [path]}
    jobs = sorted((p for p in path.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not jobs:
        raise ValueError(f"{path} is a sweep directory without job directories (did the sweep start?)")
    settings = [_job_settings(j) for j in jobs]
    varied = sorted({k for s in settings for k in s if len({t.get(k) for t in settings}) > 1})
    groups: dict[str, list[Path]] = {}
    for job, s in zip(jobs, settings):
        name = f"{label}[{','.join(f'{k}={s.get(k)}' for k in varied)}]" if varied else label
        groups.setdefault(name, []).append(job)
    return groups


def _job_settings(job: Path) -> dict[str, str]:
    """key -> value of a sweep job's overrides, seeds left out."""
    from omegaconf import OmegaConf

    record = job / ".hydra" / "overrides.yaml"
    if not record.is_file():
        raise FileNotFoundError(f"{record} does not exist: is {job} a finished job of the sweep?")
    out = {}
    for item in OmegaConf.to_container(OmegaConf.load(record)):
        key, _, value = str(item).partition("=")
        if key.lstrip("+~").split(".")[-1] != "seed":
            out[key] = value
    return out


def first_reaching(curve: dict, level: float) -> float | None:
    """The first x (env steps / seconds) of a load_curve whose evaluation success is >= level, None if none is."""
    return next((x for x, y in zip(curve["x"], curve["y"]) if y >= level), None)


def load_group(run_dirs, x: str = "steps") -> dict:
    """load_curve of one run, or of several (seeds): their mean at the x they all share, with "lo" / "hi" (min /
    max over the runs) and "runs" (each run's curve)."""
    if isinstance(run_dirs, (str, Path)):
        return load_curve(run_dirs, x)
    runs = [load_curve(d, x) for d in run_dirs]
    if len(runs) == 1:
        return runs[0]
    shared = sorted(set.intersection(*(set(c["x"]) for c in runs)))
    if not shared:
        raise ValueError(f"runs {[str(d) for d in run_dirs]} share no evaluation {x}: evaluate them at the same "
                         "rl.eval_every to average them")
    ys = [[dict(zip(c["x"], c["y"]))[v] for v in shared] for c in runs]
    cols = list(zip(*ys))
    return {"x": shared, "y": [sum(c) / len(c) for c in cols], "lo": [min(c) for c in cols],
            "hi": [max(c) for c in cols], "ci": None, "runs": runs}


def plot_comparison(runs: dict, out: str | Path, x: str = "steps", title: str = "") -> Path:
    """PNG at `out` with one curve per label (written atomically); a label maps to a run directory, or to a
    list of them (seeds: their mean curve and min-max band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {label: load_group(d, x) for label, d in runs.items()}
    trained = [c for c in curves.values() if len(c["x"]) > 1]
    right = max((max(c["x"]) for c in trained), default=1.0)
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, c in curves.items():
        if len(c["x"]) > 1:
            n = len(c.get("runs", [])) or 1
            line, = ax.plot(c["x"], c["y"], marker="o", ms=3, label=label if n == 1 else f"{label} (mean of {n})")
            if "lo" in c:
                ax.fill_between(c["x"], c["lo"], c["hi"], color=line.get_color(), alpha=0.15)
            if c["ci"]:  # the interval of the final evaluation
                ax.errorbar([c["x"][-1]], [c["y"][-1]], yerr=[[c["y"][-1] - c["ci"][0]], [c["ci"][1] - c["y"][-1]]],
                            color=line.get_color(), capsize=4)
        else:
            line, = ax.plot([0, right], [c["y"][0]] * 2, ls="--", label=label)
            if c["ci"]:
                ax.fill_between([0, right], c["ci"][0], c["ci"][1], color=line.get_color(), alpha=0.15)
    ax.set_xlabel("env steps" if x == "steps" else "training time (s)")
    ax.set_ylabel("evaluation success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return save_figure(fig, out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="label=RUN_DIR (or label=SWEEP_DIR: the jobs of a -m sweep)")
    ap.add_argument("--out", required=True, help="PNG path")
    ap.add_argument("--x", choices=X_AXES, default="steps", help="x axis: env steps or training seconds")
    ap.add_argument("--title", default="")
    ap.add_argument("--reach", type=float, default=None, metavar="LEVEL",
                    help="also print each run's first evaluation with success >= LEVEL (JSON lines)")
    args = ap.parse_args(argv)
    if args.reach is not None and not 0.0 <= args.reach <= 1.0:
        ap.error(f"--reach {args.reach}: a success rate in [0, 1]")
    runs: dict[str, list[str]] = {}
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            ap.error(f"{item!r}: give runs as label=RUN_DIR")
        runs.setdefault(label, []).append(path)
    try:
        expanded: dict[str, list] = {}
        for label, paths in runs.items():
            for p in paths:
                for name, dirs in sweep_runs(label, p).items():
                    expanded.setdefault(name, []).extend(dirs)
        runs = expanded
        print(plot_comparison(runs, args.out, args.x, args.title))
        if args.reach is not None:
            key = f"first_{args.x}_at_{args.reach:g}"
            for label, d in runs.items():
                c = load_group(d, args.x)
                line = {"run": label, key: first_reaching(c, args.reach), "best": max(c["y"])}
                if "runs" in c:
                    line.update(runs=len(c["runs"]), each=[first_reaching(r, args.reach) for r in c["runs"]])
                print(json.dumps(line))
    except (FileNotFoundError, ValueError) as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")


if __name__ == "__main__":
    main()
