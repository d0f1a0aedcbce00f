"""The SB3 SAC baseline (robot_rl/rl/sb3_baseline.py): a run directory in the residual runs' format, evaluated on
their episodes, and a missing stable-baselines3 named with its extra."""

from __future__ import annotations

import json
import sys

import pytest

SAC_ARGS = ["task=lift", "env.task_config.episode_steps=10", "env_steps=80", "learning_starts=40", "batch_size=16",
            "buffer_size=500", "net_arch=[16]", "eval_every=40", "eval_episodes=2", "final_eval_episodes=2",
            "eval_num_envs=2", "log_every=40"]


def test_the_sb3_sac_baseline_is_evaluated_on_the_residual_runs_episodes_and_read_by_compare(tmp_path, capsys):
    pytest.importorskip("stable_baselines3")
    from robot_rl.rl.compare import first_reaching, load_curve
    from robot_rl.rl.sb3_baseline import main

    main([*SAC_ARGS, f"out={tmp_path / 'sac'}"])
    m = json.loads((tmp_path / "sac" / "metrics.json").read_text())
    assert m["env_steps"] == 80 and m["mode"] == "sac" and m["control_hz"] == 20.0 and m["updates"] == 40
    assert [s for s, _ in m["history"]["eval/success_rate"]] == [40, 80]
    assert [s for s, _ in m["history"]["eval/train_time_s"]] == [40, 80]
    curve = load_curve(tmp_path / "sac")
    assert curve["x"] == [40, 80] and first_reaching(curve, 0.0) == 40
    # evaluate_policy's episodes at the residual runs' seed and env count: the episodes a residual run is scored on
    assert (m["eval"]["seed"], m["eval"]["num_envs"], m["eval"]["episodes"]) == (1000, 2, 2)
    assert (tmp_path / "sac" / "curves.png").is_file() and list((tmp_path / "sac" / "tb").glob("events.*"))
    assert "SB3 SAC" in capsys.readouterr().out


def test_the_sac_baseline_without_stable_baselines3_names_the_extra(tmp_path, capsys, monkeypatch):
    from robot_rl.rl.sb3_baseline import main

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)  # import fails as when it is not installed
    monkeypatch.setattr(sys, "argv", ["sb3_baseline"])
    with pytest.raises(SystemExit) as e:
        main([*SAC_ARGS, f"out={tmp_path / 'sac'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "pip install 'robot_rl[bench]'" in err[0]
    assert not (tmp_path / "sac").exists()


def test_an_unknown_task_is_one_line_naming_the_valid_ones(tmp_path, capsys):
    from robot_rl.rl.sb3_baseline import main

    with pytest.raises(SystemExit) as e:
        main(["task=stack", *SAC_ARGS[1:], f"out={tmp_path / 'sac'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert "unknown task 'stack'" in err[0] and "lift" in err[0], err
    assert not (tmp_path / "sac").exists()
