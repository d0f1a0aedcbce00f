"""A task of one's own, from outside the package (docs/own_task.md): the registries of tasks, experts and robots
(sim/registry.py) fill from installed packages' entry points, and the example package tests/own_task runs the whole
loop (collect -> BC -> residual RL with the scripted human -> eval) with nothing of ours edited."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, TINY_BC, assert_one_line_error, run_cli

TINY_RL = ["env.num_envs=2", "eval_num_envs=2", "rl.learning_starts=20", "rl.eval_every=0", "rl.final_eval_episodes=2",
           "rl.videos=0", "rl.log_every=20", "rl.ckpt_every=40", "rl.time_budget_s=0", "rl.residual.hidden=[16]",
           "rl.learner.num_critics=2", "rl.learner.critic_hidden=[16]", "rl.learner.batch_size=16",
           "rl.learner.critic_warmup=5"]


def pip_install(package: Path, target: Path) -> Path:
    """`package` installed as pip installs it (its modules and dist-info with the entry points) into `target`, a
    folder the test puts on PYTHONPATH instead of changing the project's environment."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                    "--quiet", "--target", str(target), str(package)], check=True, capture_output=True, text=True,
                   cwd=target.parent)
    return target


def fake_dist(site: Path, name: str, entry_points: str, modules: dict[str, str] | None = None) -> Path:
    """An installed distribution as importlib.metadata reads one (dist-info with METADATA and entry_points.txt), with
    `modules` {file name: source} beside it: for entry points that a real package would get wrong."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    for fname, src in (modules or {}).items():
        (site / fname).write_text(src)
    return site


@pytest.fixture(scope="module")
def reach_site(tmp_path_factory) -> Path:
    return pip_install(ROOT / "tests/own_task", tmp_path_factory.mktemp("site") / "lib")


@pytest.mark.mujoco_compat
def test_own_task_runs_the_whole_loop(reach_site, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(reach_site))
    monkeypatch.chdir(tmp_path)
    proc = run_cli("robot-rl-collect", "env.task=reach", "episodes=8", "expert.noise=0.1", "env.num_envs=4",
                   f"hydra.run.dir={tmp_path / 'collect'}")
    assert proc.returncode == 0, proc.stderr
    assert "reach / mujoco: recorded 8 episodes" in proc.stdout and "success rate 1.000" in proc.stdout, proc.stdout
    store = tmp_path / "collect/episodes.zarr"

    proc = run_cli("robot-rl-train-bc", "env.task=reach", f"data={store}", "steps=4", *TINY_BC,
                   f"hydra.run.dir={tmp_path / 'bc'}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "bc/policy/config.json").read_text())["spec"]["task"] == "reach"

    proc = run_cli("robot-rl-train-residual", "env.task=reach", f"base={tmp_path / 'bc/policy'}", f"demos={store}",
                   "rl.interventions=scripted", "rl.env_steps=80", *TINY_RL, f"hydra.run.dir={tmp_path / 'res'}")
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads((tmp_path / "res/metrics.json").read_text())
    assert metrics["task"] == "reach" and metrics["env_steps"] >= 80 and metrics["eval"]["episodes"] == 2, metrics

    proc = run_cli("robot-rl-eval", "env.task=reach", f"policy={tmp_path / 'res/policy'}", "episodes=2",
                   "env.num_envs=2", "videos=1", f"hydra.run.dir={tmp_path / 'eval'}")
    assert proc.returncode == 0, proc.stderr
    assert "reach / mujoco: success" in proc.stdout and list((tmp_path / "eval").rglob("*.mp4")), proc.stdout
    # the package's task is one of every registry listing, e.g. the error naming the valid tasks
    proc = run_cli("robot-rl-eval", "env.task=nope", "policy=expert", f"hydra.run.dir={tmp_path / 'bad'}")
    assert_one_line_error(proc, "unknown task 'nope'", "reach")


def test_registered_in_process_and_clashes(reach_site, monkeypatch):
    """register_task / register_expert for the process that calls them; a name given twice is one clear error."""
    from robot_rl.sim.experts import EXPERTS, make_expert, register_expert
    from robot_rl.sim.registry import RegistryError
    from robot_rl.sim.tasks import TASKS, register_task

    monkeypatch.syspath_prepend(str(reach_site))
    import reach_task

    from robot_rl import sim

    monkeypatch.setattr(TASKS, "_entries", None)  # this process's registries, rebuilt without the entry points' site
    monkeypatch.setattr(EXPERTS, "_entries", None)
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: ())
    with pytest.raises(sim.ConfigError, match="unknown task 'reach'"):
        sim.make("reach", num_envs=1)
    register_task("reach", reach_task.ReachTask)
    register_task("reach", reach_task.ReachTask)  # the same class again: nothing changes
    env = sim.make("reach", num_envs=2)
    with pytest.raises(ValueError, match="no scripted expert for task 'reach'.*robot_rl.experts"):
        make_expert(env)
    register_expert("reach", reach_task.ReachExpert)
    assert type(make_expert(env)).__name__ == "ReachExpert"
    env.close()
    with pytest.raises(RegistryError, match="task 'lift' is already registered by robot_rl"):
        register_task("lift", reach_task.ReachTask)
    with pytest.raises(RegistryError, match="name attribute is 'reach'; it must be the registered name 'reach2'"):
        register_task("reach2", reach_task.ReachTask)
    with pytest.raises(RegistryError, match="not a subclass of robot_rl.sim.task.Task"):
        register_task("thing", object)


@pytest.mark.parametrize("entry_points, modules, needles", [
    # a package reusing a built-in task's name
    ("[robot_rl.tasks]\nlift = reach_task:ReachTask\n", {}, ("task 'lift' is declared twice", "robot_rl (built in)",
                                                          "package clash-pkg")),
    # an entry point whose module is not there
    ("[robot_rl.tasks]\nghost = ghost_pkg.tasks:GhostTask\n", {}, ("task 'ghost'", "does not load", "ghost_pkg")),
    # an entry point naming something that is not a Task
    ("[robot_rl.tasks]\nghost = ghost_mod:make\n", {"ghost_mod.py": "def make():\n    pass\n"},
     ("task 'ghost'", "is not a subclass of robot_rl.sim.task.Task")),
    # a robot entry point naming something that is not a Robot
    ("[robot_rl.robots]\nghost = ghost_mod:arm\n", {"ghost_mod.py": "arm = 'a string'\n"},
     ("robot 'ghost'", "is not a robot_rl.sim.robot.Robot")),
])
def test_broken_entry_points_are_one_line(reach_site, tmp_path, monkeypatch, entry_points, modules, needles):
    site = fake_dist(tmp_path / "site", "clash-pkg", entry_points, modules)
    monkeypatch.setenv("PYTHONPATH", f"{reach_site}:{site}")
    name = "lift" if "lift =" in entry_points else "ghost"
    key = "env.robot" if "robots" in entry_points else "env.task"
    proc = run_cli("robot-rl-collect", f"{key}={name}", "episodes=1", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "run/episodes.zarr").exists()
