"""One module per room; each exposes `register(app)` adding its Typer commands."""
