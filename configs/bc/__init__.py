"""Config groups only robot-rl-train-bc searches (its `policy` group): elsewhere `policy=` is a checkpoint path."""
