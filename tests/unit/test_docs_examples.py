"""The docs' cheap command examples run, and where their output cannot depend on the host, print what the
docs show.

Run in-process through the Typer app (unit tests start no process); host-dependent commands read recorded facts
(tests/fixtures) so they never probe this machine's GPUs.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
from typer.testing import CliRunner

from tests.unit.test_docs_reference import DOCS, ROOT

ZEN4 = ROOT / "tests" / "fixtures" / "cpuinfo" / "amd-epyc-9454-zen4-guest"


def run(command: str) -> tuple[int, str]:
    """`tfsmith ...` through the app, as a user's terminal of 80 columns shows it."""
    from builder.cli import build_app

    args = shlex.split(command)
    assert args[0] == "tfsmith"
    result = CliRunner().invoke(build_app(), args[1:], env={"COLUMNS": "80", "TERM": "dumb"})
    return result.exit_code, result.output


def shown_output(page: str, command: str) -> str:
    """The output a page's console block shows for `$ command` (up to the next prompt or the block's end)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    match = re.search(r"```console\n\$ " + re.escape(command) + r"\n(.*?)(?=^\$ |^```)", text, re.DOTALL | re.MULTILINE)
    assert match, f"docs/{page} shows no `$ {command}` example"
    return match[1]


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@pytest.mark.parametrize("command", ["--help", "detect", "target", "check", "render", "build", "matrix", "push-index",
                                     "engine-up", "example", "optimize", "package", "bench", "deploy", "dockerfiles"])
def test_help_of_every_command(command: str) -> None:
    code, output = run(f"tfsmith {command} --help" if command != "--help" else "tfsmith --help")
    assert code == 0, output
    assert "Usage" in output


def test_serve_help_lists_the_server_options() -> None:
    """`tfsmith serve --help` is the server's own parser: every option it prints is in docs/reference/serve.md."""
    from builder.server.options import parser

    serve = parser("tfsmith serve")
    text = serve.format_help()
    reference = (DOCS / "reference" / "serve.md").read_text(encoding="utf-8")
    flags = [flag for action in serve._actions for flag in action.option_strings if flag not in ("-h", "--help")]
    assert flags
    for flag in flags:
        assert flag in text
        assert f"`{flag}" in reference or f", {flag}" in reference, f"{flag} is not in docs/reference/serve.md"


def test_target_example_prints_what_the_build_page_shows() -> None:
    command = "tfsmith target x86-64-v3 --cuda-cc 8.0,9.0"
    code, output = run(command)
    assert code == 0, output
    assert lines(output) == lines(shown_output("build.md", command))


def test_matrix_example_prints_what_the_build_page_shows() -> None:
    command = "tfsmith matrix --targets x86-64-v3,x86-64-v4 --format github"
    code, output = run(command)
    assert code == 0, output
    assert json.loads(output) == json.loads(shown_output("build.md", command))


def test_check_refuses_as_the_build_page_says() -> None:
    """On a Zen 4 (AVX-512, no FP16, no AVX-VNNI) sapphirerapids is refused, exit 3, naming what is missing."""
    code, output = run(f"tfsmith check --target sapphirerapids --cpuinfo {ZEN4}")
    assert code == 3
    shown = (DOCS / "build.md").read_text(encoding="utf-8")
    assert "it lacks avx512_fp16, avx_vnni" in shown
    assert "lacks avx512_fp16, avx_vnni" in " ".join(output.split())


def test_detect_json_has_the_keys_the_build_page_lists() -> None:
    code, output = run(f"tfsmith detect --json --cpuinfo {ZEN4} --gpu-facts {ROOT / 'tests/fixtures/gpu/t4-header-units.csv'}")
    assert code == 0, output
    facts = json.loads(output)
    assert facts["schema"] == "tfsmith.host-facts/1"
    page = (DOCS / "build.md").read_text(encoding="utf-8")
    for key in ("arch", "vendor", "model_name", "microarchitecture", "level", "features", "logical_cpus",
                "usable_cpus", "total_memory_bytes", "usable_memory_bytes"):
        assert key in facts["cpu"] and f"`{key}`" in page
    for key in ("status", "detail", "source", "driver_version", "devices"):
        assert key in facts["gpu"] and f"`{key}`" in page


def test_exit_codes_on_the_troubleshooting_page_are_the_cli_s() -> None:
    from builder import errors

    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    codes = {int(code) for code in re.findall(r"^\| (\d) \|", page, re.MULTILINE)}
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert codes == defined
