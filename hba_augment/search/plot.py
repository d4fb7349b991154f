"""A picture of a schedule like the paper's Fig. 4: magnitudes and normalised probabilities over epochs."""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from hba_augment.functional import MAGNITUDE_OPS, OP_NAMES, OPS
from hba_augment.schedule import Schedule

__all__ = ["missing_plot_dependency", "plot_schedule", "schedule_curves"]


def missing_plot_dependency() -> str | None:
    """``None`` if :func:`plot_schedule` can run, else a one-line reason saying what to install.

    matplotlib is an optional dependency (the ``search`` extra): callers check this before a long run,
    so that a missing plotting library never costs the run's results.
    """
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install 'hba-augment[search]')"
    return None


def schedule_curves(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The two families of curves that :func:`plot_schedule` draws.

    Returns:
        ``(magnitudes, probabilities)``: ``magnitudes`` has shape ``(S, 12)``, for each op with a magnitude
        (canonical order) the sum over the two copies of its magnitude as a fraction of its range (so each
        lies in ``[0, 2]``); ``probabilities`` has shape ``(S, 15)``, each op's probability summed over the
        two copies and divided by the sum over all ops (rows sum to 1; a row of zeros stays zero).
    """
    ops = list(MAGNITUDE_OPS)
    lo = np.array([OPS[k].low for k in ops])
    hi = np.array([OPS[k].high for k in ops])
    mags = ((schedule.mag[:, :, ops] - lo) / (hi - lo)).sum(axis=1)
    probs = schedule.prob.sum(axis=1)
    total = probs.sum(axis=1, keepdims=True)
    probs = np.divide(probs, total, out=np.zeros_like(probs), where=total > 0)
    return mags, probs


def plot_schedule(schedule: Schedule, path: str | os.PathLike[str], *, title: str | None = None) -> None:
    """Write a PNG with two stacked-area panels over the search epochs.

    (a) operation magnitudes (each op's two copies summed, as fractions of the op's range), stacked;
    (b) normalised probabilities (each op's two copies summed, divided by the total), stacked to 1.

    Uses matplotlib's Agg canvas (no display needed; pyplot's global state is not touched).
    """
    # A bare Figure renders with the Agg canvas and never touches pyplot or the user's backend.
    import matplotlib
    from matplotlib.figure import Figure

    mags, probs = schedule_curves(schedule)
    epochs = np.arange(schedule.epochs)
    if schedule.epochs == 1:  # a single entry: draw it as a flat band over one epoch
        epochs = np.array([0, 1])
        mags, probs = np.repeat(mags, 2, axis=0), np.repeat(probs, 2, axis=0)
    fig = Figure(figsize=(10, 8), layout="constrained")
    ax_m, ax_p = fig.subplots(2, 1, sharex=True)
    colours = [matplotlib.colormaps["tab20"](i % 20) for i in range(len(OP_NAMES))]
    mag_names = [OP_NAMES[k] for k in MAGNITUDE_OPS]
    ax_m.stackplot(epochs, mags.T, labels=mag_names, colors=[colours[k] for k in MAGNITUDE_OPS])
    ax_m.set_ylabel("magnitude (fraction of range,\nsum of both copies)")
    ax_m.set_title("(a) Operation magnitudes")
    ax_m.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax_p.stackplot(epochs, probs.T, labels=list(OP_NAMES), colors=colours)
    ax_p.set_ylabel("normalised probability")
    ax_p.set_ylim(0, 1)
    ax_p.set_xlabel("search epoch")
    ax_p.set_title("(b) Normalised probabilities")
    ax_p.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax_p.set_xlim(epochs[0], epochs[-1])
    epochs_text = f"{schedule.epochs} epoch{'' if schedule.epochs == 1 else 's'}"
    fig.suptitle(title if title is not None else f"HBA schedule {schedule.name!r} ({epochs_text})")
    fig.savefig(os.fspath(path), dpi=100, format="png")
