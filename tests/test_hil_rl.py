"""Interventions inside residual RL: the scripted human's steps are executed, flagged in the replay, copied
into the demo buffer as cut transitions, kept within the budget, and logged."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.policies.expert import ExpertPolicy
from robot_rl.data import EpisodeStore
from robot_rl.data.collect import collect
from robot_rl.rl.learner import LearnerConfig
from robot_rl.policies.residual import ResidualConfig
from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace
from robot_rl.common.run_log import RunLog
from robot_rl.sim.experts import make_expert


class OffsetExpert(ExpertPolicy):
    """The scripted expert pushed off in x: it drifts from the plan, so the scripted human steps in."""

    def act(self, obs_history):
        return np.clip(super().act(obs_history) + np.array([0.8, 0, 0, 0], np.float32), -1.0, 1.0)


@pytest.fixture(scope="module")
def env_and_demos(tmp_path_factory):
    env = sim.make("lift", num_envs=4, threads=1, task_config={"episode_steps": 30})
    path = tmp_path_factory.mktemp("hil_rl") / "demos.zarr"
    with EpisodeStore.open(path, "a") as store:
        collect(env, make_expert(env, noise=0.1), store, 4, seed=3)
    yield env, EpisodeStore.open(path)
    env.close()


def _cfg(**over) -> ResidualRLConfig:
    cfg = dict(env_steps=240, learning_starts=80, utd=0.25, eval_every=0, log_every=80, ckpt_every=10_000,
               final_eval=False, interventions="scripted",
               hil=dict(threshold=0.3, patience=2, hold=5, cooldown=2, max_fraction=0.25),
               residual=ResidualConfig(hidden=(16,), scale=0.2),
               learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=16, critic_warmup=10))
    cfg.update(over)
    return ResidualRLConfig(**cfg)


def test_scripted_interventions_are_flagged_routed_to_demos_and_budgeted(env_and_demos, tmp_path):
    env, demos = env_and_demos
    ws = ResidualWorkspace(tmp_path / "run", _cfg(), env, OffsetExpert(env), demo_store=demos)
    demo_rows = ws.demos.written
    log = RunLog(tmp_path / "run")
    ws.run(log)
    log.close()
    flags = ws.replay.data["intervention"][: ws.replay.written]
    human = int(flags.sum())
    assert human > 0, "the drifting base never triggered the scripted human"
    assert human <= 0.25 * flags.size + 1e-9, (human, flags.size)  # the budget holds over all steps
    assert ws.demos.written == demo_rows + human  # every human transition also went into the demo buffer
    added = slice(demo_rows, ws.demos.written)
    assert ws.demos.data["intervention"][added, 0].all()
    cut = ws.demos.data["truncated"][added, 0] | ws.demos.data["terminated"][added, 0]
    assert cut.all(), "corrections are single transitions, not walked into each other"
    # executed human actions are the expert's plan, not the offset policy's: they differ from base + residual
    rows = ws.replay.data
    p = np.nonzero(flags)
    assert np.abs(rows["action"][p] - rows["base_action"][p]).max(-1).min() > 0.3
    assert log.history["hil/intervention_rate"] and 0 < log.last("hil/fraction_so_far") <= 0.25


def test_unknown_scripted_human_setting_is_named():
    with pytest.raises(ValueError, match=r"unknown hil key\(s\) \['treshold'\]"):
        _cfg(hil={"treshold": 0.3})
    with pytest.raises(ValueError, match="interventions='human'; valid: none, scripted"):
        _cfg(interventions="human")
