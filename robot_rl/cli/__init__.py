"""Console scripts, one per verb (robot-rl-<verb>), each a Hydra app over the configs/ tree."""
