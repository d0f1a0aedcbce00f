"""robot_rl inside a user's project: their own packages named configs, sim, policies and real (common names in ML
repositories) never shadow ours, from the Python API or a console script run in their directory, and stay theirs.

Our top-level folders install as robot_rl.configs, robot_rl.sim, robot_rl.policies and robot_rl.real (pyproject.toml,
robot_rl/<name> -> ../<name>); nothing of ours imports the bare names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import BIN, ROOT

# Packages a user's project may well have; each also has what ours has under the same name (a primary config
# eval.yaml, a sim.make), so that reaching theirs instead of ours cannot go unnoticed.
USER_PACKAGES = {
    "configs/__init__.py": 'OWNER = "user"\n',
    "configs/eval.yaml": "user_key: 1\n",
    "sim/__init__.py": 'OWNER = "user"\n\n\ndef make(*args, **kwargs):\n    raise RuntimeError("the user\'s sim.make")\n',
    "policies/__init__.py": 'OWNER = "user"\nREGISTRY = {}\n',
    "real/__init__.py": 'OWNER = "user"\n',
}

# The user's script: robot_rl's Python API (an env, then robot-rl-eval's main) and then their own packages.
SCRIPT = """\
import json, sys

from robot_rl import sim as ours
import robot_rl.cli.eval

env = ours.make("lift", num_envs=1)
env.reset(0)
env.close()
sys.argv = ["robot-rl-eval", "policy=expert", "env.task=lift", "episodes=2", "env.num_envs=2", "videos=0",
            "hydra.run.dir=api_run"]
try:
    robot_rl.cli.eval.main()
except SystemExit as e:
    assert not e.code, e.code
import configs, policies, real, sim
print(json.dumps({m.__name__: m.OWNER for m in (configs, policies, real, sim)}))
"""

BARE = re.compile(r"^\s*(from|import) (configs|policies|real|sim)\b", re.M)


def user_project(tmp_path: Path) -> Path:
    for rel, text in USER_PACKAGES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "run.py").write_text(SCRIPT)
    return tmp_path


def test_the_python_api_runs_from_a_project_with_packages_of_our_folder_names(tmp_path):
    project = user_project(tmp_path)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PYTHONPATH", None)
    # `python run.py` puts the project's directory first on sys.path, ahead of the installed robot_rl
    proc = subprocess.run([sys.executable, "run.py"], cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    owners = json.loads(proc.stdout.strip().splitlines()[-1])
    assert owners == {"configs": "user", "policies": "user", "real": "user", "sim": "user"}, owners
    metrics = json.loads((project / "api_run" / "metrics.json").read_text())
    assert metrics["episodes"] == 2 and metrics["task"] == "lift", metrics


def test_a_console_script_runs_with_the_project_on_pythonpath(tmp_path):
    project = user_project(tmp_path)
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(project))
    proc = subprocess.run([str(BIN / "robot-rl-eval"), "policy=expert", "env.task=lift", "episodes=2",
                           "env.num_envs=2", "videos=0", "hydra.run.dir=cli_run"],
                          cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads((project / "cli_run" / "metrics.json").read_text())["episodes"] == 2


def test_no_module_of_ours_imports_the_bare_folder_names():
    """What keeps the tests above true for every code path: each import of our folders says robot_rl.<name>."""
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    hits = []
    for rel in tracked.stdout.split():
        if ROOT / rel == Path(__file__).resolve():  # SCRIPT above: the user's own imports
            continue
        hits += [f"{rel}: {m.group(0).strip()}" for m in BARE.finditer((ROOT / rel).read_text())]
    assert not hits, "import robot_rl.<name> instead:\n" + "\n".join(hits)
