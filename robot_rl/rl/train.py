"""Residual off-policy RL on a frozen base policy: the training loop behind robot-rl-train-residual.

    result = train(env, base, cfg, run_dir, log, demo_store=store)      # base: any BasePolicy, or None

Reads top-down:
  1. check the base against the env (a mismatch stops here, before anything runs);
  2. build the residual policy (zero last layer: it starts as the base), the learner, online replay and
     the demo buffer (demo states relabeled with the base's action); resume from checkpoints/latest.json;
  3. loop until `env_steps` transitions (or `time_budget_s`): one vector step of N envs with exploration
     noise on the residual, then `utd * N` gradient updates on batches that mix online and demo
     transitions (`demo_fraction`); observation statistics are frozen from the first `learning_starts`
     transitions (+ demos) before the first update;
  4. every `log_every` / `eval_every` / `ckpt_every` env steps: TensorBoard scalars, evaluation of the
     deterministic residual policy through robot_rl.evaluation (the same code as robot-rl-eval), an atomic
     checkpoint; at the end the final evaluation, policy/ (a BasePolicy checkpoint: base + residual), curves.png.
Before training, the base alone is evaluated (env step 0); every evaluation goes through robot_rl/rl/watch.py:
a 0% base and a long stretch below the base are reported (stderr + metrics.json "warnings"), and policy/ is the
best evaluated policy (the base's zero residual included), not just the last (metrics.json "policy_from").

RL from scratch is the same code with base=None (base action 0) and `from_scratch(cfg)` (scale 1.0).

Run directory (as robot_rl.train_bc):
    checkpoints/step_<env steps>/  full training state (also loadable by load_policy)
    checkpoints/latest.json        {"step": N, "path": "step_<N>"}, replaced atomically after each save
    checkpoints/best/              the best evaluated policy so far
    policy/   tb/   metrics.json   curves.png
A resumed run restarts the envs' episodes (simulator state is not saved) and keeps the replay when
`save_replay`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.common import checkpoint
from robot_rl.common.clock import TrainingClock
from robot_rl.rl.learner import Learner, LearnerConfig
from robot_rl.rl.replay import Replay, add_transitions, demo_replay, sample_mixed
from robot_rl.policies.residual import ResidualConfig, ResidualPolicy, actor_state
from robot_rl.common.config import check_whole, from_mapping
from robot_rl.rl.rollout import CLASSIFIER_SUCCESS, REWARDS, Collector
from robot_rl.rl.guard import Guard, GuardConfig
from robot_rl.rl.watch import EvalWatch
from robot_rl.reward.online import LabelConfig, OnlineReward
from robot_rl.common.run_dir import write_metrics

# May change between a checkpoint and its resume: they set how long and how visibly the run goes on, not what
# it learns. Every other key must match.
INTERVENTIONS = ("none", "scripted")

FREE_KEYS = ("env_steps", "time_budget_s", "eval_every", "eval_episodes", "final_eval_episodes", "videos", "eval_seed",
             "log_every", "ckpt_every", "keep_checkpoints", "save_replay", "final_eval", "below_base_window")


@dataclasses.dataclass
class ResidualRLConfig:
    """Everything the loop reads besides the env and the base policy."""

    env_steps: int = 2_000_000  # training budget in env transitions (summed over envs)
    time_budget_s: float = 1800.0  # and in training wall time, evaluations excluded (0: no limit)
    learning_starts: int = 5_000  # transitions collected before the first update (they also fix the obs stats)
    utd: float = 0.5  # gradient updates per env transition (measured on lift: 0.5 learns faster per second than 1.0)
    demo_fraction: float = 0.5  # share of every batch drawn from the demo buffer (when demos are given)
    reward: str = "success"  # success: 1.0 on success steps (sparse); env: the task's dense reward; learned: the
    # learned success classifier of `reward_model` (it also ends the learner's episodes; no simulator reward; sim
    # ground truth only in evaluation)
    reward_model: str | None = None  # robot-rl-train-reward run dir (or its reward_model/): reward=learned, and
    # shaping with reward=learned|success
    shaping: float = 0.0  # lambda of lambda * (gamma Phi(s') - Phi(s)) added when reward_model is set (0: none;
    # docs/results/learned_rewards.md measures it on lift, push and peg_insert)
    shaping_decay_steps: int = 0  # lambda falls linearly from `shaping` to 0 over these env steps (0: constant)
    interventions: str = "none"  # none | scripted: the scripted human (robot_rl/hil) takes over when the policy drifts
    # the scripted human's settings (robot_rl.hil.scripted.ScriptedHumanConfig; configs/rl/residual.yaml selects
    # configs/hil/scripted.yaml)
    hil: dict = dataclasses.field(default_factory=dict)
    intervention_capacity: int = 100_000  # room for human transitions in the demo buffer (they also go to replay)
    # std of Gaussian noise on the residual in rollouts, as a fraction of residual.scale. 0.1 (0.05 in action units):
    # the peg_insert base (0.41) scores 0.25 under N(0, 0.05) action noise and 0.00 under N(0, 0.25), the old
    # default's; with 0.5 its training rollouts never succeeded (docs/results/residual_rl.md)
    explore_std: float = 0.1
    replay_capacity: int = 300_000  # online transitions kept
    eval_every: int = 20_000  # env steps between evaluations (0: only the final one)
    eval_episodes: int = 100  # episodes per periodic evaluation
    final_eval_episodes: int = 200  # episodes of the final evaluation (0: eval_episodes)
    videos: int = 2  # mp4s of the final evaluation's first episodes, in <run dir>/videos (<= eval env's num_envs)
    eval_seed: int = 1000  # evaluation episodes never share the training episodes' seeds
    log_every: int = 2_000  # env steps between TensorBoard points
    ckpt_every: int = 20_000  # env steps between checkpoints
    keep_checkpoints: int = 2
    save_replay: bool = True  # checkpoints hold the online replay, so a resume continues with its data
    final_eval: bool = True  # evaluate the last policy at the end (false: policy/ is the best periodic evaluation's)
    below_base_window: int = 60_000  # env steps evaluations may stay below the base's success before the run warns
    # (log + metrics.json "warnings"; 0: never). Whatever happens, policy/ is the best evaluated policy
    # reward=learned: what the classifier's success does in an env episode (robot_rl/rl/rollout.py): once = the first
    # fire pays and ends the learner's episode (later rows are never sampled), the env's runs on to its own end
    # (labels judge the whole episode) | end = its first fire pays, terminates
    # the learner's episode and ends the env's (a robot resets when its success detector fires: a fire just before
    # success then ends the episode short of it) | every = every fire pays (a state where it fires falsely then pays
    # every step it is held). Chosen in docs/results/learned_rewards.md
    classifier_success: str = "once"
    seed: int = 0
    residual: ResidualConfig = dataclasses.field(default_factory=ResidualConfig)
    learner: LearnerConfig = dataclasses.field(default_factory=LearnerConfig)
    # reward=learned: operator labels of training episodes and classifier refits (robot_rl/reward/online.py)
    labels: LabelConfig = dataclasses.field(default_factory=LabelConfig)
    # reward=learned: checked episodes that keep the run no worse than its base (robot_rl/rl/guard.py)
    guard: GuardConfig = dataclasses.field(default_factory=GuardConfig)

    def __post_init__(self):
        if isinstance(self.residual, dict):
            self.residual = from_mapping(ResidualConfig, self.residual, "residual")
        if isinstance(self.learner, dict):
            self.learner = from_mapping(LearnerConfig, self.learner, "learner")
        if isinstance(self.labels, dict):
            self.labels = from_mapping(LabelConfig, self.labels, "labels")
        if isinstance(self.guard, dict):
            self.guard = from_mapping(GuardConfig, self.guard, "guard")
        check_whole(self, {"env_steps": 1, "learning_starts": 0, "replay_capacity": 1, "eval_every": 0,
                           "eval_episodes": 1, "final_eval_episodes": 0, "videos": 0, "eval_seed": 0, "log_every": 1,
                           "ckpt_every": 1, "keep_checkpoints": 1, "seed": 0, "shaping_decay_steps": 0,
                           "below_base_window": 0})
        check_budget(self.env_steps, self.learning_starts)  # updates start at env step learning_starts
        if not (self.utd > 0 and np.isfinite(self.utd)):
            raise ValueError(f"utd={self.utd!r} must be a number > 0 (gradient updates per env transition)")
        if not 0.0 <= self.demo_fraction < 1.0:
            raise ValueError(f"demo_fraction={self.demo_fraction!r} must be in [0, 1)")
        if self.reward not in REWARDS:
            raise ValueError(f"reward={self.reward!r}; valid: {', '.join(REWARDS)}")
        if self.reward == "learned" and not self.reward_model:
            raise ValueError("reward=learned needs reward_model=PATH (a robot-rl-train-reward run directory)")
        if self.reward == "learned":
            self.labels.check_budget()
        if self.classifier_success not in CLASSIFIER_SUCCESS:
            raise ValueError(f"classifier_success={self.classifier_success!r}; valid: {', '.join(CLASSIFIER_SUCCESS)}")
        if self.reward == "env" and self.reward_model:
            raise ValueError("reward=env is already dense; a reward_model (classifier, shaping) goes with "
                             "reward=learned or reward=success")
        if not (isinstance(self.shaping, (int, float)) and np.isfinite(self.shaping) and self.shaping >= 0):
            raise ValueError(f"shaping={self.shaping!r} must be a number >= 0 (lambda of the potential term)")
        if self.reward_model and self.shaping > 0:
            # the shaping terms telescope: a return moves by at most lambda, the TD-target clip widens by as much
            self.learner = dataclasses.replace(self.learner, potential_bound=float(self.shaping), critic_potential=True)
        if self.interventions not in INTERVENTIONS:
            raise ValueError(f"interventions={self.interventions!r}; valid: {', '.join(INTERVENTIONS)}")
        if self.interventions == "scripted":
            from robot_rl.hil.scripted import ScriptedHumanConfig

            self.hil = dataclasses.asdict(from_mapping(ScriptedHumanConfig, dict(self.hil), "hil"))
        if not self.explore_std >= 0:
            raise ValueError(f"explore_std={self.explore_std!r} must be >= 0")
        if not self.time_budget_s >= 0:
            raise ValueError(f"time_budget_s={self.time_budget_s!r} must be >= 0 (0: no limit)")


def check_budget(env_steps: int, learning_starts: int, first_update: int | None = None) -> None:
    """Refuse an env-step budget that ends before the first gradient update (at env step `first_update`, by default
    learning_starts; SB3 updates from learning_starts + 1), naming both numbers."""
    first = learning_starts if first_update is None else first_update
    if env_steps < first:
        what = "fewer than" if first == learning_starts else "not more than"
        raise ValueError(
            f"env_steps={env_steps} is {what} learning_starts={learning_starts}: the budget ends before the first "
            f"gradient update, so nothing would be learned. Raise env_steps (e.g. {max(10 * learning_starts, 1000)}) "
            "or lower learning_starts")


def from_scratch(cfg: ResidualRLConfig) -> ResidualRLConfig:
    """The RL-from-scratch baseline of `cfg` (use with base=None): full-range actions, TD3's usual noise, no pull
    toward action 0 (learner.actor_l2 keeps a residual near its base; without a base there is nothing to stay near)."""
    residual = dataclasses.replace(cfg.residual, scale=1.0)
    learner = dataclasses.replace(cfg.learner, actor_l2=0.0)
    return dataclasses.replace(cfg, residual=residual, learner=learner, explore_std=0.2)


def base_fingerprint(base) -> dict:
    """What identifies the base policy in a resume check: kind, spec and a hash of its weights."""
    if base is None:
        return {"kind": None}
    out = {"kind": base.kind or type(base).__name__, "spec": base.spec.to_dict()}
    if base.kind:
        out["sha256"] = base.weights_sha256()
    return out


def resume_config(cfg: ResidualRLConfig, env, base, demo_path: str | None) -> dict:
    """What a resumed run must share with its checkpoint, as JSON values."""
    out = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in FREE_KEYS}
    out.update(task=env.task_name, num_envs=env.num_envs, obs_dims=dict(env.obs_dims), base=base_fingerprint(base),
               demos=str(Path(demo_path).resolve()) if demo_path else None)
    return json.loads(json.dumps(out))


class ResidualWorkspace:
    def __init__(self, run_dir: Path, cfg: ResidualRLConfig, env, base, demo_store=None, eval_env=None):
        if base is not None:  # SpecMismatch before anything is built or run
            for e in (env, eval_env):
                if e is not None:
                    base.spec.check_env(e)
        self.run_dir, self.cfg, self.env, self.eval_env = Path(run_dir), cfg, env, eval_env
        self.ckpt_dir = self.run_dir / "checkpoints"
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.policy = ResidualPolicy.build(base, cfg.residual, env=env)
        self.resume_config = resume_config(cfg, env, base, str(demo_store.path) if demo_store is not None else None)
        self.learner = Learner(self.policy.actor, cfg.learner, seed=cfg.seed)
        obs_dim = self.policy.actor.obs_dim
        self.replay = Replay(cfg.replay_capacity, env.num_envs, obs_dim, env.action_dim)
        self.learned_reward = None  # robot_rl.reward.LearnedReward when cfg.reward_model is set
        if cfg.reward_model:
            from robot_rl.reward.shaping import from_config

            self.learned_reward = from_config(cfg.reward_model, cfg.reward, cfg.shaping, cfg.learner.gamma,
                                              [e for e in (env, eval_env) if e is not None])
        self.online = None  # reward=learned: robot_rl.reward.online.OnlineReward (operator labels, classifier refits)
        self.guard = None  # reward=learned: robot_rl.rl.guard.Guard (checked episodes, rollbacks)
        if cfg.reward == "learned":
            from robot_rl.reward.online import check_fires_on_demos, original_episodes

            model = self.learned_reward.model
            if demo_store is not None:  # a classifier that never fires on the demos' successes is refused here
                from robot_rl.reward.episodes import load_episodes

                check_fires_on_demos(model, load_episodes([demo_store], model.spec, neighbor_keys=None),
                                     str(cfg.reward_model))
            refits = cfg.labels.refit_every and cfg.labels.labels
            original = original_episodes(model, demo_store) if refits else None
            self.online = OnlineReward(self.learned_reward, cfg.labels, env.num_envs, env.episode_steps,
                                       original, seed=cfg.seed + 2)
            self.guard = Guard(cfg.guard)
        self.best_state = None  # the learner at the guard's best vouched policy: what a rollback returns to
        self.last_check = 0  # env step of the guard's last check
        self.check_now = False  # the classifier's claims turned out false: check before the next interval
        self.hil = None  # robot_rl.hil.InterventionController when cfg.interventions is set
        if cfg.interventions == "scripted":
            from robot_rl.hil import InterventionController
            from robot_rl.hil.scripted import ScriptedHuman, ScriptedHumanConfig

            self.hil = InterventionController(env.num_envs, ScriptedHuman(env, ScriptedHumanConfig(**cfg.hil)))
        self.demos = None
        if demo_store is not None and cfg.demo_fraction > 0:
            self.demos = demo_replay(demo_store, base, self.policy.obs_keys,
                                     "success" if cfg.reward == "learned" else cfg.reward,
                                     extra_capacity=cfg.intervention_capacity if self.takes_interventions() else 0,
                                     base_features=bool(self.policy.feature_dim))
            if self.learned_reward is not None:
                from robot_rl.reward.shaping import relabel_replay

                relabel_replay(self.demos, self.learned_reward, self.policy.obs_keys, dict(env.obs_dims),
                               store=demo_store,  # frames / instructions of image / language reward models
                               once=cfg.classifier_success != "every")
        self.collector = Collector(env, self.policy, self.replay, cfg.reward, cfg.explore_std, seed=cfg.seed + 1,
                                   learned=self.learned_reward, hil=self.hil, online=self.online,
                                   classifier_success=cfg.classifier_success)
        self.env_steps = 0
        self.episodes = 0
        self.owed = 0.0  # fractional updates carried over (utd * N need not be whole)
        self.stats_frozen = False
        self.train_time = 0.0  # wall time of training so far, across resumes
        self.starts = 0  # env (re)starts, for distinct seeds
        self.watch = EvalWatch(cfg.below_base_window, cfg.residual.scale)  # base level, best policy, regressions
        self.on_warning = None  # called with each warning's text (the CLI prints it); they also go to metrics.json

    # ---- checkpoints --------------------------------------------------------------------------------
    def save(self) -> Path:
        tensors = dict(self.policy.state_tensors())
        train = {
            "env_steps": self.env_steps, "episodes": self.episodes, "owed": self.owed,
            "stats_frozen": self.stats_frozen, "train_time": self.train_time, "starts": self.starts,
            "learner": checkpoint.flatten(self.learner.state(), "learner", tensors),
            "numpy_rng": self.rng.bit_generator.state,
            "collector_rng": self.collector.rng.bit_generator.state,
            "torch_rng": checkpoint.flatten(torch.get_rng_state(), "torch_rng", tensors),
            "config": self.resume_config,
            "watch": self.watch.state(),
        }
        if self.cfg.save_replay:
            train["replay"] = checkpoint.flatten(self.replay.state(), "replay", tensors)
        if self.guard is not None:
            train["guard"] = {"state": self.guard.state(), "last_check": self.last_check,
                              "best": checkpoint.flatten(self.best_state, "guard_best", tensors)}
            train["online"] = checkpoint.flatten({"state": self.online.state(), "arrays": self.online.arrays()},
                                                 "online", tensors)
        train.update(self.extra_state(tensors))
        return checkpoint.save_training(self.ckpt_dir, self.env_steps, self.policy, tensors, train,
                                        self.cfg.keep_checkpoints, width=9)

    def try_resume(self) -> bool:
        """Continue from checkpoints/latest.json when present; False when there is nothing to resume."""
        found = checkpoint.load_training(self.ckpt_dir, self.resume_config)
        if found is None:
            return False
        tensors, train = found
        self.policy.actor.load_state_dict(actor_state(tensors))
        self.learner.load_state(checkpoint.unflatten(train["learner"], tensors))
        if "replay" in train:
            self.replay.load_state(checkpoint.unflatten(train["replay"], tensors))
        self.rng.bit_generator.state = train["numpy_rng"]
        self.collector.rng.bit_generator.state = train["collector_rng"]
        torch.set_rng_state(checkpoint.unflatten(train["torch_rng"], tensors))
        self.env_steps, self.episodes = int(train["env_steps"]), int(train["episodes"])
        self.owed, self.stats_frozen = float(train["owed"]), bool(train["stats_frozen"])
        self.train_time, self.starts = float(train["train_time"]), int(train["starts"])
        self.watch.load_state(train.get("watch", {}))  # checkpoints before the watch have none
        if self.guard is not None:  # reward=learned (the resume config holds the reward: both sides have them)
            self.guard.load_state(train["guard"]["state"])
            self.last_check = int(train["guard"]["last_check"])
            self.best_state = checkpoint.unflatten(train["guard"]["best"], tensors)
            online = checkpoint.unflatten(train["online"], tensors)
            self.online.load_state(online["state"], online["arrays"])
            if self.online.refits and self.demos is not None:  # built above with the classifier as trained
                self.relabel(online=False)
        self.load_extra_state(train, tensors)
        return True

    def takes_interventions(self) -> bool:
        """Human transitions may arrive (they go to the demo buffer too, which keeps room for them)."""
        return self.cfg.interventions != "none"

    def extra_state(self, tensors: dict) -> dict:
        """Training state a subclass adds to its checkpoints (JSON values; arrays go into `tensors` through
        checkpoint.flatten). The distributed learner keeps its per-actor sequence numbers here."""
        return {}

    def load_extra_state(self, train: dict, tensors: dict) -> None:
        """Inverse of extra_state, on resume."""

    # ---- pieces of the loop -------------------------------------------------------------------------
    def restart_envs(self) -> None:
        self.collector.start(seed=self.cfg.seed + 100_003 * self.starts)
        self.starts += 1

    def freeze_obs_stats(self) -> None:
        """Observation normalization from the online replay (+ demos), fixed for the rest of training."""
        obs = [self.replay.data["obs"][: min(self.replay.written, self.replay.rows)].reshape(-1, self.replay.obs_dim)]
        if self.demos is not None:
            obs.append(self.demos.data["obs"][: self.demos.written, 0])
        obs = np.concatenate(obs)
        self.learner.set_obs_stats(obs.mean(0), np.maximum(obs.std(0), 1e-2))
        self.stats_frozen = True

    def batch(self) -> dict:
        c = self.cfg.learner
        return sample_mixed(self.replay, self.demos, c.batch_size, self.cfg.demo_fraction, c.n_step, c.gamma, self.rng)

    def evaluate(self, episodes: int | None = None, videos: int = 0, progress=None) -> dict:
        from robot_rl.evaluation import evaluate_policy

        env = self.eval_env if self.eval_env is not None else self.env
        metrics = evaluate_policy(env, self.policy, episodes or self.cfg.eval_episodes, seed=self.cfg.eval_seed,
                                  videos=videos, video_dir=self.run_dir / "videos" if videos else None,
                                  progress=progress)
        if self.eval_env is None:
            self.restart_envs()  # evaluation reset the shared env: training episodes start over
        return metrics

    # ---- the base's level, the best policy, regressions (robot_rl/rl/watch.py) ------------------------
    def evaluates(self) -> bool:
        return self.cfg.eval_every > 0 or self.cfg.final_eval

    def evaluate_base(self, log, progress=None) -> dict | None:
        """s0 of this run: the policy at env step 0 (the residual starts at zero: the base alone), on the final
        evaluation's episodes, logged as eval/base_success_rate. Once per run, only with a base and when the run
        evaluates at all; a base that never succeeds is reported before training goes on."""
        if self.policy.base is None or self.env_steps > 0 or self.watch.base_eval is not None or not self.evaluates():
            return None
        cfg = self.cfg
        m = self.evaluate(cfg.final_eval_episodes or cfg.eval_episodes, progress=progress)
        log.scalar("eval/base_success_rate", m["success_rate"], 0)
        self._warn(self.watch.base(m))
        self.save_best()
        return m

    def note_eval(self, m: dict, step: int | None = None, weights: dict | None = None) -> None:
        """After a periodic evaluation of the current actor at self.env_steps (or of `weights`, an actor state_dict
        evaluated elsewhere, at `step`): keep the best, report a long stretch below the base."""
        improved, msg = self.watch.after(m, self.env_steps if step is None else step)
        if improved:
            self.save_best(weights)
        self._warn(msg)

    def save_best(self, weights: dict | None = None) -> None:
        """checkpoints/best/: the best evaluated policy so far (a BasePolicy checkpoint, like policy/)."""
        if weights is None:
            self.policy.save(self.ckpt_dir / "best")
            return
        current = self.swap_actor(weights)
        try:
            self.policy.save(self.ckpt_dir / "best")
        finally:
            self.swap_actor(current)

    def swap_actor(self, weights: dict) -> dict:
        """Load `weights` (an actor state_dict) into the acting residual; returns a copy of the ones it replaced."""
        current = {k: v.clone() for k, v in self.policy.actor.state_dict().items()}
        self.policy.actor.load_state_dict(weights)
        return current

    # ---- reward=learned: operator labels, refits, checks and rollbacks (robot_rl/reward/online.py, rl/guard.py) --
    def relabel(self, online: bool = True) -> None:
        """Rewards and terminations of the demo buffer (and the online replay) from the current classifier."""
        from robot_rl.reward.shaping import relabel_replay

        dims = dict(self.env.obs_dims)
        for buf in ([self.replay] if online else []) + ([self.demos] if self.demos is not None else []):
            relabel_replay(buf, self.learned_reward, self.policy.obs_keys, dims,
                           once=self.cfg.classifier_success != "every")

    def after_labels(self, log) -> None:
        """After a vector step: the labeller's warnings (a check follows at once), a refit when one is due."""
        for msg in self.online.pop_warnings():
            self._warn(msg)
            self.check_now = True
        if self.online.refit_due():
            figures = self.online.refit()
            self.relabel()
            log.scalars({k: v for k, v in figures.items() if isinstance(v, (int, float))}, self.env_steps,
                        prefix="labels/refit_")

    def snapshot(self) -> dict:
        """The learner as it is now (actor, critics, optimizers), for a later rollback."""
        import copy

        return {"env_steps": self.env_steps, "stats_frozen": self.stats_frozen,
                "actor": {k: v.clone() for k, v in self.policy.actor.state_dict().items()},
                "learner": copy.deepcopy(self.learner.state())}

    def restore(self, snap: dict) -> None:
        import copy

        if self.guard is not None:  # the updates since the snapshot were performed: metrics count them
            self.guard.discarded_updates += self.learner.updates - int(snap["learner"]["updates"])
        self.policy.actor.load_state_dict(snap["actor"])
        self.learner.load_state(copy.deepcopy(snap["learner"]))
        if self.stats_frozen and not snap["stats_frozen"]:  # a snapshot from before the statistics were fixed
            self.freeze_obs_stats()

    def check(self, log, episodes: int) -> str:
        """A guard check of the current policy: `episodes` episodes, each labelled (robot time and labels, counted);
        a new best is snapshotted, a regression rolls back or stops as rl.guard.on_regression says."""
        from robot_rl.evaluation import evaluate_policy

        env = self.eval_env if self.eval_env is not None else self.env
        m = evaluate_policy(env, self.policy, episodes, seed=self.guard.next_seed())
        if self.eval_env is None:
            self.restart_envs()
        reported = len(self.guard.warnings)
        decision = self.guard.record(m, self.env_steps, hacking=self.online.hacking)
        self.last_check, self.check_now = self.env_steps, False
        log.scalars({"success_rate": m["success_rate"], "labels": self.guard.labels + self.online.labelled,
                     "robot_minutes": self.robot_minutes()}, self.env_steps, prefix="guard/")
        if decision == "best":
            self.best_state = self.snapshot()
            self.save_best()
        elif decision in ("rollback", "stop"):
            self.restore(self.best_state)
        for msg in self.guard.warnings[reported:]:
            self._warn(msg)
        return decision

    def robot_minutes(self) -> float:
        """Robot time so far: training env steps and checked episodes, at the env's control rate."""
        steps = self.env_steps + (self.guard.robot_steps if self.guard is not None else 0)
        return steps / float(self.env.control_hz) / 60.0

    def finish_by_checks(self, log, evaluate) -> dict | None:
        """reward=learned, at the end: the last policy's check (unless the run stopped), then the best vouched
        policy goes into the actor. Returns the sim evaluation of the last policy when it is not the one kept (a
        study figure: simulator success never picks the policy), else None."""
        if self.guard.stopped_at is not None:  # check() has restored the best vouched policy
            return None
        last = {k: v.clone() for k, v in self.policy.actor.state_dict().items()}
        decision = self.check(log, self.cfg.guard.base_episodes)
        if decision == "best":
            return None
        if decision not in ("rollback", "stop"):  # those restored it already
            self.restore(self.best_state)
        if not self.cfg.final_eval:
            return None
        kept = self.swap_actor(last)
        try:
            return evaluate()
        finally:
            self.swap_actor(kept)

    def keep_best(self, final: dict, evaluate) -> dict:
        """policy/ is the best evaluated policy. `final` is the last policy's final evaluation; when an earlier
        evaluation (the base's included) scored higher, that policy is evaluated on the same episodes too
        (`evaluate()`) and the better of the two is kept. Returns metrics of policy/ with "policy_from"."""
        best, step = self.watch.best, self.env_steps
        last = {**final, "policy_from": {"env_steps": step, "which": "last"}}
        if best is None or best["env_steps"] == step or best["success_rate"] <= final["success_rate"]:
            return last
        current = self.swap_actor(actor_state(checkpoint.load(self.ckpt_dir / "best")[0]))
        m = evaluate()
        if m["success_rate"] <= final["success_rate"]:
            self.swap_actor(current)
            return last
        return {**m, "policy_from": {"env_steps": best["env_steps"], "which": "best"},
                "last_eval": {k: v for k, v in final.items() if k != "episode_ids"}}

    def keep_best_evaluated(self) -> dict | None:
        """final_eval=false: the last policy is never evaluated, so policy/ is the best evaluated one (checkpoints/best,
        the base's zero residual included) and this returns where it came from; the last policy when the run made no
        evaluation (None)."""
        best = self.watch.best
        if best is None:
            return None
        self.swap_actor(actor_state(checkpoint.load(self.ckpt_dir / "best")[0]))
        return {"env_steps": best["env_steps"], "which": "best", "by": "evaluations"}

    def _warn(self, msg: str | None) -> None:
        if msg is None:
            return
        if self.on_warning is not None:
            self.on_warning(msg)
        else:
            import warnings

            warnings.warn(msg, stacklevel=3)

    def route_interventions(self) -> None:
        """The human's transitions of the newest replay row also go into the demo buffer (they are the most
        valuable data: corrections where the policy was about to fail)."""
        if self.hil is None or self.demos is None or not self.replay.written:
            return
        p = (self.replay.written - 1) % self.replay.rows
        human = self.replay.data["intervention"][p]
        if human.any():
            add_transitions(self.demos, {k: v[p][human] for k, v in self.replay.data.items()})

    def shaping_now(self) -> float:
        """The shaping weight lambda at the current env step (rl.shaping_decay_steps: linear to 0)."""
        lam, decay = self.cfg.learner.potential_bound, self.cfg.shaping_decay_steps
        return lam * max(0.0, 1.0 - self.env_steps / decay) if decay else lam

    def learn(self, transitions: int, window: dict) -> None:
        """The `utd * transitions` gradient updates owed for new transitions, once learning has started
        (fractions carry over); metrics, update count and update time go into `window`."""
        cfg = self.cfg
        if self.env_steps < max(cfg.learning_starts, 1):
            return
        if not self.stats_frozen:
            self.freeze_obs_stats()
        self.learner.shaping = self.shaping_now()
        self.owed += cfg.utd * transitions
        u0 = time.perf_counter()
        while self.owed >= 1.0:
            try:
                window["metrics"].append(self.learner.update(self.batch()))
            except FloatingPointError as e:
                raise FloatingPointError(
                    f"{e} (env step {self.env_steps}); training stopped, the last good checkpoint is kept "
                    f"in {self.ckpt_dir}") from None
            self.owed -= 1.0
            window["updates"] += 1
        window["update_s"] += time.perf_counter() - u0

    # ---- loop ---------------------------------------------------------------------------------------
    def run(self, log, progress=None) -> dict:
        """Train until the budget is spent; `progress(env_steps)` is called after every vector step."""
        cfg, n = self.cfg, self.env.num_envs
        self.evaluate_base(log)  # unless the caller did (the CLI, with a progress bar)
        if self.guard is not None and self.guard.base is None:  # the base's check: what "worse" is measured against
            self.check(log, cfg.guard.base_episodes)
        self.restart_envs()
        clock = TrainingClock(self.train_time)  # training time excludes evaluations
        start_steps, saved_at = self.env_steps, None
        window = {"metrics": [], "updates": 0, "update_s": 0.0, "steps": self.env_steps, "t": clock.now()}

        def crossed(every: int) -> bool:
            return every > 0 and self.env_steps // every > (self.env_steps - n) // every

        def flush_log():
            self._log(log, window["metrics"], window["updates"] / max(window["update_s"], 1e-9),
                      (self.env_steps - window["steps"]) / max(clock.now() - window["t"], 1e-9))
            window.update(metrics=[], updates=0, update_s=0.0, steps=self.env_steps, t=clock.now())

        while self.env_steps < cfg.env_steps and not (cfg.time_budget_s and clock.now() >= cfg.time_budget_s):
            # 1. one vector step: base chunks open-loop, residual + exploration noise every step
            self.collector.step(explore=True)
            self.route_interventions()
            self.env_steps += n
            # 2. utd * N gradient updates once learning has started
            self.learn(n, window)
            if self.online is not None:  # refits count as training time
                self.after_labels(log)
            self.train_time = clock.now()
            # 3. checks (reward=learned), logs, evaluation, checkpoints
            if self.guard is not None and self.env_steps < cfg.env_steps and (
                    self.check_now or self.guard.due(self.env_steps, self.last_check)):
                with clock.paused():
                    if self.check(log, cfg.guard.episodes) == "stop":
                        self.save()
                        saved_at = self.env_steps
                        break
            if crossed(cfg.log_every):
                flush_log()
            if crossed(cfg.eval_every) and self.env_steps < cfg.env_steps:
                with clock.paused():
                    m = self.evaluate()
                log.evaluation(m, self.env_steps, self.train_time)
                if self.guard is None:  # with a learned reward, checks pick the policy (simulator success: a figure)
                    self.note_eval(m)
            if crossed(cfg.ckpt_every):
                self.save()
                saved_at = self.env_steps
            if progress is not None:
                progress(self.env_steps)
        if self.env_steps > window["steps"]:
            flush_log()
        if saved_at != self.env_steps:
            self.save()
        final = None
        episodes = cfg.final_eval_episodes or cfg.eval_episodes
        if self.guard is not None:
            with clock.paused():
                last = self.finish_by_checks(log, lambda: self.evaluate(episodes))
                if cfg.final_eval:
                    final = self.evaluate(episodes, videos=cfg.videos)
                    log.evaluation(final, self.env_steps, self.train_time)
                    b = self.guard.best
                    which = "last" if last is None and self.guard.stopped_at is None else "best"
                    final = {**final, "policy_from": {"env_steps": b["env_steps"], "which": which, "by": "checks"}}
                    if last is not None:
                        final["last_eval"] = {k: v for k, v in last.items() if k != "episode_ids"}
        elif cfg.final_eval:
            with clock.paused():
                final = self.evaluate(episodes, videos=cfg.videos)
                log.evaluation(final, self.env_steps, self.train_time)
                final = self.keep_best(final, lambda: self.evaluate(episodes, videos=cfg.videos))
        kept_from = self.keep_best_evaluated() if self.guard is None and not cfg.final_eval else None
        self.policy.save(self.run_dir / "policy")
        if self.online is not None and self.online.refits:  # the classifier as the labels left it
            self.learned_reward.model.save(self.run_dir / "reward_model")
        log.plot(self.run_dir / "curves.png",
                 ["eval/success_rate", "rollout/success_rate", "train/critic_loss", "q/mean", "residual/abs_mean",
                  "perf/updates_per_s"], title=f"residual RL {self.env.task_name}")
        done = self.learner.updates + (self.guard.discarded_updates if self.guard is not None else 0)
        return {"final_eval": final, "env_steps": self.env_steps, "updates": done,
                "episodes": self.episodes, "train_time_s": self.train_time, "eval_time_s": clock.paused_s,
                "env_steps_this_session": self.env_steps - start_steps,
                "control_hz": float(self.env.control_hz),  # the env's own rate (a gymnasium env's may not be env.control_hz)
                **self.watch_summary(),
                **({"policy_from": kept_from} if kept_from else {})}

    def watch_summary(self) -> dict:
        """metrics.json entries of the watch: base_eval, best_eval and the warnings so far; with a learned reward
        also the guard's checks, the operator labels and robot minutes (training and checked episodes)."""
        out = {"base_eval": self.watch.base_eval, "best_eval": self.watch.best, "warnings": list(self.watch.warnings)}
        if self.guard is not None:
            hz = float(self.env.control_hz)
            out["warnings"] += self.online.warnings + self.guard.warnings
            out["guard"] = self.guard.summary()
            out["labels"] = {**self.online.summary(), "checked_episodes": self.guard.labels,
                             "total": self.online.labelled + self.guard.labels}
            out["robot_minutes"] = {"training": self.env_steps / hz / 60.0,
                                    "checks": self.guard.robot_steps / hz / 60.0, "total": self.robot_minutes()}
        return out

    def _log(self, log, metrics: list[dict], updates_per_s: float, env_steps_per_s: float) -> None:
        step = self.env_steps
        finished = self.collector.pop_finished()
        self.episodes += len(finished)
        if self.hil is not None:
            from robot_rl.hil import summary

            log.scalars(summary(self.hil.pop_finished()), step)
            log.scalar("hil/fraction_so_far", self.hil.fraction, step)
        if finished:
            succ, ret, length = (np.array(x, dtype=np.float64) for x in zip(*finished))
            log.scalars({"success_rate": succ.mean(), "env_return": ret.mean(), "length": length.mean(),
                         "episodes": len(finished)}, step, prefix="rollout/")
        if metrics:
            mean = {k: float(np.mean([m[k] for m in metrics if k in m])) for k in metrics[-1]}
            actor = [m for m in metrics if "actor_loss" in m]
            if actor:
                mean.update({k: float(np.mean([m[k] for m in actor])) for k in ("actor_loss", "residual_abs",
                                                                                   "actor_grad_norm")})
            log.scalars({k: mean[k] for k in ("critic_loss", "critic_grad_norm") if k in mean}, step, prefix="train/")
            if self.cfg.learner.potential_bound:
                log.scalar("train/shaping", self.learner.shaping, step)
            if "actor_loss" in mean:
                log.scalars({"actor_loss": mean["actor_loss"], "actor_grad_norm": mean["actor_grad_norm"]}, step,
                            prefix="train/")
                log.scalars({"abs_mean": mean["residual_abs"],
                             "frac_of_scale": mean["residual_abs"] / self.policy.actor.cfg.scale}, step,
                            prefix="residual/")
            log.scalars({"mean": mean["q_mean"], "max": mean["q_max"], "min": mean["q_min"],
                         "head_std": mean["q_head_std"], "target_mean": mean["target_mean"]}, step, prefix="q/")
            log.scalar("perf/updates_per_s", updates_per_s, step)
        log.scalars({"env_steps_per_s": env_steps_per_s, "updates": self.learner.updates}, step, prefix="perf/")
        if self.online is not None:
            o = self.online
            log.scalars({"labelled": o.labelled, "claimed_false": o.counts["claimed_false"],
                         "missed_success": o.counts["missed_success"], "refits": o.refits,
                         **({"claim_precision": o.precision} if o.precision is not None else {})}, step,
                        prefix="labels/")


def train(env, base, cfg: ResidualRLConfig, run_dir, log=None, demo_store=None, eval_env=None, progress=None) -> dict:
    """Train a residual policy on `base` (None: from scratch) in `env`, resuming from run_dir when it can.
    Without a `log`, a RunLog in run_dir is opened (continuing a resumed history) and closed."""
    from robot_rl.common.run_log import RunLog

    ws = ResidualWorkspace(Path(run_dir), cfg, env, base, demo_store=demo_store, eval_env=eval_env)
    resumed_from = ws.env_steps if ws.try_resume() else None
    own_log = log is None
    if own_log:
        log = RunLog(run_dir, resume_step=resumed_from)
    try:
        result = ws.run(log, progress=progress)
    finally:
        if own_log:
            log.close()
    result["resumed_from"] = resumed_from
    return result


def write_results(run_dir: Path, log, result: dict, extra: dict) -> None:
    """metrics.json of a run: the final evaluation, budget figures and the scalar history."""
    final = result["final_eval"]
    warnings = list(extra.get("warnings", [])) + list(result.get("warnings", []))
    metrics = {**extra, **{k: v for k, v in result.items() if k != "final_eval"}, "warnings": warnings,
               "history": log.history_json()}
    if final is not None:  # of policy/: the best evaluated policy (final["policy_from"])
        metrics.update(success_rate=final["success_rate"], success_ci95=final["success_ci95"],
                       eval={k: v for k, v in final.items() if k not in ("episode_ids", "policy_from", "last_eval")},
                       eval_episode_ids=final["episode_ids"], policy_from=final.get("policy_from"))
        if "last_eval" in final:
            metrics["last_eval"] = final["last_eval"]
    write_metrics(Path(run_dir), metrics)
