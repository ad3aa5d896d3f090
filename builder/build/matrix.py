"""The CI build matrix for a fleet, as plain data: one entry per image, each with an id `build --only` takes.

A CI pipeline fans out one job per entry: GitHub Actions reads `{"include": [...]}` through `fromJSON`,
GitLab runs a generated child pipeline with one job per entry. The id is self-describing
(`x86-64-v3-cpu`, `x86-64-v3-cuda-8.0_9.0`), so `tfsmith build --only ID` needs nothing but the id: the
matrix and the build can never disagree about what an id means. Each entry also says its image's platform
(`linux/amd64`, `linux/arm64`): an ARM runner builds arm64 natively, an x86 one under QEMU emulation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import yaml

from builder.errors import InputError

FORMATS = ("github", "gitlab", "json")
_ID = re.compile(r"^(?P<target>[A-Za-z0-9][A-Za-z0-9_.-]*?)-(?:cpu|cuda-(?P<ccs>\d{1,2}\.\d(?:_\d{1,2}\.\d)*))$")
# Targets whose architecture is not x86_64 (the CI runner must match, or emulate).
_ARM_PREFIXES = ("neoverse", "cortex", "thunderx", "a64fx", "graviton", "m1", "m2", "armv8", "armv9", "aarch64")


@dataclass(frozen=True)
class MatrixEntry:
    """One image of the fleet."""

    id: str
    target: str
    cuda_cc: str  # "" for CPU-only, else "8.0,9.0"
    arch: str  # "x86_64" or "aarch64": which runner builds it natively
    platform: str = ""  # "linux/amd64" or "linux/arm64": what the image is (an x86 runner builds arm64 emulated)

    def __post_init__(self) -> None:
        if not self.platform:
            object.__setattr__(self, "platform", platform_of(self.arch))

    def build_args(self) -> list[str]:
        """The `tfsmith build` arguments equivalent to `--only ID`."""
        args = ["--target", self.target]
        return args + (["--cuda-cc", self.cuda_cc] if self.cuda_cc else [])


def platform_of(arch: str) -> str:
    """`x86_64` -> `linux/amd64`, `aarch64` -> `linux/arm64` (Docker's and Kubernetes' names)."""
    return "linux/arm64" if arch == "aarch64" else "linux/amd64"


def arch_of(target: str) -> str:
    """Architecture family of a target name (archspec when it knows the name, else by name)."""
    import archspec.cpu

    known = archspec.cpu.TARGETS.get(target.replace("-", "_")) or archspec.cpu.TARGETS.get(target)
    if known is not None:
        return str(known.family)
    return "aarch64" if target.lower().startswith(_ARM_PREFIXES) else "x86_64"


def _normalise_cc(cuda_cc: str) -> tuple[str, ...]:
    ccs = sorted({cc.strip() for cc in cuda_cc.split(",") if cc.strip()}, key=lambda c: tuple(map(int, c.split("."))))
    for cc in ccs:
        if not re.fullmatch(r"\d{1,2}\.\d", cc):
            raise InputError(f"--cuda-cc: {cc!r} is not a capability like 8.0")
    return tuple(ccs)


def entry_id(target: str, cuda_cc: str = "") -> str:
    ccs = _normalise_cc(cuda_cc) if cuda_cc and cuda_cc != "none" else ()
    return f"{target}-cuda-{'_'.join(ccs)}" if ccs else f"{target}-cpu"


def make_entry(target: str, cuda_cc: str = "") -> MatrixEntry:
    """One entry; an unknown target is refused here (with the closest names), not an hour into CI."""
    from builder.targets import check_target_name

    check_target_name(target)
    ccs = _normalise_cc(cuda_cc) if cuda_cc and cuda_cc != "none" else ()
    return MatrixEntry(id=entry_id(target, cuda_cc), target=target, cuda_cc=",".join(ccs), arch=arch_of(target))


def parse_id(entry: str) -> MatrixEntry:
    """The inverse of `entry_id`: what `tfsmith build --only ID` builds."""
    match = _ID.match(entry.strip())
    if not match:
        raise InputError(
            f"--only: {entry!r} is not a matrix id (like x86-64-v3-cpu or x86-64-v3-cuda-8.0_9.0; "
            "list them with `tfsmith matrix --format json`)"
        )
    ccs = (match.group("ccs") or "").replace("_", ",")
    return make_entry(match.group("target"), ccs)


def fleet_matrix(targets: Sequence[str], cuda_ccs: Sequence[str] = ()) -> list[MatrixEntry]:
    """CPU image per target, plus one CUDA image per (x86 target, capability list) pair."""
    if not targets:
        raise InputError("--targets: the fleet needs at least one target")
    entries: list[MatrixEntry] = []
    for target in targets:
        if target == "host":
            raise InputError("--targets: `host` is not a fleet target (a CI runner is not your fleet); name it")
        entries.append(make_entry(target))
        if arch_of(target) == "x86_64":
            entries.extend(make_entry(target, cc) for cc in cuda_ccs if cc and cc not in ("none", "auto"))
    ids = [e.id for e in entries]
    return [e for i, e in enumerate(entries) if e.id not in ids[:i]]


def render_matrix(entries: Sequence[MatrixEntry], fmt: str, *, tfsmith: str = "tfsmith") -> str:
    """Text for one CI system: github = `{"include": [...]}` (one line, for $GITHUB_OUTPUT);
    gitlab = a child-pipeline YAML with one job per entry; json = the entries as a list."""
    rows = [asdict(e) for e in entries]
    if fmt == "github":
        return json.dumps({"include": rows}, separators=(",", ":"))
    if fmt == "json":
        return json.dumps(rows, indent=2)
    if fmt == "gitlab":
        # A child pipeline inherits nothing from its parent but variables, so it carries its own set-up in a
        # hidden job every entry extends (override `.tfsmith-build` by including your own after it).
        jobs: dict[str, object] = {
            ".tfsmith-build": {"stage": "build", "before_script": ["python3 -m pip install --quiet tfsmith"]}
        }
        for entry in entries:
            job: dict[str, object] = {"extends": ".tfsmith-build", "script": [f"{tfsmith} build --only {entry.id}"]}
            if entry.arch != "x86_64":
                job["tags"] = [entry.arch]
            jobs[f"build:{entry.id}"] = job
        return yaml.safe_dump({"stages": ["build"], **jobs}, sort_keys=False)
    raise InputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
