"""robot-rl-eval sweep=robustness: the robustness report card of one policy or several (robot_rl/robustness.py).

    robot-rl-eval sweep=robustness policy=expert task=lift
    robot-rl-eval sweep=robustness task=lift sweep.episodes=100 \\
        policy="{expert: expert, BC: runs/train_bc/<run>/policy, BC+residual: runs/train_residual/<run>/policy}"

Writes runs/eval/<timestamp>-<name>/{config.yaml, metrics.json, robustness.json, robustness.md, robustness.png,
robustness.html}. Every policy loads and every level is checked before anything is written.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from robot_rl.common.cli import fail, or_fail, progress_bar, whole
from robot_rl.cli.common import env_config, make_env, set_torch_threads
from robot_rl.common.run_dir import current_run_dir, write_config, write_metrics

# robot-rl-eval keys of a single evaluation that the card does not read, and what to give instead
NOT_READ = {
    "episodes": "give sweep.episodes=N (episodes per level and policy) instead",
    "videos": "the card records no videos; drop it",
    "camera": "the card records no videos; drop it",
    "video_size": "the card records no videos; drop it",
}
USAGE = ("policy= takes a checkpoint directory or expert, a list of them (policy=[expert,PATH]) or labelled ones "
         '(policy="{expert: expert, BC: PATH}")')


def policy_sources(value) -> dict[str, str]:
    """{label: checkpoint directory or "expert"} from policy=PATH | [PATH, ...] | {label: PATH}."""
    if isinstance(value, DictConfig):
        value = OmegaConf.to_container(value)
        pairs = list(value.items())
    elif isinstance(value, ListConfig):
        pairs = [(None, v) for v in OmegaConf.to_container(value)]
    else:
        pairs = [(None, value)]
    if not pairs:
        fail(f"policy={value!r} names no policy; {USAGE}")
    out: dict[str, str] = {}
    for label, src in pairs:
        if not isinstance(src, str) or not src or (label is not None and not str(label)):
            fail(f"policy: {src!r} is not a checkpoint directory or expert; {USAGE}")
        label = str(label) if label is not None else _label(src)
        if label in out:
            fail(f"policy: two policies would both be labelled {label!r} ({out[label]}, {src}); label them: "
                 f'policy="{{a: {out[label]}, b: {src}}}"')
        out[label] = src
    return out


def _label(src: str) -> str:
    """A checkpoint's label: its run directory's name (runs/train_bc/<run>/policy -> <run>)."""
    p = Path(src.rstrip("/"))
    return src if src == "expert" else (p.parent.name if p.name == "policy" and p.parent.name else p.name)


def _refuse_single_eval_keys() -> None:
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    for o in HydraConfig.get().overrides.task:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in NOT_READ:
            fail(f"{key}= is a setting of a single evaluation, not read by sweep=robustness: {NOT_READ[key]}")


def run(cfg: DictConfig) -> None:
    from robot_rl import robustness as rb
    from robot_rl.cli.eval import load
    from robot_rl.common.config import ConfigError, from_mapping
    from robot_rl.evaluation import evaluate_policy

    _refuse_single_eval_keys()
    env_cfg = env_config(cfg.env)
    if env_cfg.backend == "gymnasium":
        fail("sweep=robustness varies our tasks' physics, latency, noise and visuals (env.randomization); a gymnasium "
             "env has none of them to vary: evaluate it without sweep=")
    seed = whole("seed", cfg.seed, 0)
    sources = policy_sources(cfg.policy)
    sweep_cfg = or_fail(from_mapping, rb.RobustnessConfig, cfg.sweep, "sweep", errors=(ConfigError,))
    set_torch_threads(whole("torch_threads", cfg.torch_threads, 0))
    run_dir = current_run_dir()

    t0 = time.perf_counter()
    env = make_env(env_cfg)
    try:  # every policy loads and matches the env before anything is written
        cameras = {label: bool(load(src, env, cfg).spec.image_shapes) for label, src in sources.items()}
    finally:
        env.close()
    levels = or_fail(rb.plan, sweep_cfg, env_cfg.randomization, any(cameras.values()), errors=(ConfigError,))

    def applies(label: str, factor) -> bool:
        return cameras[label] or not factor.cameras

    write_config(run_dir, cfg)  # the policies loaded and the levels are valid: the run is on
    episodes = sweep_cfg.episodes
    total = rb.episodes_to_run(levels, list(sources), episodes, applies)
    current: dict = {}  # the env of the level being evaluated, shared by the policies

    def evaluate(label: str, randomization) -> dict:
        if current.get("randomization") != randomization:
            if "env" in current:
                current.pop("env").close()
            current["env"] = make_env(dataclasses.replace(env_cfg, randomization=randomization))
            current["randomization"] = randomization
        env = current["env"]
        policy = load(sources[label], env, cfg)  # loaded afresh: each level starts from the same policy state
        bar.update(task, description=f"{label[:24]}")
        return evaluate_policy(env, policy, episodes, seed=seed, progress=lambda n: bar.advance(task, n))

    try:
        with progress_bar() as bar:
            task = bar.add_task("robustness", total=total)
            records = rb.sweep(levels, list(sources), evaluate, applies)
    finally:
        if "env" in current:
            current["env"].close()

    from hydra.core.hydra_config import HydraConfig

    choice = HydraConfig.get().runtime.choices.get("randomization") if HydraConfig.initialized() else None
    nominal = not env_cfg.randomization.overrides()
    meta = {"task": env_cfg.task_name, "backend": env_cfg.backend, "num_envs": env_cfg.num_envs, "episodes": episodes,
            "seed": seed, "randomization": "nominal" if nominal else (choice or "custom"),
            "base_randomization": dataclasses.asdict(env_cfg.randomization), "expert_noise": cfg.expert_noise,
            "generated": time.strftime("%Y-%m-%d %H:%M:%S")}
    card = rb.card(records, levels, sources, meta)
    files = rb.write_card(run_dir, card)
    write_metrics(run_dir, {"sweep": "robustness", "task": env_cfg.task_name, "policies": sources,
                            "episodes_run": total,
                            "wall_time_s": time.perf_counter() - t0, "card": {k: p.name for k, p in files.items()}})
    rows, header = rb.table(card)
    width = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, width)).rstrip())
    print(f"card: {files['html']} (table {files['md'].name}, figure {files['png'].name}, data {files['json'].name})")
    print(f"run dir: {run_dir}")
