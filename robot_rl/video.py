"""MP4 writing of rendered frames (H.264 through PyAV's bundled FFmpeg; no system ffmpeg needed)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def write_mp4(path: str | Path, frames: np.ndarray, fps: float = 20.0) -> Path:
    """Encode frames [T, H, W, 3] uint8 as an H.264 mp4 at `path` (temp file + rename)."""
    import av

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise ValueError(f"frames must be a non-empty uint8 array [T, H, W, 3], got {frames.dtype} {frames.shape}")
    # yuv420p needs even sizes: crop a trailing row / column if needed.
    h, w = frames.shape[1] - frames.shape[1] % 2, frames.shape[2] - frames.shape[2] % 2
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with av.open(str(tmp), mode="w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=int(round(fps)))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f[:h, :w]), format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    os.replace(tmp, path)
    return path


def read_mp4_frames(path: str | Path) -> np.ndarray:
    """Decode an mp4 back to frames [T, H, W, 3] uint8 (for checks and tools)."""
    import av

    with av.open(str(path)) as f:
        return np.stack([fr.to_ndarray(format="rgb24") for fr in f.decode(video=0)])
