"""The search space as plain data: the 15 ops' names and magnitude ranges, and the template's constants.

The contract, section 1 (the table) and section 2 (the template); ``docs/contract.md``. These facts need
neither torch nor numpy, so that reading a schedule (``hba-augment show``) does not import torch (about 3
to 5 s): :mod:`hba_augment.schedule` validates against this module, and the kernels' table
(``functional/_table.py``) pairs each op with its kernel. ``tests/test_architecture.py`` checks that both
agree, op by op.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_COUNT_PROBS",
    "MAGNITUDE_OPS",
    "NUM_COPIES",
    "NUM_OPS",
    "OP_NAMES",
    "OP_RANGES",
    "OpRange",
    "check_count_probs",
]


class OpRange(NamedTuple):
    """An op's canonical name, the range ``[low, high]`` of the unsigned magnitudes a schedule stores for
    it (both ``None`` for the three ops without a magnitude), and whether a random sign is drawn for it
    each time it is applied (the contract, section 1)."""

    name: str
    low: float | None
    high: float | None
    signed: bool

    @property
    def has_magnitude(self) -> bool:
        return self.low is not None


#: The 15 ops in canonical order (the order of every per-op vector, file and table).
OP_RANGES: tuple[OpRange, ...] = (
    OpRange("ShearX", 0.0, 0.3, True),
    OpRange("ShearY", 0.0, 0.3, True),
    OpRange("TranslateX", 0.0, 0.45, True),
    OpRange("TranslateY", 0.0, 0.45, True),
    OpRange("Rotate", 0.0, 30.0, True),
    OpRange("AutoContrast", None, None, False),
    OpRange("Invert", None, None, False),
    OpRange("Equalize", None, None, False),
    OpRange("Solarize", 0.0, 255.0, False),  # strengths, not PIL's threshold (the contract, section 1)
    OpRange("Posterize", 0.0, 8.0, False),  # strengths, not PIL's bit count
    OpRange("Contrast", 0.1, 1.9, False),
    OpRange("Color", 0.1, 1.9, False),
    OpRange("Brightness", 0.1, 1.9, False),
    OpRange("Sharpness", 0.1, 1.9, False),
    OpRange("Cutout", 0.0, 0.2, False),
)

OP_NAMES: tuple[str, ...] = tuple(op.name for op in OP_RANGES)
NUM_OPS = len(OP_RANGES)
#: Indices (into :data:`OP_RANGES`) of the ops that take a magnitude, in canonical order.
MAGNITUDE_OPS: tuple[int, ...] = tuple(i for i, op in enumerate(OP_RANGES) if op.has_magnitude)
#: A policy holds every op twice (PBA's template): 2 x 15 slots.
NUM_COPIES = 2
#: Distribution of the number K of ops applied per image: P(K=0), P(K=1), P(K=2).
DEFAULT_COUNT_PROBS: tuple[float, ...] = (0.2, 0.3, 0.5)

# K counts applied slots, so it can never exceed the 30 slots of the template.
_MAX_COUNT = NUM_COPIES * NUM_OPS
_SUM_TOLERANCE = 1e-6


def check_count_probs(count_probs: Any) -> tuple[float, ...]:
    """Validate a distribution of K (``count_probs[k]``: the probability that at most ``k`` ops are applied).

    The one check for schedules, :func:`hba_augment.functional.augment` and the search. Accepts a sequence,
    a numpy array or a tensor (anything with ``tolist``) of 1 to 31 finite numbers >= 0 summing to 1
    (within 1e-6, summed exactly).

    Returns:
        The probabilities as a tuple of floats.

    Raises:
        ValueError: naming the offending value.
    """
    if isinstance(count_probs, (str, bytes, Mapping)) or not (
        hasattr(count_probs, "tolist") or (hasattr(count_probs, "__len__") and hasattr(count_probs, "__getitem__"))
    ):
        raise ValueError(f"count_probs must be a sequence of probabilities, got {count_probs!r}")
    values = count_probs.tolist() if hasattr(count_probs, "tolist") else list(count_probs)
    if not isinstance(values, list) or not 1 <= len(values) <= _MAX_COUNT + 1:
        size = len(values) if isinstance(values, list) else "a scalar"
        raise ValueError(f"count_probs must have 1 to {_MAX_COUNT + 1} entries (P(K=0), P(K=1), ...), got {size}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
            raise ValueError(f"count_probs[{i}] must be a finite number >= 0, got {v!r}")
        out.append(float(v))
    total = math.fsum(out)
    if abs(total - 1.0) > _SUM_TOLERANCE:
        raise ValueError(f"count_probs must sum to 1 (tolerance {_SUM_TOLERANCE}), got {out} (sum {total!r})")
    return tuple(out)
