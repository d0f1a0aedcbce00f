"""Never worse than the base, judged by what a robot has: checked episodes (rl.reward=learned).

On a robot nothing but the operator says whether the policy succeeds, so a run on learned rewards cannot pick its
policy by simulator evaluations. The guard checks instead: a check is `episodes` episodes of the current policy
(the deterministic residual), each labelled by the operator (in sim the scripted labeller answers from the
simulator's success); they cost robot time and labels, and both are counted. The base alone is checked first
(env step 0, `base_episodes`), then the policy every `every` env steps (and at once when the classifier's claims
turn out mostly false, robot_rl/reward/online.py), and the last policy at the end (`base_episodes`).

A check whose 95% interval (Wilson) lies wholly below the base's checked success is below the base. Two causes, told
apart by the operator's labels (robot_rl/reward/online.py):
  - reward hacking: the classifier's claims of success have turned out mostly false. The learner has learned to
    please the classifier; a check below the base then acts at once, as `on_hacking` says: rollback (the learner,
    actor, critics and optimizers, returns to the best vouched policy and relearns on the refitted classifier's
    relabelled replay) or warn. Once `max_rollbacks` are spent, the next one stops the run there.
  - a dip: residual RL moves its actor where its critics have no data yet, and on precise tasks the policy gets
    worse for a while before it gets better (docs/results/residual_rl.md). Training goes on while the dip climbs:
    `patience` checks below the base in a row, none of them better than the best check of the dip before it, are a
    regression, and `on_regression` says what then happens: stop (at the best vouched policy), rollback, or warn.
Vouched: a check that is not below the base. The best vouched policy has the highest checked success (the base's
zero residual included, a later check wins a tie); policy/ is it, whatever happened on the way.

    guard = Guard(GuardConfig())
    decision = guard.record(m, env_steps, hacking=online.hacking)    # m: robot_rl.evaluation metrics of a check
    # "best" (snapshot the learner), "vouched", "below", or "warn", "rollback", "stop"; guard.warnings: the lines
"""

from __future__ import annotations

import dataclasses

ACTIONS = ("warn", "rollback", "stop")


@dataclasses.dataclass
class GuardConfig:
    """Checked episodes of reward=learned runs (rl.guard.*)."""

    every: int = 20_000  # env steps between checks of the current policy (0: only the base's and the final one)
    episodes: int = 20  # episodes of one check (each one operator label and its robot time)
    base_episodes: int = 50  # episodes of the base's check at env step 0 and of the final check
    patience: int = 5  # checks below the base in a row, none better than the dip's best before it: a regression
    on_regression: str = "stop"  # warn | rollback | stop, at a regression
    on_hacking: str = "rollback"  # warn | rollback, at a check below the base while the labels show reward hacking
    max_rollbacks: int = 2  # rollbacks before the next one stops the run
    seed: int = 500_000  # env seed of the first check; check k uses seed + k (not the evaluations' or training's)

    def __post_init__(self):
        for k, lo in (("every", 0), ("episodes", 1), ("base_episodes", 1), ("patience", 1), ("max_rollbacks", 0),
                      ("seed", 0)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"guard.{k}={v!r} must be a whole number >= {lo}")
        if self.on_regression not in ACTIONS:
            raise ValueError(f"guard.on_regression={self.on_regression!r}; valid: {', '.join(ACTIONS)}")
        if self.on_hacking not in ACTIONS[:2]:
            raise ValueError(f"guard.on_hacking={self.on_hacking!r}; valid: {', '.join(ACTIONS[:2])}")


def below(m: dict, rate: float) -> bool:
    """The evaluation's 95% interval lies wholly below `rate` (not noise: 15 of 100 against 0.20 is not below)."""
    return float(m["success_ci95"][1]) < rate


@dataclasses.dataclass
class Guard:
    cfg: GuardConfig = dataclasses.field(default_factory=GuardConfig)
    base: dict | None = None  # {"successes", "episodes", "success_rate"} of the base's check
    best: dict | None = None  # {"env_steps", "successes", "episodes", "success_rate"} of the best vouched policy
    checks: list = dataclasses.field(default_factory=list)  # every check: env_steps, successes, episodes, decision
    labels: int = 0  # operator labels the checks used (one per episode)
    robot_steps: int = 0  # env steps the checked episodes took
    rollbacks: int = 0
    below_in_a_row: int = 0  # consecutive checks below the base since the dip last climbed
    dip_best: float | None = None  # the best success of the checks below the base in a row (None: not in a dip)
    stopped_at: int | None = None  # env step the run stopped at, when it did
    discarded_updates: int = 0  # learner updates undone by returning to an earlier policy (still performed)
    warnings: list = dataclasses.field(default_factory=list)

    def next_seed(self) -> int:
        return self.cfg.seed + len(self.checks)

    def due(self, env_steps: int, last_check: int) -> bool:
        return bool(self.cfg.every) and env_steps - last_check >= self.cfg.every

    def record(self, m: dict, env_steps: int, hacking: bool = False) -> str:
        """A check's metrics (robot_rl.evaluation: successes, episodes, success_ci95, mean_length) at `env_steps`;
        `hacking`: the operator's labels show the classifier's claims mostly false. "best" (a new best vouched policy:
        snapshot it), "vouched", "below" (below the base, no action yet), or "warn", "rollback", "stop"."""
        k, n = int(m["successes"]), int(m["episodes"])
        self.labels += n
        self.robot_steps += int(round(float(m["mean_length"]) * n))
        row = {"env_steps": int(env_steps), "successes": k, "episodes": n, "success_rate": k / n}
        if self.base is None:
            self.base = {"successes": k, "episodes": n, "success_rate": k / n}
            decision = "best"
        elif below(m, self.base["success_rate"]):
            climbed = self.dip_best is not None and row["success_rate"] > self.dip_best
            self.below_in_a_row = 1 if climbed else self.below_in_a_row + 1
            self.dip_best = max(row["success_rate"], self.dip_best or 0.0)
            if hacking:
                decision = self._act("on_hacking", m, row, "the labels show reward hacking")
            elif self.below_in_a_row >= self.cfg.patience:
                decision = self._act("on_regression", m, row, f"{self.below_in_a_row} checks in a row without climbing")
            else:
                decision = "below"
        elif self.best is None or row["success_rate"] >= self.best["success_rate"]:
            decision = "best"
        else:
            decision = "vouched"
        if decision == "best":
            self.best = dict(row)
        if decision in ("best", "vouched", "warn", "rollback"):
            self.below_in_a_row, self.dip_best = 0, None
        self.checks.append({**row, "decision": decision})
        return decision

    def _act(self, setting: str, m: dict, row: dict, why: str) -> str:
        """What rl.guard.<setting> (on_hacking | on_regression) says at this check; the warning line names it."""
        action = getattr(self.cfg, setting)
        spent = action == "rollback" and self.rollbacks >= self.cfg.max_rollbacks
        if spent:
            action = "stop"
        b, best = self.base, self.best
        lo, hi = m["success_ci95"]
        what = (f"check at env step {row['env_steps']}: {row['successes']} of {row['episodes']} episodes succeeded "
                f"(95% CI {lo:.2f}-{hi:.2f}), below the base's {b['success_rate']:.2f} ({b['successes']} of "
                f"{b['episodes']}), {why}: the policy got worse")
        there = f"the policy of env step {best['env_steps']} (checked {best['success_rate']:.2f})"
        if action == "warn":
            msg = f"{what}; training goes on (rl.guard.{setting}=warn)"
        elif action == "rollback":
            self.rollbacks += 1
            msg = (f"{what}; rolled back to {there}, rollback {self.rollbacks} of rl.guard.max_rollbacks="
                   f"{self.cfg.max_rollbacks}")
        else:
            self.stopped_at = row["env_steps"]
            because = f"rl.guard.max_rollbacks={self.cfg.max_rollbacks} spent" if spent else f"rl.guard.{setting}=stop"
            msg = (f"{what}; training stopped at {there} ({because}). Check the reward model (rl.reward_model) "
                   "and the base")
        self.warnings.append(msg)
        return action

    def summary(self) -> dict:
        return {"base": self.base, "best": self.best, "checks": list(self.checks), "labels": self.labels,
                "robot_steps": self.robot_steps, "rollbacks": self.rollbacks, "stopped_at": self.stopped_at}

    def state(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "cfg"}

    def load_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)

