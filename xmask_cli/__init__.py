"""xmask: structure-aware graph transformers from the command line."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("xmask")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.1.0+src"
