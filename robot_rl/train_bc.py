"""Behaviour cloning of a base policy (diffusion, or the VLA) from episode stores: the training workspace.

It owns the loop: windows from the store's sequence sampler -> the policy's loss (DDPM for diffusion, flow
matching for the VLA; camera frames as uint8 windows, the episode's instruction per window) -> AdamW with
warm-up + cosine -> EMA; TensorBoard scalars, periodic evaluation in sim through robot_rl.evaluation,
atomic checkpoints every `ckpt_every` steps (policy + optimizer + schedule + RNG, so a resumed run continues the same
stream of batches), and at the end `policy/` (the EMA policy: what robot-rl-eval and deployment load),
metrics.json and curves.png.

Run directory:
    checkpoints/step_<N>/      full training state (also loadable by load_policy)
    checkpoints/latest.json    {"step": N, "path": "step_<N>"}, replaced atomically after each save
    policy/                    final policy checkpoint
    tb/  metrics.json  curves.png  videos/
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
from robot_rl.common.config import check_whole
from robot_rl.common.run_dir import write_metrics

# Changing any of these between a checkpoint and its resume would silently train another model
# (`steps` may grow: that extends the run).
RESUME_KEYS = ("batch_size", "lr", "weight_decay", "warmup_steps", "seed", "data_weights", "source_weights",
               "intervention_weight", "autonomous_weight", "failed_weight")


@dataclasses.dataclass
class BCConfig:
    """Everything the loop reads besides the env and policy configs (robot-rl-train-bc's top-level keys)."""

    data: str | list  # episode store path (robot-rl-collect out=...), or several to mix: [PATH1, PATH2]
    steps: int = 3000  # gradient steps
    batch_size: int = 256
    lr: float = 3e-4
    weight_decay: float = 1e-6
    warmup_steps: int = 200  # linear warm-up, then cosine decay to 0 at `steps`
    grad_clip: float = 1.0  # max gradient norm
    log_every: int = 50  # steps between TensorBoard scalars
    ckpt_every: int = 500  # steps between checkpoints (and at the end)
    keep_checkpoints: int = 2  # step checkpoints kept on disk
    eval_every: int = 0  # steps between sim evaluations (0: only at the end)
    eval_episodes: int = 50  # episodes per evaluation (batched over env.num_envs)
    eval_seed: int = 1000  # evaluation episodes never share the training data's seeds
    videos: int = 2  # mp4s of the final evaluation's first episodes (<= env.num_envs)
    final_eval: bool = True  # evaluate the final policy in sim (callers that evaluate it themselves turn it off)
    seed: int = 0  # torch / sampler seed
    # Mixing demos and corrections (a window's sampling weight is the product of these):
    data_weights: list | None = None  # share of the batches drawn from each store in `data`; None: by window count
    # per episode source (e.g. source_weights.policy=0 leaves policy rollouts out); a source not named: 1
    source_weights: dict | None = dataclasses.field(default_factory=lambda: {
        "expert": 1.0, "teleop": 1.0, "policy": 1.0, "intervention": 1.0})
    intervention_weight: float = 1.0  # windows anchored at a human step (the corrections themselves)
    autonomous_weight: float = 1.0  # policy-controlled steps of source=intervention episodes, as window anchors and
    # as action steps inside any window's chunk (0: learn only the fixes, never the policy's actions around them)
    failed_weight: float = 1.0  # windows of episodes that did not succeed (0: learn only from successful episodes)
    init: str | None = None  # fine-tune from this checkpoint of the same kind (its architecture and normalization)
    data_mode: str = "memory"  # memory: load the stores' windows once | lazy: read each batch from zarr (stores
    # larger than RAM)
    skip_damaged: bool = False  # train on the intact episodes of a damaged store (robot-rl-data verify lists the
    # damaged ones) instead of refusing it

    def __post_init__(self):
        """Ranges and shapes (types are checked by robot_rl.common.config.from_mapping); ValueError naming the key."""
        from robot_rl.data.episode_store import SOURCES
        from robot_rl.data.sampler import MODES

        if isinstance(self.data, (list, tuple)) and len(self.data) == 1:
            self.data = self.data[0]
        many = isinstance(self.data, (list, tuple)) and self.data and all(isinstance(p, str) and p for p in self.data)
        if not (isinstance(self.data, str) and self.data) and not many:
            raise ValueError("data=PATH (or data=[PATH1,PATH2] to mix stores) must name episode stores "
                             "(robot-rl-collect out=PATH and robot-rl-teleop out=PATH write them)")
        check_whole(self, {"steps": 1, "batch_size": 1, "log_every": 1, "ckpt_every": 1, "keep_checkpoints": 1,
                           "eval_episodes": 1, "warmup_steps": 0, "eval_every": 0, "videos": 0, "seed": 0,
                           "eval_seed": 0})
        for k in ("lr", "grad_clip"):
            if not (_num(getattr(self, k)) and getattr(self, k) > 0):
                raise ValueError(f"{k}={getattr(self, k)!r} must be a number > 0")
        for k in ("weight_decay", "intervention_weight", "autonomous_weight", "failed_weight"):
            if not (_num(getattr(self, k)) and getattr(self, k) >= 0):
                raise ValueError(f"{k}={getattr(self, k)!r} must be a number >= 0")
        n, dw, sw = len(self.paths), self.data_weights, self.source_weights
        if dw is not None and not (isinstance(dw, (list, tuple)) and len(dw) == n
                                   and all(_num(x) and x >= 0 for x in dw) and sum(dw) > 0):
            raise ValueError(f"data_weights={dw!r} must list {n} number(s) >= 0 (one per store in data, not all 0), "
                             "or be null to draw in proportion to each store's windows")
        if sw is not None and (not isinstance(sw, dict) or any(k not in SOURCES or not (_num(v) and v >= 0)
                                                                for k, v in sw.items())):
            raise ValueError(f"source_weights={sw!r} must map episode sources ({', '.join(SOURCES)}) to numbers >= 0")
        if self.init is not None and not (isinstance(self.init, str) and self.init):
            raise ValueError(f"init={self.init!r} must be a policy checkpoint directory (or null to train from "
                             "scratch)")
        if self.data_mode not in MODES:
            raise ValueError(f"data_mode={self.data_mode!r}; valid: {', '.join(MODES)}")

    @property
    def paths(self) -> list[str]:
        return [self.data] if isinstance(self.data, str) else list(self.data)

    @property
    def mixing(self) -> bool:
        """Weighted sampling is needed (else one store, every window equally likely: the plain BC sampler)."""
        return (len(self.paths) > 1 or any(v != 1 for v in (self.source_weights or {}).values())
                or self.intervention_weight != 1 or self.autonomous_weight != 1 or self.failed_weight != 1)


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def resume_config(cfg: "BCConfig", policy_cfg, task: str) -> dict:
    """What a resumed run must share with its checkpoint, as JSON values (device and jit may change)."""
    policy = {k: v for k, v in dataclasses.asdict(policy_cfg).items() if k not in ("device", "jit")}
    data = [str(Path(p).resolve()) for p in cfg.paths]
    out = {"data": data[0] if isinstance(cfg.data, str) else data, "task": task, "policy": policy}
    # The mixing keys join only when used, so plain runs resume checkpoints written before they existed (and
    # failed_weight only when set, for mixing runs written before it).
    out.update({k: getattr(cfg, k) for k in (RESUME_KEYS if cfg.mixing else RESUME_KEYS[:5])
                if k != "failed_weight" or cfg.failed_weight != 1})
    if cfg.init is not None:
        out["init"] = str(Path(cfg.init).resolve())
    return json.loads(json.dumps(out))


ResumeMismatch = checkpoint.ResumeMismatch  # re-exported for the CLI


def load_init(path: str, env, device: str, kind: str = "diffusion", check_env: bool = True):
    """The checkpoint of `kind` to fine-tune, checked against the env (CheckpointError / SpecMismatch / ValueError)."""
    from robot_rl.policies import load_policy

    policy = load_policy(path, device=device)
    if policy.kind != kind:
        raise ValueError(f"init={path} is a {policy.kind!r} policy; policy={kind} fine-tunes {kind!r} checkpoints")
    if check_env:
        policy.spec.check_env(env)
    else:  # no evaluation in sim: only what the env defines for every policy (task, actions, vector observations)
        dataclasses.replace(policy.spec, image_shapes={}, instruction=False).check_env(env)
    return policy


def runtime_fields(cfg, like) -> dict:
    """The fields of policy config `like` that may change between runs (device, jit) and that `cfg` has."""
    names = {f.name for f in dataclasses.fields(cfg)}
    return {k: getattr(like, k) for k in ("device", "jit") if k in names and hasattr(like, k)}


def store_instructions(store) -> np.ndarray:
    """Per-episode instruction strings of a store (object array), each checked (non-empty, not over-long)."""
    from robot_rl.policies.base import check_instructions

    text = np.array([str(x) for x in store.episode_attr("instruction")], dtype=object)
    try:
        uniq = np.unique(text[store.good_episodes])  # a damaged, skipped episode's may be unreadable
        check_instructions(list(uniq), len(uniq))
    except ValueError as e:
        raise ValueError(f"episode store {store.path}: {e} (an episode's instruction attribute; record with a task "
                         "that has instructions)") from None
    return text


def lr_lambda(warmup: int, total: int):
    """LR factor at `step`: linear warm-up (step + 1) / warmup, then a half cosine to 0 at `total`.

    Kept instead of diffusers' get_cosine_schedule_with_warmup: its warm-up is step / warmup, so the first step runs at
    lr 0 and the whole warm-up one step behind ours (reward training, which has no warm-up, uses it); switching would
    change the learning rate of every BC run's first `warmup` steps, and what a checkpoint resumes."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + np.cos(np.pi * min(1.0, progress)))

    return f


def window_success(store, sampler) -> np.ndarray:
    """bool [windows]: the window's episode succeeded."""
    return np.asarray(store.episode_attr("success"), dtype=bool)[sampler.episode]


def window_weights(store, sampler, cfg: BCConfig, share: float | None = None) -> np.ndarray:
    """Sampling weight of every window of `sampler` over `store` (see BCConfig's mixing fields)."""
    per_episode = np.array([str(x) for x in store.episode_attr("source")], dtype=object)  # zarr gives StringDType
    source = per_episode[sampler.episode]
    sw = cfg.source_weights or {}
    w = np.ones(len(source))
    for s in np.unique(source):
        w[source == s] = float(sw.get(s, 1.0))
    human = store.read_rows("intervention", sampler.anchor_step)
    w *= np.where(human, cfg.intervention_weight, np.where(source == "intervention", cfg.autonomous_weight, 1.0))
    w *= np.where(window_success(store, sampler), 1.0, cfg.failed_weight)
    if share is not None:
        if w.sum() <= 0:
            raise ValueError(f"every window of {store.path} has weight 0 (source_weights / intervention weights / "
                             "failed_weight), so its data_weights share cannot be drawn; give it weight or drop it "
                             "from data")
        w *= share / w.sum()
    return w


def correction_step_weights(w: dict, correction_episode: list[np.ndarray], autonomous_weight: float) -> np.ndarray:
    """Loss weight [B, action_horizon] of every action step of sampled windows `w` (with "intervention" among their
    action keys): `autonomous_weight` on policy-controlled steps of source=intervention episodes (per store, per
    episode: `correction_episode`), 1 on human steps and on every step of other episodes."""
    source = w.get("source", np.zeros(len(w["episode"]), np.int64))
    correction = np.zeros(len(source), bool)
    for i in np.unique(source):
        rows = source == i
        correction[rows] = correction_episode[i][w["episode"][rows]]
    human = np.asarray(w["intervention"], bool).reshape(len(source), -1)
    return np.where(correction[:, None] & ~human, autonomous_weight, 1.0).astype(np.float32)


def merged_stats(per_store: list[dict]) -> dict:
    """Normalization stats over several stores' steps (pooled mean / std, overall min / max)."""
    from robot_rl.data.stats import KeyStats

    if len(per_store) == 1:
        return per_store[0]
    out = {}
    for k in per_store[0]:
        parts = [p[k] for p in per_store]
        n = np.array([p.count for p in parts], dtype=np.float64)
        mean = sum(c * p.mean for c, p in zip(n, parts)) / n.sum()
        var = sum(c * (p.std ** 2 + (p.mean - mean) ** 2) for c, p in zip(n, parts)) / n.sum()
        out[k] = KeyStats(min=np.min([p.min for p in parts], axis=0), max=np.max([p.max for p in parts], axis=0),
                          mean=mean, std=np.sqrt(var), count=int(n.sum()))
    return out


def policy_obs_dims(env, policy_cfg) -> dict[str, int]:
    """The vector observations the policy reads: the env's, or those policy.state_keys names (ValueError naming the
    env's keys for one it lacks)."""
    obs_dims = dict(env.obs_dims)
    keys = getattr(policy_cfg, "state_keys", None)
    if keys is None:
        return obs_dims
    unknown = [k for k in keys if k not in obs_dims]
    if unknown:
        raise ValueError(f"policy.state_keys: {unknown} are not observations of task {env.task_name!r} (it has "
                         f"{sorted(obs_dims)})")
    return {k: obs_dims[k] for k in keys}


class BCWorkspace:
    def __init__(self, run_dir: Path, cfg: BCConfig, policy_cfg, env, store):
        from robot_rl.policies import policy_class
        from robot_rl.data.sampler import MixtureSampler, SequenceSampler

        # Seeded before anything random is built (the policy's initial weights): same command, same weights
        torch.manual_seed(cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        stores = list(store) if isinstance(store, (list, tuple)) else [store]
        self.run_dir, self.cfg, self.env = Path(run_dir), cfg, env
        self.ckpt_dir = self.run_dir / "checkpoints"
        kind = policy_cfg.kind
        evaluates = cfg.final_eval or cfg.eval_every > 0
        init = None
        if cfg.init is not None:
            init = load_init(cfg.init, env, policy_cfg.device, kind, check_env=evaluates)
            policy_cfg = dataclasses.replace(init.cfg, **runtime_fields(init.cfg, policy_cfg))
        self.resume_config = resume_config(cfg, policy_cfg, env.task_name)
        obs_dims = policy_obs_dims(env, policy_cfg)
        image_keys = [f"obs/images/{c}" for c in getattr(policy_cfg, "cameras", ())]
        keys = [f"obs/{k}" for k in obs_dims] + ["action"]  # the normalized keys (statistics)
        # Correction windows: the human's flag of every action step, so the policy's own steps inside a window
        # anchored at a human step (before the take-over or after the hand-back) get autonomous_weight
        self.step_weights = cfg.mixing and cfg.autonomous_weight != 1
        action_keys = ("action", "intervention") if self.step_weights else ("action",)
        samplers = [SequenceSampler(s, obs_keys=keys[:-1] + image_keys, action_keys=action_keys,
                                    obs_horizon=policy_cfg.obs_horizon, action_horizon=policy_cfg.pred_horizon,
                                    mode=cfg.data_mode) for s in stores]
        # the episode instruction of every window (policies that read one): per store, per episode
        self.instructions = ([store_instructions(s) for s in stores] if getattr(policy_cfg, "instruction", False)
                             else None)
        self.mixture = None
        if cfg.mixing:
            shares = cfg.data_weights or [None] * len(stores)
            total = sum(shares) if cfg.data_weights else None
            weights = [window_weights(s, sm, cfg, None if sh is None else sh / total)
                       for s, sm, sh in zip(stores, samplers, shares)]
            if not sum(float(w.sum()) for w in weights) > 0:
                raise ValueError(f"every training window has weight 0 under source_weights={cfg.source_weights}, "
                                 f"intervention_weight={cfg.intervention_weight}, autonomous_weight="
                                 f"{cfg.autonomous_weight} and failed_weight={cfg.failed_weight} (with failed_weight=0 "
                                 "the stores need successful episodes: robot-rl-data info lists their success rate)")
            self.sampler = MixtureSampler(samplers, weights)
            # per store, per episode: a source=intervention episode (its policy-controlled steps are down-weighted)
            self.correction_episode = [np.array([str(x) == "intervention" for x in s.episode_attr("source")])
                                       for s in stores]
            human = np.concatenate([s.read_rows("intervention", sm.anchor_step) for s, sm in zip(stores, samplers)])
            mass = self.sampler.weight / self.sampler.weight.sum()
            self.mixture = {
                "windows": [len(sm) for sm in samplers],
                "store_share": [float(mass[a:b].sum()) for a, b in zip(self.sampler.offsets[:-1], self.sampler.offsets[1:])],
                "human_step_share": float(mass[human].sum()),  # expected share of sampled windows at human steps
                "successful_share": float(mass[np.concatenate(  # ... of windows from successful episodes
                    [window_success(s, sm) for s, sm in zip(stores, samplers)])].sum()),
            }
        else:
            self.sampler = samplers[0]
        if init is not None:
            self.policy = init
        else:
            spec = dict(task=env.task_name, obs_dims=obs_dims, action_dim=env.action_dim,
                        action_space=env.action_space.kind, control_hz=env.control_hz, robot=env.robot)
            if image_keys:
                spec["image_shapes"] = {k[4:]: list(stores[0].keys[k].shape) for k in image_keys}
            self.policy = policy_class(kind).from_stats(spec, policy_cfg, merged_stats([s.stats(keys) for s in stores]))
        if evaluates:  # a policy the eval env cannot feed (cameras, instruction) fails now, not after training
            self.policy.spec.check_env(env)
        if self.instructions is not None:  # every instruction fits the text encoder (and is embedded once, now)
            self.policy.text.encode(list(np.unique(np.concatenate(self.instructions))))
        self.opt = torch.optim.AdamW(self.policy.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(cfg.warmup_steps, cfg.steps))
        self.step = 0
        self.train_time = 0.0  # seconds of training over every segment of a resumed run (the checkpoint carries it)
        self.train_time_from_step = 0  # the step train_time counts from: a resumed checkpoint written before it was kept

    # ---- checkpoints --------------------------------------------------------------------------------
    def save(self) -> Path:
        tensors = dict(self.policy.state_tensors())
        tensors.update(self.policy.training_tensors())
        train = {
            "step": self.step,
            "optimizer": checkpoint.flatten(self.opt.state_dict(), "optim", tensors),
            "scheduler": checkpoint.flatten(self.sched.state_dict(), "sched", tensors),
            "ema_step": self.policy.ema.step,
            "numpy_rng": self.rng.bit_generator.state,
            "torch_rng": checkpoint.flatten(torch.get_rng_state(), "torch_rng", tensors),
            "config": self.resume_config,
            "train_time_s": self.train_time,
            "train_time_from_step": self.train_time_from_step,
        }
        return checkpoint.save_training(self.ckpt_dir, self.step, self.policy, tensors, train, self.cfg.keep_checkpoints)

    def try_resume(self) -> bool:
        """Continue from checkpoints/latest.json when present; False when there is nothing to resume."""
        found = checkpoint.load_training(self.ckpt_dir, self.resume_config)
        if found is None:
            return False
        tensors, train = found
        self.policy.ema.model.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("ema.")})
        self.policy.load_training_tensors(tensors)
        self.opt.load_state_dict(checkpoint.unflatten(train["optimizer"], tensors))
        self.sched.load_state_dict(checkpoint.unflatten(train["scheduler"], tensors))
        self.policy.ema.step = int(train["ema_step"])
        self.rng.bit_generator.state = train["numpy_rng"]
        torch.set_rng_state(checkpoint.unflatten(train["torch_rng"], tensors))
        self.step = int(train["step"])
        if "train_time_s" in train:
            self.train_time, self.train_time_from_step = float(train["train_time_s"]), int(train["train_time_from_step"])
        else:  # written before checkpoints kept it: count from here, and say so in metrics.json
            self.train_time, self.train_time_from_step = 0.0, self.step
        return True

    # ---- loop ---------------------------------------------------------------------------------------
    def batch(self) -> tuple[dict, torch.Tensor]:
        w = self.sampler.sample(self.cfg.batch_size, self.rng)
        obs = {k[4:]: torch.from_numpy(w[k]) for k in self.sampler.obs_keys}
        if self.instructions is not None:
            from robot_rl.policies.base import INSTRUCTION

            source = w.get("source", np.zeros(len(w["episode"]), np.int64))
            text = np.empty(len(source), dtype=object)
            for i in np.unique(source):
                rows = source == i
                text[rows] = self.instructions[i][w["episode"][rows]]
            obs[INSTRUCTION] = text
        return obs, torch.from_numpy(w["action"]), self.action_step_weights(w)

    def action_step_weights(self, w: dict) -> torch.Tensor | None:
        """[B, pred_horizon] loss weights of a batch's action steps (None: all 1); see correction_step_weights."""
        if not self.step_weights:
            return None
        return torch.from_numpy(correction_step_weights(w, self.correction_episode, self.cfg.autonomous_weight))

    def train_step(self) -> float:
        obs, action, weight = self.batch()
        loss = self.policy.loss(obs, action) if weight is None else self.policy.loss(obs, action, weight)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"loss is {loss.item()} at step {self.step}; the last good checkpoint is kept in {self.ckpt_dir}"
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.net.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        self.policy.ema.update(self.policy.net)
        self.step += 1
        return float(loss.detach())

    def evaluate(self, videos: int = 0, progress=None) -> dict:
        from robot_rl.evaluation import evaluate_policy

        self.policy.ema.model.eval()
        return evaluate_policy(self.env, self.policy, self.cfg.eval_episodes, seed=self.cfg.eval_seed,
                               videos=videos, video_dir=self.run_dir / "videos", progress=progress)

    def run(self, log, bar=None) -> dict:
        cfg = self.cfg
        task = bar.add_task("bc", total=cfg.steps, completed=self.step) if bar is not None else None
        t0, start, losses = time.perf_counter(), self.step, []
        clock = TrainingClock(self.train_time)  # continues a resumed run's; evaluations excluded
        while self.step < cfg.steps:
            losses.append(self.train_step())
            self.train_time = clock.now()
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                log.scalars({"loss": float(np.mean(losses)), "lr": self.sched.get_last_lr()[0],
                             "steps_per_s": (self.step - start) / (time.perf_counter() - t0)},
                            self.step, prefix="train/")
                losses = []
            if self.step % cfg.ckpt_every == 0 or self.step == cfg.steps:
                self.save()
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                with clock.paused():
                    log.evaluation(self.evaluate(), self.step)
            if task is not None:
                bar.update(task, completed=self.step)
        self.policy.save(self.run_dir / "policy")
        final = None
        if cfg.final_eval:
            final = self.evaluate(videos=cfg.videos)
            log.evaluation(final, self.step)
        return {"final_eval": final, "train_time_s": self.train_time, "steps": self.step,
                "final_loss": log.last("train/loss"), "train_time_from_step": self.train_time_from_step}


def write_results(run_dir: Path, log, result: dict, extra: dict) -> None:
    final = result["final_eval"]
    metrics = {
        **extra,
        "steps": result["steps"],
        "final_loss": result["final_loss"],
        "train_time_s": result["train_time_s"],  # every segment of a resumed run, evaluations excluded
        **({"train_time_from_step": result["train_time_from_step"]} if result.get("train_time_from_step") else {}),
        "history": log.history_json(),
    }
    if final is not None:
        metrics.update(success_rate=final["success_rate"], success_ci95=final["success_ci95"],
                       eval={k: v for k, v in final.items() if k != "episode_ids"},
                       eval_episode_ids=final["episode_ids"])
    write_metrics(run_dir, metrics)
    log.plot(run_dir / "curves.png", ["train/loss", "train/lr", "eval/success_rate"], title=f"BC {extra.get('task', '')}")
