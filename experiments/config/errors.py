"""The one exception type for a bad run configuration.

`ConfigError` means "the config cannot work" (unknown choice, impossible shape, missing file): raised before any
data is loaded, reported by the CLI as one line on stderr with a non-zero exit and no traceback. Anything else
that goes wrong during a run is a bug or an environment failure and keeps its traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration that cannot run; the message says what to change."""
