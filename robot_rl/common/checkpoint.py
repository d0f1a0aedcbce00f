"""Checkpoints: a directory with `model.safetensors` (tensors) and `config.json` (everything else).

Written atomically: both files go into a temporary sibling directory (fsynced), which is then renamed onto
the target, so a reader or a crash never sees half a checkpoint. Nothing is ever unpickled: tensors come
from safetensors, the rest from JSON.

Nested state (optimizer state dicts, RNG states, ...) is stored with `flatten`: every tensor leaf moves
into the safetensors file under a dotted key and is replaced by {"__tensor__": key} in the JSON tree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.common.atomic import fsync_dir

TENSORS = "model.safetensors"
CONFIG = "config.json"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupted or does not fit; the message names the file and the problem."""


def flatten(tree: Any, prefix: str, tensors: dict) -> Any:
    """JSON-able copy of `tree` with torch tensors / numpy arrays moved into `tensors` under dotted keys."""
    import torch

    if isinstance(tree, torch.Tensor):
        tensors[prefix] = tree.detach().cpu().contiguous()
        return {"__tensor__": prefix}
    if isinstance(tree, np.ndarray):
        tensors[prefix] = torch.from_numpy(np.ascontiguousarray(tree))
        return {"__tensor__": prefix, "numpy": True}
    if isinstance(tree, dict):
        # JSON keys are strings: remember int keys (torch optimizer state is keyed by param index).
        out = {str(k): flatten(v, f"{prefix}.{k}", tensors) for k, v in tree.items()}
        int_keys = [str(k) for k in tree if isinstance(k, int)]
        return {"__dict__": out, "int_keys": int_keys} if int_keys else out
    if isinstance(tree, (list, tuple)):
        return [flatten(v, f"{prefix}.{i}", tensors) for i, v in enumerate(tree)]
    if isinstance(tree, (np.integer, np.floating, np.bool_)):
        return tree.item()
    return tree


def unflatten(tree: Any, tensors: dict) -> Any:
    """Inverse of `flatten`."""
    if isinstance(tree, dict):
        if "__tensor__" in tree:
            t = tensors[tree["__tensor__"]]
            return t.numpy() if tree.get("numpy") else t
        if "__dict__" in tree:
            ints = set(tree["int_keys"])
            return {(int(k) if k in ints else k): unflatten(v, tensors) for k, v in tree["__dict__"].items()}
        return {k: unflatten(v, tensors) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unflatten(v, tensors) for v in tree]
    return tree


def save(path: str | Path, tensors: dict, config: dict) -> Path:
    """Write a checkpoint directory atomically (replacing an existing one at `path`)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / TENSORS))
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        for name in (TENSORS, CONFIG):
            fsync_dir(tmp / name)
        fsync_dir(tmp)
        if path.exists():
            # Two renames: the old checkpoint stays complete until the new one is in place.
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load(path: str | Path, device: str = "cpu") -> tuple[dict, dict]:
    """(tensors, config) of a checkpoint directory, with one clear error for each way it can be broken."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist; pass the directory written by save()/training")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is not a directory; a checkpoint is a directory with {TENSORS} and {CONFIG}")
    for name in (TENSORS, CONFIG):
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path} is missing {name}; it is incomplete or not a checkpoint")
    try:
        config = json.loads((path / CONFIG).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint file {path / CONFIG} is corrupted (not valid JSON: {e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"checkpoint file {path / CONFIG} is corrupted (expected a JSON object)")
    try:
        tensors = load_file(str(path / TENSORS), device=device)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint file {path / TENSORS} is corrupted ({e})") from None
    return tensors, config


# ---- training checkpoints: checkpoints/step_<N>/ + latest.json, shared by every training workspace ----------
class ResumeMismatch(ValueError):
    """The run directory's checkpoint was trained with another config; names the differing keys."""


def differing(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two nested dicts, as 'key (old -> new)'."""
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) and isinstance(y, dict):
            out += differing(x, y, f"{prefix}{k}.")
        elif x != y:
            out.append(f"{prefix}{k} ({x!r} -> {y!r})")
    return out


def save_training(ckpt_dir: Path, step: int, policy, tensors: dict, train: dict, keep: int, width: int = 7) -> Path:
    """Write checkpoints/step_<step>/ (the policy plus its training state `train`), point latest.json at it,
    and keep the newest `keep` step checkpoints."""
    from robot_rl.common.atomic import atomic_write_text

    ckpt_dir = Path(ckpt_dir)
    cfg = {"kind": policy.kind, "spec": policy.spec.to_dict(), "config": policy.config(), "train": train}
    path = save(ckpt_dir / f"step_{step:0{width}d}", tensors, cfg)
    atomic_write_text(ckpt_dir / "latest.json", json.dumps({"step": step, "path": path.name}) + "\n")
    old = sorted(p for p in ckpt_dir.glob("step_*") if p.is_dir() and p != path)
    for p in old[: max(0, len(old) - (keep - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return path


class _Entries(dict):
    """A mapping read from a checkpoint; an entry it lacks is a CheckpointError naming the file, not a KeyError."""

    def __init__(self, entries: dict, path: Path, missing: str):
        super().__init__(entries)
        self.path, self.missing = path, missing  # missing: the message, with {key}

    def __missing__(self, key):
        raise CheckpointError(self.missing.format(key=repr(key)))


def _training_state(state: dict, path: Path) -> _Entries:
    return _Entries(state, path, f"checkpoint {path / CONFIG} holds no {{key}} in its training state; it is "
                                 "incomplete or was written by another trainer: start a new run directory")


def _tensors(tensors: dict, path: Path) -> _Entries:
    return _Entries(tensors, path, f"checkpoint {path / TENSORS} lacks tensor {{key}} of its training state; it is "
                                   "incomplete: start a new run directory")


def remove_leftovers(ckpt_dir: Path) -> list[str]:
    """Delete what an interrupted save left in ckpt_dir (.step_<N>.*.tmp directories, .step_<N>.old-<pid> ones,
    .latest.json.*.tmp files); the names removed. Call it only while holding the run directory."""
    ckpt_dir = Path(ckpt_dir)
    removed = []
    if not ckpt_dir.is_dir():
        return removed
    for p in ckpt_dir.iterdir():
        if p.name.startswith(".") and (p.name.endswith(".tmp") or ".old-" in p.name):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p.name)
    return sorted(removed)


def has_training_checkpoint(run_dir: Path) -> bool:
    """A training run directory (BC, residual RL) holds a checkpoint its trainer can resume from."""
    return (Path(run_dir) / "checkpoints" / "latest.json").is_file()


def latest_path(ckpt_dir: Path) -> Path | None:
    """The checkpoint directory checkpoints/latest.json names (None: no latest.json). CheckpointError when the file
    is not what save_training writes, or names anything but a step_<N> directory inside ckpt_dir."""
    ckpt_dir = Path(ckpt_dir)
    latest = ckpt_dir / "latest.json"
    if not latest.is_file():
        return None
    want = 'expected {"step": N, "path": "step_<N>"}'
    try:
        found = json.loads(latest.read_text())
        name = found["path"]
    except (ValueError, UnicodeDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{latest} is corrupted ({want}; {type(e).__name__}); point it at one of the step_<N> "
                              f"directories in {ckpt_dir}, or start a new run directory") from None
    if not (isinstance(name, str) and re.fullmatch(r"step_\d+", name)
            and (ckpt_dir / name).resolve().parent == ckpt_dir.resolve()):  # nor a link out of it
        raise CheckpointError(f"{latest} names {name!r}; it may only name a step_<N> directory inside {ckpt_dir} "
                              f"({want})")
    return ckpt_dir / name


def load_training(ckpt_dir: Path, resume_config: dict) -> tuple[dict, dict] | None:
    """(tensors, train state) of checkpoints/latest.json, None when there is nothing to resume; refuses a
    checkpoint trained with a different `resume_config`, naming the keys. Removes an interrupted save's temp files
    first (the caller holds the run directory). A missing entry of either is a CheckpointError."""
    remove_leftovers(ckpt_dir)
    path = latest_path(ckpt_dir)
    if path is None:
        return None
    tensors, cfg = load(path)
    train = cfg.get("train")
    if not isinstance(train, dict):
        raise CheckpointError(f"{path} holds no training state; it cannot be resumed")
    train = _training_state(train, path)
    if not isinstance(train["config"], dict):
        raise CheckpointError(f"checkpoint {path / CONFIG}: its training state's config is not a mapping")
    diff = differing(train["config"], resume_config)
    if diff:
        raise ResumeMismatch(
            f"cannot resume {path}: it was trained with a different config for {', '.join(diff)}; "
            "start a new run directory or restore those values"
        )
    return _tensors(tensors, path), train
