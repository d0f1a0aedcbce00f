"""LeRobot datasets (the v3.0 layout of LeRobot >= 0.4) to and from the episode store, on local directories.

    robot-rl-data export-lerobot STORE OUT     every intact episode of STORE into a new LeRobot dataset OUT
    robot-rl-data import-lerobot DIR OUT       every episode of the LeRobot dataset DIR into a new store OUT

The layout, as LeRobot writes it (lerobot/datasets/utils.py, lerobot_dataset.py, video_utils.py):

    meta/info.json                  codebase_version "v3.0", fps, features {name: {dtype, shape, names[, info]}},
                                    totals, chunks_size, *_files_size_in_mb, data_path / video_path templates
    meta/stats.json                 per feature: min, max, mean, std, count, q01 q10 q50 q90 q99 (images: per
                                    channel of pixels / 255, shape [3, 1, 1])
    meta/tasks.parquet              task_index, indexed by the task text (a pandas index)
    meta/episodes/chunk-000/file-000.parquet   one row per episode: episode_index, tasks, length,
                                    dataset_from_index / dataset_to_index, data/{chunk,file}_index,
                                    videos/<key>/{chunk_index, file_index, from_timestamp, to_timestamp},
                                    meta/episodes/{chunk,file}_index, stats/<feature>/<stat>
    data/chunk-XXX/file-XXX.parquet one row per frame: the non-video features, timestamp, frame_index,
                                    episode_index, index (global), task_index; a new file past 100 MB
    videos/<key>/chunk-XXX/file-XXX.mp4   the frames of consecutive episodes; episode e is its frames in
                                    [from_timestamp, to_timestamp); a new file past 200 MB

Keys map as robot_rl/data/lerobot_keys.py says. LeRobot has no field for our task name, source, success, seed and
metadata: they ride along as robot_rl/* columns of meta/episodes (LeRobot keeps and ignores extra columns), so a
round trip gives them back. A foreign dataset's episodes get the task given to the import (default: the dataset's
directory name), source teleop, success from next.success (else the --success given), seed -1, and metadata naming
the dataset and episode; the instruction is the episode's LeRobot task text.

Images go through a video codec, lossy by default: LeRobot's own settings (AV1 by SVT-AV1, crf 30, yuv420p, a
keyframe every 2 frames). `VideoOptions(vcodec="h264", crf=0, pix_fmt="yuv444p")` is near-lossless (the RGB <->
YUV rounding only). Every other value is copied exactly. Both directions write into a temp directory beside OUT
and rename it at the end: OUT appears whole or not at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from robot_rl.common.atomic import vacant
from robot_rl.data.episode_store import INTERVENTION, SOURCES, Episode, EpisodeStore, KeySpec, building
from robot_rl.data.errors import StoreError
from robot_rl.data.lerobot_keys import (
    DONE, EXTRA_PREFIX, IMAGE_PREFIX, OBS_PREFIX, STATE, STEP_FEATURES, DatasetKeys, extra_feature, image_feature,
)

CODEBASE_VERSION = "v3.0"
EXTRA = "pip install 'robot_rl[lerobot-data]'"  # pyarrow
CHUNKS_SIZE = 1000  # files per chunk directory (LeRobot's DEFAULT_CHUNK_SIZE)
DATA_FILE_MB = 100  # a new data / video file once the current one holds this much (LeRobot's defaults)
VIDEO_FILE_MB = 200
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
# Per-frame bookkeeping columns every LeRobot dataset has (LeRobot's DEFAULT_FEATURES).
FRAME_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)  # LeRobot's DEFAULT_QUANTILES: stats q01 ... q99
IMAGE_STATS_FRAMES, IMAGE_STATS_SIDE = 100, 150  # image stats from a sample of frames and pixels (_image_stats)
ATTRS = "robot_rl/"  # meta/episodes columns holding our per-episode attributes
V21_FIX = ("convert it to v3.0 with LeRobot first: python -m lerobot.datasets.v30.convert_dataset_v21_to_v30 "
           "--repo-id=<id> --root=<dir> --push-to-hub=false")


class LeRobotError(StoreError):
    """A LeRobot dataset directory is missing, malformed, or does not fit the key mapping; names the fix."""


@dataclasses.dataclass
class VideoOptions:
    """How export-lerobot encodes image keys (LeRobot's encode_video_frames defaults)."""

    vcodec: str = "libsvtav1"  # libsvtav1 (AV1, LeRobot's default) | h264 | hevc
    crf: int = 30  # quality: 0 = best; LeRobot's default 30 is lossy
    pix_fmt: str = "yuv420p"  # yuv420p (LeRobot's default; halves colour resolution) | yuv444p (h264 / hevc only)
    g: int = 2  # a keyframe every g frames: cheap random access to any frame

    def __post_init__(self):
        if self.vcodec not in ("libsvtav1", "h264", "hevc"):
            raise ValueError(f"vcodec={self.vcodec!r}; valid: libsvtav1, h264, hevc (LeRobot's software encoders)")
        if self.pix_fmt not in ("yuv420p", "yuv444p"):
            raise ValueError(f"pix_fmt={self.pix_fmt!r}; valid: yuv420p, yuv444p")
        if self.pix_fmt == "yuv444p" and self.vcodec != "h264":
            raise ValueError(f"pix_fmt=yuv444p needs vcodec=h264 (LeRobot falls back to yuv420p with {self.vcodec})")
        if not (isinstance(self.crf, int) and 0 <= self.crf <= 51):
            raise ValueError(f"crf={self.crf!r} must be a whole number in [0, 51]")
        if not (isinstance(self.g, int) and self.g >= 1):
            raise ValueError(f"g={self.g!r} must be a whole number >= 1")


def _arrow():
    try:
        import pyarrow as pa
        import pyarrow.compute  # noqa: F401  (pa.compute)
        import pyarrow.parquet as pq
    except ImportError:
        raise LeRobotError(f"LeRobot datasets are parquet files, which need pyarrow: {EXTRA}") from None
    return pa, pq


# ---- key plans --------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Column:
    """One LeRobot feature and the store keys it holds."""

    feature: str
    kind: str  # state | video | image (PNGs in parquet, import only) | value (one store key)
    keys: list[str]  # store keys (a state: several, concatenated in order)
    sizes: list[int]  # per key: its width in the feature (state), else [prod(shape)]
    dtype: str
    shape: list[int]  # LeRobot's shape: [D] vectors, [1] scalars, [H, W, 3] images
    names: list[str] | None = None


def export_plan(specs: dict[str, KeySpec], keys: DatasetKeys) -> tuple[list[Column], list[str]]:
    """(the features a store with these keys exports to, the store keys left out), or LeRobotError."""
    obs = {k[len("obs/"):]: s for k, s in specs.items() if k.startswith("obs/") and not k.startswith("obs/images/")}
    vectors = sorted(k for k, s in obs.items() if len(s.shape) == 1 and s.dtype.kind in "biuf")
    state_keys = list(keys.state_keys if keys.state_keys is not None else vectors)
    for k in state_keys:
        if k not in obs:
            raise LeRobotError(f"state_keys names {k!r}, which is not an observation key of the store; its vector "
                               f"observation keys: {vectors}")
        if k not in vectors:
            raise LeRobotError(f"state_keys names {k!r}, which is {obs[k].dtype} {list(obs[k].shape)}; "
                               f"observation.state takes vector keys: {vectors}")
    cams = sorted(k[len("obs/images/"):] for k in specs if k.startswith("obs/images/"))
    cameras = keys.cameras if keys.cameras is not None else {c: image_feature(c) for c in cams}
    for c in cameras:
        if c not in cams:
            raise LeRobotError(f"cameras maps {c!r}, which the store does not have; its cameras: {cams}")
    cols = []
    if state_keys:
        sizes = [int(obs[k].shape[0]) for k in state_keys]
        dtype = np.result_type(*[obs[k].dtype for k in state_keys])
        names = [f"{k}.{i}" for k, n in zip(state_keys, sizes) for i in range(n)]
        cols.append(Column(STATE, "state", [f"obs/{k}" for k in state_keys], sizes, str(dtype), [sum(sizes)], names))
    for c, feature in cameras.items():
        spec = specs[f"obs/images/{c}"]
        if spec.dtype != np.uint8 or len(spec.shape) != 3 or spec.shape[2] != 3:
            raise LeRobotError(f"obs/images/{c} is {spec.dtype} {list(spec.shape)}; videos take uint8 [H, W, 3] images")
        cols.append(Column(feature, "video", [f"obs/images/{c}"], [1], "video", list(spec.shape),
                           ["height", "width", "channels"]))
    taken = {k for col in cols for k in col.keys}
    if keys.features is not None:
        mapped = dict(keys.features)
        for k in mapped:
            if k not in specs:
                raise LeRobotError(f"features maps {k!r}, which is not a key of the store; its keys: {sorted(specs)}")
    else:
        mapped = {k: STEP_FEATURES.get(k, extra_feature(k)) for k in sorted(specs)
                  if k not in taken and not k.startswith("obs/images/")}  # cameras not in `cameras` stay out
    for k, feature in mapped.items():
        spec = specs[k]
        if len(spec.shape) > 1:
            raise LeRobotError(f"{k} is {spec.dtype} {list(spec.shape)}: LeRobot features here are vectors, scalars or "
                               "uint8 [H, W, 3] images; leave it out with a features mapping (--keys)")
        if spec.shape:  # a vector, even of one element: names say so, so an import gives it back as [1]
            n = int(spec.shape[0])
            cols.append(Column(feature, "value", [k], [n], str(spec.dtype), [n], [f"{k}.{i}" for i in range(n)]))
        else:
            cols.append(Column(feature, "value", [k], [1], str(spec.dtype), [1], None))
    names = [c.feature for c in cols]
    ours = set(FRAME_FEATURES) | ({DONE} if {"terminated", "truncated"} & {k for c in cols for k in c.keys} else set())
    clash = sorted({n for n in names if names.count(n) > 1} | (set(names) & ours))
    if clash:
        raise LeRobotError(f"LeRobot feature(s) {clash} would be written twice or clash with LeRobot's own columns; "
                           "rename them in the features mapping (--keys)")
    left_out = sorted(set(specs) - {k for c in cols for k in c.keys})
    return cols, left_out


def _state_split(names, dim: int) -> list[tuple[str, int]] | None:
    """[(key, width), ...] from observation.state names "<key>.<i>" (our exports), else None."""
    if not isinstance(names, list) or len(names) != dim or not dim:
        return None
    groups: list[list] = []
    for name in names:
        key, _, i = str(name).rpartition(".")
        if not key or not i.isdigit():
            return None
        if groups and groups[-1][0] == key and int(i) == groups[-1][1]:
            groups[-1][1] += 1
        elif int(i) == 0 and key not in [g[0] for g in groups]:
            groups.append([key, 1])
        else:
            return None
    return [(k, n) for k, n in groups]


def import_plan(features: dict, keys: DatasetKeys, where: str) -> tuple[list[Column], list[str]]:
    """(the store keys a dataset with these LeRobot features imports to, the features left out), or LeRobotError."""
    named = [*(keys.cameras or {}).values(), *(keys.features or {}).values()] + ([STATE] if keys.state_keys else [])
    absent = [f for f in named if f not in features]
    if absent:
        raise LeRobotError(f"{where} has no feature(s) {absent}, which the key mapping names; its features: "
                           f"{sorted(f for f in features if f not in FRAME_FEATURES)}")
    cols, left_out = [], []
    cameras = {v: c for c, v in keys.cameras.items()} if keys.cameras is not None else None
    rename = {v: k for k, v in (keys.features if keys.features is not None else STEP_FEATURES).items()}
    for feature, ft in features.items():
        if feature in FRAME_FEATURES:
            continue
        dtype, shape = ft["dtype"], [int(x) for x in ft["shape"]]
        if dtype in ("video", "image"):
            if cameras is not None:
                cam = cameras.get(feature)
            else:
                cam = feature[len(IMAGE_PREFIX):] if feature.startswith(IMAGE_PREFIX) else feature.removeprefix(OBS_PREFIX)
            if cam is None:
                left_out.append(feature)
                continue
            hwc = shape[1:] + shape[:1] if (ft.get("names") or [None])[0] in ("channels", "channel") else shape
            if len(hwc) != 3 or hwc[2] != 3:
                raise LeRobotError(f"{where}: {feature} has shape {shape}; images must be RGB [H, W, 3] (or [3, H, W])")
            cols.append(Column(feature, dtype, [f"obs/images/{cam}"], [1], "uint8", hwc, ft.get("names")))
            continue
        if dtype == "string" or len(shape) != 1:
            left_out.append(feature)  # text and multi-dim arrays have no per-step store key
            continue
        if feature == STATE:
            split = _state_split(ft.get("names"), shape[0])
            if keys.state_keys is not None:
                if split is not None and [k for k, _ in split] == list(keys.state_keys):
                    pass
                elif len(keys.state_keys) == 1:
                    split = [(keys.state_keys[0], shape[0])]
                elif not keys.state_keys:
                    left_out.append(feature)
                    continue
                else:
                    recorded = [k for k, _ in split] if split else "none"
                    raise LeRobotError(f"{where}: state_keys {list(keys.state_keys)} do not match the split recorded in "
                                       f"observation.state's names ({recorded}); give one key for the whole vector")
            split = split or [("state", shape[0])]
            cols.append(Column(STATE, "state", [f"obs/{k}" for k, _ in split], [n for _, n in split], dtype, shape))
            continue
        if feature in rename:
            key = rename[feature]
        elif keys.features is not None or feature == DONE:
            left_out.append(feature)  # next.done: terminated comes from it below when nothing else gives it
            continue
        elif feature.startswith(OBS_PREFIX):
            key = "obs/" + feature[len(OBS_PREFIX):].replace(".", "/")
        elif feature.startswith(EXTRA_PREFIX):
            key = feature[len(EXTRA_PREFIX):].replace(".", "/")
        else:
            key = feature.replace(".", "/")
        vector = shape != [1] or _state_split(ft.get("names"), 1) is not None
        cols.append(Column(feature, "value", [key], [shape[0]], dtype, shape if vector else []))
    given = [k for c in cols for k in c.keys]
    if DONE in features and "terminated" not in given and DONE in left_out and keys.features is None:
        left_out.remove(DONE)
        cols.append(Column(DONE, "value", ["terminated"], [1], "bool", []))
        given.append("terminated")
    if "terminated" in given and DONE in left_out:
        left_out.remove(DONE)  # LeRobot's done flag, derived from terminated and truncated (next.terminated gave it)
    twice = sorted({k for k in given if given.count(k) > 1})
    if twice:
        raise LeRobotError(f"{where}: two features map to store key(s) {twice}; map one of them elsewhere (--keys)")
    return cols, left_out


# ---- export -----------------------------------------------------------------------------------------------------
def export_lerobot(store: EpisodeStore, out: str | Path, keys: DatasetKeys | None = None, fps: int = 20,
                   video: VideoOptions | None = None, progress: Callable[[int], None] | None = None) -> dict:
    """Write the intact episodes of `store` as a new LeRobot v3.0 dataset directory `out`; returns a summary.

    `fps`: the store's control rate (LeRobot timestamps are frame_index / fps). LeRobotError for a bad mapping, a
    NaN, an existing non-empty `out`; nothing is left at `out` then."""
    out, keys, video = Path(out), keys or DatasetKeys(), video or VideoOptions()
    if not (isinstance(fps, int) and not isinstance(fps, bool) and fps >= 1):
        raise LeRobotError(f"fps={fps!r}: LeRobot datasets have a whole number of frames per second >= 1")
    _check_new(out, "a LeRobot dataset")
    episodes = [int(e) for e in store.good_episodes]
    if not episodes:
        raise LeRobotError(f"episode store {store.path} has no intact episodes to export")
    cols, left_out = export_plan(store.keys, keys)
    for c in (c for c in cols if c.kind == "video"):
        if (c.shape[0] % 2 or c.shape[1] % 2) and video.pix_fmt == "yuv420p" and video.vcodec != "libsvtav1":
            raise LeRobotError(f"{c.keys[0]} is {c.shape[0]}x{c.shape[1]}: {video.vcodec} with yuv420p needs even sizes; "
                               "use vcodec libsvtav1, or h264 with pix_fmt yuv444p")
    pa, pq = _arrow()
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex}.exporting"
    tmp.mkdir(parents=True)
    try:
        summary = _Exporter(store, tmp, cols, fps, video, pa, pq).run(episodes, progress)
        os.rename(tmp, out)  # replaces an empty directory
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {**summary, "path": str(out), "left_out": left_out}


class _Exporter:
    def __init__(self, store, root: Path, cols: list[Column], fps: int, video: VideoOptions, pa, pq):
        self.store, self.root, self.cols, self.fps, self.video, self.pa, self.pq = store, root, cols, fps, video, pa, pq
        self.values = [c for c in cols if c.kind != "video"]
        self.videos = {c.feature: _VideoWriter(root, c.feature, fps, video) for c in cols if c.kind == "video"}
        self.exported = [k for c in self.values for k in c.keys]
        self.done = [k for k in ("terminated", "truncated") if k in self.exported]
        self.data = _ParquetFiles(root, pq)
        self.tasks: dict[str, int] = {}

    def run(self, episodes: list[int], progress) -> dict:
        rows, ep_stats, index = [], [], 0
        try:
            for n, e in enumerate(episodes):
                ep = self.store.episode(e)
                row, stats = self._episode(ep, e, n, index)
                rows.append(row)
                ep_stats.append(stats)
                index += ep.length
                if progress is not None:
                    progress(1)
        finally:  # also on an error: an encoder dropped unflushed complains on stderr
            self.data.close()
            for v in self.videos.values():
                v.close()
        features = self._features()
        stats = {f: _aggregate([s[f] for s in ep_stats]) for f in ep_stats[0]}
        table = {k: [r[k] for r in rows] for k in rows[0]}
        for f, per_ep in ((f, [s[f] for s in ep_stats]) for f in ep_stats[0]):
            for stat in per_ep[0]:
                table[f"stats/{f}/{stat}"] = [s[stat].tolist() for s in per_ep]
        (self.root / EPISODES_PATH).parent.mkdir(parents=True)
        self.pq.write_table(self.pa.table(table), self.root / EPISODES_PATH)
        _write_tasks(self.root, self.tasks, self.pa, self.pq)
        _write_json(self.root / "meta/stats.json", {f: {k: v.tolist() for k, v in s.items()} for f, s in stats.items()})
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": None, "total_episodes": len(rows),
            "total_frames": index, "total_tasks": len(self.tasks), "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": DATA_FILE_MB, "video_files_size_in_mb": VIDEO_FILE_MB, "fps": self.fps,
            "splits": {"train": f"0:{len(rows)}"}, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.videos else None, "features": features,
        }
        _write_json(self.root / "meta/info.json", info)
        return {"version": CODEBASE_VERSION, "episodes": len(rows), "frames": index, "fps": self.fps,
                "features": {c.feature: c.keys for c in self.cols}, "tasks": len(self.tasks)}

    def _episode(self, ep: Episode, e: int, n: int, index: int) -> tuple[dict, dict]:
        T, steps = ep.length, ep.steps
        for k in self.exported:
            a = steps[k]
            if a.dtype.kind in "fc" and not np.isfinite(a).all():
                raise LeRobotError(f"episode {e} of {self.store.path}: {k} holds NaN or inf at step "
                                   f"{int(np.argwhere(~np.isfinite(a))[0][0])}; fix or leave out that key")
        text = ep.instruction or ep.task
        task_index = self.tasks.setdefault(text, len(self.tasks))
        frame = {}
        for c in self.values:  # shape [1]: a plain column, as LeRobot writes it; names tell a vector [1] from a scalar
            v = np.concatenate([steps[k] for k in c.keys], axis=1, dtype=c.dtype) if c.kind == "state" else steps[c.keys[0]]
            frame[c.feature] = v.reshape(T) if c.shape == [1] else v.reshape(T, c.shape[0])
        if self.done:
            frame[DONE] = np.logical_or.reduce([steps[k] for k in self.done])
        frame["timestamp"] = (np.arange(T) / self.fps).astype(np.float32)
        frame["frame_index"] = np.arange(T, dtype=np.int64)
        frame["episode_index"] = np.full(T, n, dtype=np.int64)
        frame["index"] = np.arange(index, index + T, dtype=np.int64)
        frame["task_index"] = np.full(T, task_index, dtype=np.int64)
        chunk, file = self.data.write(self.pa.table({f: _arrow_column(v, self.pa) for f, v in frame.items()}))
        stats = {f: _stats(v.reshape(T, -1)) for f, v in frame.items()}
        row = {"episode_index": n, "tasks": [text], "length": T, "data/chunk_index": chunk, "data/file_index": file,
               "dataset_from_index": index, "dataset_to_index": index + T}
        for feature, writer in self.videos.items():
            c = next(c for c in self.cols if c.feature == feature)
            frames = steps[c.keys[0]]
            chunk, file, t0, t1 = writer.write(frames)
            row.update({f"videos/{feature}/chunk_index": chunk, f"videos/{feature}/file_index": file,
                        f"videos/{feature}/from_timestamp": t0, f"videos/{feature}/to_timestamp": t1})
            stats[feature] = _image_stats(frames)
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        row.update({ATTRS + "task": ep.task, ATTRS + "instruction": ep.instruction, ATTRS + "source": ep.source,
                    ATTRS + "success": bool(ep.success), ATTRS + "seed": int(ep.seed),
                    ATTRS + "metadata": json.dumps(ep.metadata, sort_keys=True)})
        return row, stats

    def _features(self) -> dict:
        features = {}
        for c in self.cols:
            if c.kind == "video":
                info = self.videos[c.feature].info()
                features[c.feature] = {"dtype": "video", "shape": c.shape, "names": c.names, "info": info}
            else:
                features[c.feature] = {"dtype": c.dtype, "shape": c.shape, "names": c.names}
        if self.done:
            features[DONE] = {"dtype": "bool", "shape": [1], "names": None}
        return {**features, **FRAME_FEATURES}


def _arrow_column(v: np.ndarray, pa):
    """A parquet column as LeRobot (HF datasets) writes it: scalars as values, vectors as fixed-size lists."""
    if v.ndim == 1:
        return pa.array(v)
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(v).reshape(-1)), v.shape[1])


class _ParquetFiles:
    """Frames into data/chunk-XXX/file-XXX.parquet, a new file once one holds DATA_FILE_MB."""

    def __init__(self, root: Path, pq):
        self.root, self.pq, self.writer, self.chunk, self.file = root, pq, None, 0, -1

    def write(self, table) -> tuple[int, int]:
        if self.writer is not None and _size(self.path) >= DATA_FILE_MB * 2**20:
            self.close()
        if self.writer is None:
            self.chunk, self.file = _next_file(self.chunk, self.file)
            self.path = self.root / DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = self.pq.ParquetWriter(self.path, table.schema, compression="snappy")
        self.writer.write_table(table)
        return self.chunk, self.file

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _size(path: Path) -> int:
    """Bytes written so far (0 before the first: an encoder holds its first frames back)."""
    return path.stat().st_size if path.exists() else 0


def _next_file(chunk: int, file: int) -> tuple[int, int]:
    """The chunk and file index after (chunk, file): CHUNKS_SIZE files per chunk (LeRobot's update_chunk_file_indices)."""
    return (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)


class _VideoWriter:
    """The frames of one image key, episode after episode, into videos/<key>/chunk-XXX/file-XXX.mp4."""

    def __init__(self, root: Path, key: str, fps: int, opts: VideoOptions):
        self.root, self.key, self.fps, self.opts = root, key, fps, opts
        self.out = self.stream = None
        self.chunk, self.file, self.n, self.first = 0, -1, 0, None

    def write(self, frames: np.ndarray) -> tuple[int, int, float, float]:
        """Append one episode's frames uint8 [T, H, W, 3]; (chunk, file, from_timestamp, to_timestamp) of it."""
        import av

        try:
            return self._write(frames)
        except av.FFmpegError as e:
            raise LeRobotError(f"{self.key}: {self.opts.vcodec} cannot encode {frames.shape[2]}x{frames.shape[1]} "
                               f"{self.opts.pix_fmt} frames ({e}); try another --vcodec / --pix-fmt") from None

    def _write(self, frames: np.ndarray) -> tuple[int, int, float, float]:
        import av

        if self.out is not None and _size(self.path) >= VIDEO_FILE_MB * 2**20:
            self.close()
        if self.out is None:
            self.chunk, self.file = _next_file(self.chunk, self.file)
            self.path = self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.chunk, file_index=self.file)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.first = self.first or self.path
            os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints ~20 info lines per file on stderr; errors only
            self.out = av.open(str(self.path), "w")
            options = {"g": str(self.opts.g), "crf": str(self.opts.crf)}
            if self.opts.vcodec == "libsvtav1":
                options["preset"] = "12"  # LeRobot's
            elif self.opts.vcodec == "hevc":
                options["x265-params"] = "log-level=error"  # x265 prints ~25 info lines per file on stderr
            self.stream = self.out.add_stream(self.opts.vcodec, rate=self.fps, options=options)
            self.stream.width, self.stream.height = int(frames.shape[2]), int(frames.shape[1])
            self.stream.pix_fmt = self.opts.pix_fmt
            self.n = 0
        start = self.n
        for f in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
            frame.pts, frame.time_base = self.n, Fraction(1, self.fps)  # frame k of the file at k / fps s
            self.out.mux(self.stream.encode(frame))
            self.n += 1
        return self.chunk, self.file, start / self.fps, self.n / self.fps

    def close(self) -> None:
        if self.out is not None:
            self.out.mux(self.stream.encode())  # flush the encoder
            self.out.close()
            self.out = None

    def info(self) -> dict:
        """info.json's video info of the first file (LeRobot's get_video_info)."""
        import av

        with av.open(str(self.first)) as f:
            s = f.streams.video[0]
            return {"video.height": s.height, "video.width": s.width, "video.codec": s.codec.canonical_name,
                    "video.pix_fmt": s.pix_fmt, "video.is_depth_map": False, "video.fps": int(s.base_rate),
                    "video.channels": 3, "has_audio": False}


def _stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-feature stats of x [T, D]: min, max, mean, std, count, quantiles, each [D] (count [1])."""
    x = np.asarray(x, dtype=np.float64)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0), "count": np.array([len(x)])}
    for q, v in zip(QUANTILES, np.quantile(x, QUANTILES, axis=0)):
        out[f"q{round(q * 100):02d}"] = v
    return out


def _image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of frames uint8 [T, H, W, 3] in [0, 1], shaped [3, 1, 1] as LeRobot's (count: frames).

    Like LeRobot's compute_episode_stats, from a sample: at most IMAGE_STATS_FRAMES evenly spaced frames, every
    pixel up to IMAGE_STATS_SIDE pixels a side and a stride beyond (a 300-frame 480x640 episode would otherwise
    take ~2 GB of float64 per camera)."""
    step = max(1, -(-max(frames.shape[1:3]) // IMAGE_STATS_SIDE))
    sample = frames[np.unique(np.linspace(0, len(frames) - 1, IMAGE_STATS_FRAMES).round().astype(int)), ::step, ::step]
    s = _stats(sample.reshape(-1, 3) / 255.0)
    return {k: (np.array([len(frames)]) if k == "count" else v.reshape(3, 1, 1)) for k, v in s.items()}


def _aggregate(stats: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Dataset stats from per-episode ones, as LeRobot's aggregate_feature_stats (quantiles: count-weighted means)."""
    counts = np.array([s["count"][0] for s in stats], dtype=np.float64)
    w = counts.reshape(-1, *[1] * stats[0]["mean"].ndim) / counts.sum()
    mean = sum(wi * s["mean"] for wi, s in zip(w, stats))
    var = sum(wi * (s["std"] ** 2 + (s["mean"] - mean) ** 2) for wi, s in zip(w, stats))
    out = {"min": np.min([s["min"] for s in stats], 0), "max": np.max([s["max"] for s in stats], 0), "mean": mean,
           "std": np.sqrt(var), "count": np.array([int(counts.sum())])}
    for k in stats[0]:
        if k.startswith("q"):
            out[k] = sum(wi * s[k] for wi, s in zip(w, stats))
    return out


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False))


def _write_tasks(root: Path, tasks: dict[str, int], pa, pq) -> None:
    """meta/tasks.parquet as pandas' DataFrame({"task_index": ...}, index=<task texts>).to_parquet() writes it, with
    the pandas metadata that makes LeRobot's pd.read_parquet restore the index (pandas is not needed here)."""
    index = "__index_level_0__"
    pandas_meta = {
        "index_columns": [index],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
                     "metadata": None},
                    {"name": None, "field_name": index, "pandas_type": "unicode", "numpy_type": "object",
                     "metadata": None}],
        "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.3.3",
    }
    table = pa.table({"task_index": pa.array(list(tasks.values()), pa.int64()), index: pa.array(list(tasks))})
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    pq.write_table(table, root / "meta/tasks.parquet")


def _check_new(out: Path, what: str) -> None:
    if not vacant(out):
        raise LeRobotError(f"{out} already exists and is not empty; write {what} into a new directory")


# ---- import -----------------------------------------------------------------------------------------------------
class LeRobotDir:
    """A local LeRobot v3.0 dataset directory, checked on opening: info, tasks, episodes (no frames read yet)."""

    def __init__(self, root: str | Path):
        self.root = root = Path(root)
        self.pa, self.pq = _arrow()
        if not root.is_dir():
            raise LeRobotError(f"no LeRobot dataset at {root}: "
                               + ("it is a file" if root.exists() else "it does not exist"))
        info_file = root / "meta/info.json"
        if not info_file.is_file():
            if (root / "meta/episodes.jsonl").is_file() or (root / "meta/tasks.jsonl").is_file():
                raise LeRobotError(f"{root} is a LeRobot v2 dataset (meta/episodes.jsonl, no v3 metadata); {V21_FIX}")
            raise LeRobotError(f"{root} is not a LeRobot dataset: it has no meta/info.json (LeRobot v3.0 layout: meta/, "
                               "data/, videos/)")
        try:
            info = json.loads(info_file.read_text())
        except (OSError, ValueError) as e:
            raise LeRobotError(f"{info_file} is not valid JSON ({e}); the dataset is damaged: download or convert it "
                               "again") from None
        missing = [k for k in ("codebase_version", "fps", "features", "data_path")
                   if not isinstance(info, dict) or k not in info]
        if missing:
            raise LeRobotError(f"{info_file} lacks {missing}; it is not a LeRobot v3.0 info.json")
        version = str(info["codebase_version"])
        if not version.startswith("v3."):
            fix = V21_FIX if version.startswith("v2") else "this importer reads LeRobot's v3.0 layout"
            raise LeRobotError(f"{root} is a LeRobot {version} dataset; {fix}")
        fps = info["fps"]
        if not (isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0 and math.isfinite(fps)):
            raise LeRobotError(f"{info_file}: fps={fps!r} must be a number > 0")
        features = info["features"]
        if not isinstance(features, dict) or not all(
                isinstance(f, dict) and "dtype" in f and isinstance(f.get("shape"), list) for f in features.values()):
            raise LeRobotError(f"{info_file}: features must map each name to {{dtype, shape, names}}")
        for k in ("episode_index", "frame_index", "timestamp", "index"):
            if k not in features:
                raise LeRobotError(f"{info_file}: features lack LeRobot's per-frame column {k!r}")
        self.info, self.fps, self.features = info, float(fps), features
        self.tasks = self._tasks()
        self.episodes = self._episodes()

    def _tasks(self) -> dict[int, str]:
        path = self.root / "meta/tasks.parquet"
        if not path.is_file():
            raise LeRobotError(f"{self.root} has no meta/tasks.parquet; it is not a complete LeRobot v3.0 dataset")
        table = self._read(path)
        meta = table.schema.pandas_metadata or {}
        names = [c for c in meta.get("index_columns", []) if isinstance(c, str)] + ["task", "__index_level_0__"]
        text = next((c for c in names if c in table.column_names), None)
        if text is None or "task_index" not in table.column_names:
            raise LeRobotError(f"{path} has columns {table.column_names}; expected task_index and the task text")
        return dict(zip(table["task_index"].to_pylist(), map(str, table[text].to_pylist())))

    def _episodes(self) -> list[dict]:
        files = sorted((self.root / "meta/episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise LeRobotError(f"{self.root} has no meta/episodes/chunk-*/file-*.parquet; it is not a complete LeRobot "
                               "v3.0 dataset")
        rows = []
        for f in files:
            table = self._read(f)
            cols = [c for c in table.column_names if not c.startswith("stats/")]
            rows += table.select(cols).to_pylist()
        need = ["episode_index", "length", "data/chunk_index", "data/file_index"]
        need += [f"videos/{k}/{x}" for k, ft in self.features.items() if ft["dtype"] == "video"
                 for x in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
        lacking = sorted({c for r in rows for c in need if r.get(c) is None})
        if lacking:
            raise LeRobotError(f"{self.root}/meta/episodes lacks {lacking[:4]} for some episodes; it is not a complete "
                               "LeRobot v3.0 dataset")
        rows.sort(key=lambda r: r["episode_index"])
        if [r["episode_index"] for r in rows] != list(range(len(rows))):
            raise LeRobotError(f"{self.root}/meta/episodes: episode indices are not 0..{len(rows) - 1}")
        return rows

    def _read(self, path: Path, columns=None):
        try:
            return self.pq.read_table(path, columns=columns)
        except (OSError, self.pa.ArrowException) as e:
            raise LeRobotError(f"cannot read {path} ({type(e).__name__}: {e}); the dataset is damaged") from None

    def schema(self, path: Path):
        try:
            return self.pq.read_schema(path)
        except (OSError, self.pa.ArrowException) as e:
            raise LeRobotError(f"cannot read {path} ({type(e).__name__}: {e}); the dataset is damaged") from None

    def data_files(self) -> Iterator[tuple[Path, list[dict]]]:
        """(data file, its episodes in order) for every data file, in episode order."""
        groups: dict[tuple, list] = {}
        for r in self.episodes:
            groups.setdefault((r["data/chunk_index"], r["data/file_index"]), []).append(r)
        for (chunk, file), eps in groups.items():
            yield self.root / self.info["data_path"].format(chunk_index=chunk, file_index=file), eps


def import_lerobot(src: "str | Path | LeRobotDir", out: str | Path, keys: DatasetKeys | None = None,
                   task: str | None = None, source: str = "teleop", success: bool = True,
                   progress: Callable[[int], None] | None = None) -> dict:
    """Every episode of the LeRobot v3.0 dataset `src` into a new episode store `out`; returns a summary.

    task / source / success: attributes of episodes without robot_rl/* columns (a foreign dataset; success only
    where it has no next.success). LeRobotError for a malformed dataset, a NaN, a bad mapping; nothing at `out` then."""
    keys, out = keys or DatasetKeys(), Path(out)
    if source not in SOURCES:
        raise LeRobotError(f"source={source!r}; valid sources: {', '.join(SOURCES)}")
    ds = src if isinstance(src, LeRobotDir) else LeRobotDir(src)
    cols, left_out = import_plan(ds.features, keys, str(ds.root))
    if not cols:
        raise LeRobotError(f"{ds.root}: the key mapping imports none of its features {sorted(ds.features)}")
    task = task or ds.root.resolve().name
    videos = {c.feature: _VideoReader(ds, c.feature) for c in cols if c.kind == "video"}
    steps_total = 0
    with building(out) as store, contextlib.ExitStack() as readers:
        for reader in videos.values():
            readers.callback(reader.close)
        for path, eps in ds.data_files():
            if not path.is_file():
                raise LeRobotError(f"{ds.root}: data file {path} of episodes {eps[0]['episode_index']}.. is missing")
            columns = [c.feature for c in cols if c.kind != "video"] + ["episode_index", "frame_index", "timestamp"]
            names = ds.schema(path).names
            lacking = [c for c in columns if c not in names]
            if lacking:
                raise LeRobotError(f"{ds.root}: data file {path} lacks column(s) {lacking} that info.json lists")
            table = ds._read(path, columns + (["task_index"] if "task_index" in names else []))
            ep_col = table["episode_index"].to_numpy()
            order = np.lexsort((table["frame_index"].to_numpy(), ep_col))  # by episode, then frame
            sorted_eps, wanted = ep_col[order], [int(r["episode_index"]) for r in eps]
            starts, ends = np.searchsorted(sorted_eps, wanted, "left"), np.searchsorted(sorted_eps, wanted, "right")
            for row, e, a, b in zip(eps, wanted, starts, ends):
                rows = order[a:b]
                where = f"{ds.root}: episode {e}"
                if len(rows) != row["length"] or not len(rows):
                    raise LeRobotError(f"{where} has {len(rows)} frames in {path.name}, its metadata says {row['length']}")
                part = table.take(rows)
                steps = {}
                for c in cols:
                    if c.kind == "video":
                        steps[c.keys[0]] = videos[c.feature].frames(row, part["timestamp"].to_numpy(), c.shape, where)
                    else:
                        values = _column(part[c.feature], c, where, ds)
                        for k, a in zip(c.keys, np.split(values, np.cumsum(c.sizes)[:-1], axis=1)
                                        if c.kind == "state" else [values]):
                            steps[k] = a
                if INTERVENTION not in steps:
                    steps[INTERVENTION] = np.zeros(len(rows), dtype=bool)
                # one episode at a time: a data file can hold hours of frames, decoded images included
                store.append([_episode(steps, row, ds, part, task, source, success, e)])
                steps_total += len(rows)
                if progress is not None:
                    progress(1)
    return {"path": str(out), "episodes": len(ds.episodes), "steps": steps_total, "fps": ds.fps,
            "keys": {c.feature: c.keys for c in cols}, "left_out": left_out}


def _column(col, c: Column, where: str, ds: LeRobotDir) -> np.ndarray:
    """Values of one non-video feature over an episode's frames: [T, width] (state / vectors) or [T] (scalars)."""
    if col.null_count:
        raise LeRobotError(f"{where}: {c.feature} has missing (null) values; the dataset is damaged")
    if c.kind == "image":
        from PIL import Image
        import io

        imgs = []
        for v in col.to_pylist():
            with Image.open(io.BytesIO(v["bytes"])) as im:
                imgs.append(np.asarray(im.convert("RGB")))
        a = np.stack(imgs)
        if list(a.shape[1:]) != c.shape:
            raise LeRobotError(f"{where}: {c.feature} images are {list(a.shape[1:])}, info.json says {c.shape}")
        return a
    col = col.combine_chunks()
    width = sum(c.sizes)
    if ds.pa.types.is_list(col.type) or ds.pa.types.is_large_list(col.type) or ds.pa.types.is_fixed_size_list(col.type):
        lengths = np.asarray(ds.pa.compute.list_value_length(col))
        if (lengths != width).any():
            raise LeRobotError(f"{where}: {c.feature} has rows of {int(lengths[lengths != width][0])} values; its "
                               f"shape in info.json is [{width}]")
        a = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), width)
        a = a if c.kind == "state" or c.shape else a.reshape(len(col))
    else:
        if width != 1:
            raise LeRobotError(f"{where}: {c.feature} holds single values; its shape in info.json is [{width}]")
        a = col.to_numpy(zero_copy_only=False)
        a = a.reshape(len(a), 1) if c.kind == "state" or c.shape else a
    try:
        a = a.astype(np.dtype(c.dtype))
    except TypeError:
        raise LeRobotError(f"{where}: {c.feature} has dtype {c.dtype!r}, which has no numeric store key") from None
    if a.dtype.kind in "fc" and not np.isfinite(a).all():
        raise LeRobotError(f"{where}: {c.feature} holds NaN or inf (frame {int(np.argwhere(~np.isfinite(a))[0][0])}); "
                           "fix those frames or leave the feature out (--keys)")
    return a


def _episode(steps: dict, row: dict, ds: LeRobotDir, part, task: str, source: str, success: bool, e: int) -> Episode:
    """The Episode of one LeRobot episode: our attributes from robot_rl/* columns, else from the arguments."""
    if row.get(ATTRS + "task"):
        return Episode(steps=steps, task=row[ATTRS + "task"], source=row[ATTRS + "source"],
                       success=bool(row[ATTRS + "success"]), instruction=row[ATTRS + "instruction"] or "",
                       seed=int(row[ATTRS + "seed"]), metadata=json.loads(row[ATTRS + "metadata"] or "{}"))
    first = int(part["task_index"][0].as_py()) if "task_index" in part.column_names else None
    instruction = ds.tasks.get(first) or next(iter(row.get("tasks") or []), "")
    done = bool(steps["success"].any()) if "success" in steps else success
    return Episode(steps=steps, task=task, source=source, success=done, instruction=str(instruction), seed=-1,
                   metadata={"lerobot": {"dataset": str(ds.root.resolve()), "episode_index": e}})


class _VideoReader:
    """The frames of one video key, read forward through its files: episodes are stored in order."""

    def __init__(self, ds: LeRobotDir, key: str):
        self.ds, self.key, self.path = ds, key, None
        self.frames_iter = self.container = self.pending = None

    def frames(self, row: dict, timestamps: np.ndarray, shape: list[int], where: str) -> np.ndarray:
        """uint8 [T, H, W, 3]: the frame nearest from_timestamp + each timestamp (within half a frame)."""
        import av

        prefix = f"videos/{self.key}/"
        path = self.ds.root / self.ds.info.get("video_path", VIDEO_PATH).format(
            video_key=self.key, chunk_index=row[prefix + "chunk_index"], file_index=row[prefix + "file_index"])
        t0, t1 = float(row[prefix + "from_timestamp"]), float(row[prefix + "to_timestamp"])
        want = t0 + timestamps.astype(np.float64)
        half = 0.5 / self.ds.fps
        if path != self.path or self.pending is None or self.pending.time > want[0] + half:
            self._open(path, where)
        out: list = [None] * len(want)
        try:
            while True:
                f = self.pending if self.pending is not None else next(self.frames_iter, None)
                self.pending = None
                if f is None:
                    break
                if f.time >= t1 - half and f.time > want[-1] + half:
                    self.pending = f  # the next episode's
                    break
                i = int(np.argmin(np.abs(want - f.time)))
                if abs(want[i] - f.time) <= half and out[i] is None:
                    out[i] = f.to_ndarray(format="rgb24")
        except av.FFmpegError as e:
            raise LeRobotError(f"{where}: cannot decode {path} ({e}); the video is damaged") from None
        missing = [i for i, f in enumerate(out) if f is None]
        if missing:
            raise LeRobotError(f"{where}: {path} has no frame at {want[missing[0]]:.3f} s (frame {missing[0]} of "
                               f"{len(want)}, {self.key}); the video is shorter than the episode or damaged")
        if list(out[0].shape) != shape:
            raise LeRobotError(f"{where}: {path} has {out[0].shape[0]}x{out[0].shape[1]} frames, info.json says "
                               f"{self.key} is {shape[0]}x{shape[1]}")
        return np.stack(out)

    def close(self) -> None:
        if self.container is not None:
            self.container.close()
            self.container = None

    def _open(self, path: Path, where: str) -> None:
        import av

        if not path.is_file():
            raise LeRobotError(f"{where}: video file {path} is missing")
        self.close()
        try:
            self.container = av.open(str(path))
        except av.FFmpegError as e:
            raise LeRobotError(f"{where}: cannot open {path} ({e}); the video is damaged") from None
        self.path, self.pending = path, None
        self.frames_iter = self.container.decode(video=0)
