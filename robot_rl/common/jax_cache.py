"""JAX persistent compilation cache, so MJX jit compiles are paid once per machine, not once per run."""

from __future__ import annotations

from pathlib import Path


def default_cache_dir() -> Path:
    """<repo>/.cache/jax for a source checkout (editable install), else <cwd>/.cache/jax."""
    repo = Path(__file__).resolve().parents[2]
    root = repo if (repo / "pyproject.toml").is_file() else Path.cwd()
    return root / ".cache" / "jax"


def enable_compilation_cache(path: str | Path | None = None) -> Path:
    """Point JAX's persistent compilation cache at `path` (default: default_cache_dir()) and cache every compile."""
    import jax  # imported here: CPU-only commands should not pay for importing JAX

    path = Path(path) if path is not None else default_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return path
