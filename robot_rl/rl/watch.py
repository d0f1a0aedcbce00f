"""What a residual RL run tells its user about its evaluations: the base's level, the best policy so far, and when
training has made the base worse.

    watch = EvalWatch(below_base_window=60_000, scale=0.5)
    msg = watch.base(m0)                     # s0: the policy at env step 0 (the base alone); a 0% base is reported
    improved, msg = watch.after(m, step)     # after every evaluation: is it the best so far; below the base too long?

The training workspaces do the saving (checkpoints/best/ when `improved`) and the printing; this keeps the rules,
and its state() goes into every training checkpoint so a resumed run keeps its best and its below-base stretch.

"Below the base" is statistical: the evaluation's 95% interval lies wholly under the base's success rate (100
episodes at 0.15 against a 0.20 base is noise, not a regression).
"""

from __future__ import annotations

import dataclasses

from robot_rl.rl.guard import below


@dataclasses.dataclass
class EvalWatch:
    below_base_window: int = 60_000  # env steps evaluations may stay below the base before the run says so (0: never)
    scale: float = 0.5  # rl.residual.scale, named in the 0% message
    base_eval: dict | None = None  # {"success_rate", "successes", "episodes", "success_ci95"} of env step 0
    best: dict | None = None  # {"env_steps", "success_rate", "episodes"} of the best evaluation so far (the later of
    # equals)
    below_since: int | None = None  # env step of the first evaluation of the current below-base stretch
    warned: bool = False  # the current stretch was reported
    warnings: list = dataclasses.field(default_factory=list)

    def base(self, m: dict) -> str | None:
        """Record the base's evaluation (env step 0, zero residual); a warning when it never succeeded."""
        self.base_eval = {k: m[k] for k in ("success_rate", "successes", "episodes", "success_ci95")}
        self.after(m, 0)
        if m["successes"] > 0:
            return None
        return self._warn(
            f"the base policy succeeded in 0 of {m['episodes']} evaluation episodes: residual RL from a 0% base is RL "
            f"from scratch with a handicap (the residual moves the base's actions by at most rl.residual.scale="
            f"{self.scale:g}). Train the base on more or better demonstrations (robot-rl-collect, robot-rl-train-bc), "
            "or run mode=scratch with the same demos; training continues")

    def after(self, m: dict, step: int) -> tuple[bool, str | None]:
        """After an evaluation at env step `step`: (best so far, a warning when evaluations have stayed below the
        base's success for longer than below_base_window env steps; once per stretch)."""
        s = float(m["success_rate"])
        # a later evaluation wins a tie, as a later check does (robot_rl/rl/guard.py): more training behind it
        improved = self.best is None or s >= self.best["success_rate"]
        if improved:
            self.best = {"env_steps": int(step), "success_rate": s, "episodes": int(m["episodes"])}
        if self.base_eval is None or not self.below_base_window or step == 0:
            return improved, None
        if not below(m, self.base_eval["success_rate"]):
            self.below_since, self.warned = None, False
            return improved, None
        if self.below_since is None:
            self.below_since = int(step)
        if self.warned or step - self.below_since < self.below_base_window:
            return improved, None
        self.warned = True
        b = self.best
        return improved, self._warn(
            f"evaluation success has stayed below the base's {self.base_eval['success_rate']:.2f} since env step "
            f"{self.below_since} ({step - self.below_since} env steps > rl.below_base_window={self.below_base_window}): "
            f"{s:.2f} (95% CI {m['success_ci95'][0]:.2f}-{m['success_ci95'][1]:.2f}) at env step {step}. Training is "
            f"making the base worse; policy/ will be the best evaluated policy (so far env step {b['env_steps']}, "
            f"{b['success_rate']:.2f}). Try a smaller rl.residual.scale or rl.explore_std, or check the reward")

    def _warn(self, msg: str) -> str:
        self.warnings.append(msg)
        return msg

    def state(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("below_base_window", "scale")}

    def load_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)
