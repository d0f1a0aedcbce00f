"""--help of the robot-rl-* commands: each command's own page (what it does, an example, where it writes, its keys
with their comments, the config groups it selects), not Hydra's generic one; robot-rl-data says why it is argparse."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

from conftest import ENTRY_POINTS, ROOT, run_cli

HYDRA = {script: module for script, module in ENTRY_POINTS.items()
         if "@hydra_command(" in (ROOT / (module.replace(".", "/") + ".py")).read_text()}


def test_train_bc_help_is_its_own_page_with_examples_keys_and_groups():
    proc = run_cli("robot-rl-train-bc", "--help", timeout=60)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.startswith("robot-rl-train-bc: train a base policy (diffusion or VLA) by behaviour cloning")
    assert "\n    robot-rl-train-bc task=lift data=data/lift.zarr" in out and "Writes runs/train_bc/" in out
    assert re.search(r"^  steps=3000 +gradient steps$", out, re.M)  # BCConfig's comment on the field
    assert re.search(r"^  torch_threads=1 +intra-op threads", out, re.M)  # the YAML's comment on the key
    assert re.search(r"^  policy=diffusion +one of diffusion, vla$", out, re.M)
    assert "powered by Hydra" not in out and "schema" not in out and "hil" not in out  # groups it does not use
    assert "robot-rl-train-bc -m seed=0,1,2" in out and "runs/train_bc/multirun/<date>/<time>/<job>/" in out


@pytest.mark.parametrize("script", sorted(HYDRA))
def test_every_hydra_command_help_starts_with_its_docstring_and_shows_the_overrides(script, capsys, monkeypatch):
    module = importlib.import_module(HYDRA[script])
    monkeypatch.setattr(sys, "argv", [script, "task=push", "--help"] if script != "robot-rl-benchmark" else
                        [script, "jobs=2", "--help"])
    with pytest.raises(SystemExit) as e:
        module.main()
    out = capsys.readouterr().out
    doc = module.__doc__.strip()
    assert e.value.code == 0
    assert f"\n    {script} " in doc and "runs/" in doc  # an example, and where it writes
    assert out.startswith(doc.splitlines()[0]) and "\nOptions (key=value" in out and "powered by Hydra" not in out
    assert re.search(r"^  jobs=2 " if script == "robot-rl-benchmark" else r"^  task=push ", out, re.M)


def test_robot_rl_data_help_says_why_it_is_not_a_hydra_app(capsys):
    from robot_rl.cli.data import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "robot-rl-data merge OUT IN1 [IN2 ...]" in out
    assert "argparse, not Hydra like the other robot-rl-* commands" in " ".join(out.split())
