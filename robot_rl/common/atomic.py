"""Atomic file writes: readers (and a crash) see the old file or the new one, never a torn one.

Every durable write in the project goes through here: episode-store keys, run-directory files
(config.yaml, metrics.json, latest.json) and checkpoints.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def vacant(path: Path) -> bool:
    """Nothing at `path`, or an empty directory: where a new store, dataset or run directory may go."""
    path = Path(path)
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def atomic_put(path: Path, data, *, fsync: bool = False, exclusive: bool = False, mode: int = 0o666) -> None:
    """Write bytes-like `data` to `path` so readers see the old file or the new one, nothing between (a rename: a
    file or link someone else put at `path` is replaced, never written through). `mode` as for os.open."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    # os.open with 0o666 by default so the umask applies as for any other file (mkstemp would force 0600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)  # FileExistsError if another writer got there first
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def fsync_dir(path: Path) -> None:
    """fsync a file or directory (a directory: so a rename in it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: str | Path, text: str, fsync: bool = True) -> Path:
    """Write text atomically (temp file in the same directory, fsync, rename onto `path`)."""
    path = Path(path)
    atomic_put(path, text.encode(), fsync=fsync)
    return path


def save_figure(fig, path: str | Path, dpi: int = 90) -> Path:
    """Save a matplotlib figure as PNG at `path` atomically (temp file + rename) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp.png")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    os.replace(tmp, path)
    return path
