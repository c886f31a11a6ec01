"""Experiments over clusters: plans of factors and levels ([Taufer]'s node counts and partitioning
schemes, [Zhang]'s resource sweeps), a resumable runner, results tables, and what they show."""
