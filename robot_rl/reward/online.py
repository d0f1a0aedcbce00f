"""A learned reward kept honest while residual RL optimizes against it (rl.reward=learned).

A policy that maximizes a learned success classifier finds the states where it fires without a success (a peg
held over its hole, pressed on the rim) and learns to go there: the classifier's reward climbs while the real
success falls, and offline figures cannot show it, because the classifier never saw this policy's states. What a
robot has against it is an operator who labels some of the episodes. So, during training:

  - every training episode is recorded, first to last state, as the reward model reads it;
  - a budgeted share of the finished episodes gets the operator's label (`fraction`: at most one in ten by
    default; labelling every episode would be the simulator's reward again). In sim the scripted labeller answers
    from the simulator's success of the episode, as an operator watching it would;
  - each label is compared with the classifier's claim (it fired, which ended the episode): a claim labelled
    failure is a false success, and its states are hard negatives; a success it missed is a false negative;
  - once labels have disagreed with the classifier, every `refit_every` labels the classifier is fine-tuned on the
    labelled episodes (half of every batch) and on the data it was trained on (the other half: the stores named
    in the model's info, else the run's demos); the caller then relabels its replays with it;
  - the classifier's precision over the last `watch_claims` labelled claims is watched: when most were false,
    the run says so once per stretch (reward hacking) and the caller may roll back (robot_rl/rl/guard.py).

    online = OnlineReward(learned, LabelConfig(), num_envs=16, max_steps=100, original=episodes, seed=0)
    online.start(ids, obs)                          # the first observation of new episodes
    online.push(final_obs)                          # the observation every env's step reached
    online.end(ids, claimed, sim_success)           # episodes that ended: maybe labelled
    for line in online.pop_warnings(): ...          # reward hacking (the claims' precision fell)
    if online.refit_due(): online.refit()           # then relabel the replays (shaping.relabel_replay)

Models that read camera frames or instructions are labelled and watched but not refitted (the replay keeps
neither frames nor instructions to relabel from).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from robot_rl.reward import labels as L
from robot_rl.reward.metrics import threshold_for_tpr

SOURCES = ("scripted", "none")
MIN_DEMO_TPR = 0.05  # a classifier that fires on fewer of the demos' successful endings is refused before RL


class RewardModelRefused(ValueError):
    """The reward model cannot drive RL at all (e.g. its classifier never fires on the demos' successes)."""


@dataclasses.dataclass
class LabelConfig:
    """Operator labels of training episodes and classifier refits (rl.labels.*; reward=learned only)."""

    source: str = "scripted"  # who labels: scripted (sim: the simulator's success of the episode) | none (no labels)
    fraction: float = 0.1  # at most this share of the finished training episodes is labelled
    refit_every: int = 5  # labels between classifier refits once a label disagreed with it (0: never refit)
    refit_steps: int = 300  # gradient steps of one refit
    refit_lr: float = 3e-4  # AdamW learning rate of a refit (cosine decay to 0 over refit_steps)
    refit_batch: int = 256  # states per refit batch: half from labelled episodes, half from the model's data
    max_episodes: int = 400  # labelled episodes kept for refits (the oldest go first)
    watch_claims: int = 10  # the last labelled claims (episodes the classifier ended) that judge its precision
    min_precision: float = 0.5  # below this share of true claims among them the run warns of reward hacking

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"labels.source={self.source!r}; valid: {', '.join(SOURCES)}")
        if not (isinstance(self.fraction, (int, float)) and 0.0 <= self.fraction <= 1.0):
            raise ValueError(f"labels.fraction={self.fraction!r} must be in [0, 1] (share of episodes labelled)")
        for k, lo in (("refit_every", 0), ("refit_steps", 1), ("refit_batch", 2), ("max_episodes", 1),
                      ("watch_claims", 1)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"labels.{k}={v!r} must be a whole number >= {lo}")
        if not self.refit_lr > 0:
            raise ValueError(f"labels.refit_lr={self.refit_lr!r} must be > 0")
        if not 0.0 <= self.min_precision <= 1.0:
            raise ValueError(f"labels.min_precision={self.min_precision!r} must be in [0, 1]")

    @property
    def labels(self) -> bool:
        """Whether any training episode gets a label."""
        return self.source != "none" and self.fraction > 0

    def check_budget(self) -> None:
        """A setting that needs labels with none to be had: one line naming both settings."""
        if self.refit_every and not self.labels:
            why = "labels.source=none" if self.source == "none" else f"labels.fraction={self.fraction:g}"
            raise ValueError(f"rl.{why} gives no operator labels, and rl.labels.refit_every={self.refit_every} refits "
                             "the classifier on labelled episodes: set rl.labels.fraction > 0 (e.g. 0.1) with "
                             "rl.labels.source=scripted, or rl.labels.refit_every=0 (no refits)")


@dataclasses.dataclass
class LabelledEpisode:
    obs: dict  # key -> [T + 1, dim] float32: first to last state
    claimed: bool  # the classifier fired at its last state (and ended it)
    label: bool  # the operator's verdict


class OnlineReward:
    """Records training episodes, labels a budgeted share, watches and refits the classifier of `learned`."""

    def __init__(self, learned, cfg: LabelConfig, num_envs: int, max_steps: int, original=None, seed: int = 0):
        """learned: robot_rl.reward.shaping.LearnedReward (success="classifier"); max_steps: the env's episode
        length; original: robot_rl.reward.episodes.Episodes the model was trained on (None: refits use the
        labelled episodes only)."""
        self.learned, self.cfg = learned, cfg
        spec = learned.model.spec
        self.can_refit = not (spec.image_shapes or spec.instruction)
        self.keys = tuple(spec.obs_dims)
        self.buf = {k: np.zeros((num_envs, max_steps + 2, d), np.float32) for k, d in spec.obs_dims.items()}
        self.length = np.zeros(num_envs, np.int64)  # states recorded in each env's current episode
        self.original = original
        self.rng = np.random.default_rng(seed)
        self.episodes: list[LabelledEpisode] = []
        self.finished = 0  # training episodes ended
        self.credit = 0.0  # labels the budget allows that were not used yet
        self.labelled = 0
        self.counts = {"claimed_true": 0, "claimed_false": 0, "missed_success": 0, "unclaimed_failure": 0}
        self.claims: list[bool] = []  # the operator's verdicts of the last labelled claims
        self.disagreed = False  # a label disagreed with the classifier since the last refit
        self.since_refit = 0
        self.refits = 0
        self.hacking = False  # the current stretch of low precision was reported
        self.warnings: list[str] = []
        self._reported = 0  # warnings pop_warnings() has returned

    # ---- recording ----------------------------------------------------------------------------------
    def start(self, ids, obs: dict) -> None:
        """Episodes that begin in envs `ids` with observations obs[k][ids] ({key: [N, ...]})."""
        ids = np.asarray(ids, np.int64)
        for k in self.keys:
            self.buf[k][ids, 0] = obs[k][ids]
        self.length[ids] = 1

    def push(self, obs: dict) -> None:
        """The observation every env's step reached (before any auto-reset)."""
        i = np.minimum(self.length, self.buf[self.keys[0]].shape[1] - 1) if self.keys else self.length
        for k in self.keys:
            self.buf[k][np.arange(len(i)), i] = obs[k]
        self.length = i + 1

    def end(self, ids, claimed, sim_success) -> None:
        """Episodes of envs `ids` ended: `claimed` [len(ids)] the classifier ended them, `sim_success` the
        simulator's verdict (the scripted labeller's answer). Labels those the budget allows; when the classifier's
        claims turn out mostly false, a warning (once per stretch) waits in pop_warnings()."""
        for j, i in enumerate(np.asarray(ids, np.int64)):
            self.finished += 1
            if not self.cfg.labels:
                continue
            self.credit += self.cfg.fraction
            if self.credit < 1.0 - 1e-9:
                continue
            self.credit -= 1.0
            self._label(int(i), bool(claimed[j]), bool(sim_success[j]))

    def pop_warnings(self) -> list[str]:
        """Warnings since the last call."""
        out, self._reported = self.warnings[self._reported:], len(self.warnings)
        return out

    def _label(self, env: int, claimed: bool, label: bool) -> None:
        self.labelled += 1
        self.since_refit += 1
        key = ("claimed_true" if label else "claimed_false") if claimed else \
            ("missed_success" if label else "unclaimed_failure")
        self.counts[key] += 1
        if claimed != label:
            self.disagreed = True
        if self.can_refit:
            n = int(self.length[env])
            self.episodes.append(LabelledEpisode({k: self.buf[k][env, :n].copy() for k in self.keys}, claimed, label))
            del self.episodes[: max(0, len(self.episodes) - self.cfg.max_episodes)]
        if not claimed:
            return
        self.claims = (self.claims + [label])[-self.cfg.watch_claims:]
        precision = self.precision
        if precision is None or precision >= self.cfg.min_precision:
            self.hacking = False
            return
        if self.hacking:
            return
        self.hacking = True
        false = len(self.claims) - sum(self.claims)
        msg = (f"reward hacking: the operator labelled {false} of the last {len(self.claims)} episodes the success "
               f"classifier ended as failures (precision {precision:.2f} < rl.labels.min_precision="
               f"{self.cfg.min_precision:g}); the policy is finding states where the classifier fires without a "
               "success. " + ("The classifier is refitted on the labelled episodes" if self.refits_enabled else
                              "Refits are off (rl.labels.refit_every=0, or a model that reads cameras / "
                              "instructions)"))
        self.warnings.append(msg)

    @property
    def precision(self) -> float | None:
        """Share of the last labelled claims the operator confirmed (None until `watch_claims` claims are labelled)."""
        if len(self.claims) < self.cfg.watch_claims:
            return None
        return float(np.mean(self.claims))

    # ---- refits -------------------------------------------------------------------------------------
    @property
    def refits_enabled(self) -> bool:
        return bool(self.cfg.refit_every) and self.can_refit and self.cfg.labels

    def refit_due(self) -> bool:
        return self.refits_enabled and self.disagreed and self.since_refit >= self.cfg.refit_every

    def refit(self) -> dict:
        """Fine-tune the success classifier on the labelled episodes and its original data, and calibrate its
        threshold again as it was (the highest that detects min_tpr of the positive states, here those of both);
        returns figures of the refit (the caller relabels its replays)."""
        from robot_rl.reward.train import RewardTrainConfig, _fit

        eps = self.episodes
        ends = np.cumsum([len(e.obs[self.keys[0]]) for e in eps])
        online = {k: np.concatenate([e.obs[k] for e in eps]) for k in self.keys}
        tcfg = RewardTrainConfig()  # the fit's other settings
        *frames, min_tpr = success_frames(self.learned.model)  # positive / gap frames, min_tpr as it was trained
        # every labelled episode ends in the state it ended in (a success state if it succeeded)
        label, used = L.success_targets(ends, np.array([e.label for e in eps]), *frames)
        rows_online = np.nonzero(used)[0]
        obs, target, rows = online, label.astype(np.float32), rows_online
        if self.original is not None:  # the original data, and the labelled states repeated to half of it
            o_label, o_used = L.success_targets(self.original.ends, self.original.success, *frames)
            n0 = len(o_label)
            obs = {k: np.concatenate([self.original.obs[k], online[k]]) for k in self.keys}
            target = np.concatenate([o_label, label]).astype(np.float32)
            repeat = max(1, int(o_used.sum()) // max(len(rows_online), 1))
            rows = np.concatenate([np.nonzero(o_used)[0], np.tile(rows_online + n0, repeat)])
        pos = target[rows] > 0.5
        weight = np.where(pos, (len(rows) - pos.sum()) / max(int(pos.sum()), 1), 1.0)
        cfg = dataclasses.replace(tcfg, steps=self.cfg.refit_steps, batch_size=self.cfg.refit_batch,
                                  lr=self.cfg.refit_lr, log_every=self.cfg.refit_steps)
        model = self.learned.model
        loss = _fit(model.success_net, obs, rows, target[rows], weight, cfg, self.rng, _NoLog(), "refit",
                    set_stats=False)
        positives = np.unique(rows[pos])
        if len(positives):  # nothing to calibrate on (no labelled success, no original data): the threshold stays
            model.threshold = threshold_for_tpr(model.success_prob({k: v[positives] for k, v in obs.items()}),
                                                min_tpr)
        p = model.success_prob({k: online[k] for k in self.keys})
        fired = p >= model.threshold
        episode, _, _ = L.episode_index(ends)
        claimed_false = [e for e, x in enumerate(eps) if x.claimed and not x.label]
        won = [e for e, x in enumerate(eps) if x.label]
        self.refits += 1
        self.since_refit, self.disagreed = 0, False
        return {
            "refit": self.refits, "loss": loss, "labelled_episodes": len(eps),
            # after the refit: the false claims it still fires on, the labelled successes it still detects
            "false_claims_still_firing": (float(np.mean([fired[episode == e].any() for e in claimed_false]))
                                          if claimed_false else None),
            "successes_detected": float(np.mean([fired[ends[e] - 1] for e in won])) if won else None,
            "threshold": model.threshold,
        }

    # ---- reporting and checkpoints ------------------------------------------------------------------
    def summary(self) -> dict:
        return {"training_episodes": self.finished, "labelled": self.labelled, "fraction": self.cfg.fraction,
                "source": self.cfg.source, **self.counts, "claim_precision": self.precision, "refits": self.refits,
                "threshold": self.learned.model.threshold}

    def state(self) -> dict:
        """JSON-able bookkeeping for a checkpoint (the labelled episodes go in `arrays`)."""
        return {"finished": self.finished, "credit": self.credit, "labelled": self.labelled,
                "counts": dict(self.counts), "claims": list(self.claims), "disagreed": self.disagreed,
                "since_refit": self.since_refit, "refits": self.refits, "hacking": self.hacking,
                "warnings": list(self.warnings), "threshold": self.learned.model.threshold,
                "episodes": [{"claimed": e.claimed, "label": e.label, "length": len(e.obs[self.keys[0]])}
                             for e in self.episodes] if self.keys else []}

    def arrays(self) -> dict[str, np.ndarray]:
        """The labelled episodes' states, concatenated per key, and the classifier's weights."""
        out = {f"labelled.{k}": (np.concatenate([e.obs[k] for e in self.episodes]) if self.episodes
                                 else np.zeros((0, self.buf[k].shape[2]), np.float32)) for k in self.keys}
        out.update({f"classifier.{k}": v.detach().cpu().numpy()
                    for k, v in self.learned.model.success_net.state_dict().items()})
        return out

    def load_state(self, state: dict, arrays: dict) -> None:
        import torch

        for k in ("finished", "credit", "labelled", "claims", "disagreed", "since_refit", "refits", "hacking"):
            setattr(self, k, state[k])
        self.counts = dict(state["counts"])
        self.warnings = list(state["warnings"])
        self._reported = len(self.warnings)
        self.learned.model.threshold = float(state["threshold"])
        net = self.learned.model.success_net
        net.load_state_dict({k: torch.as_tensor(arrays[f"classifier.{k}"]) for k in net.state_dict()})
        self.episodes = labelled_episodes(state, arrays, self.keys)


def labelled_episodes(state: dict, arrays: dict, keys) -> list[LabelledEpisode]:
    """The labelled episodes of a checkpoint's OnlineReward.state() and .arrays() (e.g. for scoring classifiers on
    a run's own labelled episodes offline: experiments/classifier_claims.py)."""
    out, start = [], 0
    for e in state["episodes"]:
        n = int(e["length"])
        out.append(LabelledEpisode({k: np.asarray(arrays[f"labelled.{k}"][start:start + n]) for k in keys},
                                   bool(e["claimed"]), bool(e["label"])))
        start += n
    return out


class _NoLog:
    """A refit's training curve is not the run's: its loss is reported once, in the refit's figures."""

    def scalar(self, *args, **kwargs) -> None:
        pass


def original_episodes(model, demo_store=None):
    """The episodes a reward model was trained on (the stores its info names), for refits; the run's demo store
    when those are gone; None when neither can be read (refits then use the labelled episodes alone)."""
    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.reward.episodes import RewardDataError, load_episodes

    paths = [str(p) for p in (model.info.get("data"), model.info.get("rollouts")) if p]
    stores = [EpisodeStore.open(p) for p in paths if Path(p).exists()]
    if not stores and demo_store is not None:
        stores = [demo_store]
    if not stores:
        return None
    try:
        return load_episodes(stores, model.spec, neighbor_keys=None)
    except RewardDataError:
        return None


def success_frames(model) -> tuple[int, int, float]:
    """(positive_frames, gap_frames, min_tpr) the classifier was trained with (robot_rl.reward.train.RewardTrainConfig;
    its defaults for a model saved before they were recorded)."""
    from robot_rl.reward.train import RewardTrainConfig

    d = RewardTrainConfig()
    rec = model.info.get("success_labels") or {}
    return (int(rec.get("positive_frames", d.positive_frames)), int(rec.get("gap_frames", d.gap_frames)),
            float(rec.get("min_tpr", d.min_tpr)))


def check_fires_on_demos(model, episodes, path: str = "the reward model") -> float:
    """The classifier's TPR on successful episodes' endings (it fires on one of the states it was trained to call
    success: the last positive_frames steps, the final observation among them where the store has it);
    RewardModelRefused below MIN_DEMO_TPR, naming the measured TPR. `episodes`: robot_rl.reward.episodes.Episodes
    with successes (e.g. the run's demos)."""
    won = np.nonzero(episodes.success)[0]
    if not len(won):
        return float("nan")
    ends = np.asarray(episodes.ends)
    n = success_frames(model)[0]
    starts = np.concatenate([[0], ends[:-1]])
    ranges = [np.arange(max(ends[e] - n, starts[e]), ends[e]) for e in won]
    rows = np.concatenate(ranges)
    fired = model.success({key: v[rows] for key, v in episodes.obs.items() if key in model.spec.inputs})
    detected = np.zeros(len(won), bool)
    np.logical_or.at(detected, np.repeat(np.arange(len(won)), [len(r) for r in ranges]), fired)
    tpr = float(detected.mean())
    if tpr < MIN_DEMO_TPR:
        raise RewardModelRefused(
            f"the success classifier of {path} fires on {int(detected.sum())} of {len(won)} successful demo "
            f"episodes' endings (TPR {tpr:.2f} < {MIN_DEMO_TPR:g} at its threshold {model.threshold:.3f}): it would "
            "never pay a success. Retrain it with robot-rl-train-reward on these demos and rollouts of the base")
    return tpr
