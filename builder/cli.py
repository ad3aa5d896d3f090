"""The `tfsmith` command line: parse, call a stage, print.

Each command module (builder/commands/*.py) registers its own commands, so the app stays thin and no
command pays for another's imports: heavy libraries (TensorFlow, LiteRT, docker, Jinja2) are imported
inside the command bodies. `tfsmith detect`, the command scripts and users call most, does not even load
the Typer/Click stack (about half of its start-up time): `main` runs it directly when its arguments are
plain, and hands everything else (`--help`, a typo) to the Typer app, which prints the usual messages.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from builder.errors import TfsmithError

if TYPE_CHECKING:
    import typer

# The modules whose `register(app)` adds commands, in the order `tfsmith --help` lists them.
COMMAND_MODULES = ("detect", "render", "build", "optimize", "serve", "bench", "deploy")


@lru_cache(maxsize=1)
def build_app() -> typer.Typer:
    """The Typer application with every command registered (built on first use)."""
    import importlib

    import typer

    app = typer.Typer(
        name="tfsmith",
        help="Build TensorFlow fitted to this hardware, and make models small and fast for it.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    for name in COMMAND_MODULES:
        importlib.import_module(f"builder.commands.{name}").register(app)
    return app


def __getattr__(name: str) -> Any:
    """`builder.cli.app`, built when first asked for (tests drive it with Typer's CliRunner)."""
    if name == "app":
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _run(args: Sequence[str]) -> None:
    from builder.commands.detect import DETECT_OPTIONS, detect_fast_args, run_detect

    if args[:1] == ["detect"]:
        parsed = detect_fast_args(args[1:], DETECT_OPTIONS)
        if parsed is not None:
            run_detect(**parsed)
            return
    build_app()(args=list(args), prog_name="tfsmith")


def main() -> None:
    """Console-script entry point: user errors become one line on stderr and a non-zero exit."""
    try:
        _run(sys.argv[1:])
    except TfsmithError as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        sys.stderr.write(f"tfsmith: error: {message}\n")
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("tfsmith: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
