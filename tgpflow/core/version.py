"""The installed tgpflow's version: pyproject.toml is the one place it is written."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("tgpflow")
except PackageNotFoundError:  # a source tree on sys.path that was never installed (pip install -e .)
    __version__ = "0+unknown"
