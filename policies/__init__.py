"""Base policies: the BasePolicy interface, its runner, the diffusion policy, the VLA and adapters.

One factory maps checkpoint kinds to classes: `load_policy(path)` reads `config.json`'s "kind" and
hands the checkpoint to that class. Classes are imported lazily so that loading one policy does not
import every model family.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from robot_rl.policies.base import BasePolicy, PolicySpec, SpecMismatch

# kind -> "module:Class"
REGISTRY = {
    "diffusion": "robot_rl.policies.diffusion.policy:DiffusionPolicy",
    "vla": "robot_rl.policies.vla.policy:VLAPolicy",
    "lerobot": "robot_rl.policies.external:LeRobotPolicy",
    "residual": "robot_rl.policies.residual:ResidualPolicy",
}


def policy_class(kind: str) -> type[BasePolicy]:
    if kind not in REGISTRY:
        raise ValueError(f"unknown policy kind {kind!r}; known kinds: {', '.join(sorted(REGISTRY))}")
    module, name = REGISTRY[kind].split(":")
    return getattr(importlib.import_module(module), name)


def load_policy(path: str | Path, device: str = "cpu") -> BasePolicy:
    """Load any saved BasePolicy checkpoint directory onto `device`."""
    from robot_rl.common import checkpoint

    tensors, cfg = checkpoint.load(path, device=device)
    kind = cfg.get("kind")
    if not isinstance(kind, str) or kind not in REGISTRY or "spec" not in cfg:
        raise checkpoint.CheckpointError(
            f"checkpoint {Path(path) / checkpoint.CONFIG} names no known policy kind (got {kind!r}; "
            f"known: {', '.join(sorted(REGISTRY))})"
        )
    try:
        spec = PolicySpec.from_dict(cfg["spec"])
    except (TypeError, KeyError, AttributeError, ValueError) as e:
        raise checkpoint.CheckpointError(f"checkpoint {Path(path) / checkpoint.CONFIG} has a malformed spec ({e})") from None
    try:
        return policy_class(kind).from_checkpoint(tensors, cfg.get("config", {}), spec, device)
    except (SpecMismatch, checkpoint.CheckpointError):
        raise
    except (ValueError, TypeError, KeyError) as e:  # a config value of the wrong name, type or range (ConfigError)
        why = f"it lacks {e.args[0]!r}" if isinstance(e, KeyError) else (str(e).splitlines() or [type(e).__name__])[0]
        raise checkpoint.CheckpointError(
            f"checkpoint {Path(path) / checkpoint.CONFIG} does not describe a loadable {kind} policy: {why}") from None


__all__ = ["BasePolicy", "PolicySpec", "SpecMismatch", "REGISTRY", "load_policy", "policy_class"]
