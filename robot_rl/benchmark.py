"""The benchmark suite: demonstrations -> BC -> residual RL -> baselines on several tasks, fixed budgets and seeds.

Per task and seed, each stage is one of the user commands, run as a subprocess; its exact command line is recorded:

    demos     robot-rl-collect task=T episodes=<demos> expert.noise=<demo_noise> seed=<seed> out=<demos>/episodes.zarr
    bc        robot-rl-train-bc task=T policy=<bc_policy> data=<demos> steps=<bc_steps> seed=<seed> ...
    residual  robot-rl-train-residual task=T base=<bc>/policy demos=<demos> rl.env_steps=... rl.seed=<seed> ...
    rollouts  robot-rl-collect task=T policy=<bc>/policy episodes=<rollouts> seed=<100 + seed>  (the reward models'
              failures, from the base they judge)
    reward    robot-rl-train-reward task=T data=<demos> rollouts=<rollouts> seed=<seed>
    learned   the residual stage on the learned rewards a robot has: rl.reward=learned rl.reward_model=<reward>,
              operator labels and checks by the scripted labeller (rl.labels, rl.guard), same budget and base
    scratch   the same with mode=scratch (no base), same demos and budget           (baseline_seeds)
    sac       python -m robot_rl.rl.sb3_baseline task=T env_steps=... out=<sac>     (no demos; baseline_seeds)

Layout (`runs`, default runs/benchmark): <runs>/<task>/seed<k>/<stage>/ is the stage's run directory, next to it
<stage>.json (the record: command line, inputs, commit, machine, times) and <stage>.log (the command's output).
A stage whose run directory has metrics.json and a record is finished and reused on the next run (the suite is
resumable across days); an unfinished training is resumed from its checkpoints when its command is unchanged, any
other unfinished stage starts over. `force` redoes finished stages; a stage whose inputs were redone (new demos
under a BC, a new BC under a residual) is redone too. A finished stage whose recorded command differs from the one
the config gives now is not silently reused or replaced: that task stops, naming the difference and the fix.
A failing stage stops its task with one line; the other tasks go on.

The budgets live in TaskPlan (one per task) and BenchmarkConfig below; configs/benchmark.yaml only selects and
overrides. robot_rl/benchmark_table.py turns the finished runs into the table, the JSON lines and the curves.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from robot_rl.common.checkpoint import has_training_checkpoint

STAGES = ("demos", "bc", "residual", "rollouts", "reward", "learned", "scratch", "sac")
BASELINES = ("scratch", "sac")
NEEDS = {"demos": (), "bc": ("demos",), "residual": ("demos", "bc"), "rollouts": ("bc",),
         "reward": ("demos", "rollouts"), "learned": ("demos", "bc", "reward"), "scratch": ("demos",), "sac": ()}
TRAINING = ("bc", "residual", "learned", "scratch")  # commands that resume from their checkpoints
SAC_MODULE = "robot_rl.rl.sb3_baseline"


@dataclasses.dataclass
class TaskPlan:
    """One task's settings and budgets: every seed and every run of the task uses them."""

    demos: int = 100  # expert demonstrations recorded per seed (robot-rl-collect episodes=)
    demo_noise: float = 0.1  # std of Gaussian noise on the demonstrating expert's actions (expert.noise=)
    bc_policy: str = "diffusion"  # the base policy (robot-rl-train-bc policy=, configs/bc/policy/): diffusion | vla
    bc_steps: int = 1500  # BC gradient steps (the quickstart's: lift BC 0.22-0.28, docs/results/bc.md)
    bc_args: list[str] = dataclasses.field(default_factory=lambda: ["warmup_steps=100"])  # more robot-rl-train-bc
    # overrides (the quickstart's warm-up)
    cameras: list[str] = dataclasses.field(default_factory=list)  # env.cameras of the demos, bc and residual stages
    # (the VLA's: [front, wrist]); scratch and sac read the vector observations only
    randomization: str = "none"  # randomization= of every stage (configs/randomization/); sac runs only with none
    # or visual (which changes camera images only)
    env_steps: int = 100_000  # RL budget in env transitions, the same for residual, scratch and sac (lift's
    # residual: 0.95 at 40,000, docs/results/residual_rl.md)
    time_budget_s: float = 1200.0  # and in training seconds, evaluations excluded (0: no limit)
    baseline_time_budget_s: float | None = None  # the baselines' training seconds (None: time_budget_s): the same
    # env-step budget, time for a slower learner to use it
    eval_every: int = 20_000  # env steps between evaluations (each of eval_episodes episodes)
    eval_episodes: int = 100
    final_eval_episodes: int = 200  # episodes of every run's final evaluation (the table's success)
    num_envs: int = 16  # envs of the residual and scratch runs, and of every evaluation env (sac's included): with
    # the evaluation seed they fix which episodes are evaluated
    rl_args: list[str] = dataclasses.field(default_factory=list)  # more robot-rl-train-residual overrides (residual
    # and scratch), e.g. [rl.residual.scale=0.3]
    sac_args: list[str] = dataclasses.field(default_factory=lambda: ["train_freq=2"])  # more
    # robot_rl.rl.sb3_baseline key=value arguments; train_freq=2: one update per 2 env steps, the residual's rl.utd=0.5
    baselines: list[str] = dataclasses.field(default_factory=lambda: list(BASELINES))  # scratch | sac
    rollouts: int = 100  # base-policy episodes recorded for the reward models (their failures are the negatives)
    reward_args: list[str] = dataclasses.field(default_factory=list)  # more robot-rl-train-reward overrides
    # env overrides of every stage: a gymnasium env of yours is a task of its own, e.g. tasks.car={env_args:
    # [env.backend=gymnasium,env.gym.id=MountainCarContinuous-v0,env.gym.success=terminated], expert_path: ...}
    env_args: list[str] = dataclasses.field(default_factory=list)
    expert_path: str | None = None  # module:function of the demos' scripted expert (None: the task's own)

    @property
    def gymnasium(self) -> bool:
        """The plan's env is a gymnasium env (env_args set env.backend=gymnasium)."""
        return "env.backend=gymnasium" in self.env_args

    def problems(self, where: str) -> list[str]:
        """What is wrong with this plan, each naming the key as `<where>.<key>`."""
        out = []
        for k, lo in (("demos", 1), ("bc_steps", 1), ("env_steps", 1), ("eval_every", 0), ("eval_episodes", 1),
                      ("final_eval_episodes", 1), ("num_envs", 1), ("rollouts", 1)):
            if getattr(self, k) < lo:
                out.append(f"{where}.{k}={getattr(self, k)!r} must be a whole number >= {lo}")
        for k in ("demo_noise", "time_budget_s", "baseline_time_budget_s"):
            v = getattr(self, k)
            if v is None and k == "baseline_time_budget_s":
                continue  # the residual's time_budget_s
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                out.append(f"{where}.{k}={v!r} must be a number >= 0")
        unknown = [b for b in self.baselines if b not in BASELINES]
        if unknown or len(set(self.baselines)) != len(self.baselines):
            out.append(f"{where}.baselines={self.baselines}: each at most once, of {list(BASELINES)}")
        for k, own in (("bc_args", BC_OWN), ("rl_args", RL_OWN), ("sac_args", SAC_OWN), ("reward_args", REWARD_OWN),
                       ("env_args", ENV_OWN)):
            for a in getattr(self, k):
                key = a.split("=", 1)[0].lstrip("+~")
                if "=" not in a or not key:
                    out.append(f"{where}.{k}: {a!r} is not a key=value override")
                elif key in own or key.startswith("hydra."):
                    out.append(f"{where}.{k}: {key} is set by the benchmark itself ({own.get(key, 'its run dirs')}); "
                               f"change that setting instead")
        return out


# keys of each stage's command the benchmark sets itself, and the setting that sets them
_EVAL = {"rl.eval_every": "eval_every", "rl.eval_episodes": "eval_episodes",
         "rl.final_eval_episodes": "final_eval_episodes", "rl.eval_seed": "eval_seed"}
_TASK_OWN = {"task": "the task's name", "env.task": "the task's name"}
BC_OWN = {**_TASK_OWN, "policy": "bc_policy", "data": "the demos stage",
          "steps": "bc_steps", "seed": "seeds", "env.cameras": "cameras", "randomization": "randomization"}
RL_OWN = {**_TASK_OWN, "base": "the bc stage", "demos": "the demos stage",
          "mode": "the stage", "env.num_envs": "num_envs", "eval_num_envs": "num_envs",
          "rl.env_steps": "env_steps", "rl.time_budget_s": "time_budget_s", "rl.seed": "seeds",
          "env.cameras": "cameras", "randomization": "randomization", **_EVAL}
REWARD_OWN = {**_TASK_OWN, "data": "the demos stage",
              "rollouts": "the rollouts stage", "seed": "seeds"}
ENV_OWN = {**_TASK_OWN, "env.cameras": "cameras", "env.num_envs": "num_envs",
           "randomization": "randomization"}
SAC_OWN = {"task": "the task's name", "out": "the sac stage", "env_steps": "env_steps", "seed": "baseline_seeds",
           "time_budget_s": "time_budget_s", "eval_every": "eval_every", "eval_episodes": "eval_episodes",
           "final_eval_episodes": "final_eval_episodes", "eval_seed": "eval_seed", "eval_num_envs": "num_envs"}


def recommended_plan(task: str) -> dict:
    """TaskPlan fields from the task's recommended settings (robot_rl/recipes.py): bc_steps, bc_args (the
    quickstart's warm-up and the BC policy's keys), env_steps, time_budget_s."""
    from robot_rl.recipes import recommended_settings

    bc, rl = recommended_settings(task, "train_bc"), recommended_settings(task, "train_residual")
    out = {"bc_args": ["warmup_steps=100", *(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                            for k, v in bc.items() if k != "steps")]}
    if "steps" in bc:
        out["bc_steps"] = int(bc["steps"])
    if "rl.env_steps" in rl:
        out["env_steps"] = int(rl["rl.env_steps"])
    if "rl.time_budget_s" in rl:
        out["time_budget_s"] = float(rl["rl.time_budget_s"])
    return out


def default_tasks() -> dict[str, TaskPlan]:
    return {
        "lift": TaskPlan(),
        "push": TaskPlan(),
        # The peg preset: the task's recommended BC steps, sampling and RL budget (sim Task.recommended); the
        # baselines get the same env steps and up to two hours to use them
        "peg_insert": TaskPlan(**recommended_plan("peg_insert"), baseline_time_budget_s=7200.0),
        # The VLA of docs/results/vla.md (0.72 alone, 0.975 with a residual after 40,000 env steps): 600
        # demonstrations with front + wrist frames, 14,000 steps; its residual reads the VLA's features
        "color_lift": TaskPlan(demos=600, bc_policy="vla", bc_steps=14_000,
                               bc_args=["batch_size=32", "lr=5e-4", "ckpt_every=1000"], cameras=["front", "wrist"],
                               env_steps=40_000, eval_every=10_000, rl_args=["rl.save_replay=false"]),
    }


@dataclasses.dataclass
class BenchmarkConfig:
    """The suite: which tasks, seeds and stages, where runs and results go (robot-rl-benchmark's keys)."""

    tasks: dict[str, TaskPlan] = dataclasses.field(default_factory=default_tasks)  # per-task plans: change one
    # with tasks.<task>.<key>=... (tasks.peg_insert.bc_steps=8000)
    only: list[str] | None = None  # tasks to run, in this order (null: every task of `tasks`)
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0, 1, 2])  # demos, BC and residual per seed: the
    # "base alone" and "base + residual" rows
    baseline_seeds: list[int] = dataclasses.field(default_factory=lambda: [0])  # scratch (on that seed's demos) and sac
    stages: list[str] = dataclasses.field(default_factory=lambda: list(STAGES))  # stages to run now (the others are
    # only read: a stage that needs one not finished stops its task)
    eval_seed: int = 1000  # evaluation episodes of every run (never a demonstration seed)
    runs: str = "runs/benchmark"  # run directories: <runs>/<task>/seed<k>/<stage>/
    out: str = "docs/results/tasks"  # results: <out>.md (table), <out>.jsonl, <out>_<task>.png
    force: bool | list[str] = False  # redo finished stages: true (all) or a list of stages, e.g. [bc]
    report_only: bool = False  # run nothing: rebuild <out>.md / .jsonl / .png from the finished runs
    jobs: int = 1  # stages run at once: a stage starts once the stages it needs have finished (a seed's BC next to
    # another seed's or next to the baselines). Every command trains on one thread: jobs = the cores to use. Stages
    # that shared the cores say so in their records ("jobs"); their wall times are contended

    def __post_init__(self):
        problems = []
        if not self.tasks:
            problems.append("tasks is empty: give at least one task plan")
        for name, plan in self.tasks.items():
            problems += plan.problems(f"tasks.{name}")
        if self.only is not None:
            unknown = [t for t in self.only if t not in self.tasks]
            if unknown or not self.only or len(set(self.only)) != len(self.only):
                problems.append(f"only={self.only}: name each task at most once, of {list(self.tasks)} (tasks.<name> "
                                "holds a task's plan)")
        for k in ("seeds", "baseline_seeds"):
            v = getattr(self, k)
            if not v or min(v) < 0 or len(set(v)) != len(v):
                problems.append(f"{k}={v}: give distinct whole numbers >= 0")
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            problems.append(f"jobs={self.jobs!r} must be a whole number >= 1 (the stages run at once)")
        if self.eval_seed < 0:
            problems.append(f"eval_seed={self.eval_seed} must be >= 0")
        if self.eval_seed in set(self.seeds) | set(self.baseline_seeds):
            problems.append(f"eval_seed={self.eval_seed} is also a demonstration seed: evaluate on other episodes")
        bad = [s for s in self.stages if s not in STAGES]
        if bad:
            problems.append(f"stages={self.stages}: unknown {bad}; valid: {list(STAGES)}")
        if isinstance(self.force, list) and any(s not in STAGES for s in self.force):
            problems.append(f"force={self.force}: true, false or a list of {list(STAGES)}")
        for k in ("runs", "out"):
            if not getattr(self, k):
                problems.append(f"{k} must be a path")
        if problems:
            raise ValueError(problems[0])

    def task_names(self) -> list[str]:
        return list(self.only) if self.only is not None else list(self.tasks)

    def forced(self, stage: str) -> bool:
        return self.force is True or (isinstance(self.force, list) and stage in self.force)


# ---- the plan: which stage runs which command where ---------------------------------------------------------------
@dataclasses.dataclass
class Stage:
    task: str
    seed: int
    name: str  # one of STAGES
    argv: list[str]  # the command line as a user types it (console script or `python -m ...`)
    dir: Path  # its run directory

    @property
    def record_path(self) -> Path:
        return self.dir.with_name(self.name + ".json")

    @property
    def log_path(self) -> Path:
        return self.dir.with_name(self.name + ".log")

    def label(self) -> str:
        return f"{self.task} seed {self.seed} {self.name}"


def stage_dir(runs: str | Path, task: str, seed: int, stage: str) -> Path:
    return Path(runs) / task / f"seed{seed}" / stage


def _list(values) -> str:
    return "[" + ",".join(str(v) for v in values) + "]"


def task_stages(cfg: BenchmarkConfig, task: str) -> list[Stage]:
    """Every stage of `task` in the order they start: per seed demos, bc, residual, then the baselines."""
    plan = cfg.tasks[task]
    seeds = sorted(set(cfg.seeds) | (set(cfg.baseline_seeds) if plan.baselines else set()))
    envs = [f"randomization={plan.randomization}"] if plan.randomization != "none" else []
    envs += plan.env_args  # every stage's env: the randomization preset, a gymnasium env's settings
    cams = [f"env.cameras={_list(plan.cameras)}"] if plan.cameras else []
    base_time = plan.time_budget_s if plan.baseline_time_budget_s is None else plan.baseline_time_budget_s
    evals = [f"rl.eval_every={plan.eval_every}", f"rl.eval_episodes={plan.eval_episodes}",
             f"rl.final_eval_episodes={plan.final_eval_episodes}", f"rl.eval_seed={cfg.eval_seed}",
             f"env.num_envs={plan.num_envs}"]

    def budget(time_s: float) -> list[str]:
        return [f"rl.env_steps={plan.env_steps}", f"rl.time_budget_s={time_s:g}", *evals]

    out = []
    for seed in seeds:
        d = {s: stage_dir(cfg.runs, task, seed, s) for s in STAGES}
        store, base = d["demos"] / "episodes.zarr", d["bc"] / "policy"
        need_demos = seed in cfg.seeds or "scratch" in plan.baselines
        if need_demos:
            out.append(Stage(task, seed, "demos", [
                "robot-rl-collect", f"env.task={task}", f"episodes={plan.demos}", f"expert.noise={plan.demo_noise:g}",
                *([f"expert.path={plan.expert_path}"] if plan.expert_path else []),
                f"seed={seed}", f"out={store}", *envs, *cams, f"hydra.run.dir={d['demos']}"], d["demos"]))
        if seed in cfg.seeds:
            rollouts, reward = d["rollouts"] / "episodes.zarr", d["reward"]
            out.append(Stage(task, seed, "bc", [
                "robot-rl-train-bc", f"env.task={task}", f"policy={plan.bc_policy}", f"data={store}",
                f"steps={plan.bc_steps}", f"seed={seed}", "final_eval=false", "videos=0", *envs, *cams, *plan.bc_args,
                f"hydra.run.dir={d['bc']}"], d["bc"]))
            out.append(Stage(task, seed, "residual", [
                "robot-rl-train-residual", f"env.task={task}", f"base={base}", f"demos={store}",
                *budget(plan.time_budget_s), f"rl.seed={seed}", *envs, *cams, *plan.rl_args, f"hydra.run.dir={d['residual']}"], d["residual"]))
            out.append(Stage(task, seed, "rollouts", [
                "robot-rl-collect", f"env.task={task}", f"policy={base}", f"episodes={plan.rollouts}",
                f"seed={100 + seed}", f"out={rollouts}", *envs, *cams, f"hydra.run.dir={d['rollouts']}"],
                d["rollouts"]))
            out.append(Stage(task, seed, "reward", [
                "robot-rl-train-reward", f"env.task={task}", f"data={store}", f"rollouts={rollouts}", f"seed={seed}",
                *plan.env_args, *plan.reward_args, f"hydra.run.dir={reward}"], reward))
            out.append(Stage(task, seed, "learned", [
                "robot-rl-train-residual", f"env.task={task}", f"base={base}", f"demos={store}",
                *budget(plan.time_budget_s), f"rl.seed={seed}", "rl.reward=learned", f"rl.reward_model={reward}",
                *envs, *cams, *plan.rl_args, f"hydra.run.dir={d['learned']}"], d["learned"]))
        if seed in cfg.baseline_seeds:  # sac first: it cannot resume, so it gets the first free core
            if "sac" in plan.baselines:
                out.append(Stage(task, seed, "sac", [
                    "python", "-m", SAC_MODULE, f"task={task}", f"env_steps={plan.env_steps}",
                    f"time_budget_s={base_time:g}", f"eval_every={plan.eval_every}",
                    f"eval_episodes={plan.eval_episodes}", f"final_eval_episodes={plan.final_eval_episodes}",
                    f"eval_seed={cfg.eval_seed}", f"eval_num_envs={plan.num_envs}", f"seed={seed}",
                    *(a.lstrip("+") for a in plan.env_args), *plan.sac_args,
                    f"out={d['sac']}"], d["sac"]))
            if "scratch" in plan.baselines:
                out.append(Stage(task, seed, "scratch", [
                    "robot-rl-train-residual", f"env.task={task}", "mode=scratch", f"demos={store}", *budget(base_time),
                    f"rl.seed={seed}", *envs, *plan.rl_args, f"hydra.run.dir={d['scratch']}"], d["scratch"]))
    return out


# ---- records ------------------------------------------------------------------------------------------------------
def read_record(stage: Stage) -> dict | None:
    """The stage's record, or None when there is none (or it cannot be read: then the stage counts as not run)."""
    try:
        rec = json.loads(stage.record_path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def is_finished(stage: Stage) -> bool:
    rec = read_record(stage)
    return rec is not None and rec.get("finished") is not None and (stage.dir / "metrics.json").is_file()


def commit() -> str:
    """Short hash of the checkout the commands run from (with -dirty for uncommitted changes), or 'unknown'."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("-dirty" if dirty else "")) if head else "unknown"


def machine() -> str:
    """'<n> cores, <CPU model>' of this machine."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class StageFailed(RuntimeError):
    """A stage could not run or finish; the message is one line naming the stage and where to look."""


def executable(argv: list[str]) -> list[str]:
    """argv with its program resolved: `python` is this interpreter, a console script the one next to it."""
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    local = Path(sys.executable).with_name(argv[0])
    found = str(local) if local.is_file() else shutil.which(argv[0])
    if found is None:
        raise StageFailed(f"{argv[0]} not found next to {sys.executable} or on PATH: install the project "
                          "(pip install -e .)")
    return [found, *argv[1:]]


def last_error(log: Path) -> str:
    """The command's one-line error from its log (the last 'error:' line), else its last line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    errors = [ln for ln in lines if ": error: " in ln or ln.startswith(("Traceback", "Error", "Exception"))]
    tail = [ln for ln in lines if not ln.startswith("File ")]
    return (errors or tail or ["(no output)"])[-1][:400]


# ---- running ------------------------------------------------------------------------------------------------------
class Runner:
    """Runs the stages of a task in order: reuse, resume, redo or stop, as the module docstring says."""

    def __init__(self, cfg: BenchmarkConfig, say=print):
        self.cfg, self.say = cfg, say
        self.redone: set[tuple[str, int, str]] = set()  # stages run in this invocation
        self.procs: set[subprocess.Popen] = set()  # the commands running now
        self.commit, self.machine = commit(), machine()

    def inputs(self, stage: Stage) -> dict:
        """{upstream stage: its record id}: a redone upstream makes this stage's result stale."""
        out = {}
        for up in NEEDS[stage.name]:
            rec = read_record(dataclasses.replace(stage, name=up, dir=stage.dir.with_name(up)))
            out[up] = rec.get("id") if rec else None
        return out

    def decide(self, stage: Stage) -> str:
        """reuse | run | resume, or StageFailed when a finished stage's recorded command differs."""
        rec = read_record(stage)
        finished = is_finished(stage)
        forced = self.cfg.forced(stage.name) and (stage.task, stage.seed, stage.name) not in self.redone
        if finished and not forced:
            if rec.get("argv") != stage.argv:
                old, new = rec.get("argv") or [], stage.argv
                diff = [f"{a} -> {b}" for a, b in zip(old, new) if a != b] or [
                    f"{shlex.join(old)} -> {shlex.join(new)}"]
                raise StageFailed(
                    f"{stage.label()}: {stage.dir} was made by another command ({'; '.join(diff[:3])}); redo it with "
                    f"force=[{stage.name}] (the stages that use it are redone too), or restore the setting")
            if rec.get("inputs") != self.inputs(stage):
                return "run"  # an input was redone since: this result belongs to the old one
            return "reuse"
        if (not forced and rec is not None and stage.name in TRAINING and rec.get("argv") == stage.argv
                and rec.get("inputs") == self.inputs(stage) and has_training_checkpoint(stage.dir)):
            return "resume"
        return "run"

    def run(self, stage: Stage) -> dict:
        """Run (or resume) one stage's command; its metrics. StageFailed with one line when it fails."""
        how = self.decide(stage)
        if how == "reuse":
            return json.loads((stage.dir / "metrics.json").read_text())
        missing = [up for up in NEEDS[stage.name] if not is_finished(dataclasses.replace(
            stage, name=up, dir=stage.dir.with_name(up)))]
        if missing:
            raise StageFailed(f"{stage.label()} needs the {missing[0]} stage, which has not finished (add it to "
                              f"stages={self.cfg.stages})")
        if how == "run":
            if stage.dir.exists():
                shutil.rmtree(stage.dir)
            stage.record_path.unlink(missing_ok=True)
        from robot_rl.common.atomic import atomic_write_text

        record = {"id": uuid.uuid4().hex, "argv": stage.argv, "command": shlex.join(stage.argv),
                  "inputs": self.inputs(stage), "commit": self.commit, "machine": self.machine,
                  "jobs": self.cfg.jobs, "started": _now(),
                  "finished": None, "resumed": how == "resume"}
        stage.dir.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(stage.record_path, json.dumps(record, indent=2) + "\n")
        self.say(f"{stage.label()}: {'resuming' if how == 'resume' else 'running'} {record['command']}")
        t0 = time.perf_counter()
        with open(stage.log_path, "a") as log:
            log.write(f"\n==== {_now()} {record['command']}\n")
            log.flush()
            proc = subprocess.Popen(executable(stage.argv), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=dict(os.environ, COLUMNS="120"))
            self.procs.add(proc)
            try:
                code = proc.wait()
            except BaseException:  # Ctrl-C: stop the command too (a training keeps its checkpoints for a resume)
                stop(proc)
                raise
            finally:
                self.procs.discard(proc)
        wall = time.perf_counter() - t0
        if code != 0:
            raise StageFailed(f"{stage.label()} failed (exit {code}): {last_error(stage.log_path)} (log: "
                              f"{stage.log_path})")
        if not (stage.dir / "metrics.json").is_file():
            raise StageFailed(f"{stage.label()} exited 0 but wrote no {stage.dir / 'metrics.json'} (log: "
                              f"{stage.log_path})")
        record.update(finished=_now(), wall_s=wall)
        atomic_write_text(stage.record_path, json.dumps(record, indent=2) + "\n")
        self.redone.add((stage.task, stage.seed, stage.name))
        return json.loads((stage.dir / "metrics.json").read_text())

    def run_tasks(self, tasks: list[str], progress=None) -> dict[str, str]:
        """The selected stages of `tasks`, up to cfg.jobs at once, each once the stages it needs (same task and seed)
        have ended; stages start in plan order. {task: the one line that stopped it} for the tasks that stopped: a
        failed stage stops the rest of its task, the other tasks go on. progress(n) is called as n stages end."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        pending = [s for t in tasks for s in task_stages(self.cfg, t) if s.name in self.cfg.stages]
        running: dict = {}  # future -> stage
        failures: dict[str, str] = {}

        def blocked(stage: Stage) -> bool:  # a stage it needs is still to run or running in this invocation
            return any(s.task == stage.task and s.seed == stage.seed and s.name in NEEDS[stage.name]
                       for s in [*pending, *running.values()])

        with ThreadPoolExecutor(max_workers=self.cfg.jobs) as pool:
            try:
                while pending or running:
                    for stage in list(pending):
                        if stage.task in failures:  # its task stopped: the stage will not run
                            pending.remove(stage)
                            if progress is not None:
                                progress(1)
                        elif len(running) < self.cfg.jobs and not blocked(stage):
                            pending.remove(stage)
                            running[pool.submit(self.run_one, stage)] = stage
                    done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for fut in done:
                        stage = running.pop(fut)
                        try:
                            fut.result()
                        except StageFailed as e:
                            if stage.task not in failures:
                                failures[stage.task] = str(e)
                                self.say(f"robot-rl-benchmark: error: {e}; {stage.task} stopped, the other tasks "
                                         "go on")
                        if progress is not None:
                            progress(1)
            except BaseException:  # Ctrl-C or a crash here: stop the commands (trainings resume from checkpoints)
                for proc in list(self.procs):
                    stop(proc)
                raise
        return failures

    def run_one(self, stage: Stage) -> dict:
        """run(stage), saying how it went in one line."""
        t0 = time.perf_counter()
        reused = self.decide(stage) == "reuse"
        m = self.run(stage)
        self.say(f"{stage.label()}: {'reused' if reused else f'done in {time.perf_counter() - t0:.0f} s'}"
                 f"{summary(stage.name, m)}")
        return m


def stop(proc: subprocess.Popen) -> None:
    """Terminate a command, kill it when it has not ended 30 s later."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def summary(name: str, m: dict) -> str:
    """'; <what the stage's metrics say>' in a few words."""
    if name in ("demos", "rollouts"):
        return f"; {m.get('episodes')} episodes, success {m.get('success_rate', 0):.2f}"
    if name == "reward":
        sp, auc = (m.get("progress") or {}).get("spearman"), (m.get("classifier") or {}).get("auroc")
        return (f"; progress Spearman {sp if sp is None else round(sp, 3)}, classifier AUROC "
                f"{auc if auc is None else round(auc, 3)}")
    if name == "bc":
        return f"; {m.get('steps')} steps, {m.get('train_time_s', 0):.0f} s of training"
    if "success_rate" in m:
        labels = m.get("labels")
        return (f"; success {m['success_rate']:.3f} after {m.get('env_steps', 0):,} env steps, "
                f"{m.get('train_time_s', 0):.0f} s of training"
                + (f", {labels['total']} operator labels, {len(m.get('warnings', []))} warnings" if labels else ""))
    return ""
