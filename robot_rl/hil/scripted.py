"""The scripted human: takes over when the policy drifts from the scripted expert's plan, within a budget.

Per env and step it computes the scripted expert's action (sim/experts, noise 0: "the plan") and the
drift = max |policy action - expert action| over the action entries (normalized units, 0..2; a gripper
disagreement counts 2). Trigger "drift": after `patience` consecutive steps with drift > `threshold`, the
expert takes control for `hold` steps (one correction segment), then hands back and waits `cooldown`
steps before it may take over again. Trigger "always": the expert drives every step (scripted teleop
demos). Budget: the human never controls more than `max_fraction` of all steps seen so far (over all envs,
counted per step, so the final fraction is <= max_fraction), nor more than `max_episode_steps` steps of one
episode (0 = no limit). Deterministic: same observations, same decisions.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robot_rl.hil.intervention import Decision, no_events

TRIGGERS = ("drift", "always")


@dataclasses.dataclass
class ScriptedHumanConfig:
    trigger: str = "drift"  # drift | always
    threshold: float = 0.5  # drift (max abs action difference, normalized units) that counts as off-plan
    patience: int = 5  # consecutive off-plan steps before taking over
    hold: int = 15  # steps of one correction segment
    cooldown: int = 5  # steps after handing back before the next take-over
    max_fraction: float = 0.15  # budget: at most this fraction of all steps under human control
    max_episode_steps: int = 0  # at most this many human steps per episode (0 = no limit)
    expert_path: str | None = None  # module:function act(obs) of yours that corrects (None: the task's expert)

    def __post_init__(self):
        self.validate()

    def validate(self) -> "ScriptedHumanConfig":
        if self.trigger not in TRIGGERS:
            raise ValueError(f"hil.trigger={self.trigger!r}; valid: {', '.join(TRIGGERS)}")
        if not (0 < self.threshold <= 2):
            raise ValueError(f"hil.threshold={self.threshold} must be in (0, 2] (normalized action units)")
        for k in ("patience", "hold"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"hil.{k}={getattr(self, k)} must be >= 1")
        for k in ("cooldown", "max_episode_steps"):
            if int(getattr(self, k)) < 0:
                raise ValueError(f"hil.{k}={getattr(self, k)} must be >= 0")
        if not (0 <= self.max_fraction <= 1):
            raise ValueError(f"hil.max_fraction={self.max_fraction} must be in [0, 1]")
        return self


class ScriptedHuman:
    """A Supervisor for every env of a batched env, built on the task's scripted expert."""

    def __init__(self, env, cfg: ScriptedHumanConfig | None = None):
        from robot_rl.sim.experts import make_expert

        self.cfg = (cfg or ScriptedHumanConfig()).validate()
        self.expert = make_expert(env, noise=0.0, path=self.cfg.expert_path)  # ValueError names what is missing
        n = self.num_envs = env.num_envs
        self.streak = np.zeros(n, np.int64)  # consecutive off-plan steps
        self.left = np.zeros(n, np.int64)  # steps left in the current correction segment
        self.cool = np.zeros(n, np.int64)  # steps left before another take-over
        self.episode_human = np.zeros(n, np.int64)
        self.steps = 0  # all env steps seen (budget denominator)
        self.human_steps = 0
        self.drift = np.zeros(n)

    def reset(self, env_ids=None) -> None:
        ids = slice(None) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        for a in (self.streak, self.left, self.cool, self.episode_human):
            a[ids] = 0

    def decide(self, obs: dict, policy_action: np.ndarray, human: np.ndarray) -> Decision:
        c, n = self.cfg, self.num_envs
        plan = self.expert.act(obs)  # every step: stateful experts (peg_insert) track their own estimate
        if c.trigger == "always":
            want = np.ones(n, bool)
        else:
            self.drift = np.abs(np.asarray(policy_action, np.float64) - plan).max(axis=1)
            off = self.drift > c.threshold
            self.streak = np.where(off, self.streak + 1, 0)
            self.cool = np.maximum(self.cool - 1, 0)
            start = (self.left == 0) & (self.cool == 0) & (self.streak >= c.patience)
            self.left = np.where(start, c.hold, self.left)
            want = self.left > 0
        if c.max_episode_steps:
            want &= self.episode_human < c.max_episode_steps
        take = np.zeros(n, bool)
        budget = c.max_fraction * (self.steps + n) - self.human_steps
        for i in np.nonzero(want)[0]:  # granted in env order while the budget lasts
            if budget >= 1:
                take[i], budget = True, budget - 1
        self.steps += n
        self.human_steps += int(take.sum())
        self.episode_human += take
        if c.trigger != "always":
            ended = (self.left > 0) & (~take | (self.left == 1))  # segment done, or cut by the budget
            self.left = np.where(take, self.left - 1, 0)
            self.cool = np.where(ended, c.cooldown, self.cool)
            self.streak = np.where(ended, 0, self.streak)
        action = np.where(take[:, None], plan, policy_action).astype(np.float32)
        return Decision(take=take, action=action, events=no_events(n), disconnected=np.zeros(n, bool))
