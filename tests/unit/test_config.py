"""Config precedence (flags > env > file > defaults), unknown keys, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.build.settings import DEFAULT_MATRIX_TARGETS, BuildConfig, load_config
from builder.errors import InputError


def _toml(tmp_path: Path, text: str, name: str = "tfsmith.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_source(tmp_path: Path) -> None:
    config = load_config({}, env={}, cwd=tmp_path)
    assert config.target == "host"
    assert config.tags == ()
    assert config.targets == DEFAULT_MATRIX_TARGETS
    assert config.push is None


def test_one_precedence_rule_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    _toml(tmp_path, '[build]\ntarget = "icelake"\npush = "file.example:5000/ml"\njobs = 3\n')
    env = {"TFSMITH_TARGET": "x86-64-v4", "TFSMITH_PUSH": "env.example:5000/ml"}
    config = load_config({"target": "x86-64-v3"}, env=env, cwd=tmp_path)
    assert config.target == "x86-64-v3"  # flag
    assert config.push == "env.example:5000/ml"  # env beats file
    assert config.jobs == 3  # file beats default
    assert config.python is None  # default


def test_flags_given_as_none_do_not_override(tmp_path: Path) -> None:
    _toml(tmp_path, '[build]\ntarget = "icelake"\n')
    assert load_config({"target": None, "tags": ()}, env={}, cwd=tmp_path).target == "icelake"


def test_pyproject_tool_table_is_read_when_no_tfsmith_toml(tmp_path: Path) -> None:
    _toml(tmp_path, '[project]\nname = "x"\n[tool.tfsmith.matrix]\ntargets = ["x86-64-v3", "neoverse_v1"]\n',
          name="pyproject.toml")
    assert load_config({}, env={}, cwd=tmp_path).targets == ("x86-64-v3", "neoverse_v1")


def test_explicit_config_file_wins_over_cwd(tmp_path: Path) -> None:
    _toml(tmp_path, '[build]\ntarget = "icelake"\n')
    other = tmp_path / "sub"
    other.mkdir()
    chosen = _toml(other, '[build]\ntarget = "zen4"\n', name="ci.toml")
    assert load_config({}, config_file=chosen, env={}, cwd=tmp_path).target == "zen4"


def test_unknown_key_is_rejected_with_its_name_and_closest_valid(tmp_path: Path) -> None:
    _toml(tmp_path, '[build]\ntargte = "icelake"\n')
    with pytest.raises(InputError, match=r"unknown key .*'targte'.*did you mean 'target'"):
        load_config({}, env={}, cwd=tmp_path)


def test_unknown_section_is_rejected(tmp_path: Path) -> None:
    _toml(tmp_path, '[biuld]\ntarget = "icelake"\n')
    with pytest.raises(InputError, match=r"'biuld'.*did you mean 'build'"):
        load_config({}, env={}, cwd=tmp_path)


def test_matrix_key_in_build_section_is_rejected(tmp_path: Path) -> None:
    _toml(tmp_path, '[build]\ntargets = ["x86-64-v3"]\n')
    with pytest.raises(InputError, match="'targets'.*did you mean 'target'"):
        load_config({}, env={}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cuda_cc", "8.0;rm -rf /", "CUDA capability"),
        ("tf_version", "latest", "TensorFlow version"),
        ("python", "2.7", "Python version"),
        ("base_image", "Bad Image:tag", "image reference"),
        ("push", "https://registry", "registry"),
        ("jobs", "0", "out of range"),
        ("jobs", "many", "whole number"),
        ("target", "x86\nRUN evil", "target name"),
        ("remote_cache", "http://cache/$(id)", "URL"),
        ("tags", "ok:1,Not A Tag", "image tag"),
    ],
)
def test_bad_values_are_refused_naming_the_flag(tmp_path: Path, key: str, value: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        load_config({key: value}, env={}, cwd=tmp_path)
    flag = {"tags": "--tag"}.get(key, f"--{key.replace('_', '-')}")  # the flag as the user types it
    assert str(caught.value).startswith(f"{flag}:")


def test_bad_env_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="TFSMITH_JOBS"):
        load_config({}, env={"TFSMITH_JOBS": "-2"}, cwd=tmp_path)


def test_bad_file_value_names_file_section_and_key(tmp_path: Path) -> None:
    _toml(tmp_path, '[build]\npython = "3.x"\n')
    with pytest.raises(InputError, match=r"tfsmith.toml \[build\] python"):
        load_config({}, env={}, cwd=tmp_path)


def test_wheel_must_exist_and_be_a_wheel(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_config({"wheel": str(tmp_path / "missing.whl")}, env={}, cwd=tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(InputError, match="not a .whl"):
        load_config({"wheel": str(text)}, env={}, cwd=tmp_path)


def test_ca_bundle_none_system_and_file(tmp_path: Path) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    assert load_config({"ca_bundle": "none"}, env={}, cwd=tmp_path).ca_bundle is None
    assert load_config({"ca_bundle": str(pem)}, env={}, cwd=tmp_path).ca_bundle == pem.resolve()
    with pytest.raises(InputError, match="no such file"):
        load_config({"ca_bundle": str(tmp_path / "nope.pem")}, env={}, cwd=tmp_path)


def test_lists_accept_comma_text_and_toml_arrays_and_drop_duplicates(tmp_path: Path) -> None:
    from_flag = load_config({"targets": "x86-64-v3, x86-64-v4,x86-64-v3"}, env={}, cwd=tmp_path)
    assert from_flag.targets == ("x86-64-v3", "x86-64-v4")


def test_result_is_frozen(tmp_path: Path) -> None:
    config = load_config({}, env={}, cwd=tmp_path)
    assert isinstance(config, BuildConfig)
    with pytest.raises(AttributeError):
        config.target = "x"  # type: ignore[misc]


def test_unrelated_tfsmith_env_variables_are_ignored(tmp_path: Path) -> None:
    env = {"TFSMITH_REQUIRE_GPU": "1", "TFSMITH_FEATURES": "avx2", "TFSMITH_DEBIAN_MIRROR": "http://x"}
    assert load_config({}, env=env, cwd=tmp_path) == load_config({}, env={}, cwd=tmp_path)


def test_broken_toml_is_an_input_error(tmp_path: Path) -> None:
    _toml(tmp_path, "[build\n")
    with pytest.raises(InputError, match="cannot read"):
        load_config({}, env={}, cwd=tmp_path)


def test_an_images_guard_environment_is_not_a_setting(tmp_path: Path) -> None:
    """Every built image sets the guard's variables; `tfsmith build` run inside one must not see a target."""
    from builder.build.settings import SETTINGS_ENV
    from builder.guard import ENV_PREFIX
    from builder.target_types import BuildTarget, CudaSpec

    target = BuildTarget(name="sapphirerapids", arch="x86_64", features=frozenset({"avx512f", "amx_tile"}),
                         copts=(), host_copts=(), cuda=CudaSpec("12.5.1", "9.3.0", ("9.0",), "9.0"))
    config = load_config({}, env=target.guard_env, cwd=tmp_path)
    assert config.target == "host" and config.cuda_cc is None
    assert not any(name.startswith(ENV_PREFIX) for name in SETTINGS_ENV.values())
