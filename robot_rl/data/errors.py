"""Errors of the episode store and its readers: each message names the path or key, the problem and the fix."""


class StoreError(Exception):
    """An episode store is missing or malformed, or was given bad input."""


class StoreLockedError(StoreError):
    """Another writer holds the store's lock."""


class DamagedStoreError(StoreError):
    """Chunks of committed episodes are missing or fail their checksum (robot_rl.data.integrity)."""
