"""report.json (the typed `builder.report.Report`, schema in the package docstring), report.md (a table) and
report.png (a plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builder.report import REPORT_JSON, ArtifactResult, Candidate, Report

REPORT_MD, REPORT_PNG = "report.md", "report.png"
HEADERS = ["artifact", "format", "runtime (precision)", "size", "gzip", "quality vs original", "p50 us", "p99 us",
           "rows/s", "gate"]
#: What the timing columns mean, said next to the table.
TIMINGS = ("p50/p99 us: one row per call (batch 1), from calls interleaved across every row; rows/s: rows per "
           "second at batch B, shown beside it (B rows per call: 32, fewer when one call would take over 0.25 s "
           "at the batch-1 pace or when the held-out rows are fewer, or the model's fixed batch) = B / the median "
           "time of one batch-B call, timed the same interleaved way (at B = 1: 1e6 / p50). A rows/s figure above "
           "1e6 / p50 means batching helps; below it, batching costs per row. ~: the rows/s pass ran out of time "
           "before that figure's median was known to ±10% (a busy host).")


def _fmt_size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.2f} MiB"


def quality_text(artifact: ArtifactResult) -> str:
    """Per output, the gated number and the one beside it (accuracy / agreement / relative error)."""
    parts = []
    for m in artifact.metrics:
        if m.task in ("classification", "binary", "exact"):
            text = (f"acc {m.accuracy:.4f}, " if m.accuracy is not None else "") + f"agree {m.agreement:.4f}"
        else:
            text = (f"MAE {m.mae:.4g}, " if m.mae is not None else "") + f"rel.err {m.relative_error:.4f}"
        parts.append(f"{m.output}: {text}" if len(artifact.metrics) > 1 else text)
    return "; ".join(parts)


def merged_baseline(report: Report) -> ArtifactResult | None:
    """The saved_model artifact when it is the baseline itself (the original's weights re-exported, one
    measurement for both): then the table shows one row, never the same model twice with two numbers."""
    same = (report.baseline.extra.get("same_as") if report.baseline is not None else None)
    return next((a for a in report.artifacts if a.path == same), None) if same else None


def rows_per_s(m: ArtifactResult) -> str:
    """rows/s as TIMINGS defines it: batch / the median batch-call time (older reports without it: '-')."""
    batch, per_call = m.throughput.get("batch"), m.throughput.get("batch_p50_us")
    if not batch or not per_call:
        return "-"
    unsettled = m.throughput.get("settled") is False  # older reports say nothing: no mark
    return f"{'~' if unsettled else ''}{batch * 1e6 / per_call:.0f} (batch {batch:.0f})"


def _candidate(report: Report, path: str, runtime: str, signature: str) -> Candidate | None:
    return next((c for c in report.selection.candidates
                 if c.artifact == path and c.runtime == runtime and c.signature == signature), None)


def runtime_text(runtime: str, precision: str) -> str:
    return f"{runtime} ({precision})" if precision else runtime


def chosen_candidate(report: Report) -> Candidate | None:
    """The timed candidate optimize chose (artifact x runtime x signature), when it was measured."""
    return _candidate(report, report.chosen, report.chosen_runtime, report.chosen_signature)


def table_rows(report: Report) -> list[list[str]]:
    """Rows for both the markdown and the rich table: baseline first, then every artifact on the runtime it
    was evaluated on; when the choice is that artifact on another runtime, precision or signature, a row of
    its own with its own figures follows it, marked *."""
    rows = []
    entries: list[tuple[str, ArtifactResult, bool]] = []
    merged = merged_baseline(report)
    if report.baseline is not None and merged is None:
        entries.append(("baseline (original, SavedModel)", report.baseline, False))
    entries += [(a.path + (" (= baseline: the original's weights)" if a is merged else ""), a, True)
                for a in report.artifacts]
    contract_signature = report.contract.signature
    pick = chosen_candidate(report)
    for label, m, is_artifact in entries:
        status = "" if not is_artifact else ("accepted" if m.accepted else "REJECTED")
        timed = m.latency_us.runs > 0
        own = _candidate(report, m.path, m.runtime, contract_signature) if is_artifact else None
        primary = (m.path == report.chosen and m.runtime == report.chosen_runtime
                   and report.chosen_signature == contract_signature)
        rows.append([
            label + (" *" if is_artifact and primary else ""), m.format,
            runtime_text(m.runtime, own.precision if own else ""), _fmt_size(m.size_bytes),
            _fmt_size(m.gzip_bytes), quality_text(m) or ("not run on this host" if not m.metrics else ""),
            f"{m.latency_us.p50:.1f}" if timed else "-", f"{m.latency_us.p99:.1f}" if timed else "-",
            rows_per_s(m), status,
        ])
        if is_artifact and m.path == report.chosen and not primary:
            signature = f" #{report.chosen_signature}" if report.chosen_signature != contract_signature else ""
            rows.append([
                f"  {m.path}{signature} *", m.format,
                runtime_text(report.chosen_runtime, pick.precision if pick else ""), _fmt_size(m.size_bytes),
                _fmt_size(m.gzip_bytes), "gate passed on this runtime" if pick and not pick.error else "",
                f"{pick.p50_us:.1f}" if pick and pick.p50_us is not None else "-", "-", "-", status,
            ])
    return rows


def write_markdown(report: Report, path: Path) -> None:
    lines = [f"# tfsmith optimize: {report.model.source}", ""]
    gate = report.gate
    pick = chosen_candidate(report)
    lines.append(f"Chosen: `{report.chosen}` on {runtime_text(report.chosen_runtime, pick.precision if pick else '')}, "
                 f"signature `{report.chosen_signature}` (marked *): {report.selection.how}.")
    lines.append("")
    lines.append(f"Quality gate, every artifact vs the ORIGINAL model per output (max accuracy drop "
                 f"{gate.max_accuracy_drop:.4f}, max relative error {gate.max_relative_error:.4f}): "
                 f"**{'passed' if gate.passed else 'FAILED'}** ({gate.chosen_reason}).")
    lines.append("")
    lines.append(f"Held-out rows: {report.data.held_out_rows} (the gate also judges one all-zero input after "
                 f"them, against the original's answer); threads: {report.host['threads']}; "
                 f"TensorFlow {report.host['tensorflow']}; recipe `{report.recipe.get('name')}`.")
    lines += ["", "## Contract (the original model's serving signature)", ""]
    lines += [f"- input `{t.name}`: {t.dtype} {list(t.shape)}" for t in report.contract.inputs]
    lines += [f"- output `{t.name}`: {t.dtype} {list(t.shape)}; {t.task}: {t.task_why}" for t in report.contract.outputs]
    if report.sparsity:
        lines.append(f"\nSparsity: target {report.sparsity['target']:.3f}, achieved {report.sparsity['achieved']:.3f}.")
        lines += ["", "## What pruning bought", "", *pruned_lines(report)]
    lines += ["", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report)]
    lines += ["", TIMINGS]
    if report.selection.candidates:
        lines += ["", "## Candidates (artifact x runtime x precision, batch-1 p50 on this host)", "",
                  "| artifact | runtime | precision | signature | p50 us | first call at a new shape | note |",
                  "|---|---|---|---|---|---|---|"]
        for c in report.selection.candidates:
            lines.append(f"| {c.artifact} | {c.runtime} | {c.precision or '-'} | {c.signature} | "
                         f"{'-' if c.p50_us is None else f'{c.p50_us:.1f}'} | "
                         f"{'-' if c.new_shape_us is None else f'+{c.new_shape_us / 1e3:.1f} ms'} | {c.error} |")
    lines += ["", "## Why", ""] + [f"- {r}" for r in report.reasons]
    if report.attempts:
        lines += ["", "## Steps beyond the SavedModel (each done, dropped with its cause, or skipped)", "",
                  *attempt_rows(report)]
    if report.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    lines += ["", f"![size vs latency]({REPORT_PNG})", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def pruned_lines(report: Report) -> list[str]:
    """What pruning bought (`pruning_gains.lines`): every artifact is made from the pruned model."""
    from builder.optimize.pruning_gains import lines

    return lines(report.sparsity, report.artifacts, report.selection.candidates)


def attempt_rows(report: Report) -> list[str]:
    """The ledger as a markdown table: each optional step, what became of it, its time and the process's
    resident memory around it (before -> after, and its peak)."""

    def memory(a: Any) -> str:
        if a.rss_before_mib is None:
            return "-"
        return f"{a.rss_before_mib:.0f} -> {a.rss_after_mib:.0f} MiB (peak {a.peak_rss_mib:.0f})"

    rows = ["| step | outcome | seconds | memory | why |", "|---|---|---|---|---|"]
    for a in report.attempts:
        timed = a.rss_before_mib is not None
        rows.append(f"| {a.step} | {a.outcome} | {f'{a.seconds:.1f}' if timed else '-'} | {memory(a)} | "
                    f"{(a.cause or '').replace('|', '/')} |")
    return rows


def write_plot(report: Report, path: Path) -> None:
    """gzip size (x, log) vs p50 latency (y, log), one point per artifact, labelled with its verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    merged = merged_baseline(report)
    entries = ([("baseline", report.baseline)] if report.baseline and merged is None else [])
    entries += [(a.format + (" = baseline" if a is merged else ""), a) for a in report.artifacts]
    entries = [(label, e) for label, e in entries if e.latency_us.runs > 0] or entries  # unrun files: no point
    xs = [max(e.gzip_bytes, 1) / 1024 for _, e in entries]
    ys = [max(e.latency_us.p50, 0.01) for _, e in entries]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    colours = ["tab:blue" if e.accepted else "tab:red" for _, e in entries]
    ax.scatter(xs, ys, c=colours, s=70, edgecolors="black")
    for (label, e), x, y in zip(entries, xs, ys):
        text = label + ("" if e.accepted else " REJECTED") + (" *" if e.path == report.chosen else "")
        rightmost = x == max(xs)
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(-6 if rightmost else 6, 6), fontsize=8,
                    ha="right" if rightmost else "left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
    ax.margins(x=0.35, y=0.2)
    ax.set_xlabel("gzipped size (KiB)")
    ax.set_ylabel("p50 latency at batch 1 (us)")
    ax.set_title(f"tfsmith optimize: {Path(report.model.source).name}")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(report: Report, directory: Path) -> None:
    report.write(directory)
    write_markdown(report, directory / REPORT_MD)
    write_plot(report, directory / REPORT_PNG)


__all__ = ["HEADERS", "REPORT_JSON", "REPORT_MD", "REPORT_PNG", "table_rows", "write_report"]
