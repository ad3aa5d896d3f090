"""The command-line options several commands share, declared once so their spelling and help never drift.

Each is a typer `Annotated` type: a command writes `target: TargetOption = None`, so the default stays
in the signature (None everywhere: an unset flag lets TFSMITH_* / tfsmith.toml / the default decide).
Only options that mean the same thing in every command live here. Where a command gives a flag another
meaning (`matrix --cuda-cc` is repeatable, one CUDA variant per use; `deploy --cuda-cc` describes images
already built and never probes this host), it declares its own and says why.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from builder.build.plan import DEFAULT_TF_VERSION
from builder.compat import SUPPORTED_TF_VERSIONS

#: The build target: which CPU (and, with --cuda-cc, GPUs) the TensorFlow build is tuned for.
TargetOption = Annotated[
    Optional[str],
    typer.Option(
        "--target",
        help="Build target: host (this machine, the default), x86-64-v2|v3|v4, or an archspec "
             "microarchitecture such as icelake or neoverse_v2.",
    ),
]

#: GPU capabilities to compile for: a comma list, `auto` (probes this host's GPUs) or `none` (CPU-only,
#: overriding a cuda_cc from tfsmith.toml or TFSMITH_CUDA_CC where the command reads settings). Unset, the
#: one decision of `builder.targets.choose_cuda` applies: `host` gets this host's GPUs, named targets none.
CudaCcOption = Annotated[
    Optional[str],
    typer.Option(
        "--cuda-cc",
        help="CUDA compute capabilities, e.g. 8.0,9.0; auto = those of this host's GPUs; none = CPU-only. "
             "Default: for --target host, this host's GPUs when it has some whose driver runs TensorFlow's "
             "CUDA (else CPU-only); for a named target, CPU-only.",
    ),
]

#: The TensorFlow release to build (where a command also takes a prebuilt --wheel, the wheel names its own).
TfVersionOption = Annotated[
    Optional[str],
    typer.Option("--tf-version", help=f"TensorFlow version to build: {SUPPORTED_TF_VERSIONS[0]}.x to "
                                      f"{SUPPORTED_TF_VERSIONS[-1]}.x (default {DEFAULT_TF_VERSION})."),
]
