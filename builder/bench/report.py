"""Show and save one bench run: a rich table on the terminal, bench.json, bench.md and a PNG chart.

All four come from the same `BenchRun` rows so they cannot disagree. Files are written into a temporary
folder and moved into place, so a failed run leaves no half-written report.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from builder.bench.results import ROLE_TFSMITH, BenchRun, RuntimeResult

COLUMNS = ("runtime", "role", "p50 ms", "p90 ms", "p99 ms", "CI ±%", "n", "batch/s", "size", "gzip",
           "quality", "RSS Δ MB", "vs SavedModel", "vs fastest peer", "note")
#: The terminal shows the columns a decision needs; bench.md and bench.json keep them all.
TERMINAL_COLUMNS = ("runtime", "p50 ms", "p90 ms", "CI ±%", "batch/s", "gzip", "quality", "vs SavedModel",
                    "vs fastest peer", "note")


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else (f"{ms:.2f}" if ms < 100 else f"{ms:.0f}")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 2**20:.2f} MB" if n >= 2**20 else f"{n / 2**10:.0f} KB"


def _ratio(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x"


def _rss(mb: float | None) -> str:
    """RSS growth while loading, in one shared process: a negative delta means memory was handed back
    (garbage collection of an earlier runtime), not that this runtime uses none — shown as `≤0`."""
    if mb is None:
        return "-"
    return f"{mb:.0f}" if mb > 0 else "≤0"


def _quality(r: RuntimeResult, trained: bool) -> str:
    if r.accuracy is not None:
        return f"acc {r.accuracy:.3f}"
    if r.agreement is not None:
        return f"agree {r.agreement:.0%}" + ("" if trained else " (random w)")
    if r.relative_error is not None:
        return f"rel err {r.relative_error:.2%}" + ("" if trained else " (random w)")
    return "-"


def row(r: RuntimeResult, trained: bool, shipped: str | None = None) -> list[str]:
    """One table row as strings (shared by the terminal table and bench.md); `shipped` marks optimize's pick."""
    if not r.ok:
        return [r.name, r.role, *["-"] * 12, f"FAILED: {r.reason}"]
    lat = r.latency
    ci = f"{max(lat.p50 - lat.ci_low, lat.ci_high - lat.p50) / lat.p50 * 100:.1f}" if lat and lat.p50 else "-"
    notes = []
    if r.recommended:
        notes.append("★ recommended")
    if shipped == r.name:
        notes.append("◆ optimize's choice")
    if lat and lat.noisy:
        notes.append("noisy")
    throughput = f"{r.throughput:,.0f}" if r.throughput else "-"
    return [r.name, r.role, _ms(r.p50), _ms(lat.p90 if lat else None), _ms(lat.p99 if lat else None), ci,
            str(lat.n if lat else 0), throughput, _size(r.size_bytes), _size(r.gzip_bytes), _quality(r, trained),
            _rss(r.rss_delta_mb), _ratio(r.ratio_vs_baseline),
            _ratio(r.ratio_vs_fastest_peer), ", ".join(notes)]


def headline(run: BenchRun) -> str:
    rec = run.recommendation
    if rec.runtime is None:
        return f"{run.model}: no recommendation — {rec.reason}"
    parts = [f"{run.model}: tfsmith recommends {rec.runtime}"]
    if rec.speedup_vs_baseline is not None:
        parts.append(f"{rec.speedup_vs_baseline:.1f}x faster than the SavedModel signature")
    if rec.ratio_vs_fastest_peer is not None:
        parts.append(f"{rec.ratio_vs_fastest_peer:.2f}x the time of the fastest peer ({rec.fastest_peer})"
                     + (", within noise" if rec.within_noise_of_peer else ""))
    return "; ".join(parts)


def print_table(run: BenchRun, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"tfsmith bench: {run.model} — batch 1 latency, throughput at batch {run.batch_sizes[-1]}, "
                        f"{run.threads} threads", title_justify="left")
    keep = [COLUMNS.index(c) for c in TERMINAL_COLUMNS]
    for column in TERMINAL_COLUMNS:
        table.add_column(column, justify="left" if column in ("runtime", "quality", "note") else "right",
                         overflow="fold", no_wrap=column == "runtime")
    for r in run.results:
        style = "bold green" if r.recommended else ("red" if not r.ok else ("cyan" if r.role == ROLE_TFSMITH else None))
        cells = row(r, run.trained, run.shipped)
        table.add_row(*[cells[i] for i in keep], style=style)
    console.print(table)
    console.print("cyan: serves the .tflite (tfsmith's artifact); others: the SavedModel baseline and peers. "
                  "Full columns (p99, n, raw size, RSS) in bench.md / bench.json.")
    console.print(headline(run), style="bold")
    console.print(f"why: {run.recommendation.reason}")
    for note in run.notes:
        console.print(f"note: {note}")


def markdown(run: BenchRun) -> str:
    lines = [f"# tfsmith bench: {run.model}", "",
             f"Host: {run.host.get('cpu', '?')}, {run.host.get('cores', '?')} cores; {run.threads} threads for "
             f"every runtime; batch 1 latency, throughput at batch {run.batch_sizes[-1]}; {run.rounds} interleaved "
             f"rounds in {run.elapsed_s:.0f} s.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in run.results:
        lines.append("| " + " | ".join(cell.replace("|", "/") for cell in row(r, run.trained, run.shipped)) + " |")
    lines += ["", f"**{headline(run)}**", "", f"Why: {run.recommendation.reason}", ""]
    lines += [f"- {note}" for note in run.notes]
    return "\n".join(lines) + "\n"


def chart(run: BenchRun, path: Path) -> None:
    """Horizontal bars of batch-1 p50 (log scale) with the median CI as error bars; recommended in green."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in run.results if r.ok and r.latency is not None]
    figure, axis = plt.subplots(figsize=(9, 0.45 * max(len(measured), 1) + 1.5))
    names = [r.name + (" ★" if r.recommended else "") for r in measured]
    p50 = [r.latency.p50 * 1e3 for r in measured]  # type: ignore[union-attr]
    low = [(r.latency.p50 - r.latency.ci_low) * 1e3 for r in measured]  # type: ignore[union-attr]
    high = [(r.latency.ci_high - r.latency.p50) * 1e3 for r in measured]  # type: ignore[union-attr]
    colours = ["tab:green" if r.recommended else ("tab:blue" if r.role == ROLE_TFSMITH else "tab:gray")
               for r in measured]
    axis.barh(names, p50, xerr=[low, high], color=colours)
    axis.set_xscale("log")
    axis.invert_yaxis()
    axis.set_xlabel(f"batch-1 p50 latency, ms (log scale; {run.threads} threads; bars = median 95% CI)")
    axis.set_title(f"tfsmith bench: {run.model}")
    for y, value in enumerate(p50):
        axis.text(value, y, f" {value:.3g}", va="center", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write(run: BenchRun, out: Path) -> dict[str, Path]:
    """bench.json, bench.md, bench.png into `out` (atomically: temp folder, then moved into place)."""
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bench-", dir=out))
    try:
        (staging / "bench.json").write_text(json.dumps(run.to_dict(), indent=2, default=_json_default) + "\n")
        (staging / "bench.md").write_text(markdown(run))
        chart(run, staging / "bench.png")
        paths = {}
        for name in ("bench.json", "bench.md", "bench.png"):
            os.replace(staging / name, out / name)
            paths[name] = out / name
        return paths
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, float):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)
