"""mwinv: inverted middleware for database performance work.

`mwinv.open(capture)` and `mwinv.experiment.open(out)`: the Python API (docs/python.md)."""

__version__ = "0.1.0"


def open(path, progress=None):  # noqa: A001 - mwinv.open, like io.open
    """A capture directory as a mwinv.api.Capture (correlated on first use): its tables as DataFrames."""
    from mwinv import api

    return api.open(path, progress=progress)


def __getattr__(name):
    # `mwinv.experiment.open(...)` after a bare `import mwinv`, without loading it for the command line
    if name in ("api", "experiment"):
        import importlib

        return importlib.import_module(f"mwinv.{name}")
    raise AttributeError(f"module 'mwinv' has no attribute {name!r}")
