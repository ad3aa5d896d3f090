"""Container engines: the `Engine` interface, the Docker implementation, a fake for unit tests."""


def default_engine() -> "Engine":
    """The Docker engine: the one place every command that needs an engine gets it from."""
    from builder.engine.docker import DockerEngine

    return DockerEngine()


if False:  # pragma: no cover - for type checkers only
    from builder.engine.base import Engine
