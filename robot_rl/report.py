"""The quickstart report: one HTML page (figures embedded, so the file stands alone) and a Markdown summary.

    html, md = write_report(run_dir, stages)      # stages: the pipeline's {stage name: summary}

Reads what the stages left in the run directory (their metrics.json histories and videos) and shows:
success rates with 95% intervals as bars, learning curves, reward-model quality, intervention rates,
control-loop latency and frames + video of the final policy. A section whose stage did not run is left out.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from pathlib import Path

from robot_rl.common.atomic import atomic_write_text

# (stage, label) of the policies compared in the success bars, in pipeline order.
SUCCESS_STAGES = (("expert", "scripted expert"), ("eval_bc", "diffusion BC"), ("eval_residual", "BC + residual RL"))
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 960px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; } td, th { border: 1px solid #ccc; padding: 4px 10px; }
th { background: #f3f3f3; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; } .muted { color: #777; } video { max-width: 100%; }
"""


def _png(fig) -> str:
    """A matplotlib figure as a base64 PNG (closed afterwards)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _img(alt: str, png: str | bytes) -> str:
    """An <img> embedding a PNG (base64 text, or the file's bytes) in the page."""
    data = png if isinstance(png, str) else base64.b64encode(png).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _history(path: Path) -> dict:
    try:
        return json.loads(path.read_text()).get("history", {})
    except (OSError, ValueError):
        return {}


def success_rows(stages: dict) -> list[tuple[str, dict]]:
    return [(label, stages[s]) for s, label in SUCCESS_STAGES if s in stages and "success_rate" in stages[s]]


def success_figure(rows: list[tuple[str, dict]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    labels = [label for label, _ in rows]
    rates = [r["success_rate"] for _, r in rows]
    lo = [r["success_rate"] - r["success_ci95"][0] for _, r in rows]
    hi = [r["success_ci95"][1] - r["success_rate"] for _, r in rows]
    bars = ax.bar(labels, rates, yerr=[lo, hi], capsize=6, color=["#888", "#4c72b0", "#55a868", "#c44e52"][: len(rows)])
    for b, v in zip(bars, rates):
        ax.text(b.get_x() + b.get_width() / 2, 0.02, f"{v:.2f}", ha="center", va="bottom", color="white",
                fontweight="bold")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("success rate (95% CI)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def curves_figure(run_dir: Path) -> str | None:
    """BC loss and residual-RL success against their own step axes, from the runs' metrics.json."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    bc = _history(run_dir / "bc" / "metrics.json")
    if bc.get("train/loss"):
        panels.append(("BC training loss", "gradient step", {"loss": bc["train/loss"]}, True))
    rl = _history(run_dir / "residual" / "metrics.json")
    series = {name: rl[tag] for tag, name in (("rollout/success_rate", "training episodes"),
                                              ("eval/success_rate", "evaluation"),
                                              ("eval/base_success_rate", "base alone")) if rl.get(tag)}
    if series:
        panels.append(("residual RL success", "env step", series, False))
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.2), squeeze=False)
    for ax, (title, xlabel, data, log) in zip(axes[0], panels):
        for name, points in data.items():
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, ms=3, label=name)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if log and min(ys) > 0:
            ax.set_yscale("log")
        if not log:
            ax.set_ylim(-0.02, 1.02)
            ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return _png(fig)


def frames_figure(video: Path, count: int = 5) -> str | None:
    """`count` evenly spaced frames of an mp4 side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from robot_rl.video import read_mp4_frames

    try:
        frames = read_mp4_frames(video)
    except Exception:  # noqa: BLE001 - a missing or broken video only drops the strip
        return None
    if not len(frames):
        return None
    idx = sorted({int(round(i)) for i in [k * (len(frames) - 1) / max(count - 1, 1) for k in range(count)]})
    fig, axes = plt.subplots(1, len(idx), figsize=(2.4 * len(idx), 2.0), squeeze=False)
    for ax, i in zip(axes[0], idx):
        ax.imshow(frames[i])
        ax.set_title(f"step {i}", fontsize=8)
        ax.axis("off")
    fig.tight_layout()
    return _png(fig)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        return f"{v[0]:.2f}-{v[1]:.2f}"
    return str(v)


def _table(rows: list[list], header: list[str]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for r in rows:
        cells = "".join(f'<td class="num">{html.escape(_fmt(c))}</td>' if isinstance(c, (int, float)) else
                        f"<td>{html.escape(_fmt(c))}</td>" for c in r)
        out.append(f"<tr>{cells}</tr>")
    return "\n".join(out) + "</table>"


def _md_table(rows: list[list], header: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _scalars(d: dict, keys: tuple[str, ...] | None = None) -> list[list]:
    """[name, value] rows of a summary's numbers (or of `keys`, when present)."""
    items = [(k, d[k]) for k in keys if k in d] if keys else list(d.items())
    return [[k, v] for k, v in items if isinstance(v, (int, float)) and not isinstance(v, bool)]


# (stage, title, keys shown) of the sections that are tables of one stage's figures.
TABLE_SECTIONS = (
    ("reward", "Reward models (held-out episodes)",
     ("progress_spearman", "classifier_auroc", "classifier_fpr", "classifier_tpr", "threshold", "test_episodes")),
    ("residual", "Residual RL and interventions",
     ("env_steps", "updates", "train_time_s", "human_fraction", "human_steps", "operator_labels",
      "labelled_training_episodes", "checked_episodes", "classifier_refits", "false_claims_labelled", "rollbacks",
      "stopped_at", "robot_minutes", "base_checked_success", "policy_checked_success", "policy_from_env_step")),
    ("deploy", "Deployment dry run: control loop over DDS",
     ("episodes", "successes", "ticks", "missed_ticks", "p99_lateness_ms", "obs_to_cmd_p50_ms", "obs_to_cmd_p99_ms",
      "chunk_latency_p50_ms")),
)


def write_report(run_dir: str | Path, stages: dict, title: str = "robot_rl quickstart", meta: dict | None = None
                 ) -> tuple[Path, Path]:
    """report.html and report.md in run_dir from the stages' summaries; returns their paths."""
    run_dir = Path(run_dir)
    meta = dict(meta or {})
    meta.setdefault("generated", time.strftime("%Y-%m-%d %H:%M:%S"))
    rows = success_rows(stages)
    body, md = _heading(title, meta)

    if rows:
        table = [[label, r["success_rate"], r["success_ci95"], r["episodes"]] for label, r in rows]
        header = ["policy", "success rate", "95% CI", "episodes"]
        figure = success_figure(rows)
        body += ["<h2>Success rates</h2>", _img("success rates", figure),
                 _table(table, header)]
        md += ["## Success rates", "", _md_table(table, header), ""]
    curves = curves_figure(run_dir)
    if curves:
        body += ["<h2>Learning curves</h2>", _img("learning curves", curves)]
    for stage, heading, keys in TABLE_SECTIONS:
        if stage in stages:
            table = _scalars(stages[stage], keys)
            body += [f"<h2>{html.escape(heading)}</h2>", _table(table, ["figure", "value"])]
            md += [f"## {heading}", "", _md_table(table, ["figure", "value"]), ""]
            for w in stages[stage].get("warnings") or []:  # the run's own words: a rollback, reward hacking
                body.append(f'<p class="warning">warning: {html.escape(w)}</p>')
                md += [f"> warning: {w}", ""]
    final = next((s for s in ("eval_residual", "eval_bc") if stages.get(s, {}).get("videos")), None)
    if final:
        video = Path(stages[final]["videos"][0])
        rel = video.relative_to(run_dir) if video.is_relative_to(run_dir) else video
        label = dict(SUCCESS_STAGES)[final]
        body.append(f"<h2>Final policy: {html.escape(label)}</h2>")
        strip = frames_figure(video)
        if strip:
            body.append(_img("frames of the final policy", strip))
        body.append(f'<p><video controls src="{html.escape(str(rel))}"></video><br>'
                    f'<span class="muted">{html.escape(str(rel))}</span></p>')
        md += [f"## Final policy: {label}", "", f"Video: `{rel}`", ""]
    timing = [[name, s["stage_time_s"], "reused" if s.get("reused") else ""] for name, s in stages.items()
              if "stage_time_s" in s]
    if timing:
        body += ["<h2>Stages</h2>", _table(timing, ["stage", "seconds", ""])]
        md += ["## Stages", "", _md_table(timing, ["stage", "seconds", ""]), ""]
    return (atomic_write_text(run_dir / "report.html", _page(title, body)),
            atomic_write_text(run_dir / "report.md", "\n".join(md)))


def _heading(title: str, meta: dict) -> tuple[list[str], list[str]]:
    """The title and the meta line of a page: (HTML lines, Markdown lines)."""
    body = [f"<h1>{html.escape(title)}</h1>",
            "<p class='muted'>" + " &middot; ".join(f"{html.escape(str(k))}: {html.escape(_fmt(v))}"
                                                     for k, v in meta.items()) + "</p>"]
    return body, [f"# {title}", "", " · ".join(f"{k}: {_fmt(v)}" for k, v in meta.items()), ""]


def _page(title: str, body: list[str]) -> str:
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_page(run_dir: str | Path, stem: str, title: str, meta: dict,
               sections: list[tuple[str, Path | None, list[list], list[str], str]]) -> tuple[Path, Path]:
    """<stem>.html (figures embedded, standalone) and <stem>.md in run_dir, in this report's style; each section is
    (heading, a PNG file in run_dir or None, table rows, table header, a note under the table)."""
    run_dir = Path(run_dir)
    meta = dict(meta)
    meta.setdefault("generated", time.strftime("%Y-%m-%d %H:%M:%S"))
    body, md = _heading(title, meta)
    for heading, png, rows, header, note in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        md += [f"## {heading}", ""]
        if png is not None:
            body.append(_img(heading, Path(png).read_bytes()))
            md += [f"![{heading}]({Path(png).relative_to(run_dir)})", ""]
        body.append(_table(rows, header))
        md += [_md_table(rows, header), ""]
        if note:
            body.append(f"<p class='muted'>{html.escape(note)}</p>")
            md += [note, ""]
    return (atomic_write_text(run_dir / f"{stem}.html", _page(title, body)),
            atomic_write_text(run_dir / f"{stem}.md", "\n".join(md)))
