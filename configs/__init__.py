"""Hydra config tree (YAML), shipped as package data so installed console scripts find it."""
