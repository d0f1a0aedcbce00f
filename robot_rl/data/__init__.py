"""Episode data: the zarr episode store, normalization statistics, sequence sampling, collection."""

from robot_rl.data.episode_store import SOURCES, Episode, EpisodeStore, KeySpec
from robot_rl.data.errors import DamagedStoreError, StoreError, StoreLockedError
from robot_rl.data.sampler import SequenceSampler
from robot_rl.data.stats import KeyStats

# WindowDataset (robot_rl.data.torch_dataset) is not imported here, so `import robot_rl.data` needs no torch.
__all__ = ["SOURCES", "DamagedStoreError", "Episode", "EpisodeStore", "KeySpec", "KeyStats", "SequenceSampler",
           "StoreError", "StoreLockedError"]
