"""bench's statistics are the shared ones (`builder.measure.stats`); this name stays for bench's own readers."""

from builder.measure.stats import *  # noqa: F401,F403
