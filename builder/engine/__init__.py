"""Container engines: the `Engine` interface, the Docker implementation, a fake for unit tests."""
