"""Experiments over clusters: plans of factors and levels ([Taufer]'s node counts and partitioning
schemes, [Zhang]'s resource sweeps), a resumable runner, results tables, and what they show."""


def open(out):  # noqa: A001 - mwinv.experiment.open, like mwinv.open
    """An experiment's directory as a mwinv.api.Experiment: its results as DataFrames (docs/python.md)."""
    from mwinv.api import Experiment

    return Experiment(out)
