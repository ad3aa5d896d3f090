"""One module per command group; each exposes `register(app)` adding its Typer commands (see builder/cli.py)."""
