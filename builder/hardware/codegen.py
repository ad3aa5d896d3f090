"""What a compiler may emit for a target: the CPU features an image built for it can really contain.

archspec lists, per microarchitecture, every feature the chip has, including hints, model-specific
registers and instructions that only intrinsics reach (waitpkg, serialize, cldemote, movdir*, AMX, dgh...).
Hypervisors routinely hide those, so a target that required them would refuse (and a host ranking that
required them would miss) the rented machines most users run on, while no `-march`/`-mcpu` makes the
compiler emit them. One table, builder/data/cpu_features.json (with its sources), says which features are
code-generating; everything here is derived from it:

- `code_features(target)`: what the guard, `tfsmith check` and node affinity require: the target's
  archspec features that compilers emit, plus those its `-march` enables that archspec does not list
  (sapphirerapids: AVX512-FP16, AVX-VNNI). A feature the table does not know counts as emitted: refusing a
  machine is safer than an `Illegal instruction`.
- `hint_features(target)`: the rest, shown to users and never required.
- `feature_option(feature)`: the compiler flag that enables one code-generating x86 feature.
- `server_flags(copts)`: a client `-march`/`-mtune` spelled as its server part (icelake-client -> -server).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from archspec.cpu import Microarchitecture


@dataclass(frozen=True)
class CodegenTable:
    """The table as read: features by architecture, -march additions, server spellings, server model words."""

    emitted: dict[str, frozenset[str]]
    not_emitted: dict[str, frozenset[str]]
    options: dict[str, str]  # x86 feature -> compiler flag, e.g. "avx512_fp16" -> "-mavx512fp16"
    march_adds: dict[str, frozenset[str]]
    server_tuning: dict[str, str]
    server_models: tuple[str, ...]


@lru_cache(maxsize=1)
def table() -> CodegenTable:
    """builder/data/cpu_features.json, read once."""
    with resources.files("builder").joinpath("data/cpu_features.json").open(encoding="utf-8") as handle:
        raw = json.load(handle)
    features = raw["features"]
    return CodegenTable(
        emitted={arch: frozenset(f for f, row in rows.items() if row["emitted"]) for arch, rows in features.items()},
        not_emitted={arch: frozenset(f for f, row in rows.items() if not row["emitted"]) for arch, rows in features.items()},
        options={f: row["option"] for f, row in features["x86_64"].items() if row["emitted"] and row["option"]},
        march_adds={name: frozenset(adds) for name, adds in raw["march_adds"].items() if not name.startswith("_")},
        server_tuning={k: v for k, v in raw["server_tuning"].items() if not k.startswith("_")},
        server_models=tuple(raw["server_models"]),
    )


def _family(target: Microarchitecture) -> str:
    return target.family.name


def code_features(target: Microarchitecture) -> frozenset[str]:
    """Features code compiled for `target` may contain: what a machine must have to run it."""
    data = table()
    hints = data.not_emitted.get(_family(target), frozenset())
    adds: set[str] = set()
    for name in (target.name, *(a.name for a in target.ancestors)):
        adds |= data.march_adds.get(name, frozenset())
    return frozenset((set(target.features) - hints) | adds)


def hint_features(target: Microarchitecture) -> frozenset[str]:
    """The target's archspec features that compilers never emit unasked (hints, MSRs, intrinsic-only)."""
    return frozenset(target.features) & table().not_emitted.get(_family(target), frozenset())


def is_code_feature(arch: str, feature: str) -> bool:
    """Whether compilers may emit `feature` (unknown features count as emitted)."""
    return feature not in table().not_emitted.get(arch, frozenset())


def feature_option(feature: str) -> str | None:
    """The clang/GCC flag enabling one code-generating x86 feature (`-mavx512fp16`); None when unknown."""
    return table().options.get(feature)


def is_server_part(model_name: str) -> bool:
    """Whether a CPU model name is a server part (an Intel Xeon): it gets server tuning."""
    return any(word.lower() in model_name.lower() for word in table().server_models)


def server_flags(copts: tuple[str, ...]) -> tuple[str, ...]:
    """`-march=icelake-client -mtune=icelake-client` -> the `icelake-server` spelling (same code features)."""
    spellings = table().server_tuning
    result = []
    for flag in copts:
        option, equals, value = flag.partition("=")
        result.append(f"{option}={spellings[value]}" if equals and value in spellings else flag)
    return tuple(result)
