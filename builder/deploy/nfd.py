"""How Node Feature Discovery (NFD) labels a node's CPU, written down once as data.

The scheduler only knows what is on a Node's labels. NFD's worker reads the CPU with the cpuid library
its `cpu` source is built on (x86: the CPUID instruction; arm64: the kernel's hwcaps) and publishes
`feature.node.kubernetes.io/cpu-cpuid.<FLAG>=true` for every flag it finds, except the flags on its default
attribute blacklist. A `NodeFeatureRule` sees every flag, blacklisted or not, as the `cpu.cpuid` feature.

tfsmith speaks Linux /proc/cpuinfo spelling (`avx512_vnni`, `sse4_1`, `asimddp`: what archspec and the
preflight guard use), so everything here is keyed by that spelling:

- `X86_CPUID`: /proc/cpuinfo flag -> NFD flag, for every x86 flag some archspec target requires and the
  cpuid library detects. A flag missing from this table is one NFD cannot see at all.
- `ARM64_CPUID`: the arm64 hwcap names NFD knows; its flag is the upper-cased hwcap name, which is also
  the /proc/cpuinfo `Features` word.
- `DEFAULT_BLACKLIST`: flags NFD detects but does not label unless its worker is reconfigured.

Why data and not code: the same table decides the manifests' node affinity and, in the tests, the labels a
recorded machine would get, so the two can only disagree if the table is wrong, and a reviewer checks one
table against NFD's documentation instead of two code paths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from builder.guard import canonical_features

LABEL_PREFIX = "feature.node.kubernetes.io/cpu-cpuid."
ARCH_LABEL = "kubernetes.io/arch"
# Kubernetes' GOARCH spelling of the architectures TensorFlow builds for.
K8S_ARCH: Mapping[str, str] = {"x86_64": "amd64", "aarch64": "arm64"}
# NFD always allows this sub-namespace for rule labels (other namespaces need nfd-master's extraLabelNs).
RULE_LABEL_NAMESPACE = "tfsmith.feature.node.kubernetes.io"
CPUID_FEATURE = "cpu.cpuid"  # the feature set a NodeFeatureRule matches CPU flags in

# /proc/cpuinfo spelling -> NFD's cpuid flag (x86). Spellings are the cpuid library's feature names.
X86_CPUID: Mapping[str, str] = {
    "3dnow": "AMD3DNOW",
    "3dnowext": "AMD3DNOWEXT",
    "abm": "LZCNT",  # Linux says "abm" for LZCNT
    "adx": "ADX",
    "aes": "AESNI",
    "amx_bf16": "AMXBF16",
    "amx_int8": "AMXINT8",
    "amx_tile": "AMXTILE",
    "avx": "AVX",
    "avx2": "AVX2",
    "avx512_bf16": "AVX512BF16",
    "avx512_bitalg": "AVX512BITALG",
    "avx512_fp16": "AVX512FP16",
    "avx512_vbmi2": "AVX512VBMI2",
    "avx512_vnni": "AVX512VNNI",
    "avx512_vp2intersect": "AVX512VP2INTERSECT",
    "avx512_vpopcntdq": "AVX512VPOPCNTDQ",
    "avx512bw": "AVX512BW",
    "avx512cd": "AVX512CD",
    "avx512dq": "AVX512DQ",
    "avx512er": "AVX512ER",
    "avx512f": "AVX512F",
    "avx512ifma": "AVX512IFMA",
    "avx512pf": "AVX512PF",
    "avx512vbmi": "AVX512VBMI",
    "avx512vl": "AVX512VL",
    "avx_ifma": "AVXIFMA",
    "avx_ne_convert": "AVXNECONVERT",
    "avx_vnni": "AVXVNNI",
    "avx_vnni_int16": "AVXVNNIINT16",
    "avx_vnni_int8": "AVXVNNIINT8",
    "bmi1": "BMI1",
    "bmi2": "BMI2",
    "cldemote": "CLDEMOTE",
    "clzero": "CLZERO",
    "cmpccxadd": "CMPCCXADD",
    "cx16": "CX16",
    "f16c": "F16C",
    "flush_l1d": "FLUSH_L1D",
    "fma": "FMA3",
    "fma4": "FMA4",
    "gfni": "GFNI",
    "lahf_lm": "LAHF",
    "mmx": "MMX",
    "movbe": "MOVBE",
    "movdir64b": "MOVDIR64B",
    "movdiri": "MOVDIRI",
    "pclmulqdq": "CLMUL",
    "popcnt": "POPCNT",
    "rdrand": "RDRAND",
    "rdseed": "RDSEED",
    "serialize": "SERIALIZE",
    "sha_ni": "SHA",
    "sm3": "SM3_X86",
    "sm4": "SM4_X86",
    "sse": "SSE",
    "sse2": "SSE2",
    "sse3": "SSE3",  # /proc/cpuinfo says "pni"; the guard's canonical spelling folds it to sse3
    "sse4_1": "SSE4",
    "sse4_2": "SSE42",
    "sse4a": "SSE4A",
    "ssse3": "SSSE3",
    "tbm": "TBM",
    "vaes": "VAES",
    "vpclmulqdq": "VPCLMULQDQ",
    "waitpkg": "WAITPKG",
    "xop": "XOP",
    "xsave": "XSAVE",
    "xsavec": "XSAVEC",
    "xsaveopt": "XSAVEOPT",
}

# arm64 hwcaps NFD names (AT_HWCAP and AT_HWCAP2); the NFD flag is the name upper-cased.
ARM64_CPUID: frozenset[str] = frozenset(
    """fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop
    sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes
    svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 i8mm bf16 dgh rng bti
    mte ecv afp rpres mte3 sme smei16i64 smef64f64 smei8i32 smef16f32 smeb16f32 smef32f32 smefa64 wfxt ebf16
    sveebf16""".split()
)

# Flags NFD detects but does not turn into labels by default (its worker's attributeBlacklist).
DEFAULT_BLACKLIST: frozenset[str] = frozenset(
    """AVX10 BMI1 BMI2 CLMUL CMOV CX16 ERMS F16C HTT LZCNT MMX MMXEXT NX POPCNT RDRAND RDSEED RDTSCP SGX SGXLC
    SSE SSE2 SSE3 SSE4 SSE42 SSSE3 TDX_GUEST""".split()
)


def nfd_flag(arch: str, feature: str) -> str | None:
    """NFD's flag for one /proc/cpuinfo feature of `arch`; None when NFD cannot see that feature."""
    if arch == "x86_64":
        return X86_CPUID.get(feature)
    if arch == "aarch64":
        return feature.upper() if feature in ARM64_CPUID else None
    return None


def node_cpuid(arch: str, cpuinfo_flags: Iterable[str]) -> frozenset[str]:
    """The `cpu.cpuid` flag set NFD reports for a machine with these /proc/cpuinfo flags."""
    flags = (nfd_flag(arch, f) for f in canonical_features(cpuinfo_flags))
    return frozenset(f for f in flags if f is not None)


def default_labels(arch: str, cpuinfo_flags: Iterable[str]) -> dict[str, str]:
    """The labels a stock NFD deployment puts on such a node: arch plus every non-blacklisted cpuid flag."""
    labels = {LABEL_PREFIX + flag: "true" for flag in node_cpuid(arch, cpuinfo_flags) if flag not in DEFAULT_BLACKLIST}
    if arch in K8S_ARCH:
        labels[ARCH_LABEL] = K8S_ARCH[arch]
    return labels
