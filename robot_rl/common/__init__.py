"""What every layer uses, below all of them: atomic writes, checkpoints, run directories and run logs, config
conversion, CLI errors, JAX's compilation cache. Imports nothing of ours (the layers contract checks it)."""
