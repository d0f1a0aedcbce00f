"""The benchmark's results from whatever runs have finished: <out>.md (one table), <out>.jsonl, <out>_<task>.png.

Rows per task: the base alone (each residual run's own evaluation of its base at env step 0, on the final
evaluation's episodes), base + residual, RL from scratch and SB3 SAC. Per row: final success with its 95% Wilson
interval (several seeds: their mean, min-max and each seed's value), env steps to 0.5 / 0.8 / 0.9 (the first
evaluation at or above the level, robot_rl.rl.compare.first_reaching; several seeds: of their mean curve at the
evaluations they share, each seed's in brackets), robot minutes to 0.9 (env steps / control_hz / 60) and training
time (evaluations excluded; the base alone: its BC training). Runs that have not finished read "not run", so the
table can be rebuilt at any time (robot-rl-benchmark report_only=true).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from robot_rl.benchmark import BenchmarkConfig, machine, read_record, stage_dir, task_stages
from robot_rl.evaluation import wilson_interval
from robot_rl.rl.compare import first_reaching, load_curve, load_group, plot_comparison
from robot_rl.sim.config import EnvConfig

LEVELS = (0.5, 0.8, 0.9)
ROWS = (("base", "base alone"), ("residual", "base + residual"), ("learned", "base + residual, learned reward"),
        ("scratch", "RL from scratch"), ("sac", "SB3 SAC"))
SEEDED = ("base", "residual", "learned")  # rows over cfg.seeds (the others over baseline_seeds)
DEFAULT_HZ = EnvConfig.control_hz  # for runs whose records do not say


def read_metrics(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def control_hz(run_dir: Path, metrics: dict) -> float:
    """The rate of the run's env: metrics.json (residual, scratch and sac runs), else its config.yaml's env.control_hz
    (runs recorded before metrics.json had it), else the default."""
    if metrics.get("control_hz"):
        return float(metrics["control_hz"])
    try:
        import yaml

        cfg = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
        return float(cfg["env"]["control_hz"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_HZ


def seed_figures(kind: str, run_dir: Path, metrics: dict) -> dict:
    """One finished run's figures: success (successes / episodes), its curve's steps to each level, env steps,
    training time. kind "base": the base alone, from the residual run's base_eval."""
    if kind == "base":
        b = metrics["base_eval"]
        k, n, rate = b["successes"], b["episodes"], b["success_rate"]
        curve = {"x": [0], "y": [rate]}
        bc = read_metrics(run_dir.with_name("bc")) or {}
        # a BC run resumed from a checkpoint that did not keep the time timed only its last part: unknown
        train, steps = (None if bc.get("train_time_from_step") else bc.get("train_time_s")), 0
    else:
        ev = metrics.get("eval", {})
        rate, k, n = metrics["success_rate"], ev.get("successes"), ev.get("episodes")
        curve = load_curve(run_dir)
        train, steps = metrics.get("train_time_s"), metrics.get("env_steps")
    wall = (read_metrics(run_dir.with_name("bc")) or {}).get("wall_time_s") if kind == "base" else \
        metrics.get("wall_time_s")
    ci = list(wilson_interval(k, n)) if k is not None and n else metrics.get("success_ci95")
    out = {"success": rate, "successes": k, "episodes": n, "ci95": ci, "curve": curve, "env_steps": steps,
           "train_time_s": train, "wall_time_s": wall, "control_hz": control_hz(run_dir, metrics),
           "steps_to": {lv: first_reaching(curve, lv) for lv in LEVELS}}
    if kind != "base" and metrics.get("labels"):  # learned rewards: what the robot's operator gave, robot time
        g = metrics["guard"]
        out.update(labels=metrics["labels"]["total"], robot_minutes=metrics["robot_minutes"]["total"],
                   rollbacks=g["rollbacks"], stopped_at=g["stopped_at"], warnings=list(metrics.get("warnings", [])))
    return out


def row(cfg: BenchmarkConfig, task: str, kind: str) -> dict:
    """The figures of one (task, run) over its seeds; status "not run" / "partial" / "done"."""
    plan = cfg.tasks[task]
    if kind in SEEDED:
        seeds = list(cfg.seeds)
    else:
        seeds = list(cfg.baseline_seeds) if kind in plan.baselines else []
    src = "residual" if kind == "base" else kind
    dirs = {s: stage_dir(cfg.runs, task, s, src) for s in seeds}
    done = {}
    for s, d in dirs.items():
        m = read_metrics(d)
        if m is not None and (kind != "base" or m.get("base_eval")):
            done[s] = seed_figures(kind, d, m)
    label = dict(ROWS)[kind]
    out = {"task": task, "run": kind, "label": label, "seeds_planned": seeds, "seeds": sorted(done),
           "status": "not run" if not done else "done" if len(done) == len(seeds) else "partial",
           "run_dirs": [str(dirs[s]) for s in sorted(done)]}
    if not seeds:
        out["status"] = "not planned"
    if not done:
        return out
    each = [done[s] for s in sorted(done)]
    rates = [f["success"] for f in each]
    out.update(success=sum(rates) / len(rates), success_each=rates, success_min=min(rates), success_max=max(rates),
               success_ci95=each[0]["ci95"] if len(each) == 1 else None,
               episodes=[f["episodes"] for f in each], env_steps_each=[f["env_steps"] for f in each],
               control_hz=each[0]["control_hz"])
    if len(each) == 1:
        steps_to, note = each[0]["steps_to"], None
    elif kind == "base":
        steps_to, note = {lv: 0 if out["success"] >= lv else None for lv in LEVELS}, None
    else:
        try:
            mean = load_group([dirs[s] for s in sorted(done)])
            steps_to, note = {lv: first_reaching(mean, lv) for lv in LEVELS}, None
        except ValueError as e:  # seeds evaluated at no common env step: no mean curve
            steps_to, note = {lv: None for lv in LEVELS}, str(e)
    out["steps_to"] = {f"{lv:g}": v for lv, v in steps_to.items()}
    out["steps_to_each"] = {f"{lv:g}": [f["steps_to"][lv] for f in each] for lv in LEVELS}
    s90 = steps_to[0.9]
    out["robot_minutes_to_0.9"] = None if s90 is None else s90 / out["control_hz"] / 60.0
    times = [f["train_time_s"] for f in each if f["train_time_s"] is not None]
    out["train_time_s"] = sum(times) / len(times) if times else None
    out["train_time_s_each"] = [f["train_time_s"] for f in each]
    out["wall_time_s_each"] = [f["wall_time_s"] for f in each]  # with evaluations and start-up
    if "labels" in each[0]:
        for k in ("labels", "robot_minutes", "rollbacks", "stopped_at", "warnings"):
            out[f"{k}_each"] = [f.get(k) for f in each]
    if note:
        out["note"] = note
    return out


def ratio(rows: list[dict]) -> dict:
    """Env steps to 0.9, best baseline / base + residual: {"ratio", "bound" (">" when no baseline reached 0.9: the
    ratio of the fewest env steps a baseline ran), "text"}."""
    by = {r["run"]: r for r in rows}
    res = by.get("residual", {})
    if "steps_to" not in res:
        return {"ratio": None, "text": "n/a: base + residual has not finished"}
    r90 = res["steps_to"]["0.9"]
    if r90 is None:
        return {"ratio": None, "text": "n/a: base + residual did not reach 0.9"}
    if r90 == 0:
        return {"ratio": None, "text": "n/a: the base alone already reaches 0.9 (env step 0)"}
    base = [by[k] for k in ("scratch", "sac") if "steps_to" in by.get(k, {})]
    if not base:
        return {"ratio": None, "text": "n/a: no baseline has finished"}
    reached = [(b["steps_to"]["0.9"], b["label"]) for b in base if b["steps_to"]["0.9"] is not None]
    if reached:
        steps, label = min(reached)
        return {"ratio": steps / r90, "bound": "=", "text": f"{steps / r90:.2f} ({label} {steps:,} / base + residual "
                                                            f"{r90:,} env steps)"}
    # each baseline would need more env steps than it ran (its fewest over seeds), so the best of them more than the
    # fewest of those: a budget cut short by time bounds the ratio below the planned env steps
    ran = [(min(b["env_steps_each"]), b["label"]) for b in base]
    bound = min(ran)[0]
    each = ", ".join(f"{label} {steps:,}" for steps, label in ran)
    return {"ratio": bound / r90, "bound": ">", "text": f"> {bound / r90:.2f} (no baseline reached 0.9: {each} env "
                                                        f"steps; base + residual {r90:,})"}


def gain_kept(rows: list[dict]) -> dict:
    """The learned reward's gain over the base against the simulator reward's, seed by seed on the same bases:
    {"ratio" (of the mean gains), "each", "text"}."""
    by = {r["run"]: r for r in rows}
    base, sim, learned = (by.get(k, {}) for k in ("base", "residual", "learned"))
    seeds = sorted(set(base.get("seeds", [])) & set(sim.get("seeds", [])) & set(learned.get("seeds", [])))
    if not seeds:
        return {"ratio": None, "text": "n/a: base + residual on both rewards has not finished on a common seed"}

    def at(r, s):
        return r["success_each"][r["seeds"].index(s)]

    gains = [(at(learned, s) - at(base, s), at(sim, s) - at(base, s)) for s in seeds]
    g_learned, g_sim = (sum(g[i] for g in gains) / len(gains) for i in (0, 1))
    each = ", ".join(f"seed {s}: {gl:+.3f} / {gs:+.3f}" for s, (gl, gs) in zip(seeds, gains))
    if g_sim <= 0:
        return {"ratio": None, "text": f"n/a: the simulator reward gained nothing ({each})"}
    return {"ratio": g_learned / g_sim, "each": gains,
            "text": f"{g_learned / g_sim:.2f} (mean gain {g_learned:+.3f} learned / {g_sim:+.3f} simulator; {each})"}


# ---- formatting ---------------------------------------------------------------------------------------------------
def _steps(v) -> str:
    return "–" if v is None else f"{v:,}"


def cells(r: dict) -> list[str]:
    """The table cells after task and run."""
    if r["status"] in ("not run", "not planned"):
        return [r["status"]] + ["–"] * 5
    n = len(r["seeds"])
    if n == 1:
        lo, hi = r["success_ci95"] or (float("nan"), float("nan"))
        success = f"{r['success']:.3f} ({lo:.2f}-{hi:.2f})"
    else:
        each = ", ".join(f"{x:.3f}" for x in r["success_each"])
        success = f"{r['success']:.3f} (min-max {r['success_min']:.2f}-{r['success_max']:.2f}; seeds {each})"
    if r["status"] == "partial":
        success += f" [{n} of {len(r['seeds_planned'])} seeds]"
    out = [success]
    for lv in LEVELS:
        key = f"{lv:g}"
        v = r["steps_to"][key]
        text = "not reached" if v is None else f"{v:,}"
        if n > 1:
            text += " [" + ", ".join(_steps(x) for x in r["steps_to_each"][key]) + "]"
        out.append(text)
    m = r["robot_minutes_to_0.9"]
    out.append("–" if m is None else f"{m:.1f}")
    t = r["train_time_s"]
    out.append("–" if t is None else f"{t:,.0f} s" + (" (mean)" if n > 1 else ""))
    return out


def figure(cfg: BenchmarkConfig, task: str, rows: list[dict], path: Path) -> Path | None:
    """<out>_<task>.png: the curves of every finished trained run (seeds: mean and min-max band)."""
    runs = {}
    for r in rows:
        if r["run"] != "base" and r.get("run_dirs"):
            runs[r["label"]] = r["run_dirs"]
    if not runs:
        return None
    try:
        return plot_comparison(runs, path, title=f"{task}: evaluation success (base + residual starts at the base)")
    except ValueError:  # seeds with no shared evaluation: one curve per run
        flat = {f"{label} seed {Path(d).parent.name[4:]}": d for label, ds in runs.items() for d in ds}
        return plot_comparison(flat, path, title=f"{task}: evaluation success")


def write_report(cfg: BenchmarkConfig, command: str = "") -> dict:
    """Write <out>.md, <out>.jsonl and <out>_<task>.png from the finished runs; {"md", "jsonl", "png": [...]}."""
    from robot_rl.common.atomic import atomic_write_text

    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tasks = cfg.task_names()
    rows = {t: [row(cfg, t, kind) for kind, _ in ROWS] for t in tasks}
    ratios = {t: ratio(rows[t]) for t in tasks}
    kept = {t: gain_kept(rows[t]) for t in tasks}
    pngs = {}
    for t in tasks:
        p = figure(cfg, t, rows[t], out.with_name(f"{out.name}_{t}.png"))
        if p is not None:
            pngs[t] = p
    records = [(s, read_record(s)) for t in tasks for s in task_stages(cfg, t)]
    records = [(s, r) for s, r in records if r and r.get("finished") and (s.dir / "metrics.json").is_file()]
    lines = []
    for t in tasks:
        for r in rows[t]:
            line = {k: v for k, v in r.items()}
            if r["run"] == "residual":
                line["steps_to_0.9_best_baseline_over_residual"] = ratios[t]
            if r["run"] == "learned":
                line["gain_learned_over_simulator_reward"] = kept[t]
            lines.append(json.dumps(line, sort_keys=True))
    jsonl = atomic_write_text(Path(f"{out}.jsonl"), "\n".join(lines) + "\n")
    md = atomic_write_text(Path(f"{out}.md"), markdown(cfg, tasks, rows, ratios, pngs, records, command, out, kept))
    return {"md": md, "jsonl": jsonl, "png": list(pngs.values())}


def markdown(cfg, tasks, rows, ratios, pngs, records, command, out, kept=None) -> str:
    finished = sorted(r["finished"] for _, r in records)
    commits = sorted({r.get("commit", "unknown") for _, r in records})
    machines = sorted({r.get("machine", "unknown") for _, r in records})
    jobs = sorted({r.get("jobs", 1) for _, r in records})
    runs = f"runs finished {finished[0]} to {finished[-1]}" if finished else "no run has finished yet"
    plan_lines = []
    for t in tasks:
        p = cfg.tasks[t]
        plan_lines.append(f"| {t} | {p.demos} (noise {p.demo_noise:g}) | {p.bc_policy}, {p.bc_steps:,} steps | "
                          f"{p.env_steps:,} / {p.time_budget_s:g} s"
                          f"{'' if p.baseline_time_budget_s is None else f' (baselines {p.baseline_time_budget_s:g} s)'}"
                          f" | {p.eval_every:,} ({p.eval_episodes}) / "
                          f"{p.final_eval_episodes} | {', '.join(p.baselines) or '-'} |")
    text = [
        "# Benchmark: demonstrations -> BC -> residual RL -> baselines, per task",
        "",
        f"- Date: table written {time.strftime('%Y-%m-%d %H:%M')}; {runs}.",
        f"- Commit(s) of the runs: {', '.join(commits) or '-'}.",
        f"- Machine(s) of the runs: {'; '.join(machines) or '-'} (this table written on: {machine()}). Training "
        f"times are wall-clock seconds on these machines, with {' or '.join(map(str, jobs or [1]))} stage(s) "
        "running at once (`jobs`).",
        f"- Command: `robot-rl-benchmark{(' ' + command) if command else ''}`; rebuild this page from the finished "
        f"runs: `robot-rl-benchmark report_only=true{(' ' + command) if command else ''}`. Runs: `{cfg.runs}`.",
        f"- Seeds: demonstrations, BC and residual RL {cfg.seeds} (the base alone and base + residual rows); "
        f"RL from scratch and SB3 SAC {cfg.baseline_seeds}. Every evaluation: env seed {cfg.eval_seed}, the same "
        "episodes for every run of a task (periodic ones fewer, see the plan).",
        "",
        "Success: the final evaluation of the run's policy (residual and scratch runs keep the best evaluated policy; "
        "the base alone is the residual run's evaluation of its base at env step 0 on the same episodes), with the 95% "
        "Wilson interval; several seeds: mean (min-max; each seed). Env steps to a level: the first evaluation at or "
        "above it; several seeds: of their mean curve, each seed's in brackets (– : not reached). Robot minutes: "
        "env steps / control_hz / 60. Training time: seconds of training, evaluations excluded (the base alone: its "
        "BC training). SB3 SAC learns from the task's dense reward (`reward=env`) without demonstrations; residual and "
        "scratch from the success reward with the demonstrations in half of every batch.",
        "",
        "| task | run | final success (95% CI) | env steps to 0.5 | to 0.8 | to 0.9 | robot minutes to 0.9 | "
        "training time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in tasks:
        for r in rows[t]:
            text.append(f"| {t} | {r['label']} | " + " | ".join(cells(r)) + " |")
    text += ["", "Env steps to 0.9, best baseline / base + residual (how many times the env steps the best of RL "
             "from scratch and SB3 SAC needed):", ""]
    text += [f"- {t}: {ratios[t]['text']}" for t in tasks]
    learned = [r for t in tasks for r in rows[t] if r["run"] == "learned" and r.get("labels_each")]
    if learned:
        text += ["", "Base + residual on the learned rewards a robot has (the reward model trained on the demos and the "
                 "base's rollouts; operator labels and checked episodes by the scripted labeller), against the "
                 "simulator's success reward on the same bases, demos and budget: share of the gain over the base "
                 "kept (mean gains, then each seed's learned / simulator):", ""]
        text += [f"- {t}: {kept[t]['text']}" for t in tasks if kept and kept[t]]
        text += ["", "Operator labels and robot minutes (training and checked episodes) of each learned-reward run, and "
                 "what its guard did:", ""]
        for r in learned:
            for s, lab, mins, rb, stop, warns in zip(r["seeds"], r["labels_each"], r["robot_minutes_each"],
                                                     r["rollbacks_each"], r["stopped_at_each"], r["warnings_each"]):
                did = f"{rb} rollbacks" + (f", stopped at env step {stop:,}" if stop is not None else "")
                text.append(f"- {r['task']} seed {s}: {lab:,} labels, {mins:.1f} robot minutes; {did}"
                            + "".join(f"; warning: {w}" for w in warns or []))
    notes = [f"- {r['task']} {r['label']}: {r['note']}" for t in tasks for r in rows[t] if r.get("note")]
    if notes:
        text += ["", *notes]
    text += ["", "## Curves", ""]
    for t in tasks:
        text.append(f"![{t}]({pngs[t].name})" if t in pngs else f"- {t}: no finished training run yet")
    text += ["", "## Plan (robot_rl/benchmark.py TaskPlan)", "",
             "| task | demos per seed | base policy | RL budget (env steps / training s) | eval every (episodes) / "
             "final episodes | baselines |", "|---|---|---|---|---|---|", *plan_lines, "", "## Commands, as run", ""]
    for t in tasks:
        ran = [(s, r) for s, r in records if s.task == t]
        text.append(f"{t}:" if ran else f"{t}: nothing has finished yet")
        if ran:
            text += ["", "```bash", *[shlex.join(r["argv"]) for _, r in ran], "```", ""]
    return "\n".join(text).rstrip() + "\n"
