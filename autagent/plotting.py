"""Matplotlib, headless and imported on first use: a plot is drawn on a cluster node with no display, and
``import autagent`` must not pay for matplotlib when no plot is drawn."""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
