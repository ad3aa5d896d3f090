"""The `tfsmith` command line: parse, call a stage, print.

Each room registers its own commands (builder/commands/*.py) so the app stays thin and no command pays for
another's imports: heavy libraries (TensorFlow, LiteRT, docker) are imported inside the command bodies.
"""

from __future__ import annotations

import sys

import typer

from builder.commands import bench, build, deploy, detect, optimize, render, serve
from builder.errors import TfsmithError

app = typer.Typer(
    name="tfsmith",
    help="Build TensorFlow fitted to this hardware, and make models small and fast for it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _module in (detect, render, build, optimize, serve, bench, deploy):
    _module.register(app)


def main() -> None:
    """Console-script entry point: user errors become one line on stderr and a non-zero exit."""
    try:
        app()
    except TfsmithError as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        sys.stderr.write(f"tfsmith: error: {message}\n")
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("tfsmith: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":
    main()
