"""Compatibility path for `builder.commands.detect`: settings -> plan moved to `builder.build.from_settings`.

Kept only while detect.py (owned by another change) still imports from here; new code imports
`builder.build.from_settings`. Remove once detect.py is updated.
"""

from builder.build.from_settings import resolve_settings_target

__all__ = ["resolve_settings_target"]
