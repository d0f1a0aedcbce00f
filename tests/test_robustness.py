"""The robustness report card (robot-rl-eval sweep=robustness): each factor reaches the env, one card compares
several policies on the same episodes, and its JSON, Markdown, PNG and HTML say the same thing."""

from __future__ import annotations

import base64
import json
import re

import pytest

from tests.conftest import run_main


def card_args(run, *extra) -> list[str]:
    return ["sweep=robustness", "env.num_envs=4", "sweep.episodes=4", *extra, f"hydra.run.dir={run}"]


def test_latency_6_ticks_breaks_the_lift_expert_and_the_card_files_agree(tmp_path, capsys, monkeypatch):
    """Latency set per level reaches the env (the expert, built for 0-2 ticks, lifts every cube with no delay and none
    with 6 ticks, 300 ms: measured 0/32), and robustness.json / .md / .png / .html carry the same figures."""
    run = tmp_path / "run"
    code, out, err = run_main("robot-rl-eval", card_args(run, "policy=expert", "sweep.factors=[latency,obs_noise]",
                                                         "sweep.latency=[0,6]", "sweep.obs_noise=[0]"),
                              capsys, monkeypatch)
    assert code in (0, None), err[-2000:]
    card = json.loads((run / "robustness.json").read_text())
    rate = {(r["factor"], r["level"]): r["success_rate"] for r in card["results"]}
    assert rate == {("latency", 0): 1.0, ("latency", 6): 0.0, ("obs_noise", 0): 1.0}
    assert card["factors"]["latency"] == {"key": "action_latency", "unit": "ticks", "levels": [0, 6]}
    assert all(r["episodes"] == 4 for r in card["results"]) and card["seed"] == 1000
    # the two nominal levels (latency 0, noise 0) are one evaluation: 2 levels of 4 episodes ran, not 3
    assert json.loads((run / "metrics.json").read_text())["episodes_run"] == 8

    md = (run / "robustness.md").read_text()
    html = (run / "robustness.html").read_text()
    for r in card["results"]:
        lo, hi = r["success_ci95"]
        cell = f"{r['success_rate']:.2f} ({lo:.2f}-{hi:.2f})"
        label = {"latency": "latency (ticks)", "obs_noise": "obs noise (mm)"}[r["factor"]]
        assert f"| {label} | {r['level']:g} | {cell} |" in md
        assert f"<td>{cell}</td>" in html
    png = (run / "robustness.png").read_bytes()
    assert png.startswith(b"\x89PNG") and "![Success per factor level](robustness.png)" in md
    embedded = re.search(r'src="data:image/png;base64,([^"]+)"', html).group(1)
    assert base64.b64decode(embedded) == png
    assert "latency (ticks)  6      0.00" in out  # the table printed at the end


def test_one_card_compares_the_expert_and_a_checkpoint(tiny, tmp_path, capsys, monkeypatch):
    """policy={label: source, ...} puts several policies on one card, each evaluated on every level."""
    run = tmp_path / "run"
    code, _, err = run_main("robot-rl-eval", card_args(run, f"policy={{expert: expert, BC: {tiny.policy}}}",
                                                         "sweep.factors=[object_mass]", "sweep.object_mass=[1,3]",
                                                         "env.num_envs=2", "sweep.episodes=2"),
                              capsys, monkeypatch)
    assert code in (0, None), err[-2000:]
    card = json.loads((run / "robustness.json").read_text())
    assert card["policies"] == {"expert": "expert", "BC": str(tiny.policy)}
    assert sorted((r["policy"], r["level"]) for r in card["results"]) == [("BC", 1), ("BC", 3), ("expert", 1),
                                                                        ("expert", 3)]
    assert "| factor | level | expert | BC |" in (run / "robustness.md").read_text()


def test_camera_factors_are_swept_only_for_policies_that_read_cameras():
    from robot_rl.robustness import FACTORS, RobustnessConfig, plan, sweep, table
    from robot_rl.sim.config import RandomizationConfig

    def names(levels):
        return list(dict.fromkeys(lv.factor.name for lv in levels))

    cfg = RobustnessConfig(camera_pos=[0.0, 20.0])
    assert names(plan(cfg, RandomizationConfig(), cameras=False)) == [
        "latency", "obs_noise", "object_mass", "friction", "actuator_gain"]
    levels = plan(cfg, RandomizationConfig(), cameras=True)
    assert names(levels)[-2:] == ["camera_pos", "camera_rot"]
    pos = [lv for lv in levels if lv.factor.name == "camera_pos"]
    assert [lv.randomization.camera_pos_jitter for lv in pos] == [0.0, 0.02]  # mm -> m, every other key nominal
    assert pos[1].randomization.action_latency == (0, 0) and pos[1].randomization.obs_noise_std == 0.0

    # with a state policy next to a camera policy, the state policy's camera rows are "n/a", not evaluated
    evaluated = []

    def evaluate(label, rand):
        evaluated.append((label, rand.camera_pos_jitter))
        return {"successes": 1, "episodes": 1, "success_rate": 1.0, "success_ci95": [0.2, 1.0], "mean_return": 0.0,
                "mean_length": 1.0}

    records = sweep(pos, ["vla", "state"], evaluate, lambda p, f: p == "vla" or not f.cameras)
    assert evaluated == [("vla", 0.0), ("vla", 0.02)]
    card = {"policies": {"vla": "a", "state": "b"}, "factors": {"camera_pos": {"levels": [0.0, 20.0]}},
            "results": records}
    assert table(card)[0][1] == [FACTORS["camera_pos"].label, "20", "1.00 (0.20-1.00)", "n/a"]


def test_the_card_defaults_are_the_issues_ranges():
    from robot_rl.robustness import RobustnessConfig

    cfg = RobustnessConfig()
    assert (cfg.latency, cfg.obs_noise, cfg.object_mass) == ([0, 1, 2, 3], [0, 2.5, 5, 10], [0.5, 1, 2, 3])
    assert (cfg.friction, cfg.actuator_gain, cfg.episodes) == ([0.5, 0.75, 1, 1.25, 1.5], [0.8, 0.9, 1, 1.1, 1.2], 50)


@pytest.mark.parametrize("value,labels", [
    ("expert", ["expert"]),
    (["expert", "runs/train_bc/20250101-bc/policy"], ["expert", "20250101-bc"]),
    ({"BC+residual": "runs/x/policy"}, ["BC+residual"]),
])
def test_policy_labels(value, labels):
    from omegaconf import OmegaConf

    from robot_rl.cli.robustness import policy_sources

    node = OmegaConf.create({"p": value}).p
    assert list(policy_sources(node)) == labels
