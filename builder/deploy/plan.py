"""The deploy plan: which image runs where, with what resources. Pure: frozen data in, frozen data out.

One `Member` per serving image (one per build target). Placement comes from the target alone:
- required node affinity = the node's architecture + every NFD cpuid label the target's features map to
  and NFD publishes by default + (when some features are only visible to NodeFeatureRules, e.g. BMI2, F16C,
  POPCNT, SSE4.2 for x86-64-v3) the label tfsmith's NodeFeatureRule publishes for that target;
- CUDA targets also require a GPU whose compute capability the image's SASS or PTX can run (NVIDIA GPU
  feature discovery's `nvidia.com/gpu.compute.major|minor`), the same rule as the preflight guard;
- preference: a target whose features (and NFD-visible flags) are a strict superset of another's is
  "better" for it; a member prefers nodes where no better member can run (or requires that, with
  `exclusive`), so each node runs the fastest image it can and none runs one it cannot.
Features NFD cannot see at all (x86: clflushopt, clwb, rdpid, fsgsbase, pku, ...) stay with the image's
guard; the plan lists them so the CLI can say so.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from functools import cached_property

from builder.deploy import nfd
from builder.errors import InputError
from builder.guard import parse_capability
from builder.report import Report
from builder.target_types import BuildTarget

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # RFC 1035 label: Service names need this
IMAGE_REF = re.compile(r"^[a-z0-9]+([._/-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
CPU_QUANTITY = re.compile(r"^(\d+m|\d+(\.\d{1,3})?)$")
MEMORY_QUANTITY = re.compile(r"^(\d+)(Mi|Gi)$")
MAX_NAME = 63
KSERVE_SUFFIX = "-predictor"  # KServe names the predictor's Deployment and Service <name>-predictor

# Stated defaults (README "Deploy to a mixed fleet"): used when neither a report nor a flag says otherwise.
DEFAULT_CPU_MILLIS = 1000
DEFAULT_MEMORY_MIB = 512
BASE_MEMORY_MIB = 256  # interpreter + server + runtime before the model (an estimate, not a measurement)
MODEL_MEMORY_FACTOR = 4  # the model file is mapped, plus arena/activations: a generous multiple of its size
LIMIT_FACTOR = 2  # memory limit = 2x the request: headroom without letting one pod starve a node
#: With the chosen runner's resident memory measured by optimize: the server's own share (its front, 92 MB
#: serving a BERT-base; each model process's Python and runtime before the model), one model copy a core
#: (`tfsmith serve` starts up to a model process a core, each with its own copy), and this much on top.
FRONT_MEMORY_MIB = 128
PROCESS_MEMORY_MIB = 128
MEMORY_HEADROOM = 0.25


@dataclass(frozen=True)
class FleetImage:
    """One serving image and what it was built for (from flags or from the image's io.tfsmith.* labels)."""

    target: BuildTarget
    image: str
    model_sha256: str | None = None
    spec_digest: str | None = None


@dataclass(frozen=True)
class Resources:
    """Container requests/limits and where the numbers came from (said in an annotation and by the CLI)."""

    cpu_millis: int
    memory_mib: int
    source: str
    threads: int | None = None
    p50_us: float | None = None

    @property
    def cpu_limit_millis(self) -> int:
        """The CPU limit is the request: the server in the pod sizes itself to its CPU quota (processes ×
        threads = whole cores of it), so the quota must be what the scheduler reserved for it; a higher limit
        would start more busy threads than the node set aside."""
        return self.cpu_millis

    @property
    def memory_limit_mib(self) -> int:
        return self.memory_mib * LIMIT_FACTOR


@dataclass(frozen=True)
class DeployOptions:
    """What the user asked for (flags of `tfsmith deploy`)."""

    model_name: str
    namespace: str | None = None
    replicas: int = 2
    max_replicas: int = 6
    cpu_target_percent: int = 70
    exclusive: bool = False
    kserve: bool = False
    http_port: int = 8501
    grpc_port: int = 8500
    served_name: str | None = None  # the model name the server answers to (default: model_name)


@dataclass(frozen=True)
class GpuPlacement:
    """Compute capabilities a node's GPU may have: (major, minimum minor) pairs, plus `major > ptx_major`."""

    exact: tuple[tuple[int, int], ...]  # GPU major == M and minor >= m
    newer_than_major: int | None  # PTX: any GPU with major > this also runs


@dataclass(frozen=True)
class Placement:
    """Where one target may run, in NFD's vocabulary."""

    arch: str  # kubernetes.io/arch value: amd64 | arm64
    labelled: tuple[str, ...]  # NFD cpuid flags published by default, sorted
    rule_only: tuple[str, ...]  # flags only a NodeFeatureRule can see (blacklisted as labels), sorted
    invisible: tuple[str, ...]  # /proc/cpuinfo features NFD cannot see at all (the guard's job), sorted
    rule_label: str  # the label tfsmith's NodeFeatureRule publishes for this target
    gpu: GpuPlacement | None = None

    @property
    def observable(self) -> tuple[str, ...]:
        """Every cpuid flag the target needs that NFD can see: what the NodeFeatureRule matches."""
        return tuple(sorted({*self.labelled, *self.rule_only}))


@dataclass(frozen=True)
class Member:
    """One Deployment (or InferenceService) of the fleet."""

    image: FleetImage
    slug: str  # x86-64-v3, icelake-cc80-cc90
    name: str  # object name: <model>-<slug>
    placement: Placement
    better: tuple[str, ...]  # rule labels of members that should get a node first
    rank: int  # 1 = most preferred


@dataclass(frozen=True)
class DeployPlan:
    """The whole fleet: rendered by builder.deploy.manifests, written by builder.deploy.output."""

    options: DeployOptions
    members: tuple[Member, ...]
    resources: Resources
    model_sha256: str | None
    notes: tuple[str, ...] = field(default=())

    @property
    def served_name(self) -> str:
        """The name in the server's URLs (/v1/models/<name>): the image's, else the fleet's."""
        return self.options.served_name or self.options.model_name

    @cached_property
    def digest(self) -> str:
        """sha256 of the plan as canonical JSON: identical inputs give identical manifests and labels."""
        blob = json.dumps(asdict(self), sort_keys=True, default=sorted)
        return hashlib.sha256(blob.encode()).hexdigest()


# ------------------------------------------------------------------------------------------ placement
def rule_label(target: BuildTarget) -> str:
    """The node label tfsmith's NodeFeatureRule publishes for nodes that can run `target`'s CPU code."""
    return f"{nfd.RULE_LABEL_NAMESPACE}/{target.name}"


def gpu_placement(target: BuildTarget) -> GpuPlacement | None:
    """The guard's GPU rule as label constraints: SASS runs on the same major with an equal or newer minor,
    PTX on any GPU at least that new."""
    if target.cuda is None:
        return None
    exact: dict[int, int] = {}
    for cap in target.cuda.capabilities:
        major, minor = parse_capability(cap)
        exact[major] = min(minor, exact.get(major, minor))
    ptx_major, ptx_minor = parse_capability(target.cuda.ptx)
    exact[ptx_major] = min(ptx_minor, exact.get(ptx_major, ptx_minor))
    return GpuPlacement(exact=tuple(sorted(exact.items())), newer_than_major=ptx_major)


def placement(target: BuildTarget) -> Placement:
    """Placement of one target; InputError when its architecture has no Kubernetes/NFD equivalent."""
    if target.arch not in nfd.K8S_ARCH:
        raise InputError(f"target {target.name} is {target.arch}; deploy knows amd64 and arm64 nodes only")
    labelled, rule_only, invisible = set(), set(), set()
    for feature in target.features:
        flag = nfd.nfd_flag(target.arch, feature)
        if flag is None:
            invisible.add(feature)
        elif flag in nfd.DEFAULT_BLACKLIST:
            rule_only.add(flag)
        else:
            labelled.add(flag)
    return Placement(
        arch=nfd.K8S_ARCH[target.arch],
        labelled=tuple(sorted(labelled)),
        rule_only=tuple(sorted(rule_only)),
        invisible=tuple(sorted(invisible)),
        rule_label=rule_label(target),
        gpu=gpu_placement(target),
    )


def slug(target: BuildTarget) -> str:
    """Object-name part for a target: `x86-64-v3`, `neoverse-v1`, `icelake-cc80-cc90`."""
    base = target.name.replace("_", "-").replace(".", "-").lower()
    if target.cuda is None:
        return base
    return base + "-" + "-".join("cc" + cc.replace(".", "") for cc in target.cuda.capabilities)


def _better(a: FleetImage, b: FleetImage) -> bool:
    """Whether a's image should win a node that can run both: same architecture and GPU-ness, a needs
    strictly more CPU features (every node that can run a can run b), and NFD can tell the two apart (when
    the extra features are all invisible to it, a "prefer not where a fits" would push b off every node)."""
    return (
        a.target.arch == b.target.arch
        and (a.target.cuda is None) == (b.target.cuda is None)
        and a.target.features > b.target.features
        and set(placement(a.target).observable) > set(placement(b.target).observable)
    )


# ------------------------------------------------------------------------------------------ resources
def parse_cpu(value: str) -> int:
    """`500m`, `2`, `1.5` -> millicores; InputError otherwise."""
    text = value.strip()
    if not CPU_QUANTITY.match(text):
        raise InputError(f"--cpu {value!r}: use millicores (500m) or cores (2, 1.5)")
    millis = int(text[:-1]) if text.endswith("m") else round(float(text) * 1000)
    if millis <= 0:
        raise InputError(f"--cpu {value!r}: must be more than 0")
    return millis


def parse_memory(value: str) -> int:
    """`512Mi`, `2Gi` -> MiB; InputError otherwise."""
    match = MEMORY_QUANTITY.match(value.strip())
    if not match or int(match.group(1)) == 0:
        raise InputError(f"--memory {value!r}: use Mi or Gi, e.g. 512Mi or 2Gi")
    return int(match.group(1)) * (1024 if match.group(2) == "Gi" else 1)


def measured_resident(report: Report) -> int | None:
    """What opening the chosen artifact on its runtime added to optimize's resident memory (report.json
    `memory.chosen_runner_bytes`: the model's own share of a serving process); None from a report that has none
    (older reports, or a choice that was not measured on this host)."""
    value = report.memory.chosen_runner_bytes if report.memory is not None else None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def memory_request(resident_bytes: int | None, size_bytes: int, cpu_millis: int) -> tuple[int, str]:
    """(MiB, how) a pod requests (pure). Measured: the server's share plus one copy of the model a core the pod
    gets (the server starts up to a model process a core, each holding its own copy), MEMORY_HEADROOM on top.
    Not measured: BASE + MODEL_MEMORY_FACTOR x the file size, said to be an estimate. Rounded up to 64 MiB."""
    if resident_bytes is None:
        mib = BASE_MEMORY_MIB + MODEL_MEMORY_FACTOR * math.ceil(size_bytes / 2**20)
        how = f"memory {BASE_MEMORY_MIB}Mi + {MODEL_MEMORY_FACTOR}x model size (estimate, RSS not measured)"
    else:
        copies = max(1, math.ceil(cpu_millis / 1000))
        resident = math.ceil(resident_bytes / 2**20)
        needed = FRONT_MEMORY_MIB + copies * (PROCESS_MEMORY_MIB + resident)
        mib = math.ceil(needed * (1 + MEMORY_HEADROOM))
        how = (f"memory measured: the runner held {resident}Mi; {FRONT_MEMORY_MIB}Mi front + {copies} model "
               f"process{'es' if copies != 1 else ''} x ({PROCESS_MEMORY_MIB}Mi + {resident}Mi) = {needed}Mi, "
               f"+{MEMORY_HEADROOM:.0%} headroom")
    return 64 * math.ceil(mib / 64), how


def resources_from_report(report: Report, *, cpu: str | None = None, memory: str | None = None) -> Resources:
    """Requests from a `tfsmith optimize` report: CPU = the threads the chosen artifact's latency was measured
    with (one core each), memory = `memory_request`: the chosen runner's measured resident memory a model
    process, plus headroom, or (a report without it) an estimate from the file size that says so. Flags override
    either."""
    try:
        artifact = report.chosen_artifact
    except StopIteration:
        raise InputError(f"--report: the chosen artifact {report.chosen!r} is not among its artifacts") from None
    threads = artifact.threads
    if threads < 1:
        raise InputError(f"--report: threads is {threads}; expected at least 1")
    size = artifact.size_bytes + artifact.variables_bytes
    cpu_millis = parse_cpu(cpu) if cpu else threads * 1000
    memory_mib, how = memory_request(measured_resident(report), size, cpu_millis)
    source = f"report.json: {report.chosen}, {threads} thread(s) -> {threads} CPU, the server sized to them; {how}"
    return Resources(
        cpu_millis=cpu_millis,
        memory_mib=parse_memory(memory) if memory else memory_mib,
        source=source + ("; --cpu/--memory override" if cpu or memory else ""),
        threads=threads,
        p50_us=artifact.latency_us.p50,
    )


def default_resources(*, cpu: str | None = None, memory: str | None = None) -> Resources:
    """Stated defaults (1 CPU, 512Mi), or the flags."""
    return Resources(
        cpu_millis=parse_cpu(cpu) if cpu else DEFAULT_CPU_MILLIS,
        memory_mib=parse_memory(memory) if memory else DEFAULT_MEMORY_MIB,
        source="flags" if cpu and memory else ("defaults (1 CPU, 512Mi)" if not (cpu or memory) else "flags + defaults"),
    )


# ------------------------------------------------------------------------------------------ the plan
def _check_options(options: DeployOptions) -> None:
    if not DNS_LABEL.match(options.model_name) or len(options.model_name) > 40:
        raise InputError(
            f"--model-name {options.model_name!r}: use lowercase letters, digits and '-', starting with a letter "
            "(at most 40 characters: it names the Service and every object)"
        )
    if options.namespace is not None and (not DNS_LABEL.match(options.namespace) or len(options.namespace) > MAX_NAME):
        raise InputError(f"--namespace {options.namespace!r}: not a valid Kubernetes namespace name")
    if options.replicas < 1:
        raise InputError(f"--replicas {options.replicas}: at least 1")
    if options.max_replicas < options.replicas:
        raise InputError(f"--max-replicas {options.max_replicas} is below --replicas {options.replicas}")
    if not 1 <= options.cpu_target_percent <= 100:
        raise InputError(f"--cpu-target {options.cpu_target_percent}: a percentage of the CPU request, 1-100")


def _check_image(entry: FleetImage) -> None:
    if not IMAGE_REF.match(entry.image):
        raise InputError(f"image {entry.image!r} for target {entry.target.name} is not a valid image reference")
    if entry.model_sha256 is not None and not SHA256_HEX.match(entry.model_sha256):
        raise InputError(f"model digest {entry.model_sha256!r} of {entry.image} is not a sha256 hex digest")


def plan_fleet(images: tuple[FleetImage, ...], options: DeployOptions, resources: Resources) -> DeployPlan:
    """The fleet for these images; InputError for anything that cannot be deployed as asked."""
    _check_options(options)
    if not images:
        raise InputError("nothing to deploy: give --targets (with --image-prefix), --image TARGET=REF or --from-images")
    for entry in images:
        _check_image(entry)
    slugs = [slug(entry.target) for entry in images]
    duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
    if duplicates:
        raise InputError(f"target {', '.join(duplicates)} given twice; one image per target")
    digests = {entry.model_sha256 for entry in images if entry.model_sha256}
    if len(digests) > 1:
        raise InputError("the images serve different models (io.tfsmith.model.sha256 differs); one model per fleet")
    # Most demanding first: a target's features are never a subset of a later one's.
    ordered = sorted(images, key=lambda e: (-len(e.target.features), e.target.cuda is None, slug(e.target)))
    members = []
    notes = []
    for rank, entry in enumerate(ordered, start=1):
        place = placement(entry.target)
        name = f"{options.model_name}-{slug(entry.target)}"
        limit = MAX_NAME - len(KSERVE_SUFFIX) if options.kserve else MAX_NAME
        if len(name) > limit:
            raise InputError(f"object name {name!r} is longer than {limit} characters; use a shorter --model-name")
        better = tuple(sorted({rule_label(o.target) for o in ordered if _better(o, entry)}))
        members.append(Member(image=entry, slug=slug(entry.target), name=name, placement=place, better=better, rank=rank))
        if place.invisible:
            notes.append(
                f"{entry.target.name}: NFD cannot see {', '.join(place.invisible)}; a node lacking only those is "
                "still selected and the image's guard refuses to start there (exit 3, one line)"
            )
    return DeployPlan(
        options=options,
        members=tuple(members),
        resources=resources,
        model_sha256=next(iter(digests), None),
        notes=tuple(notes),
    )
