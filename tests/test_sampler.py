"""Sequence sampler, normalization statistics and the torch Dataset over an episode store."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr

from robot_rl.data import Episode, EpisodeStore, StoreError
from robot_rl.data.sampler import SequenceSampler
from robot_rl.data.stats import compute_stats, normalize, unnormalize
from robot_rl.data.torch_dataset import WindowDataset

LENGTHS = [1, 2, 5, 3, 7]


def _episode(start: int, n: int, rng) -> Episode:
    g = np.arange(start, start + n)
    return Episode(
        steps={
            "obs/x": np.stack([g, -g], axis=1).astype(np.float32),  # row value = global step index
            "obs/images/cam": rng.integers(0, 256, (n, 6, 4, 3), dtype=np.uint8),
            "action": (g[:, None] * 10 + np.arange(3)).astype(np.float32),
            "reward": g.astype(np.float64),
            "intervention": g % 2 == 0,
        },
        task="lift", source="expert", success=True,
    )


@pytest.fixture()
def store(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "s.zarr"
    with EpisodeStore.open(path, mode="a") as w:
        start = 0
        for n in LENGTHS:
            w.append(_episode(start, n, rng))
            start += n
    return EpisodeStore.open(path)


def _expected_window(store, ep: int, t: int, to: int, ta: int):
    """Reference: a window by plain Python, clamping to the episode's first / last step."""
    s, e = store.episode_range(ep)
    obs = [max(s + t + d, s) for d in range(-to + 1, 1)]
    act = [min(s + t + d, e - 1) for d in range(ta)]
    return obs, act, [s + t + d < s for d in range(-to + 1, 1)], [s + t + d > e - 1 for d in range(ta)]


@pytest.mark.parametrize("mode", ["memory", "lazy"])
def test_windows_are_exact_and_repeat_first_and_last_step_at_episode_edges(store, mode):
    to, ta = 3, 4  # longer than the 1- and 2-step episodes: padding on both sides at once
    sampler = SequenceSampler(store, obs_keys=["obs/x"], action_keys=["action"], obs_horizon=to,
                              action_horizon=ta, mode=mode)
    assert len(sampler) == sum(LENGTHS)
    w = sampler.windows(np.arange(len(sampler)))
    x, a = store.read("obs/x"), store.read("action")
    i = 0
    for ep, n in enumerate(LENGTHS):
        for t in range(n):
            obs, act, obs_pad, act_pad = _expected_window(store, ep, t, to, ta)
            assert w["episode"][i] == ep and w["step"][i] == t
            np.testing.assert_array_equal(w["obs/x"][i], x[obs])
            np.testing.assert_array_equal(w["action"][i], a[act])
            assert w["obs_is_pad"][i].tolist() == obs_pad and w["action_is_pad"][i].tolist() == act_pad
            i += 1
    # Spot-check against literal values (row value = global step): episode 2 spans steps 3..7.
    first = sampler.windows([3])  # episode 2, t = 0
    assert first["obs/x"][0, :, 0].tolist() == [3, 3, 3]
    assert first["action"][0, :, 0].tolist() == [30, 40, 50, 60]
    last = sampler.windows([7])  # episode 2, t = 4 (its last step)
    assert last["obs/x"][0, :, 0].tolist() == [5, 6, 7]
    assert last["action"][0, :, 0].tolist() == [70, 70, 70, 70]
    assert last["action_is_pad"][0].tolist() == [False, True, True, True]


def test_episode_selection_samples_only_those_episodes_in_that_order(store):
    sampler = SequenceSampler(store, obs_keys=["obs/x"], obs_horizon=2, action_horizon=2, episodes=[3, 1])
    w = sampler.windows(np.arange(len(sampler)))
    assert len(sampler) == LENGTHS[3] + LENGTHS[1]
    assert w["episode"].tolist() == [3, 3, 3, 1, 1]
    assert w["obs/x"][:, -1, 0].tolist() == [8, 9, 10, 1, 2]  # anchors are the episodes' own steps
    assert w["obs/x"][3, :, 0].tolist() == [1, 1]  # padding stays inside episode 1, not episode 0 or 3


def test_memory_and_lazy_modes_give_identical_batches(store):
    kw = dict(obs_keys=["obs/x", "obs/images/cam"], action_keys=["action", "reward"], obs_horizon=2, action_horizon=5)
    mem, lazy = SequenceSampler(store, mode="memory", **kw), SequenceSampler(store, mode="lazy", **kw)
    a = mem.sample(64, np.random.default_rng(3))
    b = lazy.sample(64, np.random.default_rng(3))
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    assert a["obs/images/cam"].shape == (64, 2, 6, 4, 3) and a["obs/images/cam"].dtype == np.uint8
    assert a["reward"].shape == (64, 5)


def test_sampler_rejects_bad_arguments_naming_them(store):
    with pytest.raises(ValueError, match="obs_horizon=0 must be a whole number >= 1"):
        SequenceSampler(store, obs_horizon=0)
    with pytest.raises(KeyError, match="no key 'obs/depth'"):
        SequenceSampler(store, obs_keys=["obs/depth"])
    with pytest.raises(ValueError, match=r"\['action'\] are in both obs_keys and action_keys"):
        SequenceSampler(store, obs_keys=["action"])
    with pytest.raises(IndexError, match="episode 9 out of range"):
        SequenceSampler(store, episodes=[0, 9])
    with pytest.raises(ValueError, match="mode='disk'"):
        SequenceSampler(store, mode="disk")


# ---- normalization statistics -------------------------------------------------------------------------
def test_streaming_stats_equal_numpy_over_all_steps():
    x = np.random.default_rng(1).standard_normal((1000, 3)) * [1, 10, 100] + [0, 5, -7]
    st = compute_stats(lambda a, b: x[a:b], len(x), block_steps=37)  # many uneven blocks
    np.testing.assert_allclose(st.mean, x.mean(0), rtol=1e-12)
    np.testing.assert_allclose(st.std, x.std(0), rtol=1e-10)
    np.testing.assert_array_equal(st.min, x.min(0))
    np.testing.assert_array_equal(st.max, x.max(0))


def test_stats_are_computed_once_and_saved_in_the_store(store):
    st = store.stats(["obs/x", "action"])
    x = store.read("obs/x").astype(np.float64)
    np.testing.assert_allclose(st["obs/x"].mean, x.mean(0))
    np.testing.assert_array_equal(st["action"].max, store.read("action").max(0))
    saved = dict(zarr.open(store.path, mode="r")["meta/stats"].attrs)
    assert saved["n_episodes"] == len(LENGTHS) and set(saved["keys"]) == {"obs/x", "action"}
    # A new reader uses the saved figures instead of recomputing: mark them and look for the mark.
    saved["keys"]["obs/x"]["mean"] = [42.0, 42.0]
    zarr.open_group(store.path, path="meta/stats", mode="a").attrs.put(saved)
    assert EpisodeStore.open(store.path).stats(["obs/x"])["obs/x"].mean.tolist() == [42.0, 42.0]


def test_appending_episodes_makes_saved_stats_stale(store):
    store.stats(["reward"])
    with EpisodeStore.open(store.path, mode="a") as w:
        w.append(_episode(1000, 4, np.random.default_rng(0)))
    fresh = EpisodeStore.open(store.path).stats(["reward"])["reward"]
    assert fresh.max == 1003 and fresh.count == sum(LENGTHS) + 4


def test_stats_of_images_are_refused_with_the_alternative(store):
    with pytest.raises(StoreError, match="scale images by 1/255"):
        store.stats(["obs/images/cam"])


def test_normalize_maps_range_to_unit_interval_and_inverts(store):
    st = store.stats(["action"])["action"]
    a = store.read("action")
    y = normalize(a, st, "minmax")
    assert y.min() == -1.0 and y.max() == 1.0
    np.testing.assert_allclose(unnormalize(y, st, "minmax"), a, atol=1e-4)
    z = normalize(a, st, "meanstd")
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(z.std(0), 1, atol=1e-5)


# ---- torch Dataset ------------------------------------------------------------------------------------
def test_torch_dataset_returns_tensors_equal_to_sampler_windows(store):
    sampler = SequenceSampler(store, obs_keys=["obs/x", "obs/images/cam"], obs_horizon=2, action_horizon=4)
    ds = WindowDataset(sampler)
    one = ds[5]
    want = sampler.windows([5])
    assert set(one) == set(want)
    for k, v in one.items():
        assert isinstance(v, torch.Tensor) and np.array_equal(v.numpy(), want[k][0]), k
    assert one["obs/images/cam"].dtype == torch.uint8
    batches = list(ds.loader(batch_size=4, shuffle=True, seed=0))
    assert len(batches) == len(ds) // 4
    assert batches[0]["action"].shape == (4, 4, 3) and batches[0]["obs/x"].shape == (4, 2, 2)
    seen = torch.cat([b["obs/x"][:, -1, 0] for b in batches]).long().tolist()
    assert len(set(seen)) == len(seen)  # each window once per epoch


def test_torch_dataset_normalizes_float_lowdim_keys_only(store):
    sampler = SequenceSampler(store, obs_keys=["obs/x", "obs/images/cam"], obs_horizon=2, action_horizon=4)
    ds = WindowDataset(sampler, normalize="minmax")
    b = ds[np.arange(len(ds))]
    assert float(b["action"].min()) == -1.0 and float(b["action"].max()) == 1.0
    assert b["obs/images/cam"].dtype == torch.uint8  # images are left to the encoder
    with pytest.raises(ValueError, match="normalize='zscore'"):
        WindowDataset(sampler, normalize="zscore")
