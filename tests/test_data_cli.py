"""robot-rl-collect and robot-rl-data end to end, the collection loop, and their bad-input exits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from robot_rl.data import Episode, EpisodeStore
from tests.conftest import assert_one_line_error, run_cli, run_main

def _make_store(path: Path, n: int, dim: int = 3, task: str = "lift", source: str = "teleop", offset: int = 0) -> list[Episode]:
    eps = []
    for k in range(n):
        t = 2 + k
        eps.append(Episode(
            steps={"obs/proprio": np.full((t, dim), offset + k, np.float32), "action": np.ones((t, 2), np.float32),
                   "intervention": np.arange(t) == 0},
            task=task, source=source, success=k % 2 == 0, instruction=f"do {k}", seed=k, metadata={"k": offset + k},
        ))
    with EpisodeStore.open(path, mode="a") as store:
        store.append(eps)
    return eps


# ---- robot-rl-collect ---------------------------------------------------------------------------------
def test_collect_records_expert_episodes_and_appends_to_an_existing_store(tmp_path):
    out = tmp_path / "lift.zarr"
    proc = run_cli("robot-rl-collect", "task=lift", "episodes=5", "env.num_envs=3", f"out={out}", "backend=mujoco",
                f"hydra.run.dir={tmp_path / 'run1'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = json.loads((tmp_path / "run1" / "metrics.json").read_text())
    assert (tmp_path / "run1" / "config.yaml").is_file()
    store = EpisodeStore.open(out)
    assert metrics["episodes"] == store.n_episodes == 5
    assert metrics["steps"] == store.n_steps and metrics["wall_time_s"] > 0
    assert metrics["success_rate"] == pytest.approx(store.episode_attr("success").mean())
    keys = {k: (list(s.shape), str(s.dtype)) for k, s in store.keys.items()}
    assert keys["obs/proprio"] == ([20], "float32") and keys["obs/object"] == ([11], "float32")
    assert keys["action"] == ([4], "float32") and keys["intervention"] == ([], "bool")
    assert {"reward", "terminated", "truncated", "success", "progress"} <= set(keys)
    done = store.read("terminated") | store.read("truncated")
    # Auto-reset bookkeeping: each stored episode ends exactly at its env's done step, nowhere else.
    assert np.flatnonzero(done).tolist() == (store.episode_ends - 1).tolist()
    for i in range(store.n_episodes):
        ep = store.episode(i)
        assert ep.success == bool(ep.steps["success"].any()) and ep.source == "expert" and ep.task == "lift"
        assert ep.instruction and ep.metadata["backend"] == "mujoco" and ep.metadata["expert_noise"] == 0.0
    assert "recorded 5 episodes" in proc.stdout

    proc = run_cli("robot-rl-collect", "task=lift", "episodes=2", "env.num_envs=2", "expert.noise=0.1", f"out={out}",
                f"hydra.run.dir={tmp_path / 'run2'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store.refresh()
    assert store.n_episodes == 7
    assert [store.episode(i).metadata["expert_noise"] for i in (4, 5, 6)] == [0.0, 0.1, 0.1]


def test_collect_of_an_expert_that_never_succeeds_exits_2_naming_success_and_ranges_and_keeps_a_valid_store(
        tmp_path, capsys, monkeypatch):
    """action_latency is in control ticks: 100 (meant as milliseconds) leaves the expert no time to act at all."""
    out = tmp_path / "lift.zarr"
    code, _, err = run_main("robot-rl-collect", ["episodes=4", "env.num_envs=2", "env.randomization.action_latency=[100,100]",
                                                 f"out={out}", f"hydra.run.dir={tmp_path / 'run'}"], capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for needle in ("succeeded in 0 of 4 episodes", "expert.noise=0", "env.randomization.action_latency=[100, 100]",
                   "narrow the randomization ranges", f"kept in {out}"):
        assert needle in lines[0], (needle, lines[0])
    store = EpisodeStore.open(out)
    assert store.n_episodes == 4 and not store.episode_attr("success").any()
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["successes"] == 0


def test_collect_keeps_the_same_episodes_as_run_episodes(tmp_path):
    """The first `episodes` episodes to start are kept, not the first to finish (short, successful ones)."""
    from robot_rl import sim
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert, run_episodes

    def fresh():
        env = sim.make("lift", num_envs=4)
        return env, make_expert(env, noise=0.25, seed=1)  # noisy enough that some episodes fail

    env, expert = fresh()
    ref = run_episodes(env, expert, 8, seed=2)
    env.close()
    assert 0 < sum(ref["successes"]) < 8  # a mix, so the comparison below sees which episodes were kept
    env, expert = fresh()
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        got = collect(env, expert, store, 8, seed=2)
        assert store.episode_attr("success").tolist() == ref["successes"]
    env.close()
    assert got["episodes"] == 8 and got["mean_length"] == pytest.approx(ref["mean_length"])


def test_collect_into_a_path_that_is_not_a_store_exits_2_naming_it(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("x")
    proc = run_cli("robot-rl-collect", "episodes=1", f"out={notes}", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, f"{notes} is not an episode store")
    assert sorted(p.name for p in notes.iterdir()) == ["todo.txt"]


def test_collect_into_a_locked_store_exits_2_naming_the_holder(tmp_path):
    path = tmp_path / "s.zarr"
    with EpisodeStore.open(path, mode="a"):
        proc = run_cli("robot-rl-collect", "episodes=1", "env.num_envs=1", f"out={path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, f"{path} is locked by a writer (pid {os.getpid()})")


def test_collect_with_a_store_of_other_keys_exits_2_before_simulating(tmp_path, cli_here):
    path = tmp_path / "s.zarr"
    _make_store(path, 2)
    proc = cli_here("robot-rl-collect", "episodes=1", "env.num_envs=1", f"out={path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(proc, f"episode store {path} has keys", "Write them to a new store")
    assert EpisodeStore.open(path).n_episodes == 2


def test_collect_again_with_the_same_seed_is_refused_with_the_command_that_appends_new_episodes(tmp_path, capsys,
                                                                                                monkeypatch):
    """An interrupted run (here: 2 of 3 episodes recorded) re-run as is would record the same episodes again."""
    out = tmp_path / "lift.zarr"
    code, _, err = run_main("robot-rl-collect", ["episodes=2", "env.num_envs=2", f"out={out}",
                                                 f"hydra.run.dir={tmp_path / 'r1'}"], capsys, monkeypatch)
    assert code == 0, err
    code, _, err = run_main("robot-rl-collect", ["episodes=3", "env.num_envs=2", f"out={out}",
                                                 f"hydra.run.dir={tmp_path / 'r2'}"], capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for needle in (f"{out} already holds 2 of the 3 episodes", "seed=0",
                   f"robot-rl-collect episodes=1 env.num_envs=2 out={out} seed=1"):
        assert needle in lines[0], (needle, lines[0])
    assert EpisodeStore.open(out).n_episodes == 2
    command = lines[0].split("under a new seed: ")[1].split()
    assert command[0] == "robot-rl-collect"
    code, _, err = run_main(command[0], [*command[1:], f"hydra.run.dir={tmp_path / 'r3'}"], capsys, monkeypatch)
    assert code == 0, err
    store = EpisodeStore.open(out)
    assert store.episode_attr("seed").tolist() == [0, 0, 1]
    assert len({store.read("obs/object", *store.episode_range(i))[0].tobytes() for i in range(3)}) == 3  # 3 resets


def test_collect_config_backend_sets_env_backend():
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        cfg = compose(config_name="collect", overrides=["backend=mjx", "task=peg_insert"])
    assert cfg.env.backend == "mjx" and cfg.env.task == "peg_insert" and cfg.out is None


# ---- robot-rl-data ------------------------------------------------------------------------------------
def test_info_prints_episodes_steps_keys_success_and_sources(tmp_path):
    path = tmp_path / "s.zarr"
    _make_store(path, 3)  # lengths 2, 3, 4; success on episodes 0 and 2
    proc = run_cli("robot-rl-data", "info", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert lines["episodes"].split()[-1] == "3" and lines["steps"].split()[-1] == "9"
    assert "0.667" in proc.stdout and "teleop: 3" in proc.stdout
    assert lines["obs/proprio"].split()[1:] == ["float32", "[3]"]
    assert lines["intervention"].split()[1:] == ["bool", "[]"]
    summary = json.loads(run_cli("robot-rl-data", "info", str(path), "--json").stdout)
    assert summary["episodes"] == 3 and summary["intervention_steps"] == 3
    assert summary["keys"]["action"] == {"shape": [2], "dtype": "float32"}


def test_merge_combines_stores_in_order_and_keeps_every_attribute(tmp_path):
    a, b, out = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "out.zarr"
    eps = _make_store(a, 2) + _make_store(b, 3, task="peg_insert", source="policy", offset=10)
    proc = run_cli("robot-rl-data", "merge", str(out), str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    assert "merged 5 episodes from 2 store(s)" in proc.stdout
    merged = EpisodeStore.open(out)
    assert merged.n_episodes == 5
    for i, want in enumerate(eps):
        got = merged.episode(i)
        assert {k: v.tolist() for k, v in got.steps.items()} == {k: v.tolist() for k, v in want.steps.items()}
        assert (got.task, got.source, got.success, got.instruction, got.seed, got.metadata) == \
            (want.task, want.source, want.success, want.instruction, want.seed, want.metadata)
    summary = json.loads(run_cli("robot-rl-data", "info", str(out), "--json").stdout)
    assert summary["sources"] == {"policy": 3, "teleop": 2} and summary["tasks"] == {"lift": 2, "peg_insert": 3}


def test_merge_of_stores_with_different_keys_exits_2_and_creates_nothing(tmp_path, cli_here):
    a, b, out = tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "out.zarr"
    _make_store(a, 1, dim=3)
    _make_store(b, 1, dim=5)
    proc = cli_here("robot-rl-data", "merge", str(out), str(a), str(b))
    assert_one_line_error(proc, "key 'obs/proprio'", str(b))
    assert not out.exists()


@pytest.mark.parametrize("command", ["info", "merge"])
def test_data_cli_on_a_path_that_is_not_a_store_exits_2_naming_it(tmp_path, command):
    missing = tmp_path / "missing.zarr"
    args = [str(missing)] if command == "info" else [str(tmp_path / "out.zarr"), str(missing)]
    proc = run_cli("robot-rl-data", command, *args)
    assert_one_line_error(proc, f"no episode store at {missing}")


# ---- damaged stores ---------------------------------------------------------------------------------------
def test_verify_lists_every_damaged_episode_exits_1_and_info_refuses_them_in_one_line(tmp_path):
    path = tmp_path / "s.zarr"
    _make_store(path, 3)
    (path / "meta/success/c/0").unlink()  # the case: info printed success 0.000 for a lost chunk
    proc = run_cli("robot-rl-data", "verify", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("episode ")]
    assert lines == [f"episode {i} (steps {a}-{b}): meta/success chunk c/0 missing"
                     for i, (a, b) in enumerate([(0, 2), (2, 5), (5, 9)])]
    assert_one_line_error(run_cli("robot-rl-data", "info", str(path)), "3 damaged episode(s) of 3: 0-2",
                          "meta/success chunk c/0 missing", "--skip-damaged")
    summary = json.loads(run_cli("robot-rl-data", "info", str(path), "--json", "--skip-damaged").stdout)
    assert summary["episodes"] == 0 and summary["success_rate"] is None and summary["damaged_episodes"] == [0, 1, 2]


def test_merge_skip_damaged_copies_the_intact_episodes_into_a_clean_store(tmp_path):
    path, out = tmp_path / "s.zarr", tmp_path / "repaired.zarr"
    eps = _make_store(path, 45)  # 1,080 steps: obs/proprio rows 1024.. (episodes 43, 44) are chunk c/1/0
    data = bytearray((path / "data/obs/proprio/c/1/0").read_bytes())
    data[len(data) // 2] ^= 0x10
    (path / "data/obs/proprio/c/1/0").write_bytes(bytes(data))
    assert_one_line_error(run_cli("robot-rl-data", "merge", str(out), str(path)), "2 damaged episode(s) of 45: 43-44",
                          "checksum mismatch")
    assert not out.exists()
    proc = run_cli("robot-rl-data", "merge", str(out), str(path), "--skip-damaged")
    assert proc.returncode == 0, proc.stderr
    repaired = EpisodeStore.open(out)
    assert repaired.n_episodes == 43
    assert repaired.read("obs/proprio").tolist() == np.concatenate([e.steps["obs/proprio"] for e in eps[:43]]).tolist()
    clean = run_cli("robot-rl-data", "verify", str(out))
    assert clean.returncode == 0 and "every chunk present and intact" in clean.stdout, clean.stdout + clean.stderr
