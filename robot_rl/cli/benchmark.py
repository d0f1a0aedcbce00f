"""robot-rl-benchmark: demos -> BC -> residual RL -> baselines on several tasks, fixed budgets and seeds, one table.

    robot-rl-benchmark                                  # lift, push, peg_insert, color_lift; seeds 0 1 2 (hours)
    robot-rl-benchmark only=[lift] seeds=[0] jobs=2     # one task, one seed, two stages at once (one per core)
    robot-rl-benchmark tasks.peg_insert.bc_steps=8000 force=[bc] only=[peg_insert]   # a new BC preset, redone
    robot-rl-benchmark report_only=true                 # rebuild the table from the runs finished so far

Stages, reuse and layout: robot_rl/benchmark.py (runs/benchmark/<task>/seed<k>/<stage>/); the table:
robot_rl/benchmark_table.py (docs/results/tasks.md, .jsonl, tasks_<task>.png). Rerun the same command to go on
where it stopped; finished stages are reused. A failing stage stops its task with one line, the others go on
(exit code 1 at the end).
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robot_rl.cli.common import hold_run_dir
from robot_rl.common.cli import fail, hydra_command, or_fail, progress_bar
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics


def _options(group: str) -> list[str]:
    from robot_rl import configs

    return sorted(p.stem for p in (Path(configs.__file__).parent / group).glob("*.yaml"))


def _dotlist(args: list[str]) -> dict:
    return OmegaConf.to_container(OmegaConf.from_dotlist(list(args)), resolve=True) if args else {}


def check_plan(bench, task: str) -> None:
    """The task's settings against the dataclasses of the commands that will get them (one line + exit 2)."""
    import dataclasses

    from robot_rl.benchmark import task_stages
    from robot_rl.common.config import from_mapping
    from robot_rl.rl.sb3_baseline import parse_args
    from robot_rl.rl.train import ResidualRLConfig
    from robot_rl.train_bc import BCConfig

    plan, where = bench.tasks[task], f"tasks.{task}"
    if plan.bc_policy not in _options("bc/policy"):
        fail(f"{where}.bc_policy={plan.bc_policy!r}; valid: {', '.join(_options('bc/policy'))}")
    if plan.randomization not in _options("randomization"):
        fail(f"{where}.randomization={plan.randomization!r}; valid: {', '.join(_options('randomization'))}")
    if "sac" in plan.baselines and plan.randomization not in ("none", "visual"):
        fail(f"{where}: the sac baseline runs without randomization; drop sac from {where}.baselines or use "
             f"randomization none or visual (not {plan.randomization})")
    fields = {f.name for f in dataclasses.fields(BCConfig)}
    try:
        bc = {k: v for k, v in _dotlist(plan.bc_args).items() if k in fields}
        from_mapping(BCConfig, {"data": "x", "steps": plan.bc_steps, **bc})
    except (ValueError, TypeError) as e:
        fail(f"{where} (bc_steps, bc_args): {e}")
    try:
        rl = {"env_steps": plan.env_steps, "time_budget_s": plan.time_budget_s, "eval_every": plan.eval_every,
              "eval_episodes": plan.eval_episodes, "final_eval_episodes": plan.final_eval_episodes,
              "eval_seed": bench.eval_seed, **_dotlist(plan.rl_args).get("rl", {})}
        from_mapping(ResidualRLConfig, rl, "rl")
    except (ValueError, TypeError) as e:
        fail(f"{where} (RL budget, rl_args): {str(e).replace('residual RL', 'rl')}")
    for stage in task_stages(bench, task):
        if stage.name == "sac":
            try:
                parse_args(stage.argv[3:])
            except (ValueError, TypeError) as e:
                fail(f"{where} (RL budget, sac_args): {e}")
            break


def _check(cfg: DictConfig):
    from robot_rl import sim
    from robot_rl.benchmark import BenchmarkConfig
    from robot_rl.common.config import from_mapping

    bench = or_fail(from_mapping, BenchmarkConfig, cfg)
    unknown = [t for t, plan in bench.tasks.items() if t not in sim.TASKS and not plan.gymnasium]
    if unknown:
        fail(f"tasks.{unknown[0]}: no such task; valid: {', '.join(sorted(sim.TASKS))} (or a gymnasium env of yours: "
             f"tasks.{unknown[0]}.env_args=[env.backend=gymnasium,env.gym.id=...])")
    if bench.report_only:
        return bench
    for task in bench.task_names():
        check_plan(bench, task)
    if "sac" in bench.stages and any("sac" in bench.tasks[t].baselines for t in bench.task_names()):
        from importlib.util import find_spec

        if find_spec("stable_baselines3") is None:
            from robot_rl.rl.sb3_baseline import INSTALL

            fail(f"the sac baseline needs stable-baselines3: {INSTALL} (or drop sac from stages)")
    return bench


def _command() -> str:
    """The overrides this command was given (what reproduces it), without Hydra's own and report_only."""
    from hydra.core.hydra_config import HydraConfig

    args = [a for a in HydraConfig.get().overrides.task if not a.startswith(("hydra.", "report_only="))]
    return " ".join(shlex.quote(a) for a in args)


@hydra_command("benchmark")
def main(cfg: DictConfig) -> None:
    bench = _check(cfg)
    from robot_rl.benchmark_table import write_report

    command = _command()
    if bench.report_only:  # reads only: may run while a benchmark holds the runs directory
        _print_paths(write_report(bench, command))
        return

    from robot_rl.benchmark import Runner, task_stages

    run_dir = current_run_dir()
    with hold_run_dir(run_dir):  # one benchmark per runs directory
        write_config(run_dir, cfg)
        tasks = bench.task_names()
        total = sum(1 for t in tasks for s in task_stages(bench, t) if s.name in bench.stages)
        with progress_bar() as bar:
            def say(line: str) -> None:  # above the bar, unwrapped, brackets as typed (no rich markup)
                bar.console.print(line, markup=False, highlight=False, soft_wrap=True)

            runner = Runner(bench, say=say)
            overall = bar.add_task(f"benchmark: {len(tasks)} task(s), stages", total=total)
            with terminate_as_interrupt():  # `kill`, a scheduler's stop: the commands stop too (they resume)
                failures = runner.run_tasks(tasks, progress=lambda n: bar.advance(overall, n))
        paths = write_report(bench, command)
        write_metrics(run_dir, {"tasks": tasks, "failures": failures, "md": str(paths["md"]),
                                "jsonl": str(paths["jsonl"]), "png": [str(p) for p in paths["png"]]})
    _print_paths(paths)
    if failures:
        for task, msg in failures.items():
            print(f"robot-rl-benchmark: error: {msg}", file=sys.stderr)
        sys.exit(1)


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt here, as Ctrl-C does, so the running commands are stopped rather than left
    running without their benchmark (Python's default for SIGTERM exits at once, skipping every cleanup)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_paths(paths: dict) -> None:
    print(f"table: {paths['md']}")
    print(f"json lines: {paths['jsonl']}")
    for p in paths["png"]:
        print(f"curves: {p}")


if __name__ == "__main__":
    main()
