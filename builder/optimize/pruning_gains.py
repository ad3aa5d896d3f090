"""What pruning bought, measured: the pruned model's float .tflite against the unpruned one's (size and gzip
size), each pruned file's speed on each runtime it was timed on, and per runtime whether sparse kernels ran it
(a fact of the runtime and this host, said as such; a speedup is never claimed that was not timed).

Sparse kernels, per runtime, as their own documentation states them:
- LiteRT (XNNPACK): sparse inference takes only weights the converter stored sparse
  (`tf.lite.Optimize.EXPERIMENTAL_SPARSITY`, DENSIFY ops in the file), and only in float CNN subgraphs of one
  shape (a 3x3 stride-2 convolution over 3 channels first, 1x1 convolutions at least 2/3 zeros, a spatial mean
  or depth-to-space last). Any other sparse weights are densified when the model loads and run on dense kernels.
  The pruned model's float .tflite is converted so (`quantize` mode sparse_fp32): the file itself shrinks.
- OpenVINO (CPU plugin): sparse weights decompression (`CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE`) packs the
  non-zero weights of int8 MatMul / FullyConnected layers, and only on CPUs with Intel AMX.
- TensorFlow: no sparse kernels for weights stored dense.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: the CPU flags (as /proc/cpuinfo spells them) OpenVINO's sparse weights decompression needs (Intel AMX)
AMX_FLAGS = frozenset({"amx_tile", "amx_int8"})

LITERT_DENSE = ("not used: XNNPACK's sparse kernels take only weights the converter stored sparse (EXPERIMENTAL_"
                "SPARSITY) in float CNN subgraphs of one shape (a 3x3 stride-2 convolution over 3 channels first, "
                "1x1 convolutions at least 2/3 zeros, a spatial mean last); these .tflite files store their weights "
                "dense, so the pruned model runs on the same dense kernels as the unpruned one")
TENSORFLOW_DENSE = "not used: TensorFlow has no sparse kernels for weights stored dense"


def openvino_sparse(features: Iterable[str]) -> str:
    """Whether OpenVINO's CPU sparse weights decompression can run here: a fact of this host's CPU."""
    have = AMX_FLAGS & {f.lower() for f in features}
    if have == AMX_FLAGS:
        return ("not used: this CPU has Intel AMX, where the CPU plugin's sparse weights decompression "
                "(CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE, int8 MatMul layers) can run, but the IR here is compiled "
                "without it")
    return ("not used: the CPU plugin's sparse weights decompression (CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE) packs "
            "int8 MatMul weights only on CPUs with Intel AMX, and this CPU has no AMX (amx_tile, amx_int8)")


def litert_sparse(stored_sparse: str | None) -> str:
    """Whether XNNPACK's sparse kernels ran the pruned .tflite files: a fact of how they store their weights."""
    if stored_sparse is None:
        return LITERT_DENSE
    return (f"not used: {stored_sparse} stores the pruned weights sparse (the converter's EXPERIMENTAL_SPARSITY, "
            "DENSIFY ops), which LiteRT densifies once when the model loads; XNNPACK's sparse kernels take only float "
            "CNN subgraphs of one shape (a 3x3 stride-2 convolution over 3 channels first, 1x1 convolutions at least "
            "2/3 zeros, a spatial mean last), so the pruned model runs on dense kernels; the sparse storage makes "
            "the file smaller, not faster")


def sparse_kernels(runtimes: Iterable[str], features: Iterable[str],
                   stored_sparse: str | None = None) -> dict[str, str]:
    """Per runtime family timed in the run (tensorflow, litert, openvino): whether sparse kernels ran the pruned
    model here, and why not. `stored_sparse`: the .tflite that stores the pruned weights sparse, if any."""
    features = tuple(features)
    said = {"litert": litert_sparse(stored_sparse), "openvino": openvino_sparse(features),
            "tensorflow": TENSORFLOW_DENSE}
    families = []
    for runtime in runtimes:
        family = next((f for f in said if runtime.startswith(f)), None)
        if family and family not in families:
            families.append(family)
    return {family: said[family] for family in families}


def unpruned_float(probe: bytes | Path | None, scratch: Path) -> dict[str, int] | None:
    """The unpruned model's float .tflite (the plan's probe conversion of the original's weights): its size and
    gzip size, measured as every artifact's are; None where there is none (no plain .tflite)."""
    from builder.optimize.evaluate import file_sizes

    if probe is None:
        return None
    path = probe if isinstance(probe, Path) else scratch / "unpruned_fp32.tflite"
    if not isinstance(probe, Path):
        path.write_bytes(probe)
    size, gzipped = file_sizes(path)
    return {"size_bytes": size, "gzip_bytes": gzipped}


def ratio(pruned: int, unpruned: int) -> str:
    return f"{pruned / unpruned:.2f}x" if unpruned else "-"


def kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.2f} MiB"


def float_against_unpruned(sparsity: Mapping[str, Any], artifacts: Iterable[Any]) -> str | None:
    """The pruned float .tflite's size and gzip size against the unpruned one's, or why there is no unpruned one
    to set against (None when neither is known): what the report and optimize's last lines say."""
    unpruned = sparsity.get("unpruned_fp32")
    float_file = next((a for a in artifacts if a.format == "tflite_fp32"), None)
    if unpruned and float_file is not None:
        stored = " (zeros stored sparse)" if sparsity.get("stored_sparse") == float_file.path else ""
        return (f"float .tflite: {kib(float_file.size_bytes)} (gzip {kib(float_file.gzip_bytes)}) pruned{stored}, "
                f"against {kib(unpruned['size_bytes'])} (gzip {kib(unpruned['gzip_bytes'])}) unpruned: "
                f"{ratio(float_file.size_bytes, unpruned['size_bytes'])} the size, "
                f"{ratio(float_file.gzip_bytes, unpruned['gzip_bytes'])} the gzip size")
    if sparsity.get("unpruned_why"):
        return f"no unpruned float .tflite to set against: {sparsity['unpruned_why']}"
    return None


def lines(sparsity: Mapping[str, Any], artifacts: Iterable[Any], candidates: Iterable[Any]) -> list[str]:
    """The report's "What pruning bought" section: sparsity, the float .tflite against the unpruned one, each
    pruned file's size and its batch-1 p50 per runtime, and the sparse kernels per runtime."""
    out = [f"- sparsity: {sparsity['achieved']:.1%} of the pruned layers' weights are zero (target "
           f"{sparsity['target']:.1%}{', one-shot by magnitude' if sparsity.get('one_shot') else ''})"]
    artifacts = list(artifacts)
    against = float_against_unpruned(sparsity, artifacts)
    if against:
        out.append(f"- {against}")
    timed: dict[str, list[str]] = {}
    for c in candidates:
        if c.p50_us is not None:  # timed, choosable or not (a candidate that compiles per shape is timed too)
            timed.setdefault(c.artifact, []).append(f"{c.runtime}{' (' + c.precision + ')' if c.precision else ''} "
                                                    f"{c.p50_us:.1f} us")
    for a in artifacts:
        speed = "; ".join(timed.get(a.path, [])) or "not timed"
        out.append(f"- {a.path} (pruned): {kib(a.size_bytes)}, gzip {kib(a.gzip_bytes)}; batch-1 p50: {speed}")
    out.append("- the unpruned model's files are not made, so no speed is set against them here")
    for family, text in (sparsity.get("sparse_kernels") or {}).items():
        out.append(f"- sparse kernels, {family}: {text}")
    return out
