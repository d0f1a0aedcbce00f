"""MuJoCo 3.3 through 4.x: `make test` runs the tests marked mujoco_compat a second time on the MuJoCo that Meta-World
pins (Makefile MUJOCO_COMPAT, first on PYTHONPATH); MJX, which needs a newer one, says so in one line."""

from __future__ import annotations

from importlib import metadata

import mujoco
import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from robot_rl.sim.make import check_mjx_mujoco
from tests.conftest import assert_one_line_error, run_cli


@pytest.mark.mujoco_compat
def test_mjx_needs_the_mujoco_its_package_names(tmp_path):
    need = next(Requirement(r) for r in metadata.requires("mujoco-mjx") if Requirement(r).name == "mujoco")
    if need.specifier.contains(Version(mujoco.__version__), prereleases=True):
        check_mjx_mujoco()  # the MuJoCo of the main lane: MJX runs (tests marked mjx)
        return
    proc = run_cli("robot-rl-eval", "policy=expert", "env.backend=mjx", "episodes=1", f"hydra.run.dir={tmp_path}")
    assert_one_line_error(proc, "env.backend=mjx", f"needs mujoco{need.specifier}", f"mujoco {mujoco.__version__}",
                          "env.backend=mujoco")
