"""report.json (machine-readable, schema in the package docstring), report.md (a table) and report.png (a plot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REPORT_JSON, REPORT_MD, REPORT_PNG = "report.json", "report.md", "report.png"


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.2f} MiB"


def _fmt_acc(a: float | None) -> str:
    return "-" if a is None else f"{a:.4f}"


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    """Rows for both the markdown and the rich table: baseline first, then every artifact."""
    rows = []
    entries = [("baseline (float, SavedModel)", report["baseline"], None)]
    entries += [(a["path"], a, a) for a in report["artifacts"]]
    for label, m, artifact in entries:
        chosen = artifact is not None and artifact["path"] == report["chosen"]
        status = "" if artifact is None else ("accepted" if artifact["accepted"] else "REJECTED")
        rows.append([
            label + (" *" if chosen else ""), m["kind"], _fmt_size(m["size_bytes"]), _fmt_size(m["gzip_bytes"]),
            _fmt_acc(m["accuracy"]), f"{m['agreement']:.4f}", f"{m['latency_us']['p50']:.1f}",
            f"{m['latency_us']['p99']:.1f}", f"{m['throughput']['samples_per_s']:.0f}", status,
        ])
    return rows


HEADERS = ["artifact", "kind", "size", "gzip", "accuracy", "agreement", "p50 us", "p99 us", "rows/s", "gate"]


def write_markdown(report: dict[str, Any], path: Path) -> None:
    lines = [f"# tfsmith optimize: {report['model']['source']}", ""]
    gate = report["gate"]
    lines.append(f"Chosen: `{report['chosen']}` (marked *). Quality gate: max accuracy drop "
                 f"{gate['max_accuracy_drop']:.4f}, chosen drop {gate['chosen_drop']:.4f}: "
                 f"**{'passed' if gate['passed'] else 'FAILED'}**.")
    lines.append("")
    lines.append(f"Held-out rows: {report['held_out_rows']}; threads: {report['host']['threads']}; "
                 f"TensorFlow {report['host']['tensorflow']}; recipe `{report['recipe']['name']}`.")
    if report.get("sparsity"):
        s = report["sparsity"]
        lines.append(f"Sparsity: target {s['target']:.3f}, achieved {s['achieved']:.3f}.")
    lines += ["", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    lines += ["", "## Why", ""] + [f"- {r}" for r in report["reasons"]]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    lines += ["", f"![size vs latency vs accuracy]({REPORT_PNG})", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plot(report: dict[str, Any], path: Path) -> None:
    """gzip size (x, log) vs p50 latency (y, log); colour = accuracy (or agreement without labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [report["baseline"] | {"path": "baseline"}] + report["artifacts"]
    xs = [e["gzip_bytes"] / 1024 for e in entries]
    ys = [e["latency_us"]["p50"] for e in entries]
    score_key = "accuracy" if report["baseline"]["accuracy"] is not None else "agreement"
    cs = [e[score_key] for e in entries]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    points = ax.scatter(xs, ys, c=cs, cmap="viridis", s=70, edgecolors="black")
    for e, x, y, c in zip(entries, xs, ys, cs):
        label = (e["kind"] if e["path"] != "baseline" else "baseline (float)") + f" {c:.3f}"
        if not e.get("accepted", True):
            label += " REJECTED"
        rightmost = x == max(xs)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(-6 if rightmost else 6, 6), fontsize=8,
                    ha="right" if rightmost else "left")
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.margins(x=0.35, y=0.2)
    ax.set_xlabel("gzipped size (KiB)")
    ax.set_ylabel("p50 latency at batch 1 (us)")
    ax.set_title(f"tfsmith optimize: {Path(report['model']['source']).name}")
    fig.colorbar(points, ax=ax, label=score_key)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(report: dict[str, Any], directory: Path) -> None:
    (directory / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    write_markdown(report, directory / REPORT_MD)
    write_plot(report, directory / REPORT_PNG)
