"""Does a search's ``lambda`` follow a signal or a random walk? (issue 10, section 5)

Reads the ``metrics.jsonl`` of a search (``hypergrad_mean``: each hyperparameter's mean gradient over an
epoch's ``t_val`` steps, logged since this script was written) and pools epochs into windows. For each
window and hyperparameter, ``t`` is the mean of the epoch means over its standard error across the
window's epochs (so correlation between the steps of one epoch does not inflate it); with ``W`` epochs of
zero-mean noise, ``|t| > 2`` holds for about 6% of the hyperparameters (Student's t, ``W - 1`` degrees of
freedom, ``W`` = 20). ``sign kept`` is the fraction of hyperparameters whose window-mean gradient has the
sign it had in the window before: 0.5 for noise, near 1 for a push that lasts.

Two more columns ask what the signal is about. Every op has two copies in ``lambda`` (PBA's search space),
which do the same thing to an image; a gradient that measures what an op does to the images should push
both copies the same way, so ``copies agree`` is the correlation of the two copies' ``t`` over the 15
probabilities and over the 12 magnitudes (about 0 for noise, or for a push that is about the hypernetwork
rather than the op). ``prob t`` is the mean ``t`` of the 30 probabilities: positive when the search is
lowering the probabilities (Adam steps against the gradient), i.e. asking for less augmentation.

Adam moves ``lambda`` by about its learning rate per step whatever the gradients' mean, so ``lambda``
moving says nothing by itself; these statistics say whether the direction it moves in is consistent.

Usage::

    python benchmarks/hypergradient_signal.py runs/diag-hgrad-cifar10/metrics.jsonl --window 20
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from hba_augment.functional import NUM_OPS
from hba_augment.search.hparams import HPARAM_NAMES, NUM_HPARAMS, NUM_PROB_HPARAMS


def load_gradients(path: Path) -> np.ndarray:
    """The ``(epochs, NUM_HPARAMS)`` epoch-mean hypergradients of a search's ``metrics.jsonl``."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = json.loads(line)
        if "hypergrad_mean" not in m:
            raise ValueError(f"{path}:{number}: no hypergrad_mean (the search predates the metric)")
        rows.append(m["hypergrad_mean"])
    g = np.asarray(rows, dtype=np.float64)
    if g.ndim != 2 or g.shape[1] != NUM_HPARAMS:
        raise ValueError(f"{path}: expected {NUM_HPARAMS} hyperparameters per epoch, got shape {g.shape}")
    return g


def copy_agreement(t: np.ndarray) -> tuple[float, float]:
    """Correlation between copy 0 and copy 1 of each op's ``t``: over the probabilities, over the magnitudes."""
    mags = (NUM_HPARAMS - NUM_PROB_HPARAMS) // 2
    prob = np.corrcoef(t[:NUM_OPS], t[NUM_OPS:NUM_PROB_HPARAMS])[0, 1]
    mag = np.corrcoef(t[NUM_PROB_HPARAMS : NUM_PROB_HPARAMS + mags], t[NUM_PROB_HPARAMS + mags :])[0, 1]
    return float(prob), float(mag)


def window_statistics(g: np.ndarray, window: int) -> list[dict[str, float]]:
    """Per full window of ``window`` epochs: mean ``|t|``, the fraction with ``|t| > 2``, the fraction of
    hyperparameters whose mean gradient kept its sign from the window before (``nan`` for the first), the
    mean ``t`` of the probabilities, and the copies' agreement (:func:`copy_agreement`)."""
    if window < 2:
        raise ValueError(f"window must be at least 2 epochs, got {window}")
    rows, previous = [], None
    for start in range(0, len(g) - window + 1, window):
        w = g[start : start + window]
        mean = w.mean(0)
        se = w.std(0, ddof=1) / math.sqrt(window)
        t = mean / np.maximum(se, 1e-300)
        kept = math.nan if previous is None else float((np.sign(mean) == np.sign(previous)).mean())
        prob_agree, mag_agree = copy_agreement(t)
        rows.append({"first_epoch": start, "last_epoch": start + window - 1, "abs_t_mean": float(np.abs(t).mean()),
                     "t_over_2_fraction": float((np.abs(t) > 2).mean()), "sign_kept": kept,
                     "prob_t_mean": float(t[:NUM_PROB_HPARAMS].mean()), "prob_copies_agree": prob_agree,
                     "mag_copies_agree": mag_agree})
        previous = mean
    return rows


def whole_run_t(g: np.ndarray) -> np.ndarray:
    """Each hyperparameter's ``t`` over all epochs (epoch means as the samples)."""
    return g.mean(0) / np.maximum(g.std(0, ddof=1) / math.sqrt(len(g)), 1e-300)


def report(path: Path, window: int, top: int = 8) -> str:
    g = load_gradients(path)
    lines = [f"Hypergradient signal of `{path}` ({len(g)} epochs, windows of {window}).", "",
             "| epochs | mean abs t | abs t > 2 | sign kept | prob t | copies agree: prob | mag |",
             "|---|---|---|---|---|---|---|"]
    for r in window_statistics(g, window):
        kept = "-" if math.isnan(r["sign_kept"]) else f"{r['sign_kept']:.2f}"
        lines.append(f"| {r['first_epoch']}-{r['last_epoch']} | {r['abs_t_mean']:.2f} | "
                     f"{r['t_over_2_fraction']:.2f} | {kept} | {r['prob_t_mean']:+.2f} | "
                     f"{r['prob_copies_agree']:+.2f} | {r['mag_copies_agree']:+.2f} |")
    t = whole_run_t(g)
    order = np.argsort(-np.abs(t))[:top]
    prob_agree, mag_agree = copy_agreement(t)
    lines += ["", f"Whole run: mean abs t {np.abs(t).mean():.2f}, abs t > 2 for {(np.abs(t) > 2).mean():.2f} of the "
              f"hyperparameters, prob t {t[:NUM_PROB_HPARAMS].mean():+.2f}, copies agree {prob_agree:+.2f} "
              f"(prob) {mag_agree:+.2f} (mag). Most consistent (negative t: the search raises it):", ""]
    lines += [f"- {HPARAM_NAMES[i]}: t = {t[i]:+.1f}" for i in order]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("metrics", type=Path, help="a search's metrics.jsonl")
    p.add_argument("--window", type=int, default=20, help="epochs pooled per row (default 20)")
    args = p.parse_args(argv)
    try:
        sys.stdout.write(report(args.metrics, args.window))
    except (OSError, ValueError) as e:
        raise SystemExit(f"hypergradient_signal: error: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
