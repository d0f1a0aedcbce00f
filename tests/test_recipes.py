"""A task's recommended settings live with the task (sim Task.recommended): every command applies them where its
command line does not set the key, and the benchmark's task plans start from them."""

from __future__ import annotations

from robot_rl.benchmark import default_tasks
from robot_rl.recipes import recommended_settings
from robot_rl.sim.tasks import TASKS


def test_each_command_names_the_peg_recipe_in_its_own_keys():
    rec = TASKS["peg_insert"].recommended
    assert recommended_settings("peg_insert", "train_bc") == {"steps": rec["bc"]["steps"],
                                                              "policy.temperature": rec["policy"]["temperature"]}
    rl = {"rl.env_steps": rec["rl"]["env_steps"], "rl.time_budget_s": rec["rl"]["time_budget_s"]}
    assert recommended_settings("peg_insert", "quickstart") == {
        "bc.steps": rec["bc"]["steps"], "policy.temperature": rec["policy"]["temperature"], **rl}
    assert recommended_settings("peg_insert", "train_residual") == rl
    assert recommended_settings("lift", "quickstart") == {}  # lift runs on the commands' own defaults
    plan = default_tasks()["peg_insert"]  # the benchmark's peg plan is the recipe, not a copy of it
    assert plan.bc_steps == rec["bc"]["steps"] and plan.time_budget_s == rec["rl"]["time_budget_s"]
    assert plan.env_steps == rec["rl"]["env_steps"]
    assert f"policy.temperature={rec['policy']['temperature']:g}" in plan.bc_args


def test_the_commands_apply_the_recipe_unless_the_command_line_sets_the_key(cli_here, tmp_path):
    """The commands stop at a missing data store, after composing their config: what they print shows the recipe."""
    run = tmp_path / "run"
    run.mkdir()
    r = cli_here("robot-rl-train-bc", "task=peg_insert", f"data={tmp_path / 'none.zarr'}", f"hydra.run.dir={run}")
    assert r.returncode == 2 and "task peg_insert: its recommended settings steps=8000 policy.temperature=0.0" in r.stdout
    r = cli_here("robot-rl-train-bc", "task=peg_insert", "steps=5", f"data={tmp_path / 'none.zarr'}",
                 f"hydra.run.dir={run}")
    assert "recommended settings policy.temperature=0.0 (" in r.stdout and "steps=8000" not in r.stdout
    r = cli_here("robot-rl-train-bc", "task=lift", f"data={tmp_path / 'none.zarr'}", f"hydra.run.dir={run}")
    assert "recommended" not in r.stdout and r.returncode == 2
    r = cli_here("robot-rl-quickstart", "task=peg_insert", "stages=[expert]", "episodes=0", f"hydra.run.dir={run}")
    assert ("task peg_insert: its recommended settings bc.steps=8000 policy.temperature=0.0 rl.env_steps=300000 "
            "rl.time_budget_s=0.0" in r.stdout)
