"""robot-rl-train-residual as a user runs it: residual, scratch and base-alone runs in one harness, a result
that robot-rl-eval loads unchanged, resume, the comparison figure, and one-line errors for bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robot_rl import sim
from conftest import assert_one_line_error, run_cli, run_main
from robot_rl.policies import load_policy
from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy
from robot_rl.data.stats import KeyStats
from robot_rl.rl.compare import plot_comparison

TINY_ENV = ["env.num_envs=2", "+env.task_config.episode_steps=10", "eval_num_envs=2"]
TINY_RL = ["rl.learning_starts=20", "rl.eval_every=40", "rl.eval_episodes=2", "rl.final_eval_episodes=2",
           "rl.videos=0", "rl.log_every=20", "rl.ckpt_every=40", "rl.time_budget_s=0", "rl.residual.hidden=[16]",
           "rl.learner.num_critics=2", "rl.learner.critic_hidden=[16]", "rl.learner.batch_size=16",
           "rl.learner.critic_warmup=5"]


def _checkpoint(task: str, path) -> str:
    """A small diffusion BasePolicy for `task`, saved as a checkpoint directory (untrained: only the plumbing
    is under test here)."""
    env = sim.make(task, num_envs=1)
    try:
        dims = {**{f"obs/{k}": d for k, d in env.obs_dims.items()}, "action": env.action_dim}
        spec = dict(task=task, obs_dims=dict(env.obs_dims), action_dim=env.action_dim)
    finally:
        env.close()
    stats = {k: KeyStats(min=-np.ones(d), max=np.ones(d), mean=np.zeros(d), std=np.ones(d), count=10)
             for k, d in dims.items()}
    torch.manual_seed(0)
    cfg = DiffusionConfig(dims=(16, 32), step_embed_dim=16, pred_horizon=8, action_horizon=4, inference_steps=3,
                          train_steps=20)
    return str(DiffusionPolicy.from_stats(spec, cfg, stats).save(path))


@pytest.fixture(scope="module")
def lift_base(tmp_path_factory):
    return _checkpoint("lift", tmp_path_factory.mktemp("bases") / "lift")


def _train(*args: str, run, timeout: float = 300):
    return run_cli("robot-rl-train-residual", "task=lift", *TINY_ENV, *TINY_RL, *args, f"hydra.run.dir={run}",
                   timeout=timeout)


def test_residual_run_gives_a_policy_robot_rl_eval_loads_and_resumes(lift_base, tmp_path, cli_here):
    run = tmp_path / "residual"
    proc = _train(f"base={lift_base}", "rl.env_steps=80", run=run)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "base alone: success" in proc.stdout and "lift (residual): 80 env steps" in proc.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["mode"] == "residual" and metrics["env_steps"] == 80 and metrics["updates"] > 0
    assert metrics["base_eval"]["episodes"] == 2 and metrics["eval"]["episodes"] == 2
    hist = metrics["history"]
    for tag in ("eval/success_rate", "eval/train_time_s", "rollout/success_rate", "q/mean", "residual/abs_mean",
                "perf/updates_per_s", "perf/env_steps_per_s"):
        assert hist.get(tag), tag
    assert [s for s, _ in hist["eval/success_rate"]] == [40, 80]
    assert (run / "curves.png").is_file() and list((run / "tb").iterdir())
    assert load_policy(run / "policy").kind == "residual"
    # policy/ is the best evaluated policy: the base (env step 0), 40, or the last, as metrics.json says
    assert metrics["policy_from"]["env_steps"] in (0, 40, 80) and metrics["best_eval"]["episodes"] in (2,)
    assert load_policy(run / "checkpoints" / "best").kind == "residual"

    ev = cli_here("robot-rl-eval", f"policy={run / 'policy'}", "task=lift", "episodes=2", "videos=0",
                  "env.num_envs=2", f"hydra.run.dir={tmp_path / 'eval'}")
    assert ev.returncode == 0, ev.stdout + ev.stderr
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["episodes"] == 2

    more = cli_here("robot-rl-train-residual", "task=lift", *TINY_ENV, *TINY_RL, f"base={lift_base}",
                    "rl.env_steps=120", f"hydra.run.dir={run}")  # in this process: a fresh one costs ~3 s
    assert more.returncode == 0, more.stdout + more.stderr
    assert "resuming" in more.stdout and "from env step 80" in more.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["resumed_from"] == 80 and metrics["env_steps"] == 120
    assert [s for s, _ in metrics["history"]["eval/success_rate"]] == [40, 80, 120]

    changed = cli_here("robot-rl-train-residual", "task=lift", *TINY_ENV, *TINY_RL, f"base={lift_base}",
                       "rl.env_steps=160", "rl.learner.gamma=0.9", f"hydra.run.dir={run}")
    assert_one_line_error(changed, "learner.gamma (0.99 -> 0.9)")


def test_scratch_and_base_alone_runs_plot_with_the_residual_on_one_figure(lift_base, tmp_path, cli_here):
    scratch = _train("mode=scratch", "rl.env_steps=40", run=tmp_path / "scratch")
    assert scratch.returncode == 0, scratch.stdout + scratch.stderr
    m = json.loads((tmp_path / "scratch" / "metrics.json").read_text())
    assert m["mode"] == "scratch" and m["base_eval"] is None
    assert "mode: scratch" in (tmp_path / "scratch" / "config.yaml").read_text()

    alone = cli_here("robot-rl-train-residual", "task=lift", *TINY_ENV, *TINY_RL, "mode=base", f"base={lift_base}",
                     f"hydra.run.dir={tmp_path / 'base'}")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "base alone success" in alone.stdout
    m = json.loads((tmp_path / "base" / "metrics.json").read_text())
    assert m["mode"] == "base" and m["eval"]["episodes"] == 2 and len(m["history"]["eval/success_rate"]) == 1

    out = plot_comparison({"scratch": tmp_path / "scratch", "base alone": tmp_path / "base"}, tmp_path / "cmp.png")
    assert out.stat().st_size > 10_000
    with pytest.raises(ValueError, match="no eval/success_rate history"):
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "metrics.json").write_text('{"history": {}}')
        plot_comparison({"x": tmp_path / "empty"}, tmp_path / "x.png")


def test_a_reward_model_that_never_saw_the_bases_rollouts_is_warned_about(lift_base, tmp_path):
    from robot_rl.reward import RewardModel, RewardSpec

    env = sim.make("lift", num_envs=1)
    spec = RewardSpec(task="lift", obs_dims=dict(env.obs_dims))
    env.close()
    model = RewardModel.build(spec, hidden=(8,))
    model.info = {"rollout_policies": [{"policy": "runs/other/policy", "sha256": "0" * 64, "episodes": 200,
                                        "failed": 150}]}
    model.save(tmp_path / "rm" / "reward_model")
    proc = _train(f"base={lift_base}", "rl.reward=learned", f"rl.reward_model={tmp_path / 'rm'}", "rl.shaping=0.3",
                  "rl.env_steps=20", "rl.eval_every=0", run=tmp_path / "run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: the reward model's policy rollouts come from runs/other/policy" in proc.stderr
    assert f"policy={lift_base} episodes=200" in proc.stderr
    warnings = json.loads((tmp_path / "run" / "metrics.json").read_text())["warnings"]
    assert sum("none from the base this run refines" in w for w in warnings) == 1, warnings


def test_compare_reports_the_first_evaluation_reaching_a_level(tmp_path, capsys):
    from robot_rl.rl.compare import main

    for name, ys in (("sparse", [0.5, 0.79, 0.8, 0.7]), ("shaped", [0.6, 0.7, 0.75, 0.78]),
                     ("shaped2", [0.6, 0.9, 0.85, 0.88])):
        (tmp_path / name).mkdir()
        hist = {"eval/base_success_rate": [[0, 0.2]], "eval/success_rate": [[2500 * (i + 1), y] for i, y in enumerate(ys)]}
        (tmp_path / name / "metrics.json").write_text(json.dumps({"history": hist}))
    main([f"sparse={tmp_path / 'sparse'}", f"shaped={tmp_path / 'shaped'}", "--out", str(tmp_path / "c.png"),
          "--reach", "0.8"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()[1:]]
    assert lines == [{"run": "sparse", "first_steps_at_0.8": 7500, "best": 0.8},
                     {"run": "shaped", "first_steps_at_0.8": None, "best": 0.78}]
    # a label given twice (two seeds): the mean curve 0.2, 0.6, 0.8, 0.8, 0.83 reaches 0.8 at 5000
    main([f"shaped={tmp_path / 'shaped'}", f"shaped={tmp_path / 'shaped2'}", "--out", str(tmp_path / "m.png"),
          "--reach", "0.8"])
    line = json.loads(capsys.readouterr().out.splitlines()[1])
    assert line["first_steps_at_0.8"] == 5000 and line["each"] == [None, 5000] and line["runs"] == 2
    assert (tmp_path / "m.png").stat().st_size > 10_000
    with pytest.raises(SystemExit):
        main([f"sparse={tmp_path / 'sparse'}", "--out", str(tmp_path / "c.png"), "--reach", "80"])


def test_a_seed_sweep_lands_under_runs_and_compare_reads_it_as_one_label(lift_base, tmp_path, monkeypatch, capsys):
    from robot_rl.rl.compare import main

    monkeypatch.chdir(tmp_path)
    code, out, err = run_main("robot-rl-train-residual", ["-m", "rl.seed=0,1", "task=lift", f"base={lift_base}",
                                                          *TINY_ENV, *TINY_RL, "rl.env_steps=40"], capsys, monkeypatch)
    assert code == 0, out + err
    sweeps = list((tmp_path / "runs/train_residual/multirun").glob("*/*"))  # <date>/<time>
    assert len(sweeps) == 1 and not (tmp_path / "multirun").exists(), sorted(tmp_path.rglob("*"))
    assert sorted(p.name for p in sweeps[0].iterdir() if p.is_dir()) == ["0", "1"]
    from omegaconf import OmegaConf

    assert [OmegaConf.load(sweeps[0] / j / "config.yaml").rl.seed for j in ("0", "1")] == [0, 1]
    main([f"residual={sweeps[0]}", "--out", str(tmp_path / "c.png"), "--reach", "0"])
    line = json.loads(capsys.readouterr().out.splitlines()[1])
    assert line["run"] == "residual" and line["runs"] == 2 and line["each"] == [0, 0]


def test_compare_splits_a_sweep_by_the_settings_its_jobs_differ_in_besides_seeds(tmp_path, capsys):
    from robot_rl.rl.compare import main

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("{}\n")
    for job, (utd, seed, y) in enumerate([(1, 0, 0.5), (1, 1, 0.7), (2, 0, 0.9), (2, 1, 0.9)]):
        (sweep / str(job) / ".hydra").mkdir(parents=True)
        (sweep / str(job) / ".hydra" / "overrides.yaml").write_text(f"- task=lift\n- rl.utd={utd}\n- rl.seed={seed}\n")
        hist = {"eval/success_rate": [[100, y / 2], [200, y]]}
        (sweep / str(job) / "metrics.json").write_text(json.dumps({"history": hist}))
    main([f"residual={sweep}", "--out", str(tmp_path / "c.png"), "--reach", "0.8"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()[1:]]
    assert [(x["run"], x["runs"], x["best"], x["each"]) for x in lines] == [
        ("residual[rl.utd=1]", 2, pytest.approx(0.6), [None, None]), ("residual[rl.utd=2]", 2, 0.9, [200, 200])]
