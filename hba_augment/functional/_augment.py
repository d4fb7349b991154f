"""``augment``: PBA's augmentation template (SPEC section 2), vectorised over the batch."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor
from torchvision.transforms import InterpolationMode

# The distribution of K (PBA's default) and its check have their home in the torch-free table.
from .._space import DEFAULT_COUNT_PROBS, check_count_probs
from ._batched import NO_OP, apply_step
from ._cache import constant_cache
from ._kernels import (
    KernelContext,
    affine,
    cutout_centres,
    identity_table,
    lookup,
    nearest_index,
    warp_nearest,
)
from ._levels import compute_dtype, from_levels, kernel_context, to_levels
from ._table import NUM_COPIES, NUM_OPS, OPS, OpSpec
from ._validation import Fill, check_images

__all__ = [
    "DEFAULT_COUNT_PROBS",
    "Drawn",
    "augment",
    "augment_drawn",
    "check_compile",
    "check_count_probs",
    "draw_one",
]

_SLOTS = NUM_COPIES * NUM_OPS

# Op application order inside one step: all geometric ops first (they share one warp), then the rest in
# table order, then "no op" (group _NO_OP_GROUP).
_GEOMETRIC = tuple(i for i, spec in enumerate(OPS) if spec.geometric)
_OTHERS = tuple(i for i, spec in enumerate(OPS) if not spec.geometric)
_ORDER = (*_GEOMETRIC, *_OTHERS)
_NO_OP_GROUP = len(_ORDER)

# What an image does at a step is a code: ``f = slot + 30 * flip`` picks the slot's magnitude from the
# policy's magnitude table, whose second half holds the magnitudes a sign flip gives (negated for the
# signed ops), and ``code = f + 60`` if the step applies the slot, else ``f``.
_TABLE = 2 * _SLOTS


def _op_of(f: int) -> int:
    return (f % _SLOTS) % NUM_OPS


#: Group (position of the op in _ORDER, or _NO_OP_GROUP) of each code.
_GROUP_OF_CODE = (_NO_OP_GROUP,) * _TABLE + tuple(_ORDER.index(_op_of(f)) for f in range(_TABLE))
#: Table entries ``f`` of the geometric ops, grouped by op: the rows of a policy's warp maps.
_WARP_ENTRIES = tuple(f for op in _GEOMETRIC for f in range(_TABLE) if _op_of(f) == op)
#: Row of the warp maps for each code (0 for codes that apply no geometric op: never used).
_WARP_ROW_OF_CODE = tuple(
    _WARP_ENTRIES.index(c - _TABLE) if c - _TABLE in _WARP_ENTRIES else 0 for c in range(2 * _TABLE)
)
#: The geometric op each code applies (its index in OPS), -1 for codes that apply none.
_GEOMETRIC_OP_OF_CODE = tuple(
    _op_of(c - _TABLE) if c >= _TABLE and OPS[_op_of(c - _TABLE)].geometric else -1 for c in range(2 * _TABLE)
)
#: The op each code applies (its index in OPS), NO_OP for the codes that apply none.
_OP_OF_CODE = (NO_OP,) * _TABLE + tuple(_op_of(f) for f in range(_TABLE))
#: Row of the sync-free path's warp maps for each code: _WARP_ROW_OF_CODE, or the identity's row (the last).
_STATIC_WARP_ROW_OF_CODE = tuple(
    _WARP_ROW_OF_CODE[c] if _GEOMETRIC_OP_OF_CODE[c] >= 0 else len(_WARP_ENTRIES) for c in range(2 * _TABLE)
)
#: Row of the sync-free path's fixed tables for each code: its entry f, or the identity's row (the last).
_STATIC_TABLE_ROW_OF_CODE = tuple(c - _TABLE if c >= _TABLE else _TABLE for c in range(2 * _TABLE))
#: Warp maps are kept for images of at most this many pixels (20 int64 maps of 64 Ki pixels: 10 MiB).
_WARP_MAX_PIXELS = 1 << 16


@constant_cache(8)
def _constants(device: torch.device) -> tuple[Tensor, ...]:
    """Per-device tables: ``sign`` ``(30,)``, the factor a sign flip applies to each slot's magnitude (-1
    for the signed ops, else 1); ``_GROUP_OF_CODE`` and ``_WARP_ROW_OF_CODE`` ``(120,)``; and, per
    prob-then-mag entry of a ``(B, 60)`` policy, the lower and upper bounds and whether the entry is free
    (the magnitude of an op without one); and ``_GEOMETRIC_OP_OF_CODE``, ``_OP_OF_CODE``,
    ``_STATIC_WARP_ROW_OF_CODE`` and ``_STATIC_TABLE_ROW_OF_CODE`` ``(120,)``."""
    specs = [OPS[s % NUM_OPS] for s in range(_SLOTS)]
    sign = torch.tensor([-1.0 if spec.signed else 1.0 for spec in specs], device=device)
    low = [0.0] * _SLOTS + [spec.low if spec.has_magnitude else 0.0 for spec in specs]
    high = [1.0] * _SLOTS + [spec.high if spec.has_magnitude else 0.0 for spec in specs]
    free = [False] * _SLOTS + [not spec.has_magnitude for spec in specs]
    return (
        sign,
        torch.tensor(_GROUP_OF_CODE, device=device),
        torch.tensor(_WARP_ROW_OF_CODE, device=device),
        torch.tensor(low, device=device),
        torch.tensor(high, device=device),
        torch.tensor(free, device=device),
        torch.tensor(_GEOMETRIC_OP_OF_CODE, device=device),
        torch.tensor(_OP_OF_CODE, device=device),
        torch.tensor(_STATIC_WARP_ROW_OF_CODE, device=device),
        torch.tensor(_STATIC_TABLE_ROW_OF_CODE, device=device),
    )


@constant_cache(8)
def _count_edges(count_probs: tuple[float, ...], device: torch.device) -> tuple[Tensor, tuple[float, ...]]:
    """Validate ``count_probs``; return the cumulative probabilities but the last, at most one per slot,
    as a float32 tensor and as the same float32 values in a tuple (their number is the number of steps).
    Step ``j`` (from 0) may apply an op iff the image's uniform draw reaches ``edges[j]``, i.e. iff its K
    exceeds ``j``."""
    values = check_count_probs(count_probs)
    # In Python floats (float64, summed in order as a cumsum), rounded to float32 through numpy: plain
    # numbers, so that torch.compile traces the call without a graph break (Tensor.tolist).
    cumulative = list(itertools.accumulate(float(v) for v in values))[:-1][:_SLOTS]
    rounded = tuple(float(v) for v in np.asarray(cumulative, dtype=np.float32))
    return torch.tensor(rounded, dtype=torch.float32, device=device), rounded


def _policy_tensor(value: Tensor, name: str, batch: int, device: torch.device) -> Tensor:
    """``(2, 15)`` or ``(B, 2, 15)`` -> ``(1, 30)`` or ``(B, 30)`` float32 on ``device``."""
    tensor = torch.as_tensor(value, dtype=torch.float32, device=device)
    shape = (NUM_COPIES, NUM_OPS)
    if tensor.shape == shape:
        return tensor.reshape(1, -1)
    if tensor.shape == (batch, *shape):
        return tensor.reshape(batch, -1)
    raise ValueError(
        f"{name} must have shape {shape} or ({batch}, {shape[0]}, {shape[1]}), got {tuple(tensor.shape)}"
    )


def _check_policy(prob: Tensor, mag: Tensor, device: torch.device) -> None:
    """Raise ``ValueError`` for a probability outside [0, 1] or a magnitude outside its op's range.

    One host synchronisation for all checks (NaN fails every comparison, so it is caught too); the
    message is only built on failure.
    """
    low, high, free = _constants(device)[3:6]
    values = torch.cat(torch.broadcast_tensors(prob, mag), dim=1)
    bad = ~((values >= low) & (values <= high) | free)
    if not bool(bad.any()):
        return
    image, entry = (int(i) for i in bad.nonzero()[0])
    name, slot = ("prob", entry) if entry < _SLOTS else ("mag", entry - _SLOTS)
    spec = OPS[slot % NUM_OPS]
    allowed = "[0, 1]" if name == "prob" else f"[{spec.low:g}, {spec.high:g}]"
    raise ValueError(
        f"{name} of {spec.name} (copy {slot // NUM_OPS}) must lie in {allowed}, got {values[image, entry].item()!r}"
    )


@dataclasses.dataclass
class _Policy:
    """A checked policy: ``prob`` ``(1 or B, 30)``; ``table`` ``(1 or B, 60)``, each slot's magnitude and
    then its magnitude after a sign flip; and what is derived from them on first use: for a policy shared
    by the batch, the NEAREST warp maps of its geometric table entries per image size
    (:func:`_warp_maps`) and the tables of its fixed-table entries (:func:`_fixed_tables`), the
    host copy of a single image's policy (:func:`_single_policy`), and the PIL path's host values
    (``host``, filled by ``_pil``)."""

    prob: Tensor
    table: Tensor
    warps: dict[tuple[int, int], Tensor] = dataclasses.field(default_factory=dict)
    single: tuple[np.ndarray, tuple[Tensor, ...]] | None = None
    tables: Tensor | None = None
    static_tables: Tensor | None = None
    host: dict = dataclasses.field(default_factory=dict)


# The last few policies that passed the check: (prob, mag, (their versions, device, batch), _Policy),
# newest first. A transform calls augment() with the same two tensors for a whole epoch; checking them
# once saves a dozen small ops on every call for single images, and keeps the warp maps. In-place
# changes bump a tensor's version.
_CHECKED: list[tuple] = []
_CHECKED_KEEP = 4


def _checked_policy(prob: Tensor, mag: Tensor, batch: int, device: torch.device, check: bool = True) -> _Policy:
    """Validate the policy (unless ``check`` is false) and prepare it for :func:`_sample` (remembering the
    last few checked)."""
    key = None
    # A traced call prepares its policy in the graph: comparing a remembered entry's version counters with
    # the traced tensors' is a data-dependent guard that stops a full-graph compile.
    if not torch.compiler.is_compiling():
        try:
            # The batch size matters only to per-image policies (its shape is checked against it).
            key = (prob._version, mag._version, device, batch if prob.ndim == 3 or mag.ndim == 3 else None)
        except (AttributeError, RuntimeError):  # not tensors, or inference tensors (no version counter)
            pass
    if key is not None:
        for entry in _CHECKED:
            if entry[0]() is prob and entry[1]() is mag and entry[2] == key:
                return entry[3]
    prob_, mag_ = _policy_tensor(prob, "prob", batch, device), _policy_tensor(mag, "mag", batch, device)
    if check:
        _check_policy(prob_, mag_, device)
    checked = _Policy(prob_, torch.cat([mag_, mag_ * _constants(device)[0]], dim=1))
    if check and key is not None:
        _CHECKED.insert(0, (weakref.ref(prob), weakref.ref(mag), key, checked))
        del _CHECKED[_CHECKED_KEEP:]
    return checked


def _warp_maps(policy: _Policy, h: int, w: int, ctx: KernelContext) -> Tensor | None:
    """The NEAREST source index of every geometric table entry of a shared policy, ``(20, 1, H W)``.

    A shared policy gives each geometric op only four matrices (two copies, two signs), so their
    warps are computed once per image size with the same kernels as an image-by-image warp (hence the
    same pixels) and every geometric op of a step becomes one gather. ``None`` where that does not
    apply: per-image policies, BILINEAR, large images.
    """
    if policy.table.shape[0] != 1 or ctx.mode != "nearest" or h * w > _WARP_MAX_PIXELS:
        return None
    maps = policy.warps.get((h, w))
    if maps is None:
        maps = policy.warps[(h, w)] = nearest_index(_warp_matrices(policy, h, w), h, w)
    return maps


@constant_cache(8)
def _entry_indices(device: torch.device) -> tuple[Tensor, tuple[Tensor | None, ...], Tensor]:
    """Per-device index tensors of a shared policy's magnitude table: ``_WARP_ENTRIES`` ``(20,)``; per op,
    its entries if it has a fixed table (else ``None``); and whether each entry's op has a fixed table,
    ``(60,)``. Indexing with them, not with Python lists, keeps host-to-device copies out of a call (a CUDA
    graph cannot capture one, and each would wait for the host)."""
    per_op = tuple(
        torch.tensor([f for f in range(_TABLE) if _op_of(f) == op], device=device) if spec.fixed_table else None
        for op, spec in enumerate(OPS)
    )
    fixed = torch.tensor([OPS[_op_of(f)].fixed_table for f in range(_TABLE)], device=device)
    return torch.tensor(_WARP_ENTRIES, device=device), per_op, fixed


def _warp_matrices(policy: _Policy, h: int, w: int) -> Tensor:
    """PIL's AFFINE data of every geometric table entry of a shared policy (rows in ``_WARP_ENTRIES``
    order), ``(20, 2, 3)``: the matrices of :func:`_warp_maps`, which the PIL path hands to PIL."""
    entries = policy.table[0].index_select(0, _entry_indices(policy.table.device)[0])
    per_op = entries.view(len(_GEOMETRIC), -1)  # _WARP_ENTRIES is grouped by op
    return torch.cat([OPS[op].matrix(m, h, w) for op, m in zip(_GEOMETRIC, per_op, strict=True)])


def _fixed_tables(policy: _Policy) -> Tensor | None:
    """The uint8 table of every entry ``f`` of a shared policy's magnitude table whose op has a fixed
    table (``OpSpec.fixed_table``), ``(60, 1, 1, 256)`` (other rows: unused), built once; ``None`` for
    per-image policies. A lookup in them replaces the 4-7 small ops of computing the table."""
    if policy.table.shape[0] != 1:
        return None
    if policy.tables is None:
        device = policy.table.device
        ctx = KernelContext(quantize=True, fill=None, mode="nearest", generator=None)
        tables = torch.zeros(_TABLE, 1, 1, 256, device=device)
        for spec, entries in zip(OPS, _entry_indices(device)[1], strict=True):
            if entries is not None:
                # Any images of the right batch size and device: fixed tables read nothing else.
                stand_in = torch.empty(len(entries), 1, 0, 0, dtype=torch.uint8, device=device)
                magnitude = policy.table[0].index_select(0, entries) if spec.has_magnitude else None
                tables.index_copy_(0, entries, spec.table(stand_in, magnitude, ctx).to(tables.dtype))
        policy.tables = tables.to(torch.uint8)
    return policy.tables


def _static_warp_maps(policy: _Policy, h: int, w: int, ctx: KernelContext) -> Tensor | None:
    """:func:`_warp_maps` and, last, the identity's map, ``(21, 1, H W)``, for :func:`_augment_batch_static`."""
    maps = _warp_maps(policy, h, w, ctx)
    if maps is None:
        return None
    key = (h, w, "static")
    if key not in policy.warps:
        identity = torch.eye(2, 3, dtype=policy.table.dtype, device=maps.device).unsqueeze(0)
        policy.warps[key] = torch.cat([maps, nearest_index(identity, h, w)])
    return policy.warps[key]


def _static_tables(policy: _Policy) -> Tensor | None:
    """:func:`_fixed_tables` with the identity table in every other row and in one more row, last,
    ``(61, 1, 1, 256)`` uint8, for :func:`_augment_batch_static`; ``None`` for per-image policies."""
    tables = _fixed_tables(policy)
    if tables is None:
        return None
    if policy.static_tables is None:
        identity = identity_table(1, tables.device).to(torch.uint8)
        fixed = _entry_indices(tables.device)[2]
        rows = torch.where(fixed.view(-1, 1, 1, 1), tables, identity)
        policy.static_tables = torch.cat([rows, identity])
    return policy.static_tables


def augment(
    images: Tensor,
    prob: Tensor,
    mag: Tensor,
    count_probs: Sequence[float] = DEFAULT_COUNT_PROBS,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
    generator: torch.Generator | None = None,
    frames: int = 1,
    return_matrices: bool = False,
    return_applied: bool = False,
    check_policy: bool = True,
    compile: bool | Mapping[str, Any] = False,
) -> Tensor | tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    """Augment every image independently with PBA's template (SPEC section 2).

    For each image: draw ``K ~ Categorical(count_probs)``, visit the 30 slots (15 ops x 2 copies) in a
    random order, and apply each visited slot's op with its probability, with its magnitude (negated with
    probability 0.5 for the signed ops), until ``K`` ops have been applied. Every image draws its own K,
    order, coins, signs and op parameters. All draws come from ``generator`` (or torch's default
    generator of the images' device).

    How the batch is processed depends on the device, not the pixels. On the CPU the images are grouped by
    the op they draw and each op runs once on its images. On any other device nothing reads a tensor's
    value on the host and the kernels launched do not depend on the batch size or the draws: every step
    runs each op group over the whole batch with per-image parameters, the identity for the images that
    did not draw it (``_batched.py``), so a call can be captured in a CUDA graph. Both give each image
    the pixels it would get alone for the same draws; on accelerators Cutout draws a centre for every image
    at every step, so the random stream (not its distribution) differs from the CPU's.

    Args:
        images: ``(B, C, H, W)`` or ``(C, H, W)``, uint8 in ``[0, 255]`` or float in ``[0, 1]``, any device.
        prob: slot probabilities in ``[0, 1]``, ``(2, 15)`` shared by the batch or ``(B, 2, 15)`` per image.
        mag: unsigned magnitudes in each op's range, same shape as ``prob``; entries of the ops without a
            magnitude (AutoContrast, Invert, Equalize) are ignored (NaN by convention).
        count_probs: ``count_probs[k]`` is the probability that at most ``k`` ops are applied.
        fill: value of uncovered pixels and of the Cutout patch, on the images' scale.
        interpolation: ``InterpolationMode.NEAREST`` (default) or ``BILINEAR`` for the geometric ops.
        generator: random stream on the images' device.
        frames: the batch is ``B / frames`` videos of ``frames`` consecutive images each: every video
            draws once (K, order, coins, signs, Cutout's centre) and all its frames get the same ops.
            Per-image ``prob`` and ``mag`` then have one row per video.
        return_matrices: also return, per image, the composition of the geometric ops it went through
            (PIL AFFINE data, composed in order), to move its boxes, masks or key points with it.
        return_applied: also return which slots each image applied (what the search's hyper-layers can be
            conditioned on: ``hba-augment search --hyper-input applied``).
        check_policy: check that ``prob`` and ``mag`` lie in their ranges. The check reads its answer on
            the host, once per new policy tensor: a GPU caller whose policies are valid by construction
            (the search's, mapped from logits) passes ``False`` so that its steps never wait for the
            device; values outside the ranges then give undefined results.
        compile: on the accelerators' path, turn the draws into pixels through ``torch.compile`` (inductor
            fuses the call's few hundred elementwise passes), with these keyword arguments if a mapping
            (``fullgraph=True`` unless given). The draws stay eager, from ``generator``, so uint8 images
            get the eager call's pixels, and float images the same up to float rounding, which a
            discontinuous op can turn into a level or more at its boundary. The first call of each shape
            and dtype compiles (tens of seconds). No effect on the CPU's grouped path, where the compiled
            call measured 9.5x slower (docs/contract.md, section 2).

    Returns:
        A new tensor with the dtype, shape and device of ``images``; with ``return_matrices``, also the
        ``(B, 2, 3)`` float64 PIL AFFINE data (output point -> input point) of each image (for a
        ``(C, H, W)`` image, ``(1, 2, 3)``), on the images' device; the identity where no geometric op ran.
        With ``return_applied``, last, a ``(B, 2, 15)`` bool tensor (``(1, 2, 15)`` for one image), true
        where the image applied that slot (copy, op); at most ``len(count_probs) - 1`` per image.

    Raises:
        ValueError: bad shapes, probabilities outside [0, 1], magnitudes outside their op's range, bad
            ``count_probs``, ``fill``, ``interpolation`` or ``frames``.
    """
    batch, unbatched = check_images(images)
    b = batch.shape[0]
    device = batch.device
    check_compile(compile)
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1 or b % frames:
        raise ValueError(f"frames must be an integer >= 1 dividing the batch size {b}, got {frames!r}")
    try:
        edges, edge_values = _count_edges(count_probs, device)  # cached per distinct tuple
    except TypeError:  # not hashable (a list, say)
        edges, edge_values = _count_edges(check_count_probs(count_probs), device)
    steps = len(edge_values)
    policy = _checked_policy(prob, mag, b // frames, device, check_policy)
    ctx = kernel_context(batch, fill, interpolation, generator)
    if frames > 1:
        ctx = ctx._replace(frames=frames)
    geometry = _Geometry(batch.shape[-2], batch.shape[-1], device) if return_matrices else None
    applied = _Applied(device) if return_applied else None
    sync_free = _sync_free(device)
    augment_batch = _augment_batch_static if sync_free else _augment_batch
    if compile is not False and sync_free:
        augment_batch = functools.partial(_augment_batch_static, pixels=_compiled_pixels(compile))
    if b == 0 or steps == 0 or batch.shape[-2] * batch.shape[-1] == 0:
        out = images.clone()  # no images, or images without pixels: unchanged, as in torchvision
    elif b == 1 and not sync_free:
        # (disabled for dynamo only while it traces: the wrapper costs the per-image path a few percent)
        one = _augment_one_untraced if torch.compiler.is_dynamo_compiling() else _augment_one
        out = one(images, batch, unbatched, policy, edge_values, ctx, geometry, applied)
    elif _chunk_size(batch) >= b:
        out = augment_batch(batch, policy, edges, ctx, geometry=geometry, applied=applied)
        out = out.squeeze(0) if unbatched else out
    else:
        # Large CPU batches, in parts (whole videos) that stay in the CPU's caches (each part draws its
        # own template), each written into its rows of the result.
        chunk = max(frames, _chunk_size(batch) // frames * frames)
        out = torch.empty(batch.shape, dtype=batch.dtype, device=batch.device)
        for start in range(0, b, chunk):
            rows = slice(start, start + chunk)
            draws = slice(start // frames, (start + chunk) // frames)
            part = policy if policy.prob.shape[0] == 1 else _Policy(policy.prob[draws], policy.table[draws])
            augment_batch(batch[rows], part, edges, ctx, out[rows], geometry, applied)
    extra = tuple(x.result(b) for x in (geometry, applied) if x is not None)
    return (out, *extra) if extra else out


#: Which batched path :func:`augment` takes: ``None`` picks by device (:func:`_sync_free`); ``True`` forces
#: the sync-free one, ``False`` the grouped one, on every device (tests and ``benchmarks/sync_free.py``).
_FORCE_SYNC_FREE: bool | None = None


def _sync_free(device: torch.device) -> bool:
    """Whether :func:`augment` takes the path with no host synchronisation and a fixed launch count on
    ``device``: on accelerators, where a synchronisation stalls the queue and launches cost more than
    small kernels. On CPUs, reading a value costs nothing and the grouped path does each op's work only
    on the images that drew it, which measured 9-13x faster there (RESULTS.md, "Sync-free batches")."""
    if _FORCE_SYNC_FREE is not None:
        return _FORCE_SYNC_FREE
    return device.type != "cpu"


#: A single image with fewer pixels takes fixed-table ops as lookups (see _augment_one).
_SMALL_IMAGE = 64 * 64

#: CPU batches of more than twice this many bytes of levels are augmented in parts of about this size:
#: on a 2-core CPU, 224x224 batches of 256 ran 1.9x faster in 4.6 MB parts than whole (RESULTS.md).
_CHUNK_BYTES = 4 << 20


def _chunk_size(batch: Tensor) -> int:
    """How many images :func:`augment` processes at once: all of them, except on CPU for large batches."""
    b, c, h, w = batch.shape
    # uint8 images stay uint8; float ones become float32 (float64) levels.
    level_bytes = 1 if batch.dtype == torch.uint8 else compute_dtype(batch.dtype).itemsize
    image_bytes = c * h * w * level_bytes
    if batch.device.type != "cpu" or b * image_bytes <= 2 * _CHUNK_BYTES:
        return b
    return max(1, _CHUNK_BYTES // image_bytes)


def _draw_batch(
    policy: _Policy, edges: Tensor, b: int, ctx: KernelContext, geometry: _Geometry | None, applied: _Applied | None
) -> tuple[Tensor, Tensor]:
    """The ``(B, steps)`` codes and magnitudes of a batch of ``b`` images (one draw per video, repeated for
    its frames), reported to ``geometry`` and ``applied`` when given."""
    code, magnitude = _sample(policy, edges, len(edges), b // ctx.frames, ctx.generator)
    if ctx.frames > 1:  # one draw per video, the same for each of its frames
        code, magnitude = code.repeat_interleave(ctx.frames, 0), magnitude.repeat_interleave(ctx.frames, 0)
    if geometry is not None:
        geometry.add_batch(code, magnitude)
    if applied is not None:
        applied.add_batch(code)
    return code, magnitude


# The CPU's paths read values on the host (group sizes, a single image's draws): under torch.compile
# (a user compiling HBAPolicy, say) they run eagerly, a graph break, instead of failing to trace a shape
# that depends on the data.
@torch.compiler.disable
def _augment_batch(
    batch: Tensor,
    policy: _Policy,
    edges: Tensor,
    ctx: KernelContext,
    out: Tensor | None = None,
    geometry: _Geometry | None = None,
    applied: _Applied | None = None,
) -> Tensor:
    """:func:`augment` for a ``(B, C, H, W)`` batch (a part of one may hold a single image); the result in a
    new tensor, or written into ``out`` (contiguous, the batch's shape and dtype), which uint8 images are
    then augmented in. ``geometry`` collects the batch's composed geometric matrices, ``applied`` the slots
    its images applied."""
    b, _, h, w = batch.shape
    steps = len(edges)
    code, magnitude = _draw_batch(policy, edges, b, ctx, geometry, applied)
    # Group the images of each step by op. The one host synchronisation: which ops are drawn, and how
    # many images draw each.
    group = torch.take(_constants(batch.device)[1], code)  # (B, steps)
    offset = torch.arange(0, steps * (_NO_OP_GROUP + 1), _NO_OP_GROUP + 1, device=batch.device)
    flat = torch.bincount((group + offset).flatten(), minlength=steps * (_NO_OP_GROUP + 1))
    counts = flat.view(steps, -1).tolist()
    perm = group.argsort(dim=0, stable=True)
    active = [s for s in range(steps) if counts[s][_NO_OP_GROUP] < b]
    if not active:
        return batch.clone() if out is None else out.copy_(batch)
    # uint8 images stay uint8 from start to end: only the rows that draw an op without a uint8 kernel
    # (OpSpec.integer) go through float levels, for that op alone. The copy: rows are written in place.
    if not ctx.quantize:
        levels = to_levels(batch)
    else:
        levels = batch.clone(memory_format=torch.contiguous_format) if out is None else out.copy_(batch)
    tables = _fixed_tables(policy) if ctx.quantize else None
    magnitudes = magnitude.unbind(1)
    for s in active:
        maps = _warp_maps(policy, h, w, ctx) if sum(counts[s][: len(_GEOMETRIC)]) else None
        levels = _apply_step(levels, perm[:, s], counts[s], code[:, s], magnitudes[s], maps, tables, ctx)
    if out is None:
        return _result(levels, batch.dtype, _layout(batch), False)
    return out if levels is out else out.copy_(_result(levels, batch.dtype, torch.contiguous_format, False))


def _augment_batch_static(
    batch: Tensor,
    policy: _Policy,
    edges: Tensor,
    ctx: KernelContext,
    out: Tensor | None = None,
    geometry: _Geometry | None = None,
    applied: _Applied | None = None,
    pixels: Callable[..., Tensor] | None = None,
) -> Tensor:
    """:func:`_augment_batch` with no host synchronisation and a launch count that depends on neither the
    batch size nor the draws: every step runs :func:`~._batched.apply_step` on the whole batch, each image
    with its own op and parameters (the identity where it applies none). Same arguments and result, and
    ``pixels``, what turns the draws into pixels (:func:`_static_pixels`, or a compiled copy of it).

    Everything random is drawn first (the template, then each step's Cutout centres, in the order the steps
    would draw them), so the pixel work is a pure function of the draws: ``torch.compile`` can take it
    whatever the generator (dynamo takes no ``torch.Generator``), with the eager call's draws.
    """
    b, _, h, w = batch.shape
    code, magnitude = _draw_batch(policy, edges, b, ctx, geometry, applied)
    centres = tuple(cutout_centres(b, h, w, batch.device, ctx) for _ in range(len(edges)))
    maps = _static_warp_maps(policy, h, w, ctx)
    tables = _static_tables(policy) if ctx.quantize else None
    levels = (pixels or _static_pixels)(batch, code, magnitude, centres, maps, tables, ctx._replace(generator=None))
    return levels if out is None else out.copy_(levels)


def _static_pixels(
    batch: Tensor,
    code: Tensor,
    magnitude: Tensor,
    centres: tuple[Tensor, ...],
    maps: Tensor | None,
    tables: Tensor | None,
    ctx: KernelContext,
) -> Tensor:
    """The pixels of :func:`_augment_batch_static` from its draws: ``code`` and ``magnitude`` ``(B, steps)``
    (:func:`_sample`), one ``(B, 2)`` tensor of Cutout centres per step, the policy's warp maps and fixed
    tables (or ``None``), and a context that draws nothing. Reads no value on the host; the new images, in
    the batch's dtype and layout."""
    constants = _constants(batch.device)
    op = torch.take(constants[7], code)
    # apply_step never writes into its input: uint8 images need no copy.
    levels = batch.contiguous() if ctx.quantize else to_levels(batch)
    for s, centre in enumerate(centres):
        index = None if maps is None else maps.index_select(0, torch.take(constants[8], code[:, s]))
        table = None if tables is None else tables.index_select(0, torch.take(constants[9], code[:, s]))
        levels = apply_step(levels, op[:, s], magnitude[:, s], ctx, index, table, centre)
    return _result(levels, batch.dtype, _layout(batch), False)


def check_compile(compile: Any) -> bool | Mapping[str, Any]:
    """:func:`augment`'s ``compile`` (a bool, or a mapping of ``torch.compile``'s keyword arguments), returned
    as given; raises ``TypeError`` naming anything else."""
    if not isinstance(compile, (bool, Mapping)):
        raise TypeError(f"compile must be a bool or a mapping of torch.compile's arguments, got {compile!r}")
    return compile


# The compiled copies of _static_pixels, one per distinct set of torch.compile's arguments.
_COMPILED: dict[str, Callable[..., Tensor]] = {}

#: Inductor's settings under which compiled pixel code does eager's float arithmetic on a GPU too
#: (docs/contract.md, section 2). By default Triton fuses ``a * b + c`` into one FMA and divides through an
#: approximate reciprocal; either can move a value across the integer boundary at which the uint8
#: conversion truncates (the likely cause of a compiled uint8 batch that differed from the eager one on an H100
#: and an H200, 2026-11-28). Inductor's CPU code does neither.
_EAGER_NUMERICS = {"emulate_precision_casts": True, "eager_numerics.division_rounding": True}

#: Inductor's setting for what the pixel work writes to memory. Inductor writes a value that several kernels
#: read to memory when computing it reads more than this many values (4 by default), and recomputes it inside
#: each reader otherwise. At 3 it writes each step's uint8 input once, the warp's output, which every op of the step
#: reads, instead of recomputing the warp inside every reader and then writing wider intermediate sums:
#: counted from its code lowered by a GPU's rules, 67.9 -> 39.1 KB written per 32x32 uint8 image, 2,966 ->
#: 1,603 KB per 224x224 one, 183 -> 155 KB per 32x32 float32 one (``benchmarks/sync_free_bytes.py``;
#: RESULTS.md, "The compiled call's buffers as a GPU lowers them").
_FUSION = {"realize_reads_threshold": 3}


def _compile_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    """``torch.compile``'s arguments for the pixel work: the caller's, with :data:`_EAGER_NUMERICS` and
    :data:`_FUSION` (those this torch's inductor has) among inductor's ``options``. A caller's ``mode``
    becomes the options it stands for (``torch.compile`` takes a mode or options, not both; it applies a mode
    as those options itself); options the caller gives win. Other backends get the caller's arguments as
    they are."""
    arguments = dict(options)
    if arguments.get("backend", "inductor") != "inductor":
        return arguments
    from torch._inductor import config, list_mode_options

    known = config.get_config_copy()
    mode = arguments.pop("mode", None)
    arguments["options"] = {**(list_mode_options(mode, arguments.get("dynamic")) if mode else {}),
                            **{k: v for k, v in {**_EAGER_NUMERICS, **_FUSION}.items() if k in known},
                            **arguments.get("options", {})}
    return arguments


def _compiled_pixels(options: bool | Mapping[str, Any]) -> Callable[..., Tensor]:
    """``torch.compile(_static_pixels, fullgraph=True, ...)`` with :func:`_compile_arguments` of ``options``,
    made once per distinct ``options`` (``True``: none)."""
    options = {} if options is True else dict(options)
    key = repr(sorted(options.items()))  # (values such as inductor's own option dicts are not hashable)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = _COMPILED[key] = torch.compile(_static_pixels, **{"fullgraph": True, **_compile_arguments(options)})
    return compiled


def _result(levels: Tensor, dtype: torch.dtype, layout: torch.memory_format, unbatched: bool) -> Tensor:
    """The caller's images from the (new) levels, float or uint8 (then ``dtype`` is uint8 too): ``dtype``,
    ``layout``, the batch dimension removed if it was added."""
    if levels.dtype == torch.uint8:
        out = levels.contiguous(memory_format=layout)
    else:
        out = from_levels(levels, dtype, layout)
    return out.squeeze(0) if unbatched else out


def _layout(batch: Tensor) -> torch.memory_format:
    """The memory format of the result. The kernels run on contiguous levels; the result keeps a
    channels-last input's layout (a PIL image arrives as one), which also spares the conversion back to
    PIL a strided copy."""
    if not batch.is_contiguous() and batch.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def _augment_one(
    images: Tensor,
    batch: Tensor,
    unbatched: bool,
    policy: _Policy,
    edges: tuple[float, ...],
    ctx: KernelContext,
    geometry: _Geometry | None = None,
    applied: _Applied | None = None,
) -> Tensor:
    """:func:`augment` for a single image (``batch`` is ``(1, C, H, W)``), the per-image transform's case:
    :func:`_draw_one`, then :func:`_apply_drawn`."""
    entries = _draw_one(policy, edges, ctx.generator, batch.device)
    if geometry is not None:
        geometry.add_entries(policy, entries)
    if applied is not None:
        applied.add_entries(entries)
    if not entries:
        return images.clone()
    return _apply_drawn(images, batch, unbatched, policy, entries, ctx)


# Reads the draws on the host, as _augment_batch: run eagerly under torch.compile (a graph break).
_augment_one_untraced = torch.compiler.disable(_augment_one)


def _draw_one(
    policy: _Policy, edges: tuple[float, ...], generator: torch.Generator | None, device: torch.device
) -> list[int]:
    """The template for one image: the magnitude-table entries (``slot + 30 * flip``) of the ops it applies,
    in order.

    The same draws as a batch row (one ``torch.rand`` of 31 + steps values, used exactly as :func:`_sample`
    uses them), read on the host at once (the batch path's one synchronisation), the ops picked in plain
    Python: for one image the batch path's grouping costs several times more than the ops themselves.
    """
    probs = _single_policy(policy)[0]
    steps = len(edges)
    u = torch.rand(_SLOTS + 1 + steps, generator=generator, device=device)
    u = u.numpy() if u.device.type == "cpu" else u.cpu().numpy()
    # The keys of _sample, in float32 as there: v / p, inf or NaN for p = 0 (numpy sorts NaN last, as
    # topk does).
    with np.errstate(divide="ignore", invalid="ignore"):
        keys = u[:_SLOTS] / probs
    count = u[_SLOTS]
    entries = []
    for j, slot in enumerate(np.argsort(keys, kind="stable")[:steps].tolist()):
        if keys[slot] < 1.0 and count >= edges[j]:
            entries.append(slot + _SLOTS if u[_SLOTS + 1 + j] < 0.5 else slot)
    return entries


def _apply_drawn(
    images: Tensor, batch: Tensor, unbatched: bool, policy: _Policy, entries: list[int], ctx: KernelContext
) -> Tensor:
    """Apply the ops of :func:`_draw_one`'s ``entries`` to one image, ``batch`` ``(1, C, H, W)``."""
    _, _, h, w = batch.shape
    # As in augment: uint8 stays uint8 while the ops take it, in a contiguous layout (kernels on a
    # channels-last image, as a PIL image arrives, copy it in every op: 1.5x the time at 224x224).
    # Kernels never write to their input.
    magnitudes = _single_policy(policy)[1]
    levels = batch.contiguous() if ctx.quantize else to_levels(batch)
    for entry in entries:
        spec = OPS[entry % _SLOTS % NUM_OPS]
        if levels.dtype == torch.uint8 and not spec.takes_uint8(ctx.mode):
            levels = to_levels(levels)
        maps = _warp_maps(policy, h, w, ctx) if spec.geometric else None
        if maps is not None:
            row = _WARP_ROW_OF_CODE[entry + _TABLE]
            levels = warp_nearest(levels, maps[row : row + 1], ctx)
        elif spec.fixed_table and levels.dtype == torch.uint8 and h * w < _SMALL_IMAGE:
            # Small images: the cached table's lookup is fewer calls than the kernel; large ones: the
            # kernel's passes over the pixels are cheaper than a lookup's int64 gather.
            levels = lookup(levels, _fixed_tables(policy)[entry : entry + 1])
        else:
            levels = spec.kernel(levels, magnitudes[entry], ctx)
    return _result(levels, images.dtype, _layout(batch), unbatched)


class Drawn(NamedTuple):
    """One image's template, drawn before its pixels are needed (see :func:`draw_one`)."""

    policy: _Policy
    entries: list[int]


def draw_one(
    prob: Tensor,
    mag: Tensor,
    count_probs: Sequence[float] = DEFAULT_COUNT_PROBS,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Drawn:
    """Draw one image's template: ``augment(image, prob, mag, count_probs, generator=generator)`` is
    ``augment_drawn(image, draw_one(prob, mag, count_probs, generator=generator, device=image.device))``,
    draws included. Lets a caller skip converting an image (a PIL image, say) that draws no op
    (``not drawn.entries``). ``prob`` and ``mag``: ``(2, 15)``, as for :func:`augment`."""
    device = torch.device(device)
    policy = _checked_policy(prob, mag, 1, device)
    try:
        edge_values = _count_edges(count_probs, device)[1]  # cached per distinct tuple, as in augment
    except TypeError:  # not hashable (a list, say)
        edge_values = _count_edges(check_count_probs(count_probs), device)[1]
    return Drawn(policy, _draw_one(policy, edge_values, generator, device) if edge_values else [])


def augment_drawn(
    images: Tensor,
    drawn: Drawn,
    *,
    fill: Fill = None,
    interpolation: InterpolationMode = InterpolationMode.NEAREST,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Apply a template from :func:`draw_one` to one image, ``(1, C, H, W)`` or ``(C, H, W)``, on the
    device it was drawn for; ``fill``, ``interpolation`` and ``generator`` (Cutout's centres) as for
    :func:`augment`. Returns a new tensor."""
    batch, unbatched = check_images(images)
    if batch.shape[0] != 1:
        raise ValueError(f"augment_drawn takes one image, got a batch of {batch.shape[0]}")
    ctx = kernel_context(batch, fill, interpolation, generator)
    if not drawn.entries or batch.numel() == 0:
        return images.clone()
    return _apply_drawn(images, batch, unbatched, drawn.policy, drawn.entries, ctx)


class _Geometry:
    """Collects, per image, the composition of the geometric ops :func:`augment` applies to it.

    An image warped with PIL AFFINE data ``A_1`` and then ``A_2`` (each maps an output point to an input
    point) is ``img(A_1 A_2 p)``: the composition is the product in the order the ops ran. Built from the
    drawn codes on the device, with no host synchronisation: every step's five candidate matrices for
    every image, selected by the op it drew (identity otherwise). Float32 matrices, as the kernels build
    them, multiplied in float64.
    """

    def __init__(self, height: int, width: int, device: torch.device) -> None:
        self.height, self.width, self.device = height, width, device
        self.parts: list[Tensor] = []

    def _compose(self, matrices: list[Tensor], b: int) -> Tensor:
        eye = torch.eye(3, dtype=torch.float64, device=self.device)
        # (built on the device: a copy from the host would synchronise a GPU)
        total, bottom = eye.expand(b, 3, 3), eye[2:].expand(b, 1, 3)
        for m in matrices:
            total = total @ torch.cat([m.to(torch.float64), bottom], dim=1)
        return total[:, :2]

    def add_batch(self, code: Tensor, magnitude: Tensor) -> None:
        """Add the images of a ``(B, steps)`` ``code`` / ``magnitude`` draw (see :func:`_sample`)."""
        b, steps = code.shape
        op = torch.take(_constants(code.device)[6], code)  # geometric op of each code, -1 for none
        matrices = []
        for s in range(steps):
            step = torch.eye(2, 3, dtype=torch.float32, device=self.device).expand(b, 2, 3)
            for k in _GEOMETRIC:
                candidate = OPS[k].matrix(magnitude[:, s], self.height, self.width)
                step = torch.where((op[:, s] == k).view(b, 1, 1), candidate, step)
            matrices.append(step)
        self.parts.append(self._compose(matrices, b))

    def add_entries(self, policy: _Policy, entries: list[int]) -> None:
        """Add one image from :func:`_draw_one`'s ``entries``."""
        magnitudes = _single_policy(policy)[1]
        matrices = [
            OPS[_op_of(entry)].matrix(magnitudes[entry], self.height, self.width)
            for entry in entries
            if OPS[_op_of(entry)].geometric
        ]
        self.parts.append(self._compose(matrices, 1))

    def result(self, b: int) -> Tensor:
        """``(B, 2, 3)`` for the ``b`` images added, identity for images never added (no op drawn)."""
        if not self.parts:
            return torch.eye(2, 3, dtype=torch.float64, device=self.device).expand(b, 2, 3).clone()
        return torch.cat(self.parts) if len(self.parts) > 1 else self.parts[0]


class _Applied:
    """Collects, per image, the slots :func:`augment` applies to it, from the drawn codes on the device
    (no host synchronisation)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.parts: list[Tensor] = []

    def add_batch(self, code: Tensor) -> None:
        """Add the images of a ``(B, steps)`` ``code`` draw (see :func:`_sample`)."""
        # A template's slots are distinct (a top-k of the slots), so the scatter writes each place once.
        slot = code.remainder(_TABLE).remainder(_SLOTS)
        mask = torch.zeros(code.shape[0], _SLOTS, dtype=torch.bool, device=code.device)
        self.parts.append(mask.scatter_(1, slot, code >= _TABLE))

    def add_entries(self, entries: list[int]) -> None:
        """Add one image from :func:`_draw_one`'s ``entries``."""
        mask = torch.zeros(1, _SLOTS, dtype=torch.bool)
        mask[0, [entry % _SLOTS for entry in entries]] = True
        self.parts.append(mask.to(self.device))

    def result(self, b: int) -> Tensor:
        """``(B, 2, 15)``, all false for images never added (no op drawn)."""
        if not self.parts:
            return torch.zeros(b, NUM_COPIES, NUM_OPS, dtype=torch.bool, device=self.device)
        return torch.cat(self.parts).view(-1, NUM_COPIES, NUM_OPS)


def _single_policy(policy: _Policy) -> tuple[np.ndarray, tuple[Tensor, ...]]:
    """For :func:`_augment_one`: the slot probabilities as float32 ``(30,)`` on the host, and each table
    entry's magnitude as a ``(1,)`` tensor on the policy's device (built once per checked policy)."""
    if policy.single is None:
        policy.single = (policy.prob[0].cpu().numpy(), policy.table[0].view(-1, 1).unbind(0))
    return policy.single


def _sample(
    policy: _Policy, edges: Tensor, steps: int, b: int, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Draw the template for ``b`` images: what each does at each step, and the signed magnitude.

    Returns:
        ``code`` ``(B, steps)`` int64 (see ``_GROUP_OF_CODE``) and ``magnitude`` ``(B, steps)``.
    """
    prob, table = policy.prob, policy.table
    u = torch.rand(b, _SLOTS + 1 + steps, generator=generator, device=prob.device)
    order, count, flip = u.split_with_sizes([_SLOTS, 1, steps], dim=1)
    # A slot fires iff its uniform v < p. Given that, v / p is uniform on [0, 1) and independent of which
    # slots fired, so sorting the fired slots by v / p visits them in a uniformly random order; unfired
    # slots sort after them (v / p >= 1). The first K fired slots of that order are the template's ops.
    key, slot = torch.topk(order / prob, steps, dim=1, largest=False, sorted=True)
    # Step j applies its slot iff the slot fired and K > j, i.e. the K draw reaches edges[j]: comparing
    # the key with that boolean (1 or 0) tests both, since keys are never negative.
    applied = key < (count >= edges)
    entry = slot.add(flip < 0.5, alpha=_SLOTS)  # the sign coin: the table's second half
    magnitude = torch.take(table, entry) if table.shape[0] == 1 else table.gather(1, entry)
    return entry.add(applied, alpha=_TABLE), magnitude


def _apply_step(
    levels: Tensor,
    perm: Tensor,
    counts: list[int],
    code: Tensor,
    magnitude: Tensor,
    maps: Tensor | None,
    fixed_tables: Tensor | None,
    ctx: KernelContext,
) -> Tensor:
    """Apply to each image the op it drew for this step, each op once on its images.

    ``perm`` lists the images grouped in ``_ORDER`` (geometric ops first, "none" last) and ``counts`` the
    group sizes; ``code`` and ``magnitude`` ``(B,)`` are in image order. All geometric ops of the step
    share one warp: a gather at the policy's warp ``maps`` where there are any, else one warp with each
    image's matrix. On uint8 levels all pointwise ops of the step share one lookup: each image's table
    (``OpSpec.table``). Each image gets at most one op a step, so rows are overwritten in place.
    """
    b, c, h, w = levels.shape
    start, matrices, table_rows, tables = 0, [], [], []
    for position, op_index in enumerate(_ORDER):
        n = counts[position]
        spec = OPS[op_index]
        if n == b and not spec.geometric:
            # The whole batch drew this op: no gather or scatter.
            return _kernel_for(spec, levels, ctx)(levels, magnitude, ctx)
        if n:
            index = perm[start : start + n]
            if spec.table is not None and levels.dtype == torch.uint8:
                table_rows.append(index)
                if spec.fixed_table and fixed_tables is not None:
                    table = fixed_tables[code[index] - _TABLE]
                else:
                    table = spec.table(levels.index_select(0, index), magnitude[index], ctx)
                tables.append(table.expand(n, c, 1, 256))
            elif not spec.geometric:
                levels = _apply_rows(levels, index, _kernel_for(spec, levels, ctx), magnitude[index], ctx)
            elif maps is None:
                matrices.append(spec.matrix(magnitude[index], h, w))
        start += n
        if position == len(_GEOMETRIC) - 1 and start:
            rows = perm[:start]
            if maps is not None:
                rows_maps = maps[torch.take(_constants(levels.device)[2], code[rows])]
                levels = _apply_rows(levels, rows, warp_nearest, rows_maps, ctx)
            else:
                levels = _apply_rows(
                    levels, rows, _kernel_for(OPS[0], levels, ctx, affine), torch.cat(matrices), ctx
                )
    if tables:
        rows = torch.cat(table_rows) if len(tables) > 1 else table_rows[0]
        levels = _apply_rows(levels, rows, _lookup, torch.cat(tables) if len(tables) > 1 else tables[0], ctx)
    return levels


def _lookup(levels: Tensor, tables: Tensor, ctx: KernelContext) -> Tensor:
    return lookup(levels, tables)


def _kernel_for(spec: OpSpec, levels: Tensor, ctx: KernelContext, kernel: Callable | None = None) -> Callable:
    """``kernel`` (default ``spec.kernel``) for ``levels``: itself for float levels and for uint8 ones it
    takes, else wrapped in the conversion to float levels and back."""
    kernel = kernel or spec.kernel
    if levels.dtype != torch.uint8 or spec.takes_uint8(ctx.mode):
        return kernel
    return functools.partial(_via_float, kernel)


def _via_float(kernel: Callable, levels: Tensor, parameter: Tensor | None, ctx: KernelContext) -> Tensor:
    return from_levels(kernel(to_levels(levels), parameter, ctx), torch.uint8)


def _apply_rows(
    levels: Tensor, index: Tensor, kernel: Callable, parameter: Tensor, ctx: KernelContext
) -> Tensor:
    """``kernel(levels[index], parameter, ctx)`` written back into the rows ``index`` of ``levels``."""
    if index.numel() == levels.shape[0]:
        # Every image is in the group: only the order differs.
        return kernel(levels, parameter[index.argsort()], ctx)
    return _write_rows(levels, index, kernel(levels.index_select(0, index), parameter, ctx))


def _write_rows(levels: Tensor, index: Tensor, rows: Tensor) -> Tensor:
    """``levels[index] = rows`` in place. uint8 rows are copied as int64 (or int32) words where their
    size allows: torch's uint8 ``index_copy_`` measured 5-7x slower than the same bytes as int64 on CPU."""
    if levels.dtype == torch.uint8 and levels.is_contiguous() and rows.is_contiguous():
        size = levels[0].numel()
        for wide, width in ((torch.int64, 8), (torch.int32, 4)):
            if size % width == 0 and levels.storage_offset() % width == 0 and rows.storage_offset() % width == 0:
                flat = levels.view(levels.shape[0], size).view(wide)
                flat.index_copy_(0, index, rows.view(rows.shape[0], size).view(wide))
                return levels
    return levels.index_copy_(0, index, rows)
