"""LeRobot datasets (v3.0) to and from the episode store: robot-rl-data export-lerobot / import-lerobot.

A round trip store -> LeRobot -> store on a collected store with two cameras; the layout LeRobot reads; imports of
a v3.0 directory written here with pyarrow and of one written by LeRobot 0.4.4 itself (tests/data/lerobot_written);
LeRobot's own reader on our export where lerobot is installed. Bad input: tests/test_bad_input_table.py."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyarrow", reason="the lerobot-data extra (pyarrow) is part of dev")
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from robot_rl.data import EpisodeStore  # noqa: E402
from robot_rl.data.lerobot_dataset import VideoOptions, export_lerobot, import_lerobot  # noqa: E402
from robot_rl.data.lerobot_keys import DatasetKeys  # noqa: E402
from tests import lerobot_v30, lerobot_written  # noqa: E402
from tests.conftest import run_main  # noqa: E402

ROOT = Path(__file__).resolve().parent
ATTRS = ("task", "instruction", "source", "success", "seed", "metadata")


@pytest.fixture(scope="module")
def cam_store(tmp_path_factory) -> Path:
    """3 scripted lift episodes (<= 30 steps) with front and wrist cameras, 24x32 (H != W)."""
    from robot_rl import sim
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    path = tmp_path_factory.mktemp("cams") / "lift.zarr"
    env = sim.make("lift", num_envs=2, cameras=["front", "wrist"], image_size=[24, 32], task_config={"episode_steps": 30})
    with EpisodeStore.open(path, mode="a") as s:
        collect(env, make_expert(env, noise=0.1, seed=0), s, episodes=3, seed=0, source="expert")
    env.close()
    return path


@pytest.fixture(scope="module")
def exported(cam_store, tmp_path_factory) -> Path:
    """cam_store exported with the default mapping and LeRobot's default (lossy AV1) video settings, by the CLI."""
    from robot_rl.cli.data import main

    out = tmp_path_factory.mktemp("export") / "lift_lerobot"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        main(["export-lerobot", str(cam_store), str(out)])
    assert "exported 3 episodes" in stdout.getvalue() and "observation.state" in stdout.getvalue(), stdout.getvalue()
    return out


def _frames_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int16) - b.astype(np.int16))


def test_round_trip_keeps_every_key_and_attribute_exactly_and_images_within_the_codec(cam_store, exported, tmp_path,
                                                                                        capsys, monkeypatch):
    back = tmp_path / "back.zarr"
    code, out, err = run_main("robot-rl-data", ["import-lerobot", str(exported), str(back)], capsys, monkeypatch)
    assert code == 0, err
    assert "imported 3 episodes" in out and "obs/proprio" in out
    src, dst = EpisodeStore.open(cam_store), EpisodeStore.open(back)
    assert dst.keys == src.keys
    assert dst.episode_ends.tolist() == src.episode_ends.tolist()
    for name in ATTRS:
        assert dst.episode_attr(name).tolist() == src.episode_attr(name).tolist(), name
    for key in src.keys:
        if key.startswith("obs/images/"):
            d = _frames_diff(src.read(key), dst.read(key))
            # LeRobot's AV1 crf 30 yuv420p: a few levels on average, and each frame is nearer its own step than the next
            assert d.mean() < 6, (key, d.mean())
            shifted = _frames_diff(src.read(key)[1:], dst.read(key)[:-1]).mean()
            assert d.mean() < shifted, (key, d.mean(), shifted)
        else:
            np.testing.assert_array_equal(dst.read(key), src.read(key), err_msg=key)


def test_near_lossless_video_and_a_keys_file_rename_and_narrow_the_mapping(cam_store, tmp_path):
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"state_keys": ["proprio"], "cameras": {"front": "observation.images.top"}}))
    out, back = tmp_path / "lr", tmp_path / "back.zarr"
    video = VideoOptions(vcodec="h264", crf=0, pix_fmt="yuv444p")
    s = export_lerobot(EpisodeStore.open(cam_store), out, DatasetKeys.load(keys), fps=20, video=video)
    assert s["left_out"] == ["obs/images/wrist"]
    info = json.loads((out / "meta/info.json").read_text())
    assert info["features"]["observation.state"]["shape"] == [20]  # proprio only; obs/object rides along
    assert "complementary_info.obs.object" in info["features"] and "observation.images.top" in info["features"]
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == "h264"
    import_lerobot(out, back, DatasetKeys.load(keys))
    src, dst = EpisodeStore.open(cam_store), EpisodeStore.open(back)
    assert set(dst.keys) == set(src.keys) - {"obs/images/wrist"}
    assert _frames_diff(src.read("obs/images/front"), dst.read("obs/images/front")).max() <= 2  # RGB <-> YUV rounding
    for key in ("obs/proprio", "obs/object", "action", "reward", "terminated"):
        np.testing.assert_array_equal(dst.read(key), src.read(key), err_msg=key)


def test_episodes_shorter_than_the_encoders_lookahead_share_a_video_file(tmp_path):
    """Encoders hold their first frames back: the file of a camera exists only after several short episodes."""
    from robot_rl.data import Episode

    rng = np.random.default_rng(0)
    eps = [Episode(steps={"obs/images/top": rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8).repeat(2, 1).repeat(2, 2),
                          "action": rng.normal(size=(n, 2)).astype(np.float32), "intervention": np.zeros(n, bool)},
                   task="lift", source="teleop", success=True) for n in (1, 2, 3, 2)]
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as s:
        s.append(eps)
    for vcodec, pix_fmt in (("libsvtav1", "yuv420p"), ("h264", "yuv444p")):
        out, back = tmp_path / f"{vcodec}-lr", tmp_path / f"{vcodec}.zarr"
        video = VideoOptions(vcodec=vcodec, crf=0, pix_fmt=pix_fmt)
        export_lerobot(EpisodeStore.open(tmp_path / "s.zarr"), out, video=video)
        import_lerobot(out, back)
        store = EpisodeStore.open(back)
        assert store.episode_ends.tolist() == [1, 3, 6, 8]
        np.testing.assert_array_equal(store.read("action"), np.concatenate([e.steps["action"] for e in eps]))
    frames = np.concatenate([e.steps["obs/images/top"] for e in eps])
    assert _frames_diff(store.read("obs/images/top"), frames).max() <= 2


def test_odd_image_sizes_with_h264_yuv420p_are_refused_before_anything_is_written(tmp_path):
    from robot_rl.data import Episode
    from robot_rl.data.lerobot_dataset import LeRobotError

    ep = Episode(steps={"obs/images/top": np.zeros((2, 9, 8, 3), np.uint8), "intervention": np.zeros(2, bool)},
                 task="lift", source="teleop", success=True)
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as s:
        s.append(ep)
    with pytest.raises(LeRobotError, match="9x8: h264 with yuv420p needs even sizes; use vcodec libsvtav1"):
        export_lerobot(EpisodeStore.open(tmp_path / "s.zarr"), tmp_path / "lr", video=VideoOptions(vcodec="h264"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_export_is_in_lerobot_v30_layout(cam_store, exported):
    src = EpisodeStore.open(cam_store)
    info = json.loads((exported / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 20
    assert info["total_episodes"] == 3 and info["total_frames"] == src.n_steps and info["splits"] == {"train": "0:3"}
    f = info["features"]
    assert f["observation.state"]["shape"] == [31]  # object (11) then proprio (20): sorted, split recorded in names
    names = f["observation.state"]["names"]
    assert names[:2] == ["object.0", "object.1"] and names[11] == "proprio.0"
    assert f["observation.images.front"]["shape"] == [24, 32, 3] and f["observation.images.front"]["dtype"] == "video"
    assert f["observation.images.front"]["info"]["video.codec"] == "av1"
    assert f["observation.images.front"]["info"]["video.pix_fmt"] == "yuv420p"
    assert f["next.reward"]["shape"] == [1] and f["next.done"]["dtype"] == "bool"
    assert list(f)[-5:] == ["timestamp", "frame_index", "episode_index", "index", "task_index"]

    data = pq.read_table(exported / "data/chunk-000/file-000.parquet")
    state_type = data.schema.field("observation.state").type  # as HF datasets' Sequence(float32, length=31)
    assert pa.types.is_fixed_size_list(state_type) and state_type.list_size == 31 and state_type.value_type == pa.float32()
    assert data.schema.field("next.reward").type == pa.float32()  # shape [1]: a plain column
    ends = src.episode_ends
    np.testing.assert_array_equal(data["index"].to_numpy(), np.arange(src.n_steps))
    np.testing.assert_array_equal(data["frame_index"].to_numpy()[ends[0]:ends[1]], np.arange(ends[1] - ends[0]))
    np.testing.assert_allclose(data["timestamp"].to_numpy()[: ends[0]], np.arange(ends[0]) / 20, rtol=1e-6)
    done = src.read("terminated") | src.read("truncated")
    np.testing.assert_array_equal(data["next.done"].to_numpy(zero_copy_only=False), done)

    eps = pq.read_table(exported / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e["dataset_to_index"] for e in eps] == ends.tolist()
    assert [e["length"] for e in eps] == np.diff(ends, prepend=0).tolist()
    assert eps[1]["videos/observation.images.front/from_timestamp"] == pytest.approx(ends[0] / 20)
    assert eps[2]["videos/observation.images.wrist/to_timestamp"] == pytest.approx(ends[2] / 20)
    assert (exported / "videos/observation.images.wrist/chunk-000/file-000.mp4").is_file()
    assert eps[0]["tasks"] == [src.episode(0).instruction] and eps[0]["robot_rl/source"] == "expert"

    tasks = pq.read_table(exported / "meta/tasks.parquet")
    assert tasks.schema.pandas_metadata["index_columns"] == ["__index_level_0__"]  # pandas restores the text index
    assert tasks["__index_level_0__"].to_pylist()[tasks["task_index"].to_pylist()[0]] == eps[0]["tasks"][0]

    stats = json.loads((exported / "meta/stats.json").read_text())
    assert np.array(stats["observation.images.front"]["mean"]).shape == (3, 1, 1)
    assert stats["action"]["count"] == [src.n_steps] and set(stats["action"]) >= {"min", "max", "mean", "std", "q01", "q99"}
    np.testing.assert_allclose(stats["action"]["mean"], src.read("action").mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["action"]["std"], src.read("action").std(0), rtol=1e-4, atol=1e-6)


def test_import_of_a_v30_directory_written_with_pyarrow(tmp_path, capsys, monkeypatch):
    root = tmp_path / "so100_push"
    values = lerobot_v30.write_v30(root)
    out = tmp_path / "push.zarr"
    code, stdout, err = run_main("robot-rl-data", ["import-lerobot", str(root), str(out)], capsys, monkeypatch)
    assert code == 0, err
    store = EpisodeStore.open(out)
    assert store.episode_ends.tolist() == np.cumsum(lerobot_v30.LENGTHS).tolist()
    assert set(store.keys) == {"obs/state", "obs/environment_state", "obs/images/top", "action", "reward",
                               "terminated", "intervention"}
    np.testing.assert_array_equal(store.read("obs/state"), values["observation.state"])  # names x, y, z: kept whole
    np.testing.assert_array_equal(store.read("obs/environment_state"), values["observation.environment_state"])
    np.testing.assert_array_equal(store.read("action"), values["action"])
    np.testing.assert_array_equal(store.read("reward"), values["next.reward"])
    np.testing.assert_array_equal(store.read("terminated"), values["next.done"])  # no next.terminated: next.done
    assert not store.read("intervention").any()
    assert _frames_diff(store.read("obs/images/top"), values["observation.images.top"]).max() <= 2
    ep = store.episode(1)
    assert (ep.task, ep.source, ep.success, ep.seed) == ("so100_push", "teleop", True, -1)
    assert ep.instruction == lerobot_v30.TASKS[1] and ep.metadata["lerobot"]["episode_index"] == 1


def test_import_of_images_stored_as_pngs_in_the_data_files(tmp_path):
    values = lerobot_v30.write_v30(tmp_path / "pngs", png=True)
    import_lerobot(tmp_path / "pngs", tmp_path / "pngs.zarr")
    store = EpisodeStore.open(tmp_path / "pngs.zarr")
    np.testing.assert_array_equal(store.read("obs/images/top"), values["observation.images.top"])  # PNG: lossless
    np.testing.assert_array_equal(store.read("obs/state"), values["observation.state"])


def test_import_of_a_dataset_written_by_lerobot_itself(tmp_path):
    """tests/data/lerobot_written: LeRobot 0.4.4's LeRobotDataset.save_episode output (tests/lerobot_written.py)."""
    out = tmp_path / "written.zarr"
    s = import_lerobot(ROOT / "data/lerobot_written", out, task="pick", source="expert", success=False)
    assert s["episodes"] == 3 and s["fps"] == 30
    store, ref = EpisodeStore.open(out), lerobot_written.expected()
    assert store.episode_ends.tolist() == np.cumsum([n for n, _ in lerobot_written.EPISODES]).tolist()
    np.testing.assert_array_equal(store.read("obs/state"), ref["observation.state"])
    np.testing.assert_array_equal(store.read("action"), ref["action"])
    d = _frames_diff(store.read("obs/images/cam"), ref["observation.images.cam"])  # LeRobot's lossy AV1 encode
    assert d.mean() < 8, d.mean()
    assert [store.episode(i).instruction for i in range(3)] == [t for _, t in lerobot_written.EPISODES]
    assert {store.episode(i).task for i in range(3)} == {"pick"} and not store.episode_attr("success").any()


def test_lerobot_reads_our_export(cam_store, exported):
    lerobot_dataset = pytest.importorskip("lerobot.datasets.lerobot_dataset", reason="the lerobot extra")
    ds = lerobot_dataset.LeRobotDataset("local/lift", root=exported, video_backend="pyav")
    src = EpisodeStore.open(cam_store)
    assert len(ds) == src.n_steps and ds.num_episodes == 3 and ds.fps == 20
    state = np.concatenate([src.read("obs/object"), src.read("obs/proprio")], 1)
    for i in (0, src.episode_ends[0], src.n_steps - 1):  # first frame, an episode's first, the last
        item = ds[int(i)]
        np.testing.assert_array_equal(item["observation.state"].numpy(), state[i])
        np.testing.assert_array_equal(item["action"].numpy(), src.read("action")[i])
        frame = (item["observation.images.wrist"].permute(1, 2, 0).numpy() * 255).round()
        assert np.abs(frame - src.read("obs/images/wrist")[i]).mean() < 8
        e = int(np.searchsorted(src.episode_ends, i, side="right"))
        assert item["task"] == src.episode(e).instruction and int(item["episode_index"]) == e


def test_image_stats_of_long_large_episodes_come_from_a_sample_and_count_every_frame():
    from robot_rl.data.lerobot_dataset import IMAGE_STATS_FRAMES, _image_stats

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(IMAGE_STATS_FRAMES * 3, 320, 320, 3), dtype=np.uint8)
    frames[..., 0] //= 2  # channels with different means
    s = _image_stats(frames)
    assert s["count"].tolist() == [len(frames)] and s["mean"].shape == (3, 1, 1)
    full = frames.reshape(-1, 3).mean(0) / 255.0
    np.testing.assert_allclose(s["mean"].ravel(), full, atol=0.01)
    assert s["min"].ravel().tolist() == [0.0, 0.0, 0.0] and s["max"].ravel()[1] == 1.0
