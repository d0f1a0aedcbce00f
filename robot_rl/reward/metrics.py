"""Evaluation figures of learned rewards, in numpy: Spearman rank correlation, AUROC, rates at a threshold.

Written out (a few lines each) so that evaluating a reward model needs no scipy / scikit-learn.
"""

from __future__ import annotations

import numpy as np


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of a 1-D array, ties get the mean of the ranks they span (as scipy.stats.rankdata)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    # boundaries of runs of equal values in sorted order
    starts = np.concatenate([[0], np.nonzero(np.diff(sorted_x))[0] + 1])
    ends = np.concatenate([starts[1:], [len(x)]])
    mean_rank = (starts + ends + 1) / 2.0  # ranks start..end-1 (0-based) -> mean of (start+1 .. end)
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation of two 1-D arrays (Pearson correlation of their tie-averaged ranks);
    nan when either is constant or they have fewer than 2 entries."""
    x, y = np.asarray(x).ravel(), np.asarray(y).ravel()
    if x.shape != y.shape:
        raise ValueError(f"spearman: x has {x.size} entries, y has {y.size}")
    if x.size < 2:
        return float("nan")
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denom = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denom) if denom > 0 else float("nan")


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: P(score of a random positive > score of a random negative), ties count 1/2
    (Mann-Whitney U / (n_pos n_neg)); nan without both classes."""
    scores, labels = np.asarray(scores, np.float64).ravel(), np.asarray(labels).ravel().astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    u = ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def threshold_for_tpr(pos_scores: np.ndarray, min_tpr: float) -> float:
    """The largest threshold t with fraction(pos_scores >= t) >= min_tpr (a positive is score >= t): the
    fewest false positives that still detect `min_tpr` of the positives."""
    s = np.sort(np.asarray(pos_scores, np.float64).ravel())[::-1]
    if s.size == 0:
        raise ValueError("threshold_for_tpr needs at least one positive score")
    if not 0.0 < min_tpr <= 1.0:
        raise ValueError(f"min_tpr={min_tpr!r} must be in (0, 1]")
    need = int(np.ceil(min_tpr * s.size - 1e-9))  # positives that must be at or above the threshold
    return float(s[max(need, 1) - 1])


def rates(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    """True-positive rate, false-positive rate and precision of `score >= threshold`."""
    scores, labels = np.asarray(scores, np.float64).ravel(), np.asarray(labels).ravel().astype(bool)
    pred = scores >= threshold
    tp, fp = int((pred & labels).sum()), int((pred & ~labels).sum())
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    return {
        "tpr": tp / n_pos if n_pos else float("nan"),
        "fpr": fp / n_neg if n_neg else float("nan"),
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "positives": n_pos,
        "negatives": n_neg,
    }
