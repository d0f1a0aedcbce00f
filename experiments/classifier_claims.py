"""Diagnostic: success classifiers scored on the policy's own labelled episodes from a learned-reward run.

    python experiments/classifier_claims.py runs/peg_exp/noshape/checkpoints/step_000100000 \
        runs/quickstart/peg38g/reward/reward_model runs/peg_exp/rw_g1/reward_model [--thresholds 0.5,0.9,0.99]

A residual run with rl.reward=learned keeps the training episodes the operator labelled in its checkpoints
(robot_rl/reward/online.py OnlineReward: every state of each, its label). Each reward model given is scored on
them: an episode is claimed when the classifier fires on any of its states (at the model's own threshold, and at
each of --thresholds). With several models, "all fire" claims only where every one fires at its own threshold (an
ensemble's agreement). Prints one line per classifier: claims on the labelled successes and on the failures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from robot_rl.common import checkpoint
from robot_rl.reward.model import load_reward_model
from robot_rl.reward.online import labelled_episodes


def run_episodes(path: Path) -> list[tuple[dict, bool]]:
    """[(obs {key: [T, dim]}, the operator's label)] of a residual checkpoint's labelled episodes."""
    tensors, cfg = checkpoint.load(path)
    online = checkpoint.unflatten(cfg["train"]["online"], tensors)
    keys = [k[len("labelled."):] for k in online["arrays"] if k.startswith("labelled.")]
    return [(e.obs, e.label) for e in labelled_episodes(online["state"], online["arrays"], keys)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path, help="a learned-reward residual run's checkpoints/step_* directory")
    ap.add_argument("models", nargs="+", help="reward model directories")
    ap.add_argument("--thresholds", default="", help="comma-separated probabilities to score at as well")
    args = ap.parse_args()
    episodes = run_episodes(args.checkpoint)
    label = np.array([lab for _, lab in episodes])
    print(f"{len(episodes)} labelled episodes: {int(label.sum())} successes, {int((~label).sum())} failures")

    def line(name: str, claimed: np.ndarray) -> None:
        print(f"{name}: claims on successes {int((claimed & label).sum())}/{int(label.sum())}, "
              f"on failures {int((claimed & ~label).sum())}/{int((~label).sum())}")

    fires = []
    for path in args.models:
        model = load_reward_model(path)
        probs = [model.success_prob(obs) for obs, _ in episodes]  # one pass; success() is prob >= threshold
        best = np.array([p.max() for p in probs])
        fires.append([p >= model.threshold for p in probs])
        line(f"{path} (threshold {model.threshold:.4f})", best >= model.threshold)
        for t in (float(x) for x in args.thresholds.split(",") if x):
            line(f"  at {t:g}", best >= t)
    if len(fires) > 1:
        line("all fire", np.array([np.logical_and.reduce([f[e] for f in fires]).any() for e in range(len(episodes))]))


if __name__ == "__main__":
    main()
