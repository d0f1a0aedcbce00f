"""Our keys and LeRobot's feature names, one table for LeRobot datasets (lerobot_dataset.py) and policies (external.py).

    ours (episode store / observation)              LeRobot feature
    obs/<key>, the vector keys in `state_keys`      observation.state, concatenated in that order; its names
      order (default: every vector key, sorted)       "<key>.<i>" record the split, so an import splits it back
    obs/images/<camera> uint8 [H, W, 3]             observation.images.<camera> (`cameras` renames), an mp4 video
    action                                          action
    reward, terminated, truncated, success          next.reward, next.terminated, next.truncated, next.success
    intervention, progress                          complementary_info.is_intervention, complementary_info.progress
    any other key, e.g. obs/foo                     complementary_info.obs.foo ("/" becomes ".")
    terminated or truncated                         next.done: LeRobot's own done flag, written on export; an import
                                                      takes terminated from it when a dataset has no next.terminated

An import reads the table backwards; a foreign dataset's other observation.<x> features become obs/<x>.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

STATE = "observation.state"
IMAGE_PREFIX = "observation.images."
OBS_PREFIX = "observation."
EXTRA_PREFIX = "complementary_info."
DONE = "next.done"
# Per-step keys of our recorder (robot_rl/data/recorder.py) -> LeRobot's names (lerobot.utils.constants, gym_manipulator).
STEP_FEATURES = {
    "action": "action",
    "reward": "next.reward",
    "terminated": "next.terminated",
    "truncated": "next.truncated",
    "success": "next.success",
    "intervention": EXTRA_PREFIX + "is_intervention",
    "progress": EXTRA_PREFIX + "progress",
}


def camera_name(key: str) -> str:
    """Our camera name of `key`: "front" for "front", "images/front" or "obs/images/front"."""
    for prefix in ("obs/images/", "images/"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def image_feature(name: str) -> str:
    """LeRobot's image key: "observation.images.top" for "top" or "observation.images.top"."""
    return name if name.startswith(OBS_PREFIX) else IMAGE_PREFIX + name


def extra_feature(key: str) -> str:
    """The LeRobot feature of a store key outside the table: complementary_info.<key, "/" as ".">."""
    return EXTRA_PREFIX + key.replace("/", ".")


@dataclasses.dataclass
class DatasetKeys:
    """Which store keys become which LeRobot features (export-lerobot) and back (import-lerobot); ours -> theirs.

    A JSON file with these fields is read by `robot-rl-data {export,import}-lerobot --keys FILE`."""

    state_keys: tuple[str, ...] | None = None  # our vector obs keys in observation.state, in order; None: every one,
    # sorted (export) / the split recorded in observation.state's names, else all of it as obs/state (import)
    cameras: dict[str, str] | None = None  # our camera -> their image key; None: every camera, same name
    features: dict[str, str] | None = None  # other per-step keys -> their feature; None: every key, by the table
    # above. Given, it is the whole list: keys it leaves out are not exported / imported.

    def __post_init__(self):
        if self.state_keys is not None:
            self.state_keys = tuple(k[len("obs/"):] if k.startswith("obs/") else k for k in self.state_keys)
            if len(set(self.state_keys)) != len(self.state_keys):
                raise ValueError(f"state_keys={list(self.state_keys)} names a key twice")
        if self.cameras is not None:
            self.cameras = {camera_name(c): image_feature(v) for c, v in self.cameras.items()}
        if self.features is not None:
            self.features = dict(self.features)
        theirs = [*(self.cameras or {}).values(), *(self.features or {}).values()]
        twice = sorted({t for t in theirs if theirs.count(t) > 1} | ({STATE} & set(theirs)))
        if twice:
            raise ValueError(f"LeRobot feature(s) {twice} are mapped from two keys (observation.state is state_keys')")

    @classmethod
    def load(cls, path: str | Path) -> "DatasetKeys":
        """The mapping in JSON file `path`; ValueError (ConfigError) naming the file and the bad key."""
        from robot_rl.common.config import from_mapping

        try:
            node = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"--keys {path}: cannot read a JSON object ({e})") from None
        try:
            return from_mapping(cls, node, "keys")
        except ValueError as e:
            raise ValueError(f"--keys {path}: {e}") from None
