"""Two policies of a ``policy_quality.py`` table compared seed by seed (issue 20's decisions).

Runs of one table share everything but the policy for a given training seed (data subset, initialisation,
data order), so a difference taken seed by seed would remove what the seeds do to both. For each pair ``A B``
(or ``A=B``, ...) this prints the seeds both have, the errors, the mean paired difference ``A - B`` with its
sample standard deviation, the paired t statistic (``mean / (sd / sqrt(n))``) and its two-sided p-value,
Welch's unpaired p-value for the same runs (scipy), and a test with the noise of one run pooled over every
policy of the tables that has two seeds or more (``pooled p``: ``t = (mean A - mean B) / (s sqrt(1/n_A +
1/n_B))`` over each policy's own seeds, ``s`` the pooled within-policy standard deviation, its degrees of
freedom the sum of each policy's seeds less one). A negative difference means A trains better networks.

Which to read: at paper scale the seeds do not pair (over the 16 policies of
``paper_scale_cifar10/test`` with seeds 0-2, two policies' differences seed by seed vary by 0.50 points,
what independent runs give, sqrt(2) x 0.35; ``benchmarks/RESULTS.md``, "How many seeds a decision needs"),
so a paired test of three seeds has two degrees of freedom for nothing, and the pooled one, with 32, is the
sharper test when the policies' noise is alike.

Runs of another machine (the CPU's paper-scale runs beside the GPU's) are another block: ``--block TABLES``
(repeatable) adds one. Its seeds are not joined to the others (a CPU run and a GPU run of one seed are not
the same run, and the machines' levels may differ); instead each block's difference of the policies' means is
taken within the block and the blocks' differences are combined, weighted as their variances under one
noise (``w = 1 / (1/n_A + 1/n_B)`` a block): ``d = sum(w d_b) / sum(w)``, ``t = d / (s / sqrt(sum(w)))``, ``s``
one run's noise pooled within policy and block over every block, its degrees of freedom those of ``s``.
That assumes the difference, not the level, is the same on every machine, and that one run's noise is
alike on all (each block's own noise is printed beside it).

A main effect of a factorial design (which of two amounts of augmentation, which of two mixes of ops) is
a contrast of several policies: ``--contrast A1+A2=B1+B2`` (repeatable) tests the mean of A1's and A2's means
less the mean of B1's and B2's, each over its own seeds: ``t = d / (s sqrt(sum 1 / (k_A^2 n_i) + sum 1 /
(k_B^2 n_j)))`` over the ``k_A`` and ``k_B`` policies of the two sides, ``s`` the pooled noise. With
``--block`` it is taken within each block and the blocks combined as a difference is
(:func:`blocked_contrast`).

Usage::

    python benchmarks/paired.py benchmarks/results/paper_scale_cifar10/test/policy_quality.json pba pba-mean \\
        trivialaugment pba [--block benchmarks/results/cpu_paper_scale/policy_quality.json] [--out FILE.md]
    python benchmarks/paired.py benchmarks/results/cpu_paper_scale/policy_quality.json \\
        --contrast population-paper4+null-population-paper4-amount-of-population-paper4=\\
null-population-paper4+population-paper4-amount-of-null-population-paper4

A policy is named as in the table's ``policy`` column (e.g. ``pba``, ``start-teacher-ta-decay1``, or a
``hba:PATH`` argument as written).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from scipy import stats


def load_errors(*tables: Path) -> dict[str, dict[int, float]]:
    """Each policy's test (or validation) error per training seed, from one or more ``policy_quality.json``
    (e.g. a plan's main table and one of more seeds of a few policies); ``ValueError`` when two tables hold
    the same policy and seed."""
    errors: dict[str, dict[int, float]] = {}
    for table in tables:
        for row in json.loads(table.read_text())["rows"]:
            own = errors.setdefault(row["policy"], {})
            for seed, error in zip(row["seeds"], row["test_errors"], strict=True):
                if seed in own:
                    raise ValueError(f"{row['policy']!r} seed {seed} is in more than one table ({table})")
                own[seed] = error
    return errors


def pooled_noise(errors: dict[str, dict[int, float]]) -> tuple[float, int]:
    """The within-policy standard deviation of one run's error pooled over every policy with two seeds or
    more, and its degrees of freedom (``(nan, 0)`` when none has two)."""
    squares, df = 0.0, 0
    for runs in errors.values():
        if len(runs) >= 2:
            values = list(runs.values())
            mean = statistics.fmean(values)
            squares += sum((v - mean) ** 2 for v in values)
            df += len(values) - 1
    return (math.sqrt(squares / df), df) if df else (math.nan, 0)


def pooled_test(a: dict[int, float], b: dict[int, float], noise: tuple[float, int]) -> tuple[float, float]:
    """``(t, two-sided p)`` of the difference of the means of ``a`` and ``b`` (each over its own seeds) with the
    pooled ``noise`` (:func:`pooled_noise`): :func:`blocked_test` with one block."""
    r = blocked_test([(a, b)], noise)
    return r["t"], r["p"]


def blocked_test(blocks: list[tuple[dict[int, float], dict[int, float]]],
                 noise: tuple[float, int]) -> dict[str, Any]:
    """The difference of two policies combined over blocks of runs (machines; see the module docstring).

    Args:
        blocks: per block, ``(A's errors, B's errors)`` by seed; a block where either has no run is left out.
        noise: one run's noise pooled within policy and block (:func:`pooled_noise` over every block's
            policies), with its degrees of freedom.

    Returns:
        ``per_block`` (each block's A - B, NaN where it lacks one of them), ``difference`` (A - B, weighted
        over the blocks), ``se`` (its standard error), ``t`` and ``p`` (two-sided); NaN where no block has
        both policies or the noise is unknown.
    """
    return blocked_contrast([([a], [b]) for a, b in blocks], noise)


def blocked_contrast(blocks: list[tuple[list[dict[int, float]], list[dict[int, float]]]],
                     noise: tuple[float, int]) -> dict[str, Any]:
    """A contrast of policies' means (the module docstring), taken within each block and combined.

    Each block's contrast ``d_b`` is the mean of A's policies' means less the mean of B's. Under one run's
    noise ``s`` its variance is ``s^2 v_b``, ``v_b = sum 1 / (k_A^2 n_i) + sum 1 / (k_B^2 n_j)``. The blocks
    combine weighted by ``1 / v_b``: ``d = sum(d_b / v_b) / sum(1 / v_b)``, ``se = s / sqrt(sum(1 / v_b))``.
    One policy a side is the difference of two means, weighted ``1 / (1/n_A + 1/n_B)``.

    Args:
        blocks: per block, ``(A's policies, B's policies)``, each policy's errors by seed; a block where any
            of them has no run is left out.
        noise: one run's noise pooled within policy and block, with its degrees of freedom.

    Returns:
        ``per_block`` (each block's contrast, NaN where it is left out), ``difference``, ``se``, ``t`` and
        ``p`` (two-sided); NaN where no block has every policy or the noise is unknown.
    """
    def variance(side: list[dict[int, float]]) -> float:
        return sum(1 / len(r) for r in side) / len(side) ** 2

    def mean(side: list[dict[int, float]]) -> float:
        return statistics.fmean(statistics.fmean(r.values()) for r in side)

    whole = [bool(a) and bool(b) and all(a) and all(b) for a, b in blocks]
    per_block = [mean(a) - mean(b) if ok else math.nan for (a, b), ok in zip(blocks, whole, strict=True)]
    weights = [1 / (variance(a) + variance(b)) if ok else 0.0 for (a, b), ok in zip(blocks, whole, strict=True)]
    out: dict[str, Any] = {"per_block": per_block, "difference": math.nan, "se": math.nan, "t": math.nan,
                           "p": math.nan}
    weight = sum(weights)
    if not weight:
        return out
    out["difference"] = sum(d * w for d, w in zip(per_block, weights, strict=True) if w) / weight
    s, df = noise
    if df and s > 0:
        out["se"] = s / math.sqrt(weight)
        out["t"] = out["difference"] / out["se"]
        out["p"] = float(2 * stats.t.sf(abs(out["t"]), df))
    return out


def compare(a: dict[int, float], b: dict[int, float]) -> dict[str, object]:
    """The seed-by-seed comparison of two policies' errors (see the module docstring)."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    out: dict[str, object] = {"seeds": seeds, "a": [a[s] for s in seeds], "b": [b[s] for s in seeds],
                              "mean_difference": statistics.fmean(diffs) if diffs else math.nan}
    if len(diffs) >= 2:
        sd = statistics.stdev(diffs)
        out["sd_difference"] = sd
        if sd > 0:  # (identical differences on every seed leave t undefined)
            out["paired_t"] = out["mean_difference"] / (sd / math.sqrt(len(diffs)))
            out["paired_p"] = float(stats.ttest_rel(out["a"], out["b"]).pvalue)
    if len(a) >= 2 and len(b) >= 2:
        out["welch_p"] = float(stats.ttest_ind(list(a.values()), list(b.values()), equal_var=False).pvalue)
    return out


def _pairs(names: list[str]) -> list[tuple[str, str]]:
    if any("=" in n for n in names):
        return [tuple(n.split("=", 1)) for n in names]  # type: ignore[misc]
    if len(names) % 2:
        raise SystemExit(f"paired: give policies in pairs (A B A B ...), got {len(names)} names")
    return list(zip(names[::2], names[1::2], strict=True))


def _contrast(text: str) -> tuple[list[str], list[str]]:
    left, sep, right = text.partition("=")
    sides = (left.split("+"), right.split("+"))
    if not sep or not all(name for side in sides for name in side):
        raise argparse.ArgumentTypeError(f"a contrast is A1+A2=B1+B2, got {text!r}")
    return sides


def _contrast_lines(blocks: list[dict[str, dict[int, float]]], contrasts: list[tuple[list[str], list[str]]],
                    noise: tuple[float, int]) -> list[str]:
    """The markdown of the contrasts (``--contrast``): each block's policies' runs and contrast, and the blocks
    combined (one block: the table's own contrast)."""
    lines = ["", "Contrasts (each side the mean of its policies' means"
             + (f"; combined over the blocks, one run's noise {_fmt(noise[0], '.3f')}, {noise[1]} degrees of "
                "freedom" if len(blocks) > 1 else "") + "):", "",
             "| A | B | per block: runs of each policy, contrast | combined A - B | se | t | p |",
             "|---|---|---|---|---|---|---|"]
    for a, b in contrasts:
        sides = [([block.get(n, {}) for n in a], [block.get(n, {}) for n in b]) for block in blocks]
        r = blocked_contrast(sides, noise)
        per = "; ".join(f"{' + '.join(str(len(x)) for x in ra)} / {' + '.join(str(len(x)) for x in rb)}, {_fmt(d)}"
                        for (ra, rb), d in zip(sides, r["per_block"], strict=True))
        lines.append(f"| {' + '.join(a)} | {' + '.join(b)} | {per} | {_fmt(r['difference'])} | "
                     f"{_fmt(r['se'], '.2f')} | {_fmt(r['t'])} | {_fmt(r['p'], '.3f')} |")
    return lines


def _block_noise(blocks: list[dict[str, dict[int, float]]]) -> tuple[float, int]:
    """One run's noise pooled within policy and block."""
    # Keyed by policy and block, so that each block's runs of a policy are a group of their own.
    return pooled_noise({f"{policy}@{i}": runs for i, block in enumerate(blocks) for policy, runs in block.items()})


def _fmt(value: object, spec: str = "+.2f") -> str:
    return format(value, spec) if isinstance(value, int | float) and math.isfinite(value) else "-"


def _blocked_lines(blocks: list[dict[str, dict[int, float]]], tables: list[list[Path]],
                   pairs: list[tuple[str, str]]) -> list[str]:
    """The markdown of the comparisons combined over blocks (``--block``)."""
    noise = _block_noise(blocks)
    names = "; ".join(
        f"block {i}: {', '.join(f'`{t}`' for t in group)} (one run's noise {_fmt(pooled_noise(block)[0], '.3f')})"
        for i, (group, block) in enumerate(zip(tables, blocks, strict=True)))
    lines = ["", f"Combined over blocks ({names}); one run's noise pooled within policy and block: "
             f"{noise[0]:.3f} points ({noise[1]} degrees of freedom):", "",
             "| A | B | per block: runs of A / B, mean A - B | combined A - B | se | t | p |",
             "|---|---|---|---|---|---|---|"]
    for a, b in pairs:
        runs = [(block.get(a, {}), block.get(b, {})) for block in blocks]
        r = blocked_test(runs, noise)
        per = "; ".join(f"{len(ra)} / {len(rb)}, {_fmt(d)}" for (ra, rb), d in zip(runs, r["per_block"], strict=True))
        lines.append(f"| {a} | {b} | {per} | "
                     f"{_fmt(r['difference'])} | {_fmt(r['se'], '.2f')} | {_fmt(r['t'])} | {_fmt(r['p'], '.3f')} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("table", type=lambda text: [Path(t) for t in text.split(",")],
                   help="a policy_quality.json, or several, comma-separated (their seeds joined per policy)")
    p.add_argument("policies", nargs="*", help="pairs A B A B ... (or A=B ...)")
    p.add_argument("--contrast", type=_contrast, action="append", default=[], metavar="A1+A2=B1+B2",
                   help="the mean of A1's and A2's means less B1's and B2's, within each block and combined "
                   "(module docstring)")
    p.add_argument("--block", type=lambda text: [Path(t) for t in text.split(",")], action="append", default=[],
                   metavar="TABLES", help="another machine's policy_quality.json (comma-separated): its runs are a "
                   "block of their own, compared within it and combined with the others (module docstring)")
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    args = p.parse_args(argv)
    if not args.policies and not args.contrast:
        p.error("give pairs of policies, or --contrast")
    try:
        errors = load_errors(*args.table)
        blocks = [errors, *(load_errors(*tables) for tables in args.block)]
    except ValueError as e:
        raise SystemExit(f"paired: {e}") from None
    tables = ", ".join(f"`{t}`" for t in args.table)
    noise = pooled_noise(errors)
    lines = [f"Comparisons from {tables} (`python benchmarks/paired.py "
             f"{' '.join(sys.argv[1:] if argv is None else argv)}`); one run's noise pooled over the tables' "
             f"policies: {noise[0]:.3f} points ({noise[1]} degrees of freedom)."]
    if args.policies:
        lines += ["", "Seed by seed:", "",
                  "| A | B | seeds | A's errors | B's errors | mean A - B | sd | paired t | paired p | Welch p | pooled p |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
    named = [n for pair in _pairs(args.policies) for n in pair]
    named += [n for a, b in args.contrast for n in (*a, *b)]
    missing = [name for name in named if name not in errors]
    if missing:
        raise SystemExit(f"paired: {missing[0]!r} is not a policy of {tables} ({', '.join(errors)})")
    for a, b in _pairs(args.policies):
        c = compare(errors[a], errors[b])
        lines.append(f"| {a} | {b} | {','.join(map(str, c['seeds']))} | {', '.join(f'{e:.2f}' for e in c['a'])} | "
                     f"{', '.join(f'{e:.2f}' for e in c['b'])} | {_fmt(c['mean_difference'])} | "
                     f"{_fmt(c.get('sd_difference'), '.2f')} | {_fmt(c.get('paired_t'), '+.2f')} | "
                     f"{_fmt(c.get('paired_p'), '.3f')} | {_fmt(c.get('welch_p'), '.3f')} | "
                     f"{_fmt(pooled_test(errors[a], errors[b], noise)[1], '.3f')} |")
    if args.block:
        lines += _blocked_lines(blocks, [args.table, *args.block], _pairs(args.policies))
    if args.contrast:
        lines += _contrast_lines(blocks, args.contrast, _block_noise(blocks) if args.block else noise)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
