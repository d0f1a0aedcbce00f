"""Episode store: round trips, crash safety under SIGKILL, readers beside a writer, the writer lock, bad input.

Run as a script, this file is the writer process the crash and reader tests start:
    python tests/test_episode_store.py write PATH            append deterministic episodes forever
    python tests/test_episode_store.py lockstep PATH N       append N, one per line read from stdin
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl.data import SOURCES, Episode, EpisodeStore, SequenceSampler, StoreError, StoreLockedError

ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]


def make_episode(k: int) -> Episode:
    """Episode number k of the test writer: every value derives from k, so a reader can check bytes."""
    rng = np.random.default_rng(k)
    n = 1 + (k * 7) % 23
    return Episode(
        steps={
            "obs/proprio": rng.standard_normal((n, 20)).astype(np.float32),
            "obs/images/cam": rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8),
            "action": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "reward": rng.standard_normal(n),
            "intervention": rng.random(n) < 0.3,
        },
        task="lift", source=SOURCES[k % len(SOURCES)], success=k % 3 == 0,
        instruction=f"episode {k}: pick up the cube ✓", seed=k, metadata={"k": k, "tags": ["a", k]},
    )


def _writer_main(argv: list[str]) -> None:
    mode, path = argv[0], argv[1]
    store = EpisodeStore.open(path, mode="a")
    print("ready", flush=True)
    if mode == "write":
        while True:
            k = store.n_episodes
            store.append([make_episode(k + j) for j in range(1 + (k % 3 == 0))])  # batches of 1 or 2
            print(f"committed {store.n_episodes}", flush=True)
    for k in range(int(argv[2])):
        store.append(make_episode(k))
        print(f"committed {store.n_episodes}", flush=True)
        sys.stdin.readline()


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )


def _assert_same_episode(got: Episode, want: Episode) -> None:
    assert set(got.steps) == set(want.steps)
    for k, v in want.steps.items():
        assert got.steps[k].dtype == v.dtype and got.steps[k].shape == v.shape, k
        assert got.steps[k].tobytes() == v.tobytes(), k
    for f in ("task", "source", "success", "instruction", "seed", "metadata"):
        assert getattr(got, f) == getattr(want, f), f


def _snapshot(path: Path) -> dict[str, bytes]:
    """Every file of a store except the lock (whose pid changes), by relative path."""
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.name != ".lock"}


# ---- round trip ---------------------------------------------------------------------------------------
def test_every_dtype_and_attribute_round_trips_bit_exact(tmp_path):
    rng = np.random.default_rng(0)

    def episode(n: int, k: int) -> Episode:
        steps = {"intervention": np.arange(n) % 2 == 1}
        for dt in ALL_DTYPES:
            d = np.dtype(dt)
            if d.kind == "b":
                v = rng.random((n, 3)) < 0.5
            elif d.kind in "iu":
                info = np.iinfo(d)
                v = rng.integers(info.min, info.max, (n, 3), dtype=d, endpoint=True)
            elif d.kind == "c":
                v = (rng.standard_normal((n, 3)) + 1j * rng.standard_normal((n, 3))).astype(d)
            else:
                v = (rng.standard_normal((n, 3)) * 1e3).astype(d)
            steps[f"x/{dt}"] = v
        steps["scalar"] = rng.standard_normal(n).astype(np.float32)
        steps["matrix"] = rng.standard_normal((n, 2, 5)).astype(np.float64)
        steps["obs/images/front"] = rng.integers(0, 256, (n, 12, 10, 3), dtype=np.uint8)
        return Episode(steps, task="peg_insert", source="teleop", success=bool(k), instruction="insère la cheville 🔩",
                       seed=2**40 + k, metadata={"operator": "ana", "gain": 0.5, "nested": {"ids": [1, 2]}})

    eps = [episode(7, 0), episode(1, 1), episode(30, 2)]
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        assert store.append(eps[:2]) == range(0, 2)
        assert store.append(eps[2]) == range(2, 3)

    store = EpisodeStore.open(tmp_path / "s.zarr")
    assert store.n_episodes == 3 and store.n_steps == 38
    assert list(store.episode_ends) == [7, 8, 38]
    for i, want in enumerate(eps):
        _assert_same_episode(store.episode(i), want)
    # The documented plain-zarr recipe reads the same bytes.
    z = zarr.open(tmp_path / "s.zarr", mode="r")
    ends = z["meta/episode_ends"][:]
    np.testing.assert_array_equal(z["data/x/uint64"][: ends[-1]], np.concatenate([e.steps["x/uint64"] for e in eps]))
    assert list(z["meta/success"][:]) == [False, True, True]
    assert json.loads(str(z["meta/metadata"][2])) == eps[2].metadata


def test_images_are_stored_in_compressed_chunks_of_consecutive_frames(tmp_path):
    frames = np.zeros((70, 64, 64, 3), dtype=np.uint8)
    frames[:, 10:20, 10:20] = 255
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        store.append(Episode({"obs/images/front": frames, "intervention": np.zeros(70, bool)}, task="lift",
                             source="policy", success=False))
    arr = zarr.open(tmp_path / "s.zarr", mode="r")["data/obs/images/front"]
    assert arr.chunks == (64, 64, 64, 3)  # 64 frames per chunk
    chunk_files = [p for p in (tmp_path / "s.zarr/data/obs/images/front/c").rglob("*") if p.is_file()]
    assert len(chunk_files) == 2
    assert sum(p.stat().st_size for p in chunk_files) < frames.nbytes / 100
    # large frames: fewer per chunk, so one chunk stays a few MiB
    from robot_rl.data.episode_store import KeySpec, _chunks

    assert _chunks(KeySpec((480, 640, 3), np.dtype(np.uint8)))[0] == 4


# ---- crash safety and concurrency ---------------------------------------------------------------------
def test_sigkilled_writer_never_loses_a_committed_episode(tmp_path):
    """A real writer process is SIGKILLed at random moments 12 times (up to 36 until one kill lands inside a commit);
    after each kill the store opens, holds at least every episode the writer reported committed, and every episode
    is byte-identical."""
    path = tmp_path / "s.zarr"
    keys = list(make_episode(0).steps)
    expected: list[Episode] = []
    rng = random.Random(7)
    committed = 0
    torn = 0  # kills that landed inside a commit
    kills = 0
    for it in range(36):
        if it >= 12 and torn:
            break
        proc = _spawn("write", str(path))
        seen = ""
        if it % 4 == 3:  # sometimes kill during start-up / open / repair
            time.sleep(rng.uniform(0.0, 0.6))
        else:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
            if it % 4 == 1:  # wait for a commit first, so progress is made however slow the machine is
                seen = proc.stdout.readline()
                assert seen.startswith("committed"), (seen, proc.stderr.read())
            time.sleep(rng.uniform(0.02, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        kills += 1
        out, err = proc.communicate()
        assert proc.returncode == -signal.SIGKILL, err
        reported = [int(line.split()[1]) for line in (seen + out).splitlines() if line.startswith("committed")]
        reported_n = reported[-1] if reported else committed

        store = EpisodeStore.open(path)  # a reader: no repair has happened yet
        n = store.n_episodes
        assert n >= max(reported_n, committed), f"kill {it}: lost committed episodes ({n} < {reported_n})"
        assert n <= reported_n + 2  # at most the one batch in flight was committed but not reported
        while len(expected) < n:
            expected.append(make_episode(len(expected)))
        for key in keys if n else []:  # a kill before the first commit (a slow machine) leaves nothing to compare
            want = np.concatenate([e.steps[key] for e in expected[:n]])
            got = store.read(key)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (it, key)
        assert [str(s) for s in store.episode_attr("instruction")] == [e.instruction for e in expected[:n]]
        assert [json.loads(str(m)) for m in store.episode_attr("metadata")] == [e.metadata for e in expected[:n]]
        # Evidence the kill landed inside a commit: rows past the committed end, or temp files.
        torn += any(store.array(k).shape[0] > store.n_steps for k in keys) or any(
            p.name.endswith((".tmp", ".partial")) for p in path.rglob("*"))
        committed = n

    # No stale lock after a SIGKILL, and the next writer truncates whatever the last kill left behind.
    with EpisodeStore.open(path, mode="a") as store:
        assert store.n_episodes == committed
        assert all(store.array(k).shape[0] == store.n_steps for k in keys)
        assert not [p for p in path.rglob("*") if p.name.endswith((".tmp", ".partial"))]
        store.append(make_episode(committed))
    assert committed > 0
    assert torn >= 1, "no kill landed inside a commit, so the test proved nothing; commits are too fast to hit"
    print(f"\ncrash test: {kills} SIGKILLs, {committed} episodes committed, {torn} kills landed inside a commit")


def test_failed_commit_keeps_committed_episodes_and_the_next_append_recovers(tmp_path):
    path = tmp_path / "s.zarr"
    store = EpisodeStore.open(path, mode="a")
    store.append(make_episode(0))
    # A real I/O failure in the middle of a commit: data/action's zarr.json cannot be replaced.
    meta_file = path / "data/action/zarr.json"
    meta_file.rename(tmp_path / "saved.json")
    meta_file.mkdir()
    with pytest.raises(OSError):
        store.append(make_episode(1))
    meta_file.rmdir()
    (tmp_path / "saved.json").rename(meta_file)
    reader = EpisodeStore.open(path)
    assert reader.n_episodes == 1
    _assert_same_episode(reader.episode(0), make_episode(0))
    store.append(make_episode(2))
    store.close()
    reader.refresh()
    assert reader.n_episodes == 2
    _assert_same_episode(reader.episode(1), make_episode(2))
    assert all(reader.array(k).shape[0] == reader.n_steps for k in reader.keys)


def test_reader_sees_episodes_another_process_appends(tmp_path):
    path = tmp_path / "s.zarr"
    proc = _spawn("lockstep", str(path), "4")
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        reader = EpisodeStore.open(path)
        assert reader.n_episodes == 0
        for k in range(4):
            assert proc.stdout.readline().strip() == f"committed {k + 1}"
            assert reader.n_episodes == k  # a reader keeps its view until it refreshes ...
            reader.refresh()
            assert reader.n_episodes == k + 1  # ... then sees the other process's commit
            _assert_same_episode(reader.episode(k), make_episode(k))
            # The writer is alive and holds the lock: a second writer is refused, naming path and pid.
            with pytest.raises(StoreLockedError) as e:
                EpisodeStore.open(path, mode="a")
            assert str(path) in str(e.value) and f"pid {proc.pid}" in str(e.value)
            proc.stdin.write("\n")
            proc.stdin.flush()
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert EpisodeStore.open(path).n_episodes == 4


def test_second_writer_in_same_process_is_refused_until_the_first_closes(tmp_path):
    path = tmp_path / "s.zarr"
    first = EpisodeStore.open(path, mode="a")
    with pytest.raises(StoreLockedError, match=f"{path}.*pid {os.getpid()}"):
        EpisodeStore.open(path, mode="a")
    first.close()
    EpisodeStore.open(path, mode="a").close()


def test_reader_cannot_append(tmp_path):
    EpisodeStore.open(tmp_path / "s.zarr", mode="a").close()
    with pytest.raises(StoreError, match="read-only; open it with mode='a'"):
        EpisodeStore.open(tmp_path / "s.zarr").append(make_episode(0))


# ---- bad input ----------------------------------------------------------------------------------------
def _three_step_episode(k: int) -> Episode:
    ep = make_episode(k)
    ep.steps = {key: v[:3] for key, v in ep.steps.items()}
    return ep


@pytest.mark.parametrize(
    "change, message",
    [
        ({"obs/proprio": None}, "missing key 'obs/proprio' (expected float32 per-step shape [20])"),
        ({"action": np.zeros((3, 5), np.float32)}, "key 'action' has per-step shape [5], expected [4]"),
        ({"action": np.zeros((3, 4), np.float64)}, "key 'action' has dtype float64, expected float32"),
        ({"extra": np.zeros(3, np.float32)}, "unknown key 'extra'"),
        ({"reward": np.zeros(2)}, "key 'reward' has 2 steps, expected 3"),
        ({"action": np.float32(1.0)}, "key 'action' is a scalar; give one value per step"),
    ],
    ids=["missing_key", "wrong_shape", "wrong_dtype", "unknown_key", "wrong_length", "scalar"],
)
def test_bad_episode_is_refused_naming_key_and_store_is_unchanged(tmp_path, change, message):
    path = tmp_path / "s.zarr"
    with EpisodeStore.open(path, mode="a") as store:
        store.append(make_episode(0))
        before = _snapshot(path)
        bad = _three_step_episode(1)
        for key, value in change.items():
            if value is None:
                del bad.steps[key]
            else:
                bad.steps[key] = value
        with pytest.raises(StoreError) as e:
            store.append([make_episode(2), bad])  # one bad episode refuses the whole batch
        assert message in str(e.value)
        assert store.n_episodes == 1
    assert _snapshot(path) == before
    assert EpisodeStore.open(path).n_episodes == 1


def test_zero_step_episode_is_refused_and_store_is_unchanged(tmp_path):
    path = tmp_path / "s.zarr"
    with EpisodeStore.open(path, mode="a") as store:
        store.append(make_episode(0))
        before = _snapshot(path)
        empty = Episode({k: v[:0] for k, v in make_episode(0).steps.items()}, "lift", "expert", False)
        with pytest.raises(StoreError, match="zero steps; an episode needs at least one step"):
            store.append(empty)
    assert _snapshot(path) == before


def test_first_episode_must_carry_a_bool_intervention_mask(tmp_path):
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        with pytest.raises(StoreError, match="missing key 'intervention'"):
            store.append(Episode({"action": np.zeros((3, 2), np.float32)}, "lift", "expert", False))
        with pytest.raises(StoreError, match="'intervention' has dtype int64 .* expected bool"):
            store.append(Episode({"intervention": np.zeros(3, np.int64)}, "lift", "expert", False))
        assert store.n_episodes == 0 and not store.keys


@pytest.mark.parametrize(
    "field, value, message",
    [("source", "robot", "source='robot'; valid sources: expert, teleop, policy, intervention"),
     ("task", "", "task='' must be a non-empty string"),
     ("metadata", {"x": object()}, "metadata must be JSON-serializable"),
     ("seed", 1.5, "seed=1.5 must be an integer")],
)
def test_bad_episode_attribute_is_refused_naming_it(tmp_path, field, value, message):
    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        ep = make_episode(0)
        setattr(ep, field, value)
        with pytest.raises(StoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
            store.append(ep)
        assert store.n_episodes == 0


def test_opening_a_path_that_is_not_a_store_names_the_path_and_problem(tmp_path):
    missing = tmp_path / "nope.zarr"
    with pytest.raises(StoreError, match=f"no episode store at {missing}: the path does not exist"):
        EpisodeStore.open(missing)
    a_file = tmp_path / "file.txt"
    a_file.write_text("hello")
    for mode in ("r", "a"):
        with pytest.raises(StoreError, match=f"{a_file} is a file, not an episode store"):
            EpisodeStore.open(a_file, mode=mode)
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    for mode in ("r", "a"):
        with pytest.raises(StoreError, match=f"{folder} is not an episode store: it has no zarr.json"):
            EpisodeStore.open(folder, mode=mode)
    assert sorted(p.name for p in folder.iterdir()) == ["cat.jpg"]  # nothing was written into it
    plain = tmp_path / "plain.zarr"
    zarr.open_group(plain, mode="w")
    with pytest.raises(StoreError, match=f"{plain} is a zarr node but not an episode store"):
        EpisodeStore.open(plain)


def _store_with_episodes(path: Path, n: int = 3) -> None:
    with EpisodeStore.open(path, mode="a") as store:
        store.append([make_episode(k) for k in range(n)])


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: (p / "zarr.json").write_text('{"zarr_format": 3, "node_ty'), "zarr.json is not valid JSON"),
        (lambda p: (p / "meta/episode_ends/zarr.json").write_text("\x00\x00garbage"),
         "meta/episode_ends/zarr.json is not valid JSON"),
        (lambda p: (p / "meta/episode_ends/zarr.json").unlink(), "meta/episode_ends is missing"),
        (lambda p: zarr.open_array(p / "meta/episode_ends", mode="r+").__setitem__(slice(None), [5, 3, 9]),
         "meta/episode_ends is not strictly increasing"),
        (lambda p: zarr.open_array(p / "data/action", mode="r+").resize((2, 4)), "data/action has shape [2, 4]"),
    ],
    ids=["root_json", "ends_json", "ends_missing", "ends_order", "data_short"],
)
def test_corrupted_store_is_refused_naming_path_and_what_is_wrong(tmp_path, damage, message):
    path = tmp_path / "s.zarr"
    _store_with_episodes(path)
    damage(path)
    for mode in ("r", "a"):
        with pytest.raises(StoreError) as e:
            EpisodeStore.open(path, mode=mode)
        assert str(path) in str(e.value) and message in str(e.value)


# ---- damage: missing, truncated or altered chunks, leftover temp stores ---------------------------------
@pytest.mark.parametrize("kind", ["delete", "truncate", "bitflip"])
@pytest.mark.parametrize("array, chunk", [("data/obs/proprio", "c/1/0"), ("meta/success", "c/0")], ids=["obs", "meta"])
def test_a_damaged_chunk_is_refused_naming_its_episodes_and_skip_damaged_leaves_them_out(tmp_path, kind, array, chunk):
    from bench.store_integrity import damage_chunk

    path = tmp_path / "s.zarr"
    _store_with_episodes(path, 120)  # 1,432 steps: obs/proprio rows 1024.. are chunk c/1/0; meta holds 1024 per chunk
    ends = EpisodeStore.open(path).episode_ends
    damaged = list(range(120)) if array.startswith("meta/") else list(range(int(np.searchsorted(ends, 1024, "right")), 120))
    damage_chunk(path / array / chunk, kind, random.Random(0))

    for mode in ("r", "a"):  # readers and writers refuse it, naming the episodes, the chunk and the fix
        with pytest.raises(StoreError) as e:
            EpisodeStore.open(path, mode=mode)
        assert f"{path} has {len(damaged)} damaged episode(s) of 120" in str(e.value)
        assert f"{array} chunk {chunk}" in str(e.value) and "--skip-damaged" in str(e.value)
    store = EpisodeStore.open(path, skip_damaged=True)
    assert list(store.damaged_episodes) == damaged
    good = store.good_episodes
    assert good.tolist() == sorted(set(range(120)) - set(damaged))
    with pytest.raises(StoreError, match="damaged episode"):
        store.episode(damaged[0])
    with pytest.raises(StoreError, match="damaged episode"):
        store.read("obs/proprio")
    summary = store.summary()
    assert summary["episodes"] == len(good) and summary["damaged_episodes"] == damaged
    if not len(good):  # meta/success lost: no success rate at all (not 0.000), no statistics
        assert summary["success_rate"] is None
        with pytest.raises(StoreError, match="every episode is damaged"):
            store.stats(["obs/proprio"])
        return
    assert summary["success_rate"] == pytest.approx(np.mean([make_episode(k).success for k in good]))
    _assert_same_episode(store.episode(int(good[-1])), make_episode(int(good[-1])))
    sampler = SequenceSampler(store, obs_keys=["obs/proprio"], action_keys=["action"], obs_horizon=1, action_horizon=2)
    assert sorted(set(sampler.episode.tolist())) == good.tolist()
    # Statistics over the intact episodes only, kept in memory: meta/stats never holds numbers from damaged data.
    want = np.concatenate([make_episode(k).steps["obs/proprio"] for k in good]).astype(np.float64)
    st = store.stats(["obs/proprio"])["obs/proprio"]
    assert st.count == len(want) and np.allclose(st.mean, want.mean(0)) and np.allclose(st.min, want.min(0))
    assert "keys" not in json.loads((path / "meta/stats/zarr.json").read_text())["attributes"]


def test_random_chunk_damage_is_always_detected(tmp_path):
    """A small sample of bench/store_integrity.py: random chunk, random kind, detected at open every time."""
    from bench.store_integrity import build_store, run_trials

    path = tmp_path / "s.zarr"
    build_store(path, episodes=120)
    seed = random.randrange(10**6)
    result = run_trials(path, trials=15, seed=seed)
    assert result["detected"] == 15 and result["silent"] == 0, (seed, result["missed"])


def test_leftover_temp_stores_of_killed_creators_are_removed_at_the_next_open(tmp_path):
    path = tmp_path / "s.zarr"
    # A real creator process, stopped just before the rename that publishes its temp store.
    code = ("import os, sys, time\n"
            "os.rename = lambda *a: (print('creating', flush=True), time.sleep(60))\n"
            "from robot_rl.data import EpisodeStore\n"
            "EpisodeStore.open(sys.argv[1], mode='a')\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "creating"
        (live,) = tmp_path.glob(".s.zarr.*.creating")
        EpisodeStore.open(path, mode="a").close()  # another writer creates the store: the live temp store stays
        assert live.is_dir()
    finally:
        proc.kill()
        proc.wait()
    unlocked = tmp_path / ".s.zarr.0123.creating"  # killed before it took its lock: removed once a minute old
    unlocked.mkdir()
    young = tmp_path / ".s.zarr.4567.creating"
    young.mkdir()
    os.utime(unlocked, (time.time() - 120, time.time() - 120))
    EpisodeStore.open(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [young.name, "s.zarr"]


def test_a_built_store_appears_whole_or_not_at_all(tmp_path):
    """episode_store.building (imports): appends go to a temp store renamed at the end, removed on an error, swept
    by the next open after a SIGKILL."""
    from robot_rl.data.episode_store import building

    path = tmp_path / "new.zarr"
    with building(path) as store:
        store.append([make_episode(0), make_episode(1)])
        assert not path.exists()
    assert EpisodeStore.open(path).n_episodes == 2
    with pytest.raises(StoreError, match="already exists"):
        with building(path):
            pass
    other = tmp_path / "other.zarr"
    with pytest.raises(RuntimeError, match="stop"):
        with building(other) as store:
            store.append(make_episode(0))
            raise RuntimeError("stop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.zarr"]
    code = ("import sys\nfrom robot_rl.data.episode_store import building\n"
            "with building(sys.argv[1]) as s:\n    print('building', flush=True)\n    sys.stdin.readline()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(other)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        assert proc.stdout.readline().strip() == "building"
        (live,) = tmp_path.glob(".other.zarr.*.creating")
    finally:
        proc.kill()
        proc.wait()
    EpisodeStore.open(other, mode="a").close()  # the killed builder's temp store is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.zarr", "other.zarr"]


if __name__ == "__main__":
    _writer_main(sys.argv[1:])
