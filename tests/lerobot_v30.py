"""A LeRobot v3.0 dataset written directly with pyarrow and av, the way LeRobot 0.4 lays one out (its
lerobot/datasets/utils.py, lerobot_dataset.py, video_utils.py), independent of robot_rl's exporter: import tests
read it (tests/test_lerobot_dataset.py, tests/test_bad_input_table.py)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np

FPS = 10
LENGTHS = (5, 7, 4)
TASKS = ("push the block to the goal", "stack the blocks")
H, W = 16, 24  # H != W: a transposed image would not fit


def frame_image(t: int) -> np.ndarray:
    """Frame t (global) of observation.images.top: smooth colours, uint8 [H, W, 3]."""
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([128 + 100 * np.sin(x / 4 + t / 3), 128 + 90 * np.cos(y / 3 + t / 5),
                     np.full((H, W), 20.0 + 9 * t)], -1).clip(0, 255).astype(np.uint8)


def write_v30(root: Path, nan_in_episode: int | None = None, version: str = "v3.0",
              png: bool = False) -> dict[str, np.ndarray]:
    """Write the dataset at `root`; returns what it holds per frame (all episodes concatenated).

    Episodes 0-1 go to data file-000, episode 2 to file-001; every episode's frames to one mp4 (H.264, yuv444p,
    crf 0: near-lossless) at from_timestamp = the frames before it / FPS, as LeRobot concatenates them. png=True:
    the frames are PNGs in the data files instead (LeRobot's use_videos=False: an HF datasets Image column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    n = sum(LENGTHS)
    values = {
        "observation.state": rng.normal(size=(n, 3)).astype(np.float32),
        "observation.environment_state": rng.normal(size=(n, 2)).astype(np.float32),
        "action": rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        "next.reward": rng.normal(size=n).astype(np.float32),
        "next.done": np.zeros(n, dtype=bool),
        "observation.images.top": np.stack([frame_image(t) for t in range(n)]),
    }
    ends = np.cumsum(LENGTHS)
    values["next.done"][ends - 1] = True
    if nan_in_episode is not None:
        values["observation.state"][ends[nan_in_episode] - 2, 1] = np.nan
    features = {
        "observation.state": {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
        "observation.environment_state": {"dtype": "float32", "shape": [2], "names": None},
        "observation.images.top": {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"],
                                   "info": {"video.height": H, "video.width": W, "video.codec": "h264",
                                            "video.pix_fmt": "yuv444p", "video.is_depth_map": False,
                                            "video.fps": FPS, "video.channels": 3, "has_audio": False}},
        "action": {"dtype": "float32", "shape": [2], "names": ["vx", "vy"]},
        "next.reward": {"dtype": "float32", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    if png:
        features["observation.images.top"] = {"dtype": "image", "shape": [H, W, 3],
                                              "names": ["height", "width", "channels"]}
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    info = {"codebase_version": version, "robot_type": "so100", "total_episodes": len(LENGTHS), "total_frames": n,
            "total_tasks": len(TASKS), "chunks_size": 1000, "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200, "fps": FPS, "splits": {"train": f"0:{len(LENGTHS)}"},
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4", "features": features}
    (root / "meta/info.json").write_text(json.dumps(info, indent=4))

    # meta/tasks.parquet: pandas' DataFrame({"task_index": [...]}, index=[task texts]).to_parquet()
    pandas_meta = {"index_columns": ["__index_level_0__"], "column_indexes": [], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
        {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None}], "pandas_version": "2.3.3"}
    tasks = pa.table({"task_index": pa.array(range(len(TASKS)), pa.int64()), "__index_level_0__": list(TASKS)})
    pq.write_table(tasks.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}), root / "meta/tasks.parquet")

    if not png:
        _write_video(root / "videos/observation.images.top/chunk-000/file-000.mp4", values["observation.images.top"])

    episode_rows, start = [], 0
    for e, length in enumerate(LENGTHS):
        file = 0 if e < 2 else 1
        task = e % len(TASKS)
        rows = slice(start, start + length)
        table = {
            "observation.state": _fixed(values["observation.state"][rows], pa),
            "observation.environment_state": _fixed(values["observation.environment_state"][rows], pa),
            "action": _fixed(values["action"][rows], pa),
            "next.reward": pa.array(values["next.reward"][rows]),
            "next.done": pa.array(values["next.done"][rows]),
            "timestamp": pa.array((np.arange(length) / FPS).astype(np.float32)),
            "frame_index": pa.array(np.arange(length, dtype=np.int64)),
            "episode_index": pa.array(np.full(length, e, dtype=np.int64)),
            "index": pa.array(np.arange(start, start + length, dtype=np.int64)),
            "task_index": pa.array(np.full(length, task, dtype=np.int64)),
        }
        if png:
            table["observation.images.top"] = pa.array([{"bytes": _png(img), "path": None}
                                                        for img in values["observation.images.top"][rows]])
        path = root / f"data/chunk-000/file-{file:03d}.parquet"
        part = pa.table(table)
        old = pq.read_table(path) if path.exists() else None
        pq.write_table(pa.concat_tables([old, part]) if old is not None else part, path)
        episode_rows.append({
            "episode_index": e, "tasks": [TASKS[task]], "length": length, "data/chunk_index": 0, "data/file_index": file,
            "dataset_from_index": start, "dataset_to_index": start + length,
            "videos/observation.images.top/chunk_index": 0, "videos/observation.images.top/file_index": 0,
            "videos/observation.images.top/from_timestamp": start / FPS,
            "videos/observation.images.top/to_timestamp": (start + length) / FPS,
            "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
            "stats/action/min": values["action"][rows].min(0).tolist(),
        })
        start += length
    pq.write_table(pa.Table.from_pylist(episode_rows), root / "meta/episodes/chunk-000/file-000.parquet")
    return values


def _write_video(path: Path, frames: np.ndarray) -> None:
    import av

    path.parent.mkdir(parents=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("h264", rate=FPS, options={"crf": "0", "g": "2"})
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv444p"
        for t, img in enumerate(frames):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = t, Fraction(1, FPS)
            out.mux(stream.encode(f))
        out.mux(stream.encode())


def _png(img: np.ndarray) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(img).save(out, format="PNG")
    return out.getvalue()


def _fixed(a: np.ndarray, pa):
    return pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[1])
