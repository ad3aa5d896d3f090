"""The compiler-emitted feature table (builder/data/cpu_features.json) against archspec and the compilers' docs."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest
from archspec.cpu import TARGETS

from builder.hardware import codegen
from builder.targets import FAMILIES

RAW = json.loads(resources.files("builder").joinpath("data/cpu_features.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("arch", FAMILIES)
def test_every_feature_archspec_lists_is_classified_with_a_reason(arch: str) -> None:
    listed = set().union(*(t.features for t in TARGETS.values() if t.family.name == arch))
    rows = RAW["features"][arch]
    assert listed - set(rows) == set(), "classify new archspec features in builder/data/cpu_features.json"
    assert all(row["why"].strip() for row in rows.values())


def test_the_table_cites_gcc_and_clang_docs() -> None:
    sources = " ".join(RAW["sources"].values())
    for page in ("gcc.gnu.org/onlinedocs/gcc/x86-Options", "gcc.gnu.org/onlinedocs/gcc/AArch64-Options",
                 "clang.llvm.org/docs/ClangCommandLineReference", "X86TargetParser"):
        assert page in sources


def test_hints_that_hypervisors_hide_are_never_required() -> None:
    hidden = {"waitpkg", "serialize", "cldemote", "movdiri", "movdir64b", "umip", "pdcm", "amx_tile", "amx_int8", "amx_bf16"}
    assert not any(codegen.is_code_feature("x86_64", f) for f in hidden)
    assert not codegen.is_code_feature("aarch64", "dgh")


def test_x86_options_are_compiler_flags_and_only_for_emitted_features() -> None:
    for feature, row in RAW["features"]["x86_64"].items():
        if row["option"] is not None:
            assert row["emitted"], feature
            assert re.fullmatch(r"-m[a-z0-9.]+", row["option"]), row["option"]
    assert codegen.feature_option("avx512_fp16") == "-mavx512fp16"
    assert codegen.feature_option("waitpkg") is None


def test_march_additions_name_real_targets_and_emitted_features() -> None:
    for name, adds in codegen.table().march_adds.items():
        assert name in TARGETS
        assert all(codegen.is_code_feature(TARGETS[name].family.name, f) for f in adds)
        assert not adds & TARGETS[name].features, "already listed by archspec: drop it from march_adds"


def test_code_features_of_sapphirerapids_and_neoverse_v1() -> None:
    spr = TARGETS["sapphirerapids"]
    code = codegen.code_features(spr)
    assert {"avx512_fp16", "avx_vnni", "avx512_bf16", "avx512_vnni"} <= code
    assert not code & {"waitpkg", "serialize", "cldemote", "movdiri", "movdir64b", "amx_tile"}
    assert code | codegen.hint_features(spr) >= spr.features  # nothing dropped silently
    v1 = codegen.code_features(TARGETS["neoverse_v1"])
    assert {"sve", "bf16", "i8mm", "asimddp"} <= v1 and "dgh" not in v1


def test_descendants_emit_at_least_what_their_ancestors_emit() -> None:
    for target in TARGETS.values():
        if target.family.name in FAMILIES:
            for parent in target.parents:
                missing = codegen.code_features(parent) - codegen.code_features(target)
                assert not missing, f"{target.name} emits less than {parent.name}: {sorted(missing)}"


def test_server_spelling_keeps_the_code_and_only_applies_to_server_parts() -> None:
    flags = ("-march=icelake-client", "-mtune=icelake-client")
    assert codegen.server_flags(flags) == ("-march=icelake-server", "-mtune=icelake-server")
    assert codegen.server_flags(("-march=haswell", "-mtune=haswell")) == ("-march=haswell", "-mtune=haswell")
    assert codegen.is_server_part("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz")
    assert not codegen.is_server_part("11th Gen Intel(R) Core(TM) i7-1185G7 @ 3.00GHz")
