"""robot-rl-benchmark: the table from finished run dirs (thresholds, robot minutes, seeds, missing runs, the ratio)
and the rules that reuse, resume or redo a stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robot_rl.benchmark import BenchmarkConfig, Runner, StageFailed, TaskPlan, stage_dir, task_stages
from robot_rl.benchmark_table import ratio, row, write_report


def run_dir(path: Path, curve: list[tuple[int, float]], successes: int, episodes: int = 200, base: float | None = None,
            train_time: float = 100.0, hz: float | None = None) -> Path:
    """A finished run directory as residual / scratch / sac runs write them."""
    path.mkdir(parents=True, exist_ok=True)
    hist = {"eval/success_rate": [[s, y] for s, y in curve], "eval/train_time_s": [[s, s / 100] for s, _ in curve]}
    m = {"success_rate": successes / episodes, "success_ci95": [0, 1], "env_steps": curve[-1][0],
         "train_time_s": train_time, "eval": {"successes": successes, "episodes": episodes}, "history": hist}
    if base is not None:
        hist["eval/base_success_rate"] = [[0, base]]
        m["base_eval"] = {"success_rate": base, "successes": round(base * episodes), "episodes": episodes,
                          "success_ci95": [0, 1]}
    if hz is not None:
        (path / "config.yaml").write_text(f"env:\n  control_hz: {hz}\n")
    (path / "metrics.json").write_text(json.dumps(m))
    return path


def test_the_table_gives_thresholds_robot_minutes_seed_spread_and_not_run_rows(tmp_path):
    cfg = BenchmarkConfig(tasks={"lift": TaskPlan(), "push": TaskPlan(baselines=["scratch"])},
                          runs=str(tmp_path / "runs"), out=str(tmp_path / "res" / "tasks"), seeds=[0, 1, 2],
                          baseline_seeds=[0])

    def d(task, seed, stage):
        return stage_dir(cfg.runs, task, seed, stage)

    # lift, 3 residual seeds: mean curve (0.2, 0.6, 0.9 at 0 / 20k / 40k), 10 Hz control
    run_dir(d("lift", 0, "residual"), [(20_000, 0.5), (40_000, 0.9), (52_000, 0.95)], 190, base=0.2, hz=10.0)
    run_dir(d("lift", 1, "residual"), [(20_000, 0.6), (40_000, 0.85), (48_000, 0.9)], 180, base=0.1, hz=10.0)
    run_dir(d("lift", 2, "residual"), [(20_000, 0.7), (40_000, 0.95), (50_000, 0.96)], 192, base=0.3, hz=10.0)
    (d("lift", 0, "bc").mkdir(parents=True))
    (d("lift", 0, "bc") / "metrics.json").write_text(json.dumps({"train_time_s": 250.0}))
    run_dir(d("lift", 0, "scratch"), [(20_000, 0.3), (40_000, 0.5), (100_000, 0.9)], 180, hz=10.0)
    # push: one residual seed of three finished; its scratch never reached 0.9; nothing else
    run_dir(d("push", 1, "residual"), [(20_000, 0.92)], 186, base=0.5, hz=20.0)
    run_dir(d("push", 0, "scratch"), [(20_000, 0.4), (60_000, 0.7)], 140)

    res, base = row(cfg, "lift", "residual"), row(cfg, "lift", "base")
    assert res["status"] == "done" and res["seeds"] == [0, 1, 2]
    assert res["steps_to"] == {"0.5": 20_000, "0.8": 40_000, "0.9": 40_000}  # mean 0.6 at 20k, 0.9 at 40k
    assert res["steps_to_each"]["0.9"] == [40_000, 48_000, 40_000]
    assert res["robot_minutes_to_0.9"] == pytest.approx(40_000 / 10 / 60)
    assert res["success"] == pytest.approx((0.95 + 0.9 + 0.96) / 3)
    assert (res["success_min"], res["success_max"]) == (0.9, 0.96) and res["success_ci95"] is None
    assert base["success_each"] == [0.2, 0.1, 0.3] and base["steps_to"]["0.5"] is None
    assert base["train_time_s_each"] == [250.0, None, None]  # the BC run's; the other seeds' BC has no metrics
    scratch = row(cfg, "lift", "scratch")
    assert scratch["success_ci95"] == pytest.approx([0.851, 0.934], abs=1e-3)  # Wilson: 180 of 200
    assert scratch["steps_to"]["0.9"] == 100_000 and scratch["robot_minutes_to_0.9"] == pytest.approx(100_000 / 600)
    assert row(cfg, "lift", "sac")["status"] == "not run"
    assert ratio([res, row(cfg, "lift", "scratch"), row(cfg, "lift", "sac")])["ratio"] == pytest.approx(2.5)

    push = [row(cfg, "push", k) for k in ("base", "residual", "scratch", "sac")]
    assert push[1]["status"] == "partial" and push[1]["seeds"] == [1] and push[1]["steps_to"]["0.9"] == 20_000
    assert push[1]["robot_minutes_to_0.9"] == pytest.approx(20_000 / 20 / 60)
    assert push[3]["status"] == "not planned"
    r = ratio(push)
    assert r["bound"] == ">" and r["ratio"] == pytest.approx(3.0)  # scratch's 60k budget / 20k, never reached 0.9

    paths = write_report(cfg, "only=[lift,push]")
    md = paths["md"].read_text()
    assert "| lift | SB3 SAC | not run |" in md
    assert ("| lift | base + residual | 0.937 (min-max 0.90-0.96; seeds 0.950, 0.900, 0.960) | 20,000 [20,000, "
            "20,000, 20,000] | 40,000 [40,000, 40,000, 40,000] | 40,000 [40,000, 48,000, 40,000] | 66.7 | "
            "100 s (mean) |") in md
    assert "[1 of 3 seeds]" in md and "- lift: 2.50 (RL from scratch 100,000 / base + residual 40,000 env steps)" in md
    lines = [json.loads(x) for x in paths["jsonl"].read_text().splitlines()]
    assert [(x["task"], x["run"]) for x in lines][:4] == [("lift", "base"), ("lift", "residual"), ("lift", "scratch"),
                                                          ("lift", "sac")]
    assert lines[1]["steps_to_0.9_best_baseline_over_residual"]["ratio"] == pytest.approx(2.5)
    assert [p.name for p in paths["png"]] == ["tasks_lift.png", "tasks_push.png"]


def test_finished_stages_are_reused_a_changed_command_stops_and_a_redone_input_reruns(tmp_path):
    cfg = BenchmarkConfig(tasks={"lift": TaskPlan(baselines=[])}, runs=str(tmp_path), seeds=[0])
    demos, bc, residual = task_stages(cfg, "lift")
    runner = Runner(cfg, say=lambda line: None)

    def finish(stage, **record):
        stage.dir.mkdir(parents=True, exist_ok=True)
        (stage.dir / "metrics.json").write_text("{}")
        rec = {"id": stage.name + "1", "argv": stage.argv, "finished": "now", "inputs": runner.inputs(stage), **record}
        stage.record_path.write_text(json.dumps(rec))

    assert runner.decide(demos) == "run"
    finish(demos)
    finish(bc)
    assert runner.decide(bc) == "reuse"
    finish(residual)
    (residual.dir / "metrics.json").unlink()  # a training killed before its end, with its checkpoints
    (residual.dir / "checkpoints").mkdir()
    (residual.dir / "checkpoints" / "latest.json").write_text("{}")
    assert runner.decide(residual) == "resume"
    finish(bc, id="bc2")  # BC redone since: the residual belongs to the old BC
    assert runner.decide(residual) == "run"
    changed = BenchmarkConfig(tasks={"lift": TaskPlan(bc_steps=8000, baselines=[])}, runs=str(tmp_path), seeds=[0])
    with pytest.raises(StageFailed, match=r"made by another command \(steps=1500 -> steps=8000\); redo it with "
                                          r"force=\[bc\]"):
        Runner(changed).decide(task_stages(changed, "lift")[1])
    forced = BenchmarkConfig(tasks=changed.tasks, runs=str(tmp_path), seeds=[0], force=["bc"])
    assert Runner(forced).decide(task_stages(forced, "lift")[1]) == "run"
