"""Compatibility path for `builder.commands.detect`: the settings moved to `builder.build.settings`.

Kept only while detect.py (owned by another change) still imports from here; new code imports
`builder.build.settings`. Remove once detect.py is updated.
"""

from builder.build.settings import load_config

__all__ = ["load_config"]
