"""Learned augmentation schedules: one policy per search epoch (the contract, section 4).

A :class:`Schedule` holds, for each of ``S`` search epochs, the probability and magnitude of the 30
slots (2 copies x 15 ops) of PBA's template (the contract, section 2), plus the distribution of the number of
ops applied per image. It is what ``hba-augment search`` writes and what :class:`~hba_augment.HBAPolicy`
reads; the JSON format is validated on load and on construction, so a schedule that exists is valid.
"""

from __future__ import annotations

import json
import math
import operator
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ._io import atomic_open
from ._space import DEFAULT_COUNT_PROBS, NUM_COPIES, NUM_OPS, OP_NAMES, OP_RANGES, check_count_probs

if TYPE_CHECKING:
    import torch

__all__ = ["Schedule"]

FORMAT = "hba-schedule"
#: The format version this package writes (the contract, section 4). Version 2 holds Solarize and Posterize
#: as strengths; version 1 held PIL's raw threshold and bit count, and is converted on load.
VERSION = 2
#: Versions :meth:`Schedule.from_dict` reads.
READABLE_VERSIONS = (1, 2)
_SOLARIZE = OP_NAMES.index("Solarize")
_POSTERIZE = OP_NAMES.index("Posterize")
# Six significant digits keep files small and diffable; rounding maps each range end to itself,
# so a rounded value never leaves its range.
_SIGNIFICANT_DIGITS = 6
_KEYS = ("format", "version", "name", "ops", "count_probs", "epochs", "entries", "provenance")
_ENTRY_KEYS = ("epoch", "prob", "mag")

_HAS_MAG = np.array([op.has_magnitude for op in OP_RANGES])
_LOW = np.array([op.low if op.has_magnitude else np.nan for op in OP_RANGES], dtype=np.float64)
_HIGH = np.array([op.high if op.has_magnitude else np.nan for op in OP_RANGES], dtype=np.float64)
# A float32 range end (0.3f, 0.2f) lies just outside the float64 range; values that far out are float32
# rounding of a bound, not a different magnitude, and are set to the bound. 1e-6 relative is 10x float32's.
_SNAP = 1e-6 * np.fmax(np.abs(_LOW), np.abs(_HIGH))


def _is_tensor(value: Any) -> bool:
    # torch is imported only where a tensor goes in or out, so that reading a schedule (hba-augment show)
    # does not import it; a tensor cannot exist before torch is imported.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _slot(field: str, s: int, c: int, k: int) -> str:
    return f"entries[{s}].{field}[{c}][{k}] (copy {c}, {OP_NAMES[k]})"


def _check_int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}") from None
    if value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value}")
    return value


def _check_provenance(provenance: Any) -> dict[str, Any]:
    if provenance is None:
        return {}
    if not isinstance(provenance, dict):
        raise ValueError(f"provenance must be a dict, got {type(provenance).__name__}: {provenance!r}")
    try:
        # Round-trip so the stored copy is plain JSON data that nobody else holds a reference to.
        return json.loads(json.dumps(provenance, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"provenance must be JSON-serialisable (finite numbers, str keys): {e}") from None


def _as_array(values: Any, field: str) -> np.ndarray:
    if _is_tensor(values):
        values = values.detach().cpu().double().numpy()
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{field} must be a numeric array of shape (S, {NUM_COPIES}, {NUM_OPS}): {e}") from None
    if array.ndim != 3 or array.shape[1:] != (NUM_COPIES, NUM_OPS) or array.shape[0] < 1:
        raise ValueError(
            f"{field} must have shape (S, {NUM_COPIES}, {NUM_OPS}) with S >= 1, got {tuple(array.shape)}"
        )
    return array


def _check_prob(prob: np.ndarray) -> None:
    bad = ~((prob >= 0.0) & (prob <= 1.0))  # NaN fails both comparisons
    if bad.any():
        s, c, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{_slot('prob', s, c, k)} = {float(prob[s, c, k])!r} is outside [0, 1]")


def _check_mag(mag: np.ndarray) -> None:
    """Validate ``mag`` in place, snapping float32 rounding of a range end onto that end."""
    for s, c, k in np.argwhere(np.isnan(mag) & _HAS_MAG):
        s, c, k = int(s), int(c), int(k)
        raise ValueError(
            f"{_slot('mag', s, c, k)} is missing (null/NaN); {OP_NAMES[k]} needs a magnitude in "
            f"[{_LOW[k]}, {_HIGH[k]}]"
        )
    for s, c, k in np.argwhere(~np.isnan(mag) & ~_HAS_MAG):
        s, c, k = int(s), int(c), int(k)
        raise ValueError(
            f"{_slot('mag', s, c, k)} = {float(mag[s, c, k])!r} must be null (NaN): {OP_NAMES[k]} takes no magnitude"
        )
    with np.errstate(invalid="ignore"):
        low = np.broadcast_to(_LOW, mag.shape)
        high = np.broadcast_to(_HIGH, mag.shape)
        near_low = (mag < low) & (mag >= low - _SNAP)
        near_high = (mag > high) & (mag <= high + _SNAP)
        mag[near_low] = low[near_low]
        mag[near_high] = high[near_high]
        bad = _HAS_MAG & ~((mag >= _LOW) & (mag <= _HIGH))
    if bad.any():
        s, c, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{_slot('mag', s, c, k)} = {float(mag[s, c, k])!r} is outside {OP_NAMES[k]}'s range [{_LOW[k]}, {_HIGH[k]}] "
            "(schedules store unsigned magnitudes; the sign is drawn when the op is applied)"
        )


def _strengths_from_version_1(mag: np.ndarray) -> np.ndarray:
    """Version-1 magnitudes ``(S, 2, 15)`` with Solarize and Posterize as version-2 strengths.

    Posterize: ``8 - bits`` keeps exactly the same bits (``round(8 - b) = 8 - round(b)`` under
    round-half-to-even, 8 being even). Solarize: ``256 - t`` inverts exactly the same levels for every
    threshold ``t >= 1``; a threshold below 1 also inverted level 0, which no strength in [0, 255] does, and
    becomes 255 (the nearest: every level but 0 inverted).
    """
    mag = mag.copy()
    mag[:, :, _POSTERIZE] = 8.0 - mag[:, :, _POSTERIZE]
    mag[:, :, _SOLARIZE] = np.minimum(256.0 - mag[:, :, _SOLARIZE], 255.0)
    return mag


def _round(x: float) -> float:
    return float(f"{x:.{_SIGNIFICANT_DIGITS}g}")


def _rows(array: np.ndarray, precision: bool) -> list[list[float | None]]:
    return [[None if math.isnan(v) else (_round(v) if precision else float(v)) for v in row] for row in array.tolist()]


class Schedule:
    """An HBA augmentation schedule: a policy of 2 x 15 slots for each of ``S`` search epochs.

    Args:
        prob (array-like): probabilities, shape ``(S, 2, 15)`` (epoch, copy, op in canonical order), in [0, 1].
        mag (array-like): unsigned magnitudes, shape ``(S, 2, 15)``, inside each op's range; NaN exactly
            for the ops without a magnitude (AutoContrast, Invert, Equalize). A value beyond a range end
            by at most 1e-6 relative (float32 rounding, e.g. ``float32(0.3)``) is set to that end.
        name (str): a short name, shown by ``repr`` and by :class:`~hba_augment.HBAPolicy`.
        count_probs (sequence of float): distribution of the maximum number K of ops per image,
            ``(P(K=0), P(K=1), ...)``; non-negative, summing to 1.
        provenance (dict, optional): how the schedule was made (dataset, model, command, ...); JSON data.

    Raises:
        ValueError: on any invalid value, naming the field (and the entry, copy and op).

    Attributes are read-only: ``prob`` and ``mag`` are non-writeable float64 arrays of shape ``(S, 2, 15)``.
    """

    def __init__(
        self,
        prob: Any,
        mag: Any,
        *,
        name: str = "custom",
        count_probs: Sequence[float] = DEFAULT_COUNT_PROBS,
        provenance: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        prob_array = _as_array(prob, "prob")
        mag_array = _as_array(mag, "mag")
        if prob_array.shape != mag_array.shape:
            raise ValueError(f"prob and mag must have the same shape, got {prob_array.shape} and {mag_array.shape}")
        _check_prob(prob_array)
        _check_mag(mag_array)
        prob_array.flags.writeable = False
        mag_array.flags.writeable = False
        self._name = name
        self._prob = prob_array
        self._mag = mag_array
        self._count_probs = check_count_probs(count_probs)
        self._provenance = _check_provenance(provenance)

    # ------------------------------------------------------------------ attributes
    @property
    def name(self) -> str:
        return self._name

    @property
    def epochs(self) -> int:
        """Number of entries ``S`` (search epochs)."""
        return self._prob.shape[0]

    @property
    def count_probs(self) -> tuple[float, ...]:
        return self._count_probs

    @property
    def prob(self) -> np.ndarray:
        """Read-only float64 array ``(S, 2, 15)``."""
        return self._prob

    @property
    def mag(self) -> np.ndarray:
        """Read-only float64 array ``(S, 2, 15)``, NaN for the ops without a magnitude."""
        return self._mag

    @property
    def provenance(self) -> dict[str, Any]:
        """A copy of the provenance record (editing it does not change the schedule)."""
        return json.loads(json.dumps(self._provenance))

    # ------------------------------------------------------------------ constructors
    @classmethod
    def constant(
        cls,
        prob: Any,
        mag: Any,
        *,
        epochs: int = 1,
        name: str = "constant",
        count_probs: Sequence[float] = DEFAULT_COUNT_PROBS,
        provenance: dict[str, Any] | None = None,
    ) -> Schedule:
        """A schedule that uses the same policy at every epoch.

        Args:
            prob (array-like): shape ``(2, 15)``.
            mag (array-like): shape ``(2, 15)``, NaN for AutoContrast, Invert and Equalize.
            epochs (int): number of (identical) entries.
        """
        epochs = _check_int(epochs, "epochs", 1)
        arrays = []
        for field, values in (("prob", prob), ("mag", mag)):
            if _is_tensor(values):
                values = values.detach().cpu().double().numpy()
            try:
                array = np.array(values, dtype=np.float64)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{field} must be a numeric array of shape ({NUM_COPIES}, {NUM_OPS}): {e}") from None
            if array.shape != (NUM_COPIES, NUM_OPS):
                raise ValueError(f"{field} must have shape ({NUM_COPIES}, {NUM_OPS}), got {tuple(array.shape)}")
            arrays.append(np.broadcast_to(array, (epochs, NUM_COPIES, NUM_OPS)))
        return cls(arrays[0], arrays[1], name=name, count_probs=count_probs, provenance=provenance)

    @classmethod
    def from_dict(cls, data: Any) -> Schedule:
        """Build a schedule from the JSON structure of the contract, section 4 (as returned by ``json.load``).

        Raises:
            ValueError: on any violation of the format, naming the field.
        """
        if not isinstance(data, dict):
            raise ValueError(f"a schedule must be a JSON object, got {type(data).__name__}")
        unknown = [k for k in data if k not in _KEYS]
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; a schedule has the fields {list(_KEYS)}")
        missing = [k for k in _KEYS if k not in data and k != "provenance"]
        if missing:
            raise ValueError(f"missing field(s) {missing}")
        if data["format"] != FORMAT:
            raise ValueError(f"format must be {FORMAT!r}, got {data['format']!r}")
        version = data["version"]
        if isinstance(version, bool) or version not in READABLE_VERSIONS:
            raise ValueError(
                f"version must be one of {list(READABLE_VERSIONS)}, got {version!r} (this hba_augment reads "
                f"versions {list(READABLE_VERSIONS)} and writes version {VERSION})"
            )
        if not isinstance(data["name"], str) or not data["name"].strip():
            raise ValueError(f"name must be a non-empty string, got {data['name']!r}")
        if data["ops"] != list(OP_NAMES):
            raise ValueError(f"ops must be the {NUM_OPS} op names in canonical order {list(OP_NAMES)}, got {data['ops']!r}")
        if not isinstance(data["count_probs"], list):
            raise ValueError(f"count_probs must be a list, got {data['count_probs']!r}")
        epochs = _check_int(data["epochs"], "epochs", 1)
        entries = data["entries"]
        if not isinstance(entries, list):
            raise ValueError(f"entries must be a list, got {type(entries).__name__}")
        if len(entries) != epochs:
            raise ValueError(f"epochs is {epochs} but entries has {len(entries)} entries")
        prob = np.empty((epochs, NUM_COPIES, NUM_OPS))
        mag = np.empty((epochs, NUM_COPIES, NUM_OPS))
        for s, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ValueError(f"entries[{s}] must be an object, got {type(entry).__name__}")
            if sorted(entry) != sorted(_ENTRY_KEYS):
                raise ValueError(f"entries[{s}] must have exactly the fields {list(_ENTRY_KEYS)}, got {list(entry)}")
            if isinstance(entry["epoch"], bool) or entry["epoch"] != s:
                raise ValueError(f"entries[{s}].epoch must be {s} (entries in epoch order), got {entry['epoch']!r}")
            for field, out, nullable in (("prob", prob, False), ("mag", mag, True)):
                rows = entry[field]
                if not isinstance(rows, list) or len(rows) != NUM_COPIES:
                    raise ValueError(f"entries[{s}].{field} must be a list of {NUM_COPIES} copies, got {rows!r}")
                for c, row in enumerate(rows):
                    if not isinstance(row, list) or len(row) != NUM_OPS:
                        raise ValueError(f"entries[{s}].{field}[{c}] must be a list of {NUM_OPS} values, got {row!r}")
                    for k, v in enumerate(row):
                        if v is None and nullable:
                            out[s, c, k] = np.nan
                        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                            need = "a finite number or null" if nullable else "a finite number"
                            raise ValueError(f"{_slot(field, s, c, k)} must be {need}, got {v!r}")
                        else:
                            out[s, c, k] = v
        provenance = data.get("provenance", {})
        if not isinstance(provenance, dict):
            raise ValueError(f"provenance must be an object, got {type(provenance).__name__}")
        if version == 1:
            # Validate the file as written (its own ranges are the same), then convert.
            cls(prob, mag, name=data["name"], count_probs=data["count_probs"], provenance=provenance)
            mag = _strengths_from_version_1(mag)
            provenance = {**provenance, "converted_from_version": 1}
            warnings.warn(
                f"schedule {data['name']!r} is in format version 1 (Solarize threshold, Posterize bits); it was "
                f"converted to version {VERSION} strengths (Solarize 256 - threshold, Posterize 8 - bits). "
                "Save it again to write version 2.",
                UserWarning,
                stacklevel=2,
            )
        return cls(prob, mag, name=data["name"], count_probs=data["count_probs"], provenance=provenance)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | Any) -> Schedule:
        """Read and validate a schedule JSON file.

        Args:
            path: a file path, or any object with ``read_text`` (e.g. an ``importlib.resources`` Traversable).

        Raises:
            ValueError: if the file is missing or unreadable, is not JSON, or is not a valid schedule;
                the message starts with the path.
        """
        try:
            if isinstance(path, (str, os.PathLike)):
                text = Path(path).read_text(encoding="utf-8")
            else:
                text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: cannot read schedule file: {e}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
        try:
            return cls.from_dict(data)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """The JSON structure of the contract, section 4, at full float precision (``null`` for NaN magnitudes)."""
        return self._to_dict(round_floats=False)

    def _to_dict(self, round_floats: bool) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self._name,
            "ops": list(OP_NAMES),
            "count_probs": list(self._count_probs),
            "epochs": self.epochs,
            "entries": [
                {"epoch": s, "prob": _rows(self._prob[s], round_floats), "mag": _rows(self._mag[s], round_floats)}
                for s in range(self.epochs)
            ],
            "provenance": self.provenance,
        }

    def to_json(self) -> str:
        """The text :meth:`save` writes: one line per entry's ``prob`` and ``mag``, floats to 6 significant digits."""
        d = self._to_dict(round_floats=True)
        entries = d.pop("entries")
        provenance = d.pop("provenance")
        lines = ["{"]
        lines += [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in d.items()]
        lines.append('  "entries": [')
        for i, entry in enumerate(entries):
            comma = "," if i + 1 < len(entries) else ""
            lines.append(f'    {{"epoch": {entry["epoch"]},')
            lines.append(f'     "prob": {json.dumps(entry["prob"])},')
            lines.append(f'     "mag": {json.dumps(entry["mag"])}}}{comma}')
        lines.append("  ],")
        provenance_text = json.dumps(provenance, indent=2, sort_keys=True).replace("\n", "\n  ")
        lines.append(f'  "provenance": {provenance_text}')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the schedule as JSON, atomically (a temporary file in the same folder, then ``os.replace``).

        Floats are rounded to 6 significant digits so that files stay small and diff well.
        """
        path = Path(path)
        text = self.to_json()
        with atomic_open(path, "w", encoding="utf-8") as f:
            f.write(text)

    # ------------------------------------------------------------------ lookup
    def index(self, epoch: int, total_epochs: int | None = None) -> int:
        """Entry used at training epoch ``epoch`` of ``total_epochs``: ``min(floor(epoch * S / T), S - 1)``.

        Args:
            epoch (int): training epoch, >= 0. Epochs past ``total_epochs`` use the last entry.
            total_epochs (int, optional): training length T >= 1; ``None`` means the schedule's own length S.
        """
        epoch = _check_int(epoch, "epoch", 0)
        total = None if total_epochs is None else _check_int(total_epochs, "total_epochs", 1)
        return self._index(epoch, total)

    def _index(self, epoch: int, total_epochs: int | None) -> int:
        # index() without its checks, for callers that checked both values once already (HBAPolicy checks
        # the epoch in set_epoch and total_epochs in its constructor, not on every image).
        return min(epoch * self.epochs // (total_epochs or self.epochs), self.epochs - 1)

    def at(self, epoch: int, total_epochs: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy at a training epoch (see :meth:`index`).

        Returns:
            (prob, mag): float32 tensors of shape ``(2, 15)`` on the CPU; ``mag`` is NaN for the ops
            without a magnitude.
        """
        return self._entry(self.index(epoch, total_epochs))

    def _entry(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        # at() of an index that index() returned.
        import torch

        return (
            torch.tensor(self._prob[index], dtype=torch.float32),
            torch.tensor(self._mag[index], dtype=torch.float32),
        )

    # ------------------------------------------------------------------ display
    def table(self, epoch: int = 0, total_epochs: int | None = None) -> str:
        """The policy at ``epoch`` (scaled as in :meth:`index`) as a text table, one row per op."""
        s = self.index(epoch, total_epochs)
        header = f"{'op':<13}{'p copy0':>9}{'m copy0':>10}{'p copy1':>9}{'m copy1':>10}"
        lines = [f"entry {s} of {self.epochs}", header, "-" * len(header)]

        def m(v: float) -> str:
            return f"{'-':>10}" if math.isnan(v) else f"{v:>10.4g}"

        for k, op in enumerate(OP_NAMES):
            p0, p1 = self._prob[s, 0, k], self._prob[s, 1, k]
            lines.append(f"{op:<13}{p0:>9.3f}{m(self._mag[s, 0, k])}{p1:>9.3f}{m(self._mag[s, 1, k])}")
        return "\n".join(lines)

    def __str__(self) -> str:
        counts = ", ".join(f"{p:g}" for p in self._count_probs)
        epochs = f"{self.epochs} epoch" + ("" if self.epochs == 1 else "s")
        return f"Schedule {self._name!r}: {epochs}, count_probs ({counts})\n{self.table(0)}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._name!r}, epochs={self.epochs}, count_probs={self._count_probs})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (
            self._name == other._name
            and self._count_probs == other._count_probs
            and self._provenance == other._provenance
            and np.array_equal(self._prob, other._prob)
            and np.array_equal(self._mag, other._mag, equal_nan=True)
        )

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # Unpickled arrays come back writeable; keep the read-only guarantee.
        self._prob.flags.writeable = False
        self._mag.flags.writeable = False
