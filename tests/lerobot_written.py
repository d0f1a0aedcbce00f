"""How tests/data/lerobot_written/ was made: by LeRobot 0.4.4's own LeRobotDataset.create / add_frame / save_episode
(av 18, datasets 4.8.5, pyarrow 26). tests/test_lerobot_dataset.py imports it and checks every value against
`expected()`, which draws the same numbers again.

    python tests/lerobot_written.py OUT     # needs `pip install lerobot==0.4.4`; not run by the tests

Three episodes at 30 fps (12, 9, 15 frames; tasks "pick the cube", "place the cube", "pick the cube"): a float32 [6]
observation.state and action named joint<i>.pos (no robot_rl split), a 32x48 camera observation.images.cam stored
by LeRobot as one AV1 video (its default encoder settings, lossy) holding all three episodes.
"""

from __future__ import annotations

import sys

import numpy as np

EPISODES = ((12, "pick the cube"), (9, "place the cube"), (15, "pick the cube"))
FPS = 30


def image(e: int, t: int) -> np.ndarray:
    y, x = np.mgrid[0:32, 0:48]
    return np.stack([128 + 100 * np.sin(x / 6 + t / 3 + e), 128 + 90 * np.cos(y / 5 + t / 4),
                     np.full((32, 48), 40.0 + 10 * t)], -1).clip(0, 255).astype(np.uint8)


def expected() -> dict[str, np.ndarray]:
    """Per frame, all episodes concatenated: observation.state, action, observation.images.cam."""
    rng = np.random.default_rng(0)
    out: dict[str, list] = {"observation.state": [], "action": [], "observation.images.cam": []}
    for e, (length, _) in enumerate(EPISODES):
        for t in range(length):  # the draw order of the frame dict below: state, then action
            out["observation.state"].append(rng.normal(size=6).astype(np.float32))
            out["observation.images.cam"].append(image(e, t))
            out["action"].append(rng.normal(size=6).astype(np.float32))
    return {k: np.stack(v) for k, v in out.items()}


def main(root: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    joints = [f"joint{i}.pos" for i in range(6)]
    features = {
        "observation.state": {"dtype": "float32", "shape": (6,), "names": joints},
        "observation.images.cam": {"dtype": "video", "shape": (32, 48, 3), "names": ["height", "width", "channels"]},
        "action": {"dtype": "float32", "shape": (6,), "names": joints},
    }
    ds = LeRobotDataset.create("local/written", fps=FPS, features=features, root=root, use_videos=True)
    rng = np.random.default_rng(0)
    for e, (length, task) in enumerate(EPISODES):
        for t in range(length):
            ds.add_frame({"observation.state": rng.normal(size=6).astype(np.float32),
                          "observation.images.cam": image(e, t),
                          "action": rng.normal(size=6).astype(np.float32), "task": task})
        ds.save_episode()
    ds.finalize()


if __name__ == "__main__":
    main(sys.argv[1])
