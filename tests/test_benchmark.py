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
    (d("lift", 1, "bc").mkdir(parents=True))  # resumed from a checkpoint without the time: 40 s of its last part
    (d("lift", 1, "bc") / "metrics.json").write_text(json.dumps({"train_time_s": 40.0, "train_time_from_step": 900}))
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
    # seed 0's BC run; seed 1's timed only its part after step 900 (unknown, not 40 s); seed 2's has no metrics
    assert base["train_time_s_each"] == [250.0, None, None] and base["train_time_s"] == 250.0
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
    assert [(x["task"], x["run"]) for x in lines][:5] == [("lift", "base"), ("lift", "residual"), ("lift", "learned"),
                                                          ("lift", "scratch"), ("lift", "sac")]
    assert lines[1]["steps_to_0.9_best_baseline_over_residual"]["ratio"] == pytest.approx(2.5)
    assert [p.name for p in paths["png"]] == ["tasks_lift.png", "tasks_push.png"]


def test_the_learned_reward_row_gives_the_gain_it_keeps_its_labels_robot_minutes_and_what_its_guard_did(tmp_path):
    """Two seeds of base + residual on both rewards, the same bases: the share of the simulator reward's gain kept is
    the ratio of the mean gains; the learned runs' labels, robot minutes, rollbacks and warnings are listed."""
    from robot_rl.benchmark_table import gain_kept

    cfg = BenchmarkConfig(tasks={"peg_insert": TaskPlan(baselines=[])}, runs=str(tmp_path / "runs"),
                          out=str(tmp_path / "res" / "t"), seeds=[0, 1])
    for seed, (base, sim, learned) in enumerate([(0.6, 0.98, 0.9), (0.8, 1.0, 0.8)]):
        run_dir(stage_dir(cfg.runs, "peg_insert", seed, "residual"), [(20_000, sim)], round(sim * 200), base=base)
        d = run_dir(stage_dir(cfg.runs, "peg_insert", seed, "learned"), [(20_000, learned)], round(learned * 200),
                    base=base)
        m = json.loads((d / "metrics.json").read_text())
        m.update(labels={"total": 300 + seed}, robot_minutes={"total": 50.0 + seed},
                 guard={"rollbacks": seed, "stopped_at": 40_000 if seed else None},
                 warnings=["check at env step 40000: ... rolled back"] if seed else [])
        (d / "metrics.json").write_text(json.dumps(m))
    rows = [row(cfg, "peg_insert", k) for k in ("base", "residual", "learned")]
    kept = gain_kept(rows)
    assert kept["ratio"] == pytest.approx(((0.9 - 0.6) + 0.0) / ((0.98 - 0.6) + (1.0 - 0.8)))
    assert rows[2]["labels_each"] == [300, 301] and rows[2]["rollbacks_each"] == [0, 1]
    md = write_report(cfg)["md"].read_text()
    assert "- peg_insert: 0.52 (mean gain +0.150 learned / +0.290 simulator; seed 0: +0.300 / +0.380" in md
    assert "- peg_insert seed 1: 301 labels, 51.0 robot minutes; 1 rollbacks, stopped at env step 40,000; warning: " \
           "check at env step 40000" in md
    assert gain_kept(rows[:2])["ratio"] is None


def test_when_no_baseline_reaches_0_9_the_ratio_is_bounded_by_the_fewest_env_steps_a_baseline_ran(tmp_path):
    """SAC stopped by its time budget after fewer env steps than scratch ran: the best baseline is only known to need
    more than SAC's env steps, so those bound the ratio, and the text names what each baseline ran."""
    cfg = BenchmarkConfig(tasks={"peg_insert": TaskPlan()}, runs=str(tmp_path / "runs"), seeds=[0], baseline_seeds=[0])
    run_dir(stage_dir(cfg.runs, "peg_insert", 0, "residual"), [(60_000, 0.95)], 190, base=0.3)
    run_dir(stage_dir(cfg.runs, "peg_insert", 0, "scratch"), [(300_000, 0.3), (600_000, 0.3)], 60)
    run_dir(stage_dir(cfg.runs, "peg_insert", 0, "sac"), [(500_000, 0.0), (527_000, 0.0)], 0)
    r = ratio([row(cfg, "peg_insert", k) for k in ("base", "residual", "scratch", "sac")])
    assert r["bound"] == ">" and r["ratio"] == pytest.approx(527_000 / 60_000)
    assert r["text"] == ("> 8.78 (no baseline reached 0.9: RL from scratch 600,000, SB3 SAC 527,000 env steps; "
                         "base + residual 60,000)")


def test_finished_stages_are_reused_a_changed_command_stops_and_a_redone_input_reruns(tmp_path):
    cfg = BenchmarkConfig(tasks={"lift": TaskPlan(baselines=[])}, runs=str(tmp_path), seeds=[0])
    demos, bc, residual, *_ = task_stages(cfg, "lift")
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


STAGE_SCRIPT = """
import pathlib, sys, time
out, label, seconds, code, log = pathlib.Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
with open(log, "a") as f:
    f.write(f"{label} start {time.time()}\\n")
time.sleep(seconds)
if code:
    sys.exit(code)
out.mkdir(parents=True, exist_ok=True)
(out / "metrics.json").write_text("{}")
with open(log, "a") as f:
    f.write(f"{label} end {time.time()}\\n")
"""


def scripted_stages(monkeypatch, tmp_path, seconds: dict, fails: set = frozenset()):
    """task_stages with each stage's command replaced by a real subprocess that logs its start and end, sleeps and
    writes metrics.json (or exits 1 for the stages in `fails`)."""
    import dataclasses
    import sys

    import robot_rl.benchmark as bm

    real, log = bm.task_stages, tmp_path / "times.log"

    def fake(cfg, task):
        out = []
        for s in real(cfg, task):
            label = f"{task}/{s.seed}/{s.name}"
            out.append(dataclasses.replace(s, argv=["python", "-c", STAGE_SCRIPT, str(s.dir), label,
                                                    str(seconds.get(s.name, 0.2)), str(int(label in fails)), str(log)]))
        return out

    monkeypatch.setattr(bm, "task_stages", fake)
    assert sys.executable  # `python` in argv is this interpreter (robot_rl.benchmark.executable)
    return log


def read_times(log: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        label, what, t = line.split()
        out.setdefault(label, {})[what] = float(t)
    return out


def test_jobs_run_independent_stages_at_once_after_the_stages_they_need_and_a_failure_stops_only_its_task(
        tmp_path, monkeypatch):
    log = scripted_stages(monkeypatch, tmp_path / "x", {"demos": 0.6, "bc": 0.6, "sac": 0.3},
                          fails={"push/0/bc"})
    (tmp_path / "x").mkdir()
    cfg = BenchmarkConfig(tasks={"lift": TaskPlan(), "push": TaskPlan(baselines=[])}, runs=str(tmp_path / "runs"),
                          seeds=[0, 1], jobs=2)
    ended = []
    failures = Runner(cfg, say=lambda line: None).run_tasks(["lift", "push"], progress=ended.append)
    assert set(failures) == {"push"} and "push seed 0 bc failed (exit 1)" in failures["push"]
    t = read_times(log)
    for seed in (0, 1):  # each stage started after the stages it needs had ended
        lift = {k.rsplit("/", 1)[1]: v for k, v in t.items() if k.startswith(f"lift/{seed}/")}
        assert lift["bc"]["start"] >= lift["demos"]["end"]
        assert lift["residual"]["start"] >= lift["bc"]["end"]
        if seed == 0:
            assert lift["scratch"]["start"] >= lift["demos"]["end"]
    # the failed task stopped (push seed 1's BC may have been running by then; its residual never started); lift
    # went on
    assert "push/0/residual" not in t and "push/1/residual" not in t and "lift/1/residual" in t
    assert sum(ended) == len([s for task in ("lift", "push") for s in task_stages(cfg, task)])
    events = sorted((v[k], +1 if k == "start" else -1) for v in t.values() for k in v)
    events = sorted(events + [(v["start"] + 0.05, 0) for v in t.values() if "end" not in v])
    busy = peak = 0
    for _, d in events:
        busy += d
        peak = max(peak, busy)
    assert peak == 2  # two at once, never more
    assert t["lift/0/sac"]["start"] < t["lift/0/demos"]["end"]  # sac needs nothing: it ran next to the demos
    rec = json.loads(stage_dir(cfg.runs, "lift", 0, "bc").with_name("bc.json").read_text())
    assert rec["jobs"] == 2 and rec["finished"]


def test_an_interrupted_benchmark_stops_the_commands_it_started(tmp_path, monkeypatch):
    import os
    import time

    log = scripted_stages(monkeypatch, tmp_path, {"demos": 0.2, "sac": 60})
    cfg = BenchmarkConfig(tasks={"lift": TaskPlan(baselines=["sac"])}, runs=str(tmp_path / "runs"), seeds=[0], jobs=2)
    runner = Runner(cfg, say=lambda line: None)
    procs = []

    def interrupt(n):  # Ctrl-C as the demos end, while SAC runs
        procs.extend(p.pid for p in runner.procs)
        raise KeyboardInterrupt

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        runner.run_tasks(["lift"], progress=interrupt)
    assert time.perf_counter() - t0 < 30 and procs and not runner.procs
    for pid in procs:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "end" not in read_times(log)["lift/0/sac"]


def test_a_terminated_benchmark_stops_the_commands_it_started(tmp_path):
    """SIGTERM (`kill`, a job scheduler) to robot-rl-benchmark stops its running commands as Ctrl-C does, instead of
    leaving them running without it."""
    import os
    import signal
    import subprocess
    import time

    from tests.conftest import BIN

    def commands() -> list[int]:  # pids of the benchmark's commands: their command lines name a stage directory
        out = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and str(tmp_path / "runs" / "lift") in (d / "cmdline").read_bytes().decode(
                        errors="replace"):
                    out.append(int(d.name))
            except OSError:
                pass
        return out

    bench = subprocess.Popen([str(BIN / "robot-rl-benchmark"), "only=[lift]", "seeds=[0]", "stages=[demos]",
                              "tasks.lift.demos=1000000", f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'tasks'}",
                              f"hydra.run.dir={tmp_path / 'bench'}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while not commands() and time.monotonic() < deadline and bench.poll() is None:
            time.sleep(0.2)
        started = commands()
        assert started and bench.pid not in started, (
            bench.stdout.read() if bench.poll() is not None else "no command started in 90 s")
        bench.send_signal(signal.SIGTERM)
        out, _ = bench.communicate(timeout=60)
        assert bench.returncode != 0, out
        for pid in started:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if bench.poll() is None:
            bench.kill()
        for pid in commands():
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True])
def test_jobs_must_be_a_whole_number_of_stages(jobs):
    with pytest.raises(ValueError, match=r"jobs=.* must be a whole number >= 1"):
        BenchmarkConfig(jobs=jobs)
