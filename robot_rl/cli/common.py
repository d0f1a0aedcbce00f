"""What the robot-rl-<verb> commands share beyond errors (robot_rl.common.cli): the env from the `env` node,
torch threads, loading a policy checkpoint against the env, resuming a run; each failure is one line + exit 2."""

from __future__ import annotations

import contextlib

from robot_rl.common.cli import fail, or_fail


def env_config(cfg_env):
    """Validated sim.config.EnvConfig from the `env` node, before any model is compiled."""
    from robot_rl import sim

    return or_fail(sim.env_config, cfg_env)  # ConfigError, or a value of the wrong type (num_envs=abc)


def make_env(env_cfg):
    """The batched env (MJX with JAX's persistent compilation cache); task_config errors exit 2."""
    from robot_rl import sim

    return or_fail(sim.make_from_config, env_cfg, errors=(sim.ConfigError,))


def set_torch_threads(n: int) -> None:
    """Intra-op threads for torch (0 = torch's default). Small models on few cores run fastest on 1."""
    if n > 0:
        import torch

        torch.set_num_threads(n)


def load_checkpoint(path: str, env, device: str = "cpu"):
    """A BasePolicy checkpoint checked against `env`, or fail() naming the file or the mismatch."""
    from robot_rl.policies import SpecMismatch, load_policy
    from robot_rl.common.checkpoint import CheckpointError

    try:
        policy = load_policy(path, device=str(device))
        policy.spec.check_env(env)
    except (CheckpointError, SpecMismatch) as e:
        fail(str(e))
    except RuntimeError as e:  # e.g. an unavailable torch device
        fail(f"cannot load {path} on device {device!r}: {str(e).splitlines()[0]}")
    return policy


@contextlib.contextmanager
def hold_run_dir(run_dir):
    """robot_rl.common.run_dir.hold(run_dir) for the block, with another live holder as one line + exit 2."""
    from robot_rl.common.run_dir import RunDirBusy, hold

    try:
        with hold(run_dir):
            yield run_dir
    except RunDirBusy as e:  # raised by hold() before the block runs; nothing in a block holds a run dir again
        fail(str(e))


def resume_or_fail(workspace) -> bool:
    """workspace.try_resume(), with a changed config or a broken checkpoint as one line + exit 2 (run it while
    holding the run directory: it also removes the temp files of an interrupted checkpoint write)."""
    from robot_rl.common.checkpoint import CheckpointError, ResumeMismatch

    try:
        return workspace.try_resume()
    except (ResumeMismatch, CheckpointError) as e:
        fail(str(e))
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # state of the wrong shape or type
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        fail(f"cannot resume from {workspace.ckpt_dir}: its training state does not load ({msg}); restore the "
             "checkpoint or start a new run directory")



def apply_recommended(cfg, command: str) -> list[str]:
    """Put the task's recommended settings into a composed Hydra config wherever the command line did not set the key
    (a key the config lacks, e.g. a diffusion setting under policy=vla, is skipped); prints them, returns
    ["key=value", ...]. The task is cfg.env.task."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from robot_rl.recipes import recommended_settings

    given = set()
    if HydraConfig.initialized():
        given = {o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task}
    applied = []
    with open_dict(cfg):
        for key, value in recommended_settings(str(cfg.env.task), command).items():
            if key in given or OmegaConf.select(cfg, key, default="__absent__") == "__absent__":
                continue
            OmegaConf.update(cfg, key, value, merge=False)
            applied.append(f"{key}={value}")
    if applied:
        print(f"task {cfg.env.task}: its recommended settings {' '.join(applied)} (any of them set on the command "
              "line wins)")
    return applied
