"""Bad input to every console script, one row per case: exit code 2, exactly one line on stderr naming the problem
(no traceback), and nothing written or changed on disk.

Each row calls the command's `main` in this process with sys.argv patched (as a user's shell would run it), on a
copy of one tiny session-scoped store / BC run. "Nothing written" compares a snapshot of every file and directory
under the row's tmp dir and the shared fixture before and after; only the pid inside a run dir's `.lock` may change
(a refused resume held the run dir while it checked). Hydra creates a fresh hydra.run.dir before any of our code
runs, so rows point it at an existing empty directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import SCRIPTS, TINY_BC, Tiny, run_main
from tests.lerobot_v30 import write_v30

RL = ["rl.env_steps=40", "rl.time_budget_s=0", "rl.learning_starts=20", "rl.residual.hidden=[16]",
      "rl.learner.num_critics=2", "rl.learner.critic_hidden=[16]", "rl.learner.batch_size=16", "rl.eval_every=0",
      "rl.final_eval=false", "rl.videos=0", "env.num_envs=2"]

def snapshot(*roots: Path) -> dict:
    """Every file (size, sha256; a run dir's .lock only by existence) and directory under `roots`."""
    out = {}
    for root in roots:
        for p in sorted(Path(root).rglob("*")):
            if p.is_dir() and not p.is_symlink():
                out[str(p)] = "dir"
            elif p.name == ".lock":
                out[str(p)] = "lock"
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[str(p)] = "other"
    return out


# ---- row helpers: each takes (tiny, tmp) and returns the argv, preparing files under tmp ----------------------
def ckpt_copy(tiny: Tiny, tmp: Path, edit: Callable[[dict], None] | None = None, name: str = "ckpt") -> Path:
    """A copy of the tiny BC policy checkpoint whose config.json went through `edit`."""
    path = tmp / name
    shutil.copytree(tiny.policy, path)
    if edit is not None:
        cfg = json.loads((path / "config.json").read_text())
        edit(cfg)
        (path / "config.json").write_text(json.dumps(cfg))
    return path


def with_file(tiny, tmp, name: str, text: str | bytes) -> Path:
    path = ckpt_copy(tiny, tmp)
    (path / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def without(tiny, tmp, name: str) -> Path:
    path = ckpt_copy(tiny, tmp)
    (path / name).unlink()
    return path


def truncated(tiny, tmp) -> Path:
    path = ckpt_copy(tiny, tmp)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    return path


def bc_run(tiny, tmp, edit: Callable[[Path], None] | None = None) -> Path:
    """A copy of the tiny BC run dir, changed by `edit(run)`."""
    run = tmp / "run"
    shutil.copytree(tiny.bc_run, run)
    if edit is not None:
        edit(run)
    return run


def latest_step(run: Path) -> Path:
    ckpts = run / "checkpoints"
    return ckpts / json.loads((ckpts / "latest.json").read_text())["path"]


def edit_train(run: Path, fn: Callable[[dict], None]) -> None:
    f = latest_step(run) / "config.json"
    cfg = json.loads(f.read_text())
    fn(cfg)
    f.write_text(json.dumps(cfg))


def point_latest_at(run: Path, ckpt: Path) -> None:
    """latest.json of `run` names `ckpt` (a real checkpoint of another run) by a ../ path."""
    rel = os.path.relpath(ckpt, run / "checkpoints")
    (run / "checkpoints/latest.json").write_text(json.dumps({"step": 2, "path": rel}))


def fresh_run(tmp: Path) -> Path:
    run = tmp / "run"
    run.mkdir(exist_ok=True)
    return run


def bc_args(tiny, *extra, run=None, tmp=None) -> list[str]:
    return [f"data={tiny.store}", "steps=4", *TINY_BC, *extra, f"hydra.run.dir={run or fresh_run(tmp)}"]


def rl_args(tiny, tmp, *extra, run=None) -> list[str]:
    return [f"base={tiny.policy}", *RL, *extra, f"hydra.run.dir={run or fresh_run(tmp)}"]


def reward_args(tiny, tmp, *extra, run=None) -> list[str]:
    return [f"data={tiny.store}", "steps=2", "batch_size=8", *extra, f"hydra.run.dir={run or fresh_run(tmp)}"]


def eval_args(tmp, *extra) -> list[str]:
    return ["episodes=2", "env.num_envs=2", "videos=0", *extra, f"hydra.run.dir={fresh_run(tmp)}"]


def sweep_args(tmp, *extra) -> list[str]:
    return ["sweep=robustness", "policy=expert", "env.num_envs=2", "sweep.episodes=1", *extra,
            f"hydra.run.dir={fresh_run(tmp)}"]


def collect_args(tmp, *extra) -> list[str]:
    return ["episodes=2", "env.num_envs=2", f"out={tmp / 'out.zarr'}", *extra, f"hydra.run.dir={fresh_run(tmp)}"]


def deploy_args(tmp, *extra) -> list[str]:
    return ["policy=expert", "episodes=1", *extra, f"hydra.run.dir={fresh_run(tmp)}"]


def set_key(*path, value):
    def edit(cfg):
        node = cfg
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return edit


def drop_key(*path):
    def edit(cfg):
        node = cfg
        for k in path[:-1]:
            node = node[k]
        del node[path[-1]]
    return edit


def lerobot_dir(tmp: Path, edit: Callable[[Path], None] | None = None, **kw) -> Path:
    """A LeRobot v3.0 dataset written with pyarrow (tests/lerobot_v30.py), changed by `edit(root)`."""
    root = tmp / "lerobot"
    write_v30(root, **kw)
    if edit is not None:
        edit(root)
    return root


def text_file(tmp: Path, name: str, text: str) -> Path:
    (tmp / name).write_text(text)
    return tmp / name


def reward_model(tmp: Path, task: str = "lift", threshold: float = 0.5) -> Path:
    """An (untrained) reward model of `task` saved under tmp; threshold 2.0: a classifier that never fires."""
    from robot_rl import sim
    from robot_rl.reward import RewardModel, RewardSpec

    env = sim.make(task, num_envs=1)
    model = RewardModel.build(RewardSpec(task=task, obs_dims=dict(env.obs_dims)), hidden=(8,))
    env.close()
    model.threshold = threshold
    return model.save(tmp / f"reward_{task}")


def write(rel: str, text: str):
    def edit(run: Path):
        (run / rel).parent.mkdir(parents=True, exist_ok=True)
        (run / rel).write_text(text)
    return edit


@dataclasses.dataclass
class Row:
    id: str
    script: str
    argv: Callable[[Tiny, Path], list[str]]  # (tiny, tmp) -> argv; prepares files under tmp
    needles: tuple[str, ...]  # each appears in the one stderr line
    locked: bool = False  # a live process holds <tmp>/run while the row runs


ROWS = [
    # ---- robot-rl-eval ------------------------------------------------------------------------------------------
    Row("eval-policy-unset", "robot-rl-eval", lambda t, d: eval_args(d), ("policy=???",)),
    Row("eval-policy-missing", "robot-rl-eval", lambda t, d: eval_args(d, f"policy={d / 'nope'}"), ("does not exist",)),
    Row("eval-policy-is-a-file", "robot-rl-eval", lambda t, d: eval_args(d, f"policy={t.file}"), ("not a directory",)),
    Row("eval-ckpt-without-config", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={without(t, d, 'config.json')}"), ("missing config.json",)),
    Row("eval-ckpt-without-tensors", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={without(t, d, 'model.safetensors')}"), ("missing model.safetensors",)),
    Row("eval-ckpt-config-not-json", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={with_file(t, d, 'config.json', '{kind: diffusion')}"), ("not valid JSON",)),
    Row("eval-ckpt-config-binary", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={with_file(t, d, 'config.json', bytes([0xff, 0xfe, 0]))}"),
        ("config.json is corrupted",)),
    Row("eval-ckpt-config-a-list", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={with_file(t, d, 'config.json', '[1, 2]')}"), ("expected a JSON object",)),
    Row("eval-ckpt-unknown-kind", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={ckpt_copy(t, d, set_key('kind', value='transformer'))}"),
        ("no known policy kind", "'transformer'")),
    Row("eval-ckpt-config-unknown-key", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={ckpt_copy(t, d, set_key('config', 'bogus', value=1))}"),
        ("config.json", "'bogus'")),
    Row("eval-ckpt-config-wrong-type", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={ckpt_copy(t, d, set_key('config', 'inference_steps', value='ten'))}"),
        ("config.json", "inference_steps='ten'")),
    Row("eval-ckpt-spec-malformed", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={ckpt_copy(t, d, set_key('spec', value=[1]))}"), ("malformed spec",)),
    Row("eval-ckpt-truncated-tensors", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={truncated(t, d)}"), ("model.safetensors is corrupted",)),
    Row("eval-ckpt-of-another-task", "robot-rl-eval",
        lambda t, d: eval_args(d, f"policy={t.policy}", "task=push"), ("task: policy 'lift', env 'push'",)),
    Row("eval-episodes-0", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "episodes=0"),
        ("episodes=0", ">= 1")),
    Row("eval-episodes-not-a-number", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "episodes=abc"),
        ("episodes='abc'",)),
    Row("eval-videos-over-envs", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "videos=5"),
        ("videos=5", "env.num_envs=2")),
    Row("eval-seed-negative", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "seed=-1"), ("seed=-1",)),
    Row("eval-expert-noise-negative", "robot-rl-eval",
        lambda t, d: eval_args(d, "policy=expert", "expert_noise=-1"), ("expert_noise=-1",)),
    Row("eval-unknown-task", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "task=stack"),
        ("task=stack", "lift", "push")),
    Row("eval-unknown-backend", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "env.backend=warp"),
        ("warp", "mujoco")),
    Row("eval-unknown-robot", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "env.robot=nope"),
        ("unknown robot 'nope'", "valid robots: primitive, panda_menagerie, ur5e")),
    Row("eval-reversed-randomization", "robot-rl-eval",
        lambda t, d: eval_args(d, "policy=expert", "env.randomization.friction=[2,1]"), ("friction", "min > max")),
    Row("eval-unknown-key", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "episode=3"),
        ("unknown key 'episode'",)),
    Row("eval-added-key", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "+foo=1"),
        ("unknown key 'foo'", "episodes")),
    Row("eval-unparsable-override", "robot-rl-eval", lambda t, d: eval_args(d, "policy=expert", "episodes=["),
        ("episodes=[",)),
    Row("eval-several-policies-without-sweep", "robot-rl-eval", lambda t, d: eval_args(d, "policy=[expert,expert]"),
        ("names several policies", "sweep=robustness")),
    # ---- robot-rl-eval sweep=robustness (the robustness card; every check before anything is written) -----------
    Row("sweep-unknown-factor", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.factors=[latncy]"),
        ("unknown factor 'latncy'", "latency, obs_noise")),
    Row("sweep-camera-factor-for-a-state-policy", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.factors=[camera_pos]"),
        ("camera_pos", "no policy here reads cameras", "drop camera_pos")),
    Row("sweep-mass-level-0", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.object_mass=[0,1]"),
        ("sweep.object_mass: level 0 x nominal is outside what the sim supports", "must be > 0")),
    Row("sweep-negative-latency", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.latency=[-1]"),
        ("sweep.latency: level -1 ticks", "must be >= 0")),
    Row("sweep-latency-not-whole", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.latency=[1.5]"),
        ("sweep.latency[0]=1.5", "whole number")),
    Row("sweep-no-levels", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.friction=[]"),
        ("sweep.friction=[] has no levels",)),
    Row("sweep-episodes-0", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.episodes=0"), ("sweep.episodes=0",)),
    Row("sweep-single-eval-episodes", "robot-rl-eval", lambda t, d: sweep_args(d, "episodes=5"),
        ("episodes= is a setting of a single evaluation", "sweep.episodes=N")),
    Row("sweep-two-policies-one-label", "robot-rl-eval", lambda t, d: sweep_args(d, "policy=[expert,expert]"),
        ("both be labelled 'expert'",)),
    Row("sweep-missing-checkpoint", "robot-rl-eval", lambda t, d: sweep_args(d, f"policy=[expert,{d / 'nope'}]"),
        ("does not exist",)),
    Row("sweep-unknown-key", "robot-rl-eval", lambda t, d: sweep_args(d, "sweep.factor=[latency]"),
        ("sweep.factor",)),
    Row("quickstart-unknown-backend", "robot-rl-quickstart",
        lambda t, d: ["env.backend=nope", f"hydra.run.dir={fresh_run(d)}"], ("nope", "mujoco", "mjx")),
    Row("quickstart-reversed-randomization", "robot-rl-quickstart",
        lambda t, d: ["env.randomization.friction=[2,1]", f"hydra.run.dir={fresh_run(d)}"], ("friction", "min > max")),
    Row("quickstart-stages-not-a-prefix", "robot-rl-quickstart",
        lambda t, d: ["stages=[bc]", f"hydra.run.dir={fresh_run(d)}"], ("must be a prefix of",)),
    # ---- robot-rl-benchmark (the plan is checked against the stage commands' configs before any stage runs) ------
    Row("benchmark-unknown-task-in-only", "robot-rl-benchmark",
        lambda t, d: ["only=[stack]", f"hydra.run.dir={fresh_run(d)}"], ("only=['stack']", "'lift'")),
    Row("benchmark-plan-of-an-unknown-task", "robot-rl-benchmark",
        lambda t, d: ["+tasks.stack={demos:1}", f"hydra.run.dir={fresh_run(d)}"], ("tasks.stack: no such task", "lift")),
    Row("benchmark-budget-below-learning-starts", "robot-rl-benchmark",
        lambda t, d: ["tasks.lift.env_steps=1000", f"hydra.run.dir={fresh_run(d)}"],
        ("tasks.lift", "env_steps=1000 is fewer than learning_starts=5000")),
    Row("benchmark-rl-args-set-a-budget", "robot-rl-benchmark",
        lambda t, d: ['tasks.push.rl_args=["rl.time_budget_s=5"]', f"hydra.run.dir={fresh_run(d)}"],
        ("tasks.push.rl_args: rl.time_budget_s is set by the benchmark itself (time_budget_s)",)),
    # ---- robot-rl-collect ---------------------------------------------------------------------------------------
    Row("collect-episodes-0", "robot-rl-collect", lambda t, d: collect_args(d, "episodes=0"), ("episodes=0",)),
    Row("collect-unknown-backend", "robot-rl-collect", lambda t, d: collect_args(d, "backend=nope"),
        ("unknown backend 'nope'", "mujoco")),
    Row("collect-out-is-a-file", "robot-rl-collect", lambda t, d: collect_args(d, f"out={t.file}"), ("notes.txt",)),
    Row("collect-policy-missing", "robot-rl-collect", lambda t, d: collect_args(d, f"policy={d / 'nope'}"),
        ("does not exist",)),
    Row("collect-policy-config-unknown-key", "robot-rl-collect",
        lambda t, d: collect_args(d, f"policy={ckpt_copy(t, d, set_key('config', 'bogus', value=1))}"),
        ("config.json", "'bogus'")),
    Row("collect-policy-config-wrong-type", "robot-rl-collect",
        lambda t, d: collect_args(d, f"policy={ckpt_copy(t, d, set_key('config', 'dims', value='wide'))}"),
        ("config.json", "dims='wide'")),
    Row("collect-policy-of-another-task", "robot-rl-collect",
        lambda t, d: collect_args(d, f"policy={t.policy}", "task=push"), ("task: policy 'lift', env 'push'",)),
    Row("collect-noise-negative", "robot-rl-collect", lambda t, d: collect_args(d, "expert.noise=-0.1"),
        ("expert.noise=-0.1",)),
    Row("collect-fsync-not-bool", "robot-rl-collect", lambda t, d: collect_args(d, "fsync=maybe"), ("fsync='maybe'",)),
    Row("collect-unknown-task", "robot-rl-collect", lambda t, d: collect_args(d, "task=stack"), ("task=stack",)),
    Row("collect-added-key", "robot-rl-collect", lambda t, d: collect_args(d, "+noise=0.1"), ("unknown key 'noise'",)),
    # ---- robot-rl-train-bc ----------------------------------------------------------------------------------------
    Row("bc-data-unset", "robot-rl-train-bc", lambda t, d: ["steps=2", f"hydra.run.dir={fresh_run(d)}"], ("data=???",)),
    Row("bc-data-missing", "robot-rl-train-bc", lambda t, d: bc_args(t, tmp=d)[1:] + [f"data={d / 'none.zarr'}"],
        ("none.zarr",)),
    Row("bc-data-is-a-file", "robot-rl-train-bc", lambda t, d: [f"data={t.file}", *bc_args(t, tmp=d)[1:]],
        ("notes.txt",)),
    Row("bc-store-of-another-task", "robot-rl-train-bc", lambda t, d: bc_args(t, "task=push", tmp=d),
        ("holds task(s) ['lift']",)),
    Row("bc-steps-0", "robot-rl-train-bc", lambda t, d: bc_args(t, "steps=0", tmp=d), ("steps=0", ">= 1")),
    Row("bc-lr-negative", "robot-rl-train-bc", lambda t, d: bc_args(t, "lr=-1", tmp=d), ("lr=-1",)),
    Row("bc-batch-size-not-a-number", "robot-rl-train-bc", lambda t, d: bc_args(t, "batch_size=abc", tmp=d),
        ("batch_size='abc'",)),
    Row("bc-final-eval-not-bool", "robot-rl-train-bc", lambda t, d: bc_args(t, "final_eval=maybe", tmp=d),
        ("final_eval='maybe'",)),
    Row("bc-data-weights-length", "robot-rl-train-bc", lambda t, d: bc_args(t, "data_weights=[1,2]", tmp=d),
        ("data_weights=[1, 2]", "1 number(s)")),
    Row("bc-source-weights-unknown", "robot-rl-train-bc",
        lambda t, d: bc_args(t, "+source_weights.robot=1", tmp=d), ("source_weights=", "expert")),
    Row("bc-data-mode-unknown", "robot-rl-train-bc", lambda t, d: bc_args(t, "data_mode=fast", tmp=d),
        ("data_mode='fast'", "memory")),
    Row("bc-videos-over-envs", "robot-rl-train-bc", lambda t, d: bc_args(t, "videos=5", tmp=d), ("videos=5",)),
    Row("bc-torch-threads-negative", "robot-rl-train-bc", lambda t, d: bc_args(t, "torch_threads=-1", tmp=d),
        ("torch_threads=-1",)),
    Row("bc-unknown-policy", "robot-rl-train-bc", lambda t, d: bc_args(t, "policy=transformer", tmp=d),
        ("policy=transformer", "diffusion")),
    Row("bc-policy-wrong-type", "robot-rl-train-bc", lambda t, d: bc_args(t, "policy.kernel=wide", tmp=d),
        ("policy.kernel='wide'",)),
    Row("bc-policy-added-key", "robot-rl-train-bc", lambda t, d: bc_args(t, "+policy.width=3", tmp=d),
        ("unknown policy key(s) ['width']",)),
    Row("bc-init-missing", "robot-rl-train-bc", lambda t, d: bc_args(t, f"init={d / 'nope'}", tmp=d),
        ("does not exist",)),
    Row("bc-init-config-unknown-key", "robot-rl-train-bc",
        lambda t, d: bc_args(t, f"init={ckpt_copy(t, d, set_key('config', 'bogus', value=1))}", tmp=d),
        ("config.json", "'bogus'")),
    Row("bc-added-key", "robot-rl-train-bc", lambda t, d: bc_args(t, "+foo=1", tmp=d), ("unknown key 'foo'",)),
    Row("bc-resume-refused", "robot-rl-train-bc", lambda t, d: bc_args(t, "lr=0.01", run=bc_run(t, d)),
        ("cannot resume", "lr (0.0003 -> 0.01)")),
    Row("bc-latest-json-garbage", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, write("checkpoints/latest.json", "{\"step\": 2, pa"))),
        ("latest.json is corrupted",)),
    Row("bc-latest-json-not-an-object", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, write("checkpoints/latest.json", "[2]"))),
        ("latest.json is corrupted",)),
    Row("bc-latest-json-escapes-run-dir", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, lambda r: point_latest_at(r, t.bc_run / "checkpoints/step_0000002"))),
        ("may only name a step_<N> directory",)),
    Row("bc-latest-json-names-a-missing-step", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, write("checkpoints/latest.json",
                                                       json.dumps({"step": 9, "path": "step_0000009"})))),
        ("step_0000009 does not exist",)),
    Row("bc-state-without-optimizer", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, lambda r: edit_train(r, drop_key("train", "optimizer")))),
        ("'optimizer'",)),
    Row("bc-state-config-not-json", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, lambda r: (latest_step(r) / "config.json").write_text("{"))),
        ("not valid JSON",)),
    Row("bc-state-step-wrong-type", "robot-rl-train-bc",
        lambda t, d: bc_args(t, run=bc_run(t, d, lambda r: edit_train(r, set_key("train", "step", value="two")))),
        ("cannot resume", "'two'")),
    Row("bc-run-dir-locked", "robot-rl-train-bc", lambda t, d: bc_args(t, run=bc_run(t, d)),
        ("in use by another process (pid ",), locked=True),
    # ---- robot-rl-train-residual ----------------------------------------------------------------------------------
    Row("residual-base-unset", "robot-rl-train-residual", lambda t, d: [*RL, f"hydra.run.dir={fresh_run(d)}"],
        ("needs base=PATH",)),
    Row("residual-base-missing", "robot-rl-train-residual", lambda t, d: rl_args(t, d, f"base={d / 'nope'}"),
        ("does not exist",)),
    Row("residual-base-of-another-task", "robot-rl-train-residual", lambda t, d: rl_args(t, d, "task=push"),
        ("task: policy 'lift', env 'push'",)),
    Row("residual-base-config-unknown-key", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, f"base={ckpt_copy(t, d, set_key('config', 'bogus', value=1))}"),
        ("config.json", "'bogus'")),
    Row("residual-base-config-wrong-type", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, f"base={ckpt_copy(t, d, set_key('config', 'obs_horizon', value=[2]))}"),
        ("config.json", "obs_horizon=[2]")),
    Row("residual-scratch-with-base", "robot-rl-train-residual", lambda t, d: rl_args(t, d, "mode=scratch"),
        ("mode=scratch",)),
    Row("residual-mode-unknown", "robot-rl-train-residual", lambda t, d: rl_args(t, d, "mode=fancy"),
        ("mode='fancy'",)),
    Row("residual-utd-negative", "robot-rl-train-residual", lambda t, d: rl_args(t, d, "rl.utd=-1"), ("utd=-1",)),
    Row("residual-budget-below-learning-starts", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, "rl.env_steps=10"), ("env_steps=10 is fewer than learning_starts=20",)),
    Row("residual-rl-added-key", "robot-rl-train-residual", lambda t, d: rl_args(t, d, "+rl.gamma=0.9"),
        ("unknown rl key(s) ['gamma']",)),
    Row("residual-demos-missing", "robot-rl-train-residual", lambda t, d: rl_args(t, d, f"demos={d / 'none.zarr'}"),
        ("none.zarr",)),
    Row("residual-latest-json-garbage", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, run=bc_run(t, d, write("checkpoints/latest.json", "garbage"))),
        ("latest.json is corrupted",)),
    Row("residual-resume-refused", "robot-rl-train-residual", lambda t, d: rl_args(t, d, run=bc_run(t, d)),
        ("cannot resume",)),
    Row("residual-run-dir-locked", "robot-rl-train-residual", lambda t, d: rl_args(t, d, run=bc_run(t, d)),
        ("in use by another process (pid ",), locked=True),
    Row("residual-added-key", "robot-rl-train-residual", lambda t, d: rl_args(t, d, "+foo=1"),
        ("unknown key 'foo'",)),
    Row("residual-reward-model-of-another-task", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, "rl.reward=learned", f"rl.reward_model={reward_model(d, 'push')}"),
        ("task: reward model 'push', env 'lift'",)),
    Row("residual-label-budget-zero", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, "rl.reward=learned", f"rl.reward_model={reward_model(d)}", "rl.labels.fraction=0"),
        ("rl.labels.fraction=0 gives no operator labels", "rl.labels.refit_every=5")),
    Row("residual-classifier-never-fires-on-the-demos", "robot-rl-train-residual",
        lambda t, d: rl_args(t, d, "rl.reward=learned", f"rl.reward_model={reward_model(d, threshold=2.0)}",
                             f"demos={t.store}"),
        ("fires on 0 of 4 successful demo episodes", "TPR 0.00")),
    # ---- robot-rl-train-reward ------------------------------------------------------------------------------------
    Row("reward-data-unset", "robot-rl-train-reward", lambda t, d: ["steps=2", f"hydra.run.dir={fresh_run(d)}"],
        ("data",)),
    Row("reward-data-missing", "robot-rl-train-reward",
        lambda t, d: reward_args(t, d)[1:] + [f"data={d / 'none.zarr'}"], ("none.zarr",)),
    Row("reward-rollouts-is-a-file", "robot-rl-train-reward", lambda t, d: reward_args(t, d, f"rollouts={t.file}"),
        ("rollouts=", "notes.txt")),
    Row("reward-steps-0", "robot-rl-train-reward", lambda t, d: reward_args(t, d, "steps=0"), ("steps=0",)),
    Row("reward-unknown-inputs-key", "robot-rl-train-reward", lambda t, d: reward_args(t, d, "+inputs.depth=1"),
        ("unknown inputs key(s) ['depth']",)),
    Row("reward-unknown-state-key", "robot-rl-train-reward", lambda t, d: reward_args(t, d, "inputs.state=[joints]"),
        ("['joints'] are not observation keys",)),
    Row("reward-hidden-0", "robot-rl-train-reward", lambda t, d: reward_args(t, d, "hidden=[0]"), ("hidden=[0]",)),
    Row("reward-added-key", "robot-rl-train-reward", lambda t, d: reward_args(t, d, "+foo=1"), ("unknown key 'foo'",)),
    Row("reward-run-dir-locked", "robot-rl-train-reward", lambda t, d: reward_args(t, d, run=bc_run(t, d)),
        ("in use by another process (pid ",), locked=True),
    # ---- robot-rl-data ------------------------------------------------------------------------------------------
    Row("data-info-missing", "robot-rl-data", lambda t, d: ["info", str(d / "none.zarr")], ("none.zarr",)),
    Row("data-info-a-file", "robot-rl-data", lambda t, d: ["info", str(t.file)], ("notes.txt",)),
    Row("data-merge-into-an-input", "robot-rl-data", lambda t, d: ["merge", str(t.store), str(t.store)],
        ("both an input and the output",)),
    Row("data-merge-input-missing", "robot-rl-data", lambda t, d: ["merge", str(d / "out.zarr"), str(d / "none.zarr")],
        ("none.zarr",)),
    Row("data-no-command", "robot-rl-data", lambda t, d: [], ("required",)),
    Row("data-unknown-option", "robot-rl-data", lambda t, d: ["info", str(t.store), "--yaml"], ("--yaml",)),
    Row("data-import-lerobot-missing", "robot-rl-data", lambda t, d: ["import-lerobot", str(d / "none"), str(d / "o.zarr")],
        ("no LeRobot dataset at", "does not exist")),
    Row("data-import-lerobot-not-a-dataset", "robot-rl-data", lambda t, d: ["import-lerobot", str(t.root), str(d / "o.zarr")],
        ("is not a LeRobot dataset", "no meta/info.json")),
    Row("data-import-lerobot-v21", "robot-rl-data", lambda t, d: ["import-lerobot", str(lerobot_dir(d, version="v2.1")),
        str(d / "o.zarr")], ("LeRobot v2.1 dataset", "convert_dataset_v21_to_v30")),
    Row("data-import-lerobot-info-not-json", "robot-rl-data", lambda t, d: ["import-lerobot", str(lerobot_dir(d,
        edit=write("meta/info.json", "{codebase_version: v3.0"))), str(d / "o.zarr")], ("info.json is not valid JSON",)),
    # the NaN is in the second data file: the first one's episodes were already appended to the temp store
    Row("data-import-lerobot-nan", "robot-rl-data", lambda t, d: ["import-lerobot", str(lerobot_dir(d, nan_in_episode=2)),
        str(d / "o.zarr")], ("episode 2", "observation.state holds NaN")),
    Row("data-import-lerobot-feature-not-in-dataset", "robot-rl-data", lambda t, d: ["import-lerobot",
        str(lerobot_dir(d)), str(d / "o.zarr"), "--camera", "top=observation.images.side"],
        ("no feature(s) ['observation.images.side']",)),
    Row("data-import-lerobot-out-exists", "robot-rl-data", lambda t, d: ["import-lerobot", str(lerobot_dir(d)),
        str(t.store)], ("already exists",)),
    Row("data-export-lerobot-out-not-empty", "robot-rl-data", lambda t, d: ["export-lerobot", str(t.store), str(t.root)],
        ("already exists and is not empty",)),
    Row("data-export-lerobot-unknown-state-key", "robot-rl-data", lambda t, d: ["export-lerobot", str(t.store),
        str(d / "lr"), "--state-keys", "proprio,joints"], ("state_keys names 'joints'", "'proprio'")),
    Row("data-export-lerobot-keys-file-unknown-key", "robot-rl-data", lambda t, d: ["export-lerobot", str(t.store),
        str(d / "lr"), "--keys", str(text_file(d, "keys.json", '{"camera": {}}'))], ("unknown keys key(s) ['camera']",)),
    Row("data-export-lerobot-fps-fraction", "robot-rl-data", lambda t, d: ["export-lerobot", str(t.store), str(d / "lr"),
        "--fps", "12.5"], ("--fps 12.5",)),
    Row("data-export-lerobot-camera-without-theirs", "robot-rl-data", lambda t, d: ["export-lerobot", str(t.store),
        str(d / "lr"), "--camera", "front"], ("OURS=THEIRS",)),
    Row("data-export-lerobot-yuv444-with-av1", "robot-rl-data", lambda t, d: ["export-lerobot", str(t.store),
        str(d / "lr"), "--pix-fmt", "yuv444p"], ("pix_fmt=yuv444p needs vcodec=h264",)),
    # ---- robot-rl-deploy (config checks before anything runs) -----------------------------------------------------
    Row("deploy-unknown-transport", "robot-rl-deploy", lambda t, d: deploy_args(d, "deploy.transport=zmq"),
        ("deploy.transport='zmq'",)),
    Row("deploy-mjx-backend", "robot-rl-deploy", lambda t, d: deploy_args(d, "env.backend=mjx"),
        ("env.backend='mjx'",)),
    Row("deploy-residual-scale-over-1", "robot-rl-deploy", lambda t, d: deploy_args(d, "residual_scale=2"),
        ("residual_scale=2",)),
    Row("deploy-episodes-0", "robot-rl-deploy", lambda t, d: deploy_args(d, "episodes=0"), ("episodes=0",)),
    Row("deploy-unknown-deploy-key", "robot-rl-deploy", lambda t, d: deploy_args(d, "+deploy.bogus=1"),
        ("unknown deploy key(s) ['bogus']",)),
    Row("deploy-limits-file-missing", "robot-rl-deploy",
        lambda t, d: deploy_args(d, f"deploy.limits_file={d / 'none.yaml'}"), ("does not exist",)),
    Row("deploy-rosbag-exists", "robot-rl-deploy", lambda t, d: deploy_args(d, f"record.rosbag={t.root}"),
        ("already exists",)),
    Row("deploy-added-key", "robot-rl-deploy", lambda t, d: deploy_args(d, "+foo=1"), ("unknown key 'foo'",)),
]


@pytest.fixture()
def holder(tmp_path):
    """A live process holding <tmp>/run (robot_rl.common.run_dir.hold), as a second training on it would find."""
    procs = []

    def start(run: Path) -> int:
        code = ("import sys, time; from robot_rl.common.run_dir import hold\n"
                "with hold(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)\n")
        p = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        return p.pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(row, tiny, tmp_path, capsys, monkeypatch, holder):
    argv = row.argv(tiny, tmp_path)
    pid = holder(tmp_path / "run") if row.locked else None
    before = snapshot(tmp_path, tiny.root)
    code, out, err = run_main(row.script, argv, capsys, monkeypatch)
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{row.script}: error: "), lines[0]
    for needle in row.needles:
        assert needle in lines[0], (needle, lines[0])
    if pid is not None:
        assert f"pid {pid}" in lines[0]
    assert snapshot(tmp_path, tiny.root) == before, "the failed command wrote or changed files"


def test_the_table_covers_every_listed_command_with_at_least_62_rows():
    assert len(ROWS) >= 62 and len({r.id for r in ROWS}) == len(ROWS)
    assert {r.script for r in ROWS} == set(SCRIPTS)
