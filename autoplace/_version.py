"""The one version: the installed distribution's (pyproject `version`, read by importlib.metadata)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autoplace")
except PackageNotFoundError:  # a source checkout on PYTHONPATH, not installed
    __version__ = "0.0.0+unknown"
