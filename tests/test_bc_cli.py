"""robot-rl-train-bc and robot-rl-eval end to end: run directory, resume, evaluation metrics, bad inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.data import EpisodeStore
from robot_rl.evaluation import wilson_interval
from robot_rl.video import read_mp4_frames
from tests.conftest import assert_one_line_error, run_cli, run_main

# A tiny policy and budget: the plumbing, not the learning, is under test here.
TINY = ["policy.dims=[16,32]", "policy.step_embed_dim=16", "policy.pred_horizon=8", "policy.action_horizon=4",
        "policy.inference_steps=3", "policy.train_steps=20", "batch_size=16", "ckpt_every=2", "log_every=1",
        "eval_episodes=2", "env.num_envs=2", "warmup_steps=1"]


@pytest.fixture(scope="module")
def lift_store(tmp_path_factory):
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    path = tmp_path_factory.mktemp("data") / "lift.zarr"
    env = sim.make("lift", num_envs=3)
    with EpisodeStore.open(path, mode="a") as store:
        collect(env, make_expert(env, noise=0.1, seed=0), store, episodes=6, seed=0, source="expert")
    env.close()
    return path


@pytest.fixture(scope="module")
def trained(lift_store, tmp_path_factory):
    run = tmp_path_factory.mktemp("bc") / "run"
    proc = run_cli("robot-rl-train-bc", f"data={lift_store}", "steps=4", "videos=1", *TINY, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run, proc


def test_train_bc_writes_policy_checkpoints_logs_and_curves(trained):
    run, proc = trained
    for name in ("config.yaml", "metrics.json", "curves.png", "policy/model.safetensors", "policy/config.json",
                 "checkpoints/latest.json", "videos/episode_0.mp4"):
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*")), "TensorBoard events"
    m = json.loads((run / "metrics.json").read_text())
    assert m["steps"] == 4 and m["episodes"] == 6 and math.isfinite(m["final_loss"])
    assert [s for s, _ in m["history"]["train/loss"]] == [1, 2, 3, 4]
    assert 0.0 <= m["success_rate"] <= 1.0 and m["eval"]["episodes"] == 2
    assert json.loads((run / "checkpoints/latest.json").read_text()) == {"step": 4, "path": "step_0000004"}
    assert len(read_mp4_frames(run / "videos/episode_0.mp4")) > 1
    assert "BC success" in proc.stdout


def _train_state(checkpoint_dir):
    return json.loads((checkpoint_dir / "config.json").read_text())["train"]


def test_train_bc_resumes_from_the_latest_checkpoint(trained, lift_store):
    run, _ = trained
    first = _train_state(run / "checkpoints/step_0000004")["train_time_s"]
    assert first > 0
    proc = run_cli("robot-rl-train-bc", f"data={lift_store}", "steps=6", "videos=1", *TINY, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resuming" in proc.stdout and "from step 4" in proc.stdout
    m = json.loads((run / "metrics.json").read_text())
    assert m["steps"] == 6 and m["resumed_from"] == 4
    # training time over both segments: the first's carried by the checkpoint, not just the resumed part's
    assert m["train_time_s"] > first and "train_time_from_step" not in m
    assert m["train_time_s"] == pytest.approx(_train_state(run / "checkpoints/step_0000006")["train_time_s"])
    # one continuous history: steps 1..6 once each, the resumed part appended
    assert [s for s, _ in m["history"]["train/loss"]] == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_0000004", "step_0000006"]


def test_a_checkpoint_without_training_time_resumes_and_metrics_say_where_the_time_counts_from(
        trained, lift_store, tmp_path, cli_here):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained[0], run)
    step = max(run.glob("checkpoints/step_*"))
    config = json.loads((step / "config.json").read_text())
    for key in ("train_time_s", "train_time_from_step"):  # as checkpoints were written before they kept the time
        del config["train"][key]
    (step / "config.json").write_text(json.dumps(config))
    n = config["train"]["step"]
    proc = cli_here("robot-rl-train-bc", f"data={lift_store}", f"steps={n + 2}", "videos=0", *TINY, f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = json.loads((run / "metrics.json").read_text())
    assert m["resumed_from"] == n and m["train_time_from_step"] == n and m["train_time_s"] > 0


def test_resume_with_a_changed_config_names_the_differing_keys(trained, lift_store, cli_here):
    run, _ = trained
    proc = cli_here("robot-rl-train-bc", f"data={lift_store}", "steps=8", *TINY, "lr=0.01", "policy.kernel=3",
                    f"hydra.run.dir={run}")
    assert_one_line_error(proc, "cannot resume", "lr (0.0003 -> 0.01)", "policy.kernel (5 -> 3)")


def test_train_bc_refuses_a_store_of_another_task(lift_store, tmp_path, cli_here):
    proc = cli_here("robot-rl-train-bc", "task=push", f"data={lift_store}", "steps=2", *TINY,
                    f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "holds task(s) ['lift']", "trains task 'push'")


def test_train_bc_refuses_a_damaged_store_in_one_line_and_skip_damaged_trains_on_the_rest(lift_store, tmp_path, capsys,
                                                                                          monkeypatch):
    from robot_rl.data.merge import merge_stores

    path = tmp_path / "big.zarr"  # the demos 8 times: over 1,024 steps, so obs/proprio spans two chunks
    with EpisodeStore.open(path, mode="a") as out:
        merge_stores(out, [EpisodeStore.open(lift_store)] * 8)
    store = EpisodeStore.open(path)
    first_damaged = int(np.searchsorted(store.episode_ends, 1024, side="right"))
    (path / "data/obs/proprio/c/1/0").unlink()  # the case: training saw zero rows and saved zero stats
    code, _, err = run_main("robot-rl-train-bc", [f"data={path}", "steps=2", *TINY,
                                                  f"hydra.run.dir={tmp_path / 'refused'}"], capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for needle in (f"{path} has {store.n_episodes - first_damaged} damaged episode(s)",
                   "data/obs/proprio chunk c/1/0 missing", "skip_damaged=true"):
        assert needle in lines[0], (needle, lines[0])
    code, out, err = run_main("robot-rl-train-bc", [f"data={path}", "steps=2", "final_eval=false", "skip_damaged=true",
                                                    *TINY, f"hydra.run.dir={tmp_path / 'skipped'}"], capsys, monkeypatch)
    assert code == 0, out + err
    metrics = json.loads((tmp_path / "skipped" / "metrics.json").read_text())
    assert metrics["episodes"] == first_damaged and metrics["windows"] == store.episode_ends[first_damaged - 1]
    assert "keys" not in json.loads((path / "meta/stats/zarr.json").read_text())["attributes"]


def test_failed_weight_0_trains_only_on_the_successful_episodes(tmp_path, cli_here):
    """BC from the successful demonstrations only (the expert's failures left out): windows of failed episodes get
    failed_weight; a store with no successful episode is refused in one line naming the key."""
    from robot_rl.data.collect import collect
    from robot_rl.data.sampler import SequenceSampler
    from robot_rl.train_bc import BCConfig, window_weights
    from robot_rl.sim.experts import make_expert

    mixed, failed = tmp_path / "mixed.zarr", tmp_path / "failed.zarr"
    env = sim.make("lift", num_envs=2)
    with EpisodeStore.open(mixed, mode="a") as store:
        collect(env, make_expert(env, noise=0.1, seed=0), store, episodes=2, seed=0, source="expert")
        collect(env, make_expert(env, noise=3.0, seed=0), store, episodes=2, seed=1, source="expert")
    with EpisodeStore.open(failed, mode="a") as store:
        collect(env, make_expert(env, noise=3.0, seed=0), store, episodes=2, seed=1, source="expert")
    env.close()
    store = EpisodeStore.open(mixed)
    assert store.episode_attr("success").tolist() == [True, True, False, False]  # the expert, then random actions
    sampler = SequenceSampler(store, action_horizon=8)
    w = window_weights(store, sampler, BCConfig(data=str(mixed), failed_weight=0.0))
    assert np.all(w[sampler.episode < 2] == 1.0) and np.all(w[sampler.episode >= 2] == 0.0)
    assert BCConfig(data=str(mixed), failed_weight=0.5).mixing and not BCConfig(data=str(mixed)).mixing

    proc = cli_here("robot-rl-train-bc", f"data={mixed}", "failed_weight=0", "steps=2", "final_eval=false", *TINY,
                    f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mixture = json.loads((tmp_path / "run/metrics.json").read_text())["mixture"]
    assert mixture["successful_share"] == pytest.approx(1.0) and mixture["windows"] == [len(sampler)]
    proc = cli_here("robot-rl-train-bc", f"data={failed}", "failed_weight=0", "steps=2", *TINY,
                    f"hydra.run.dir={tmp_path / 'none'}")
    assert_one_line_error(proc, "every training window has weight 0", "failed_weight=0.0", "robot-rl-data info")
    proc = cli_here("robot-rl-train-bc", f"data={mixed}", "failed_weight=-1", "steps=2", *TINY,
                    f"hydra.run.dir={tmp_path / 'neg'}")
    assert_one_line_error(proc, "failed_weight=-1", ">= 0")


def test_eval_of_the_expert_reports_success_with_wilson_interval_seeds_and_video(tmp_path):
    proc = run_cli("robot-rl-eval", "policy=expert", "task=lift", "episodes=4", "env.num_envs=2", "videos=1",
                   "seed=7", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["episodes"] == 4 and m["success_rate"] == 1.0 and m["seed"] == 7
    assert m["success_ci95"] == pytest.approx(list(wilson_interval(4, 4)))
    assert sorted(map(tuple, m["episode_ids"])) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert len(m["episode_success"]) == 4 and sum(m["episode_success"]) == m["successes"]
    assert m["mean_length"] < 80 and len(read_mp4_frames(tmp_path / "videos/episode_0.mp4")) > 5


def test_eval_names_a_missing_checkpoint_file(trained, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(trained[0] / "policy", ckpt)
    (ckpt / "config.json").unlink()
    proc = run_cli("robot-rl-eval", f"policy={ckpt}", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, f"checkpoint {ckpt} is missing config.json")


def test_wilson_interval_matches_known_values():
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 10)[1] == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(10, 10)[0] == pytest.approx(0.7225, abs=1e-4)
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)


def test_wilson_interval_is_scipys_and_knows_nothing_without_trials():
    from scipy.stats import binomtest

    for n in (1, 7, 50):
        for k in range(n + 1):
            ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            assert wilson_interval(k, n) == (ci.low, ci.high)
    assert wilson_interval(0, 0) == (0.0, 1.0)