"""Shared fixtures: one compiled MJX env per session, persistent JAX compilation cache in .cache/."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")
from robot_rl import sim  # noqa: E402,F401  (before any test module imports mujoco: sim picks MUJOCO_GL for this machine first)
# Small torch models run ~10x slower with intra-op threads on 2 busy cores (measured: 150 SB3 SAC updates
# 22 s with 2 threads, 2 s with 1). Set before torch is imported anywhere in the session.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The suite's MJX programs (and its subprocesses') compile with most XLA optimizations off: on a fresh clone
# (CI: no JAX cache yet) compiling dominates their tests, and their few hundred steps run slower by less.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

# Randomization used by the shared envs: every mechanism on, so equivalence and determinism cover it.
DR = dict(
    friction=[0.7, 1.3], object_mass=[0.5, 1.5], object_size=[0.9, 1.1], joint_damping=[0.8, 1.2],
    armature=[0.8, 1.2], actuator_gain=[0.9, 1.1], obs_noise_std=0.002, action_latency=[0, 2],
)
N_ENVS = 4


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without xdist (-p no:xdist) it is not called
def pytest_configure(config):
    """`make test`'s second lane (ROBOT_RL_MUJOCO=<version>, that MuJoCo first on PYTHONPATH) really runs on it."""
    want = os.environ.get("ROBOT_RL_MUJOCO")
    if want:
        import mujoco

        if mujoco.__version__ != want:
            raise pytest.UsageError(f"ROBOT_RL_MUJOCO={want} but mujoco {mujoco.__version__} imports (from "
                                    f"{mujoco.__file__}); put mujoco {want} first on PYTHONPATH")


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs the suite on pytest-xdist workers with --dist loadfile: each file's tests on one worker (its
    module fixtures built once), and here the files with a function taking the session's mjx_env join one unit, so
    one worker compiles that env's MJX step and serves them all."""
    if config.getvalue("dist") != "loadfile":
        return None
    import ast

    from xdist.scheduler import LoadFileScheduling

    def takes_mjx_env(path: Path) -> bool:
        return any(isinstance(n, ast.FunctionDef) and any(a.arg == "mjx_env" for a in n.args.args)
                   for n in ast.walk(ast.parse(path.read_text())))

    mjx_files = {p.name for p in Path(__file__).parent.glob("test_*.py") if takes_mjx_env(p)}

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "mjx" if Path(file).name in mjx_files else file

    return Scheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def _jax_cache():
    from robot_rl.common.jax_cache import enable_compilation_cache

    enable_compilation_cache(ROOT / ".cache" / "jax")


@pytest.fixture(scope="session")
def mjx_env():
    from robot_rl import sim

    env = sim.make("lift", backend="mjx", num_envs=N_ENVS, randomization=DR)
    yield env
    env.close()


@pytest.fixture()
def cpu_env():
    from robot_rl import sim

    env = sim.make("lift", backend="mujoco", num_envs=N_ENVS, randomization=DR)
    yield env
    env.close()


BIN = Path(sys.executable).parent  # the venv's bin dir, where the console scripts live


def run_cli(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run one of our console scripts as a user would, capturing its output."""
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    return subprocess.run([str(BIN / script), *args], capture_output=True, text=True, timeout=timeout, env=env)


@contextlib.contextmanager
def running(script: str, *args: str):
    """One of our console scripts started in the background (stdout discarded, stderr piped), for a test that kills
    it: whatever happens in the block, the process is SIGKILLed if still alive and reaped on leaving it."""
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    proc = subprocess.Popen([str(BIN / script), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()


def wait_for(pred, what: str, timeout: float = 120.0):
    """pred()'s first truthy value, polled every 50 ms; AssertionError naming `what` after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def checkpoint_step(run: Path) -> int | None:
    """The step of a training run directory's latest checkpoint (None: none yet, or latest.json mid-write)."""
    try:
        return json.loads((Path(run) / "checkpoints/latest.json").read_text())["step"]
    except (OSError, ValueError):
        return None


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, no traceback, one line on stderr containing every needle."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)


# ---- console scripts in this process, on one tiny store and BC run (tests/test_bad_input_table.py, ...) --------
# A tiny diffusion policy and budget: checkpoints, not learning, are what the rows read.
TINY_BC = ["policy.dims=[16,32]", "policy.step_embed_dim=16", "policy.pred_horizon=8", "policy.action_horizon=4",
        "policy.inference_steps=2", "policy.train_steps=20", "batch_size=8", "ckpt_every=1", "log_every=1",
        "warmup_steps=1", "env.num_envs=2", "final_eval=false", "videos=0"]

ENTRY_POINTS = {name: target.split(":")[0] for name, target in  # console script -> module with main
                tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"].items()}
# The commands tests/test_bad_input_table.py must cover (teleop, the sim driver and the rosbag import have their own
# bad-input tests next to their other tests)
SCRIPTS = {name: ENTRY_POINTS[name] for name in (
    "robot-rl-eval", "robot-rl-collect", "robot-rl-train-bc", "robot-rl-train-residual", "robot-rl-train-reward",
    "robot-rl-data", "robot-rl-deploy", "robot-rl-quickstart", "robot-rl-benchmark")}


def run_main(script: str, args: list[str], capsys, monkeypatch) -> tuple[int | str | None, str, str]:
    """(exit code, stdout, stderr) of console script `script` run in-process with argv `args` (of one key given
    twice, the last wins)."""
    import torch

    main = importlib.import_module(ENTRY_POINTS[script]).main
    monkeypatch.setattr(sys, "argv", [script, *args])
    capsys.readouterr()
    code = 0
    threads = torch.get_num_threads()  # a command may set its own (set_torch_threads): later tests keep the session's
    try:
        main()
    except SystemExit as e:
        code = e.code
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def cli_here(capsys, monkeypatch):
    """run_cli's twin in this process, for bad input refused before any work and for short runs whose process start
    is not what the test is about: a CompletedProcess with the exit code and output the console script would give (a
    fresh interpreter per case costs ~2.5 s of imports). Output printed
    at import time is not seen here: each command keeps at least one run_cli bad-input test for that."""

    def run(script: str, *args: str) -> subprocess.CompletedProcess:
        code, out, err = run_main(script, list(args), capsys, monkeypatch)
        if isinstance(code, str):  # SystemExit("message"): Python prints it to stderr and exits 1
            code, err = 1, err + code + "\n"
        return subprocess.CompletedProcess([script, *args], 0 if code is None else code, out, err)

    return run


@dataclasses.dataclass
class Tiny:
    root: Path
    store: Path  # lift episodes of the scripted expert
    bc_run: Path  # a finished 2-step train-bc run dir: checkpoints/step_0000002, latest.json, policy/
    file: Path  # a plain file

    @property
    def policy(self) -> Path:
        return self.bc_run / "policy"


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Tiny:
    from robot_rl import sim
    from robot_rl.data import EpisodeStore
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    root = tmp_path_factory.mktemp("tiny")
    store = root / "lift.zarr"
    env = sim.make("lift", num_envs=2)
    with EpisodeStore.open(store, mode="a") as s:
        collect(env, make_expert(env, noise=0.1, seed=0), s, episodes=4, seed=0, source="expert")
    env.close()
    (root / "notes.txt").write_text("not a store\n")
    run = root / "bc"
    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["robot-rl-train-bc", f"data={store}", "steps=2", *TINY_BC, f"hydra.run.dir={run}"])
    importlib.import_module(SCRIPTS["robot-rl-train-bc"]).main()
    mp.undo()
    assert (run / "checkpoints/latest.json").is_file() and (run / "policy/config.json").is_file()
    return Tiny(root, store, run, root / "notes.txt")
