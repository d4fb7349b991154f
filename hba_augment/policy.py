"""``HBAPolicy``: a learned, epoch-aware HBA schedule as a torchvision-style transform (the contract, section 5)."""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import PIL.Image
import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode

from . import pretrained
from ._graphs import CapturedCall
from ._targets import TARGETS, move_target
from .functional import (
    CHANNELS,
    augment,
    augment_pil,
    check_channels,
    check_compile,
    check_pil_mode,
    draw_one,
    interpolation_mode,
)
from .schedule import Schedule, _check_int

__all__ = ["HBAPolicy"]

# What a sample's one image may be (a pure tensor too, when there is none of these).
_IMAGES = (PIL.Image.Image, tv_tensors.Image, tv_tensors.Video)
#: Captured calls ``cuda_graphs`` keeps (one per batch shape, dtype, device, generator and fill).
_MAX_GRAPHS = 8
Fill = float | int | list[float] | tuple[float, ...] | None

_NO_SCRIPT = (
    "HBAPolicy cannot be scripted or traced with TorchScript (torch.jit is deprecated from torch 2.14, and "
    "torchvision's v2-only transforms do not script either): call it eagerly, e.g. in the Dataset's "
    "transform or on the batch in the training loop"
)


# RGB images of at least this many pixels cross between PIL's interleaved pixels and the kernels' planes
# in PIL's own C code (one band at a time in, merge() out): at 224x224 2.2x (in) and 2.2x (out) faster
# than a strided copy in torch, at 32x32 slower (RESULTS.md, issue 6).
_PLANAR_PIXELS = 64 * 64


def _pil_to_batch(img: PIL.Image.Image) -> Tensor:
    """``(1, C, H, W)`` uint8 holding the image's pixels.

    Small RGB images come as a channels-last view of their bytes (the kernels keep the layout), large
    ones as planes, each band encoded on its own by PIL's raw encoder. Reading bytes straight into a
    tensor skips numpy's array interface: in the per-image transform, where conversion is a large part of
    the cost, this measured 19 us per 32x32 image less than ``np.array`` + ``fromarray`` (RESULTS.md).
    """
    width, height = img.size
    bands = img.getbands()
    if len(bands) > 1 and width * height >= _PLANAR_PIXELS:
        n = width * height
        planes = bytearray(len(bands) * n)  # writable, as torch.frombuffer wants
        for i, band in enumerate(bands):
            planes[i * n : (i + 1) * n] = img.tobytes("raw", band)
        return torch.frombuffer(planes, dtype=torch.uint8).view(1, len(bands), height, width)
    data = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
    return data.view(1, height, width, len(bands)).permute(0, 3, 1, 2)


def _batch_to_pil(batch: Tensor, mode: str) -> PIL.Image.Image:
    """Inverse of :func:`_pil_to_batch` for a ``(1, C, H, W)`` uint8 tensor (a copy, in ``mode``)."""
    _, bands, height, width = batch.shape
    if bands > 1 and width * height >= _PLANAR_PIXELS:
        planes = batch[0].contiguous().numpy()
        # frombuffer maps each plane without a copy; merge() copies them into the new image.
        return PIL.Image.merge(
            mode, [PIL.Image.frombuffer("L", (width, height), plane, "raw", "L", 0, 1) for plane in planes]
        )
    array = batch[0].permute(1, 2, 0).contiguous().numpy()
    return PIL.Image.frombytes(mode, (width, height), array)


def _is_pure_tensor(x: Any) -> bool:
    return isinstance(x, Tensor) and not isinstance(x, tv_tensors.TVTensor)


def _check_fill(fill: Any) -> Any:
    """What can be checked before the images are seen: numbers in [0, 255], one or one per channel (1 or
    3 channels), or torchvision v2's dict form ``{type: fill, "others": fill}`` of such fills. Whether a
    value fits the image's scale ([0, 1] for float images) is checked on each call."""
    if isinstance(fill, dict):
        for key, value in fill.items():
            if not (isinstance(key, type) or key == "others"):
                raise ValueError(f'fill dict keys must be types (e.g. tv_tensors.Image) or "others", got {key!r}')
            _check_fill_value(value, f"fill[{getattr(key, '__name__', key)}]")
        return fill
    _check_fill_value(fill, "fill")
    return fill


def _check_fill_value(fill: Any, what: str) -> None:
    def ok(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 255.0

    if fill is None or ok(fill):
        return
    if isinstance(fill, (list, tuple)) and fill and all(ok(v) for v in fill):
        if len(fill) in CHANNELS:
            return
        raise ValueError(
            f"{what} must have one value or one per channel (images have 1 or 3 channels), "
            f"got {len(fill)} values: {fill!r}"
        )
    raise ValueError(
        f"{what} must be None, a number or a sequence of one number per channel, in [0, 255] for uint8 and "
        f"PIL images or [0, 1] for float images, got {fill!r}"
    )


def _captures_graphs(options: Mapping[str, Any]) -> bool:
    """Whether ``torch.compile(**options)`` makes inductor capture CUDA graphs of its own."""
    from torch._inductor import list_mode_options  # (inductor is heavy: imported only for this check)

    inductor = {**list_mode_options(options.get("mode") or "default"), **(options.get("options") or {})}
    return bool(inductor.get("triton.cudagraphs"))


def _schedule_digest(schedule: Schedule) -> str:
    """A content hash of what the policy draws from: every entry's prob and mag (NaN, where an op has no
    magnitude, as -1) and count_probs. The name is stored beside it, for the message."""
    digest = hashlib.sha256()
    mag = np.nan_to_num(schedule.mag.astype("<f8"), nan=-1.0)
    for part in (schedule.prob.astype("<f8"), mag, np.asarray(schedule.count_probs, dtype="<f8")):
        digest.update(part.tobytes())
    return digest.hexdigest()[:16]


def _resolve_policy(policy: str | os.PathLike[str] | Schedule) -> Schedule:
    if isinstance(policy, Schedule):
        return policy
    if isinstance(policy, os.PathLike):
        return Schedule.load(policy)
    if isinstance(policy, str):
        available = pretrained.available_policies()
        if policy in available:
            return pretrained.load_pretrained(policy)
        if policy.endswith(".json") or os.sep in policy or os.path.exists(policy):
            return Schedule.load(policy)
        raise ValueError(
            f"Unknown policy {policy!r}: neither a shipped schedule (shipped: {available or 'none'}) "
            "nor a path to a schedule JSON file"
        )
    raise TypeError(
        "policy must be a shipped schedule name, a path to a schedule JSON file or a Schedule, got "
        f"{type(policy).__name__} {policy!r}"
    )


class HBAPolicy(torch.nn.Module):
    r"""Augment images with a learned HBA schedule (Chen & Chang, ICCV 2021), one policy per epoch.

    Each call augments every image independently with PBA's template (the contract, section 2): draw the number of
    ops ``K`` from the schedule's ``count_probs``, visit the 30 slots (15 ops x 2 copies) in a random
    order and apply each with its probability and magnitude (random sign for the geometric ops) until
    ``K`` ops have been applied. The policy used is the schedule's entry for the current epoch, scaled
    linearly to ``total_epochs`` (:meth:`Schedule.index`).

    Works where torchvision's ``AutoAugment`` / ``RandAugment`` go, in ``transforms.Compose`` and
    ``transforms.v2.Compose``:

    - PIL images (mode ``"L"`` or ``"RGB"``) in, PIL images of the same mode out;
    - tensors ``[..., C, H, W]``, uint8 in ``[0, 255]`` or float in ``[0, 1]``, on any device, in; same dtype,
      shape and device out. Every image of the leading dimensions gets its own draws, so a whole batch
      can be augmented on the GPU in one call;
    - ``tv_tensors.Image`` stays an Image; ``tv_tensors.Video`` ``[..., T, C, H, W]`` stays a Video, each
      video drawing once for all its frames (as torchvision's auto-augment transforms). Like the v2
      transforms, a sample such as ``(image, label)`` or a dict may be passed: the one image (or video) in
      it is augmented and everything else passes through (a pure tensor counts as the image only if there
      is no PIL image, ``tv_tensors.Image`` or ``Video``, and only the first one);
    - with an image, ``tv_tensors.BoundingBoxes``, ``Mask`` and ``KeyPoints`` follow its geometric ops
      (shear, translate, rotate; per image in a batch, for masks): torchvision's kernels move boxes and
      key points, the image's own NEAREST warp moves masks; pointwise ops and Cutout leave them alone.
      Alone they raise ``TypeError``, as do other tv_tensors.

    Float tensors must hold values in ``[0, 1]``: checked on the CPU; on other devices nothing is checked
    (a check would cost a host synchronisation on every call) and values outside give undefined results.
    Tensors with other than 1 or 3 channels raise ``ValueError``; images without pixels are returned
    unchanged (as torchvision's). TorchScript (``torch.jit.script`` / ``trace``) is not supported.

    Epochs: call :meth:`set_epoch` (or :meth:`step`) in the training loop before iterating the
    DataLoader. The epoch lives in shared memory, so DataLoader worker processes, persistent or not,
    forked or spawned, see the value set in the main process.

    Randomness comes from torch's default generator of the images' device, so ``torch.manual_seed``
    reproduces results and DataLoader workers (seeded differently by PyTorch) draw differently. For a
    dedicated stream call ``policy(images, generator=g)`` with a ``torch.Generator`` on the images' device.

    Args:
        policy (str, PathLike or Schedule): the name of a shipped schedule
            (:func:`~hba_augment.pretrained.available_policies`), a path to a schedule JSON file, or a
            :class:`~hba_augment.Schedule`. A string is looked up as a shipped name first.
        total_epochs (int, optional): length of the training run the schedule is stretched to; ``None``
            uses the schedule's own number of epochs. Epochs past the end use the last entry.
        interpolation (InterpolationMode or int): ``InterpolationMode.NEAREST`` (default, as
            AutoAugment) or ``InterpolationMode.BILINEAR``, for the geometric ops; Pillow's constants
            (``PIL.Image.NEAREST`` / ``BILINEAR``, ``PIL.Image.Resampling`` members) are accepted too.
        fill (number, sequence of numbers or dict, optional): value of the pixels uncovered by geometric
            ops and of the Cutout patch, on the images' own scale (0..255 for uint8 and PIL, 0..1 for
            float); one number, or one per channel. ``None`` means 0 (black). As in torchvision v2, a dict
            ``{type: fill}`` (keys such as ``tv_tensors.Image``, ``torch.Tensor``, ``PIL.Image.Image``,
            ``tv_tensors.Video``, ``tv_tensors.Mask``, or ``"others"``) gives each input type its own fill;
            a mask's fill is one label.
        cuda_graphs (bool): on CUDA, replay the batched call for each new batch shape from a CUDA graph
            (:class:`~hba_augment._graphs.CapturedCall`: after three eager calls of that shape, one launch
            instead of a few hundred; the bare call replayed so took 0.67 ms against 3.48 ms eagerly at B = 256
            on an H100, ``benchmarks/RESULTS.md``), meant to give the pixels and draws of eager calls. For
            image batches (and single images) with a number or sequence as fill; videos, samples with targets
            and tensor fills run eagerly. Default: ``False``.
        compile (bool or mapping): on accelerators, turn each tensor batch's draws into pixels through
            ``torch.compile`` (``functional.augment``'s ``compile``: the draws stay eager, from the call's
            generator, so uint8 pixels are the eager call's, float ones up to rounding); a mapping gives
            ``torch.compile``'s keyword arguments, e.g. ``{"mode": "max-autotune-no-cudagraphs"}``. The first
            batch of each shape and dtype compiles (tens of seconds). With ``cuda_graphs``, the graph replays the
            compiled kernels. No effect on CPU tensors and PIL images. Default: ``False``.

    Raises:
        ValueError: for an unknown policy name, an invalid schedule file, ``total_epochs`` < 1, an
            interpolation other than NEAREST or BILINEAR, a bad ``fill``, or ``cuda_graphs`` with ``compile``
            options under which inductor captures CUDA graphs itself (modes ``"reduce-overhead"``,
            ``"max-autotune"``).
        TypeError: ``policy`` neither a string, a path nor a :class:`~hba_augment.Schedule`, ``cuda_graphs``
            not a bool, or ``compile`` neither a bool nor a mapping.
    """

    def __prepare_scriptable__(self) -> HBAPolicy:
        # torch.jit.script calls this first: a clear error instead of one from TorchScript's internals.
        raise RuntimeError(_NO_SCRIPT)

    def __init__(
        self,
        policy: str | os.PathLike[str] | Schedule = "cifar10",
        total_epochs: int | None = None,
        interpolation: InterpolationMode = InterpolationMode.NEAREST,
        fill: Fill | dict[type | str, Fill] = None,
        cuda_graphs: bool = False,
        compile: bool | Mapping[str, Any] = False,
    ) -> None:
        super().__init__()
        if not isinstance(cuda_graphs, bool):
            raise TypeError(f"cuda_graphs must be a bool, got {type(cuda_graphs).__name__}")
        check_compile(compile)
        if cuda_graphs and not isinstance(compile, bool) and _captures_graphs(compile):
            # (a graph captured by inductor cannot be captured inside the transform's own)
            raise ValueError(f"cuda_graphs=True and compile={compile!r} both capture CUDA graphs: choose one")
        self.cuda_graphs = cuda_graphs
        # (not ``self.compile``: that is nn.Module's own method, which compiles the module in place)
        self.compile_options = compile
        # Per batch shape, dtype, device, generator and fill: the captured call (cuda_graphs).
        self._graphs: dict[tuple, CapturedCall] = {}
        # One check for the whole package (raises ValueError for anything but NEAREST / BILINEAR).
        interpolation = InterpolationMode(interpolation_mode(interpolation))
        self.schedule = _resolve_policy(policy)
        self.total_epochs = None if total_epochs is None else _check_int(total_epochs, "total_epochs", 1)
        self.interpolation = interpolation
        self.fill = _check_fill(fill)
        # Shared memory: forked workers map the same page, spawned workers receive it through torch's
        # multiprocessing pickler, so set_epoch in the main process reaches every worker.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._cache: dict[torch.device, tuple[Schedule, tuple[int, int | None], Tensor, Tensor]] = {}

    # ------------------------------------------------------------------ epochs
    @property
    def epoch(self) -> int:
        """The current training epoch (shared with DataLoader workers)."""
        return int(self._epoch.item())

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Use the schedule's entry for training epoch ``epoch`` (>= 0) from now on, in every worker."""
        self._epoch.fill_(_check_int(epoch, "epoch", 0))

    def step(self) -> None:
        """Advance to the next epoch (call once per epoch, like a learning-rate scheduler)."""
        self._epoch.add_(1)

    def policy_at(self, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
        """``(prob, mag)`` of the current epoch as float32 ``(2, 15)`` tensors on ``device`` (cached)."""
        device = torch.device(device)
        # Keyed by what picks the entry, so that an image of the same epoch does not ask the schedule again;
        # both were checked on the way in (set_epoch, the constructor), not again for every image.
        # The schedule object itself is part of the key (compared by identity), so one assigned later is used.
        key = (self.epoch, self.total_epochs)
        cached = self._cache.get(device)
        if cached is None or cached[0] is not self.schedule or cached[1] != key:
            prob, mag = self.schedule._entry(self.schedule._index(*key))
            cached = (self.schedule, key, prob.to(device), mag.to(device))
            self._cache[device] = cached
        return cached[2], cached[3]

    # ------------------------------------------------------------------ transform
    def forward(self, *inputs: Any, generator: torch.Generator | None = None) -> Any:
        """Augment an image, a batch of images, a video, or the image of a sample (and its targets).

        Args:
            inputs: a PIL image, a tensor ``[..., C, H, W]``, a ``tv_tensors.Image`` or ``Video``, or a
                sample (tuple/list/dict) holding exactly one of them, and optionally its
                ``BoundingBoxes``, ``Mask`` and ``KeyPoints``.
            generator (torch.Generator, optional): random stream on the images' device; default torch's.

        Returns:
            The augmented image(s), of the input's type, mode, dtype, shape and device; or the sample
            with its image (and targets) replaced.

        Raises:
            TypeError: no image, several images, or an unsupported input type (named).
            ValueError: a bad image (shape, channels, dtype, float range, PIL mode) or fill.
        """
        if torch.jit.is_tracing():
            raise RuntimeError(_NO_SCRIPT)
        if len(inputs) == 1 and isinstance(inputs[0], (Tensor, PIL.Image.Image)):
            return self._augment_image(inputs[0], generator)
        if not inputs:
            raise TypeError("HBAPolicy() needs an image")
        flat, spec = tree_flatten(inputs if len(inputs) > 1 else inputs[0])
        explicit = any(isinstance(x, _IMAGES) for x in flat)
        found, targets = [], []
        for i, x in enumerate(flat):
            if isinstance(x, TARGETS):
                targets.append(i)
            elif isinstance(x, _IMAGES) or (_is_pure_tensor(x) and not explicit and not found):
                found.append(i)
            elif isinstance(x, tv_tensors.TVTensor):
                raise TypeError(f"Inputs of type {type(x).__name__} are not supported by HBAPolicy()")
        if len(inputs) == 1 and len(flat) == 1 and flat[0] is inputs[0] and not found:
            kind = type(inputs[0])
            hint = " (a numpy array: torch.from_numpy(a).permute(2, 0, 1) for H x W x C)" if kind is np.ndarray else ""
            raise TypeError(
                f"Inputs of type {kind.__module__}.{kind.__qualname__} are not supported by HBAPolicy(): it takes "
                f"PIL images, tensors [..., C, H, W], tv_tensors.Image or Video, or samples holding one{hint}"
            )
        if len(found) != 1:
            kinds = sorted({type(x).__name__ for x in flat})
            raise TypeError(
                "HBAPolicy() augments a single image (PIL, tensor, tv_tensors.Image or Video) per sample, "
                f"found {len(found)} among inputs of type {', '.join(kinds)}"
            )
        if targets:
            moved = self._augment_with_targets(flat[found[0]], [flat[i] for i in targets], generator)
            for i, x in zip([found[0], *targets], moved, strict=True):
                flat[i] = x
        else:
            flat[found[0]] = self._augment_image(flat[found[0]], generator)
        return tree_unflatten(flat, spec)

    def _augment_image(self, img: Tensor | PIL.Image.Image, generator: torch.Generator | None) -> Any:
        if isinstance(img, PIL.Image.Image):
            return self._augment_pil(img, generator)
        if isinstance(img, tv_tensors.Video):
            # One draw per video for all its frames: frames = T of [..., T, C, H, W].
            out = self._augment_tensor(img.as_subclass(Tensor), generator, self._fill_for(img), frames=img.shape[-4])
            return tv_tensors.wrap(out, like=img)
        if isinstance(img, tv_tensors.Image):
            return tv_tensors.wrap(self._augment_tensor(img.as_subclass(Tensor), generator, self._fill_for(img)), like=img)
        if isinstance(img, tv_tensors.TVTensor):
            # A Mask, boxes, key points, ...: never augmented as if they were images.
            alone = " on their own (pass them with their image)" if isinstance(img, TARGETS) else ""
            raise TypeError(f"Inputs of type {type(img).__name__} are not supported by HBAPolicy(){alone}")
        return self._augment_tensor(img, generator, self._fill_for(img))

    def _augment_with_targets(
        self, img: Tensor | PIL.Image.Image, targets: list[Tensor], generator: torch.Generator | None
    ) -> list[Any]:
        """Augment ``img`` and move ``targets`` with its geometric ops: ``[image, *targets]``."""
        if isinstance(img, tv_tensors.Video):
            raise TypeError(
                f"Inputs of type {type(targets[0]).__name__} are not supported by HBAPolicy() with a Video"
            )
        if isinstance(img, PIL.Image.Image):
            check_pil_mode(img)  # augment_pil checks its input, but this path does not reach it
            # Through the tensor path, which reports the geometry: the same draws and pixels as for the
            # PIL image alone.
            batch, matrices = self._augment_tensor(
                _pil_to_batch(img), generator, self._fill_for(img), return_matrices=True
            )
            out, lead, canvas = _batch_to_pil(batch, img.mode), (), (img.height, img.width)
        else:
            data = img.as_subclass(Tensor)
            out, matrices = self._augment_tensor(data, generator, self._fill_for(img), return_matrices=True)
            out = tv_tensors.wrap(out, like=img) if isinstance(img, tv_tensors.Image) else out
            lead, canvas = tuple(data.shape[:-3]), tuple(data.shape[-2:])
        return [out, *(move_target(t, matrices, lead, canvas, self._fill_for(t)) for t in targets)]

    def _augment_pil(self, img: PIL.Image.Image, generator: torch.Generator | None) -> PIL.Image.Image:
        # As torchvision: PIL images go through PIL's own operations, with the tensor path's draws (its
        # template, then Cutout's centres), hence its pixels (functional/_pil.py).
        prob, mag = self.policy_at("cpu")
        drawn = draw_one(prob, mag, self.schedule.count_probs, generator=generator)
        return augment_pil(img, drawn, fill=self._fill_for(img), interpolation=self.interpolation, generator=generator)

    def _augment_tensor(
        self,
        img: Tensor,
        generator: torch.Generator | None,
        fill: Fill = None,
        frames: int = 1,
        return_matrices: bool = False,
    ) -> Any:
        """``img`` ``[..., C, H, W]`` (a video: ``[..., T, C, H, W]`` with ``frames = T``), one draw per
        image (video); with ``return_matrices``, also the ``(N, 2, 3)`` geometry of its N images."""
        # Only what the reshape below needs or would hide: the rank and, on the original shape, the channels
        # (a flattened channels-last video would pass). augment() checks the rest (dtype, float range) once.
        if img.ndim < 3:
            raise ValueError(f"image tensors must have shape [..., C, H, W], got {tuple(img.shape)}")
        check_channels(img.shape, "image tensors")
        batch = img.reshape(math.prod(img.shape[:-3]), *img.shape[-3:])  # (-1 is ambiguous without pixels)
        out = self._augment_batch(batch, generator, fill, frames=frames, return_matrices=return_matrices)
        if return_matrices:
            return out[0].reshape(img.shape), out[1]
        return out.reshape(img.shape)

    def _augment_batch(
        self,
        batch: Tensor,
        generator: torch.Generator | None,
        fill: Fill = None,
        frames: int = 1,
        return_matrices: bool = False,
    ) -> Any:
        prob, mag = self.policy_at(batch.device)
        if self.cuda_graphs and batch.device.type == "cuda" and frames == 1 and not return_matrices and not (
                isinstance(fill, Tensor)):
            return self._captured(batch, generator, fill)(batch, prob, mag)
        return augment(
            batch,
            prob,
            mag,
            self.schedule.count_probs,
            fill=fill,
            interpolation=self.interpolation,
            generator=generator,
            frames=frames,
            return_matrices=return_matrices,
            compile=self.compile_options,
        )

    def _captured(self, batch: Tensor, generator: torch.Generator | None, fill: Fill) -> CapturedCall:
        """The captured call of ``cuda_graphs`` for this batch's shape, dtype, device, generator and fill (and
        the transform's ``count_probs`` and interpolation, which a caller may change). The
        epoch's ``prob`` and ``mag`` are its inputs, so a new epoch replays the same graph with the new policy;
        the schedule's values were checked when it was built, so the call checks nothing (a check reads the
        device)."""
        count_probs, interpolation, compile_ = self.schedule.count_probs, self.interpolation, self.compile_options
        # (everything the captured call fixes; a generator in the key is kept alive by its call, so its id
        # cannot come back for another one)
        key = (batch.shape, batch.dtype, batch.device, None if generator is None else id(generator), repr(fill),
               count_probs, interpolation, repr(compile_))
        captured = self._graphs.get(key)
        if captured is None:
            if len(self._graphs) >= _MAX_GRAPHS:  # each holds its own buffers: keep a few shapes, not all
                self._graphs.clear()

            def call(x: Tensor, prob: Tensor, mag: Tensor) -> Tensor:
                return augment(x, prob, mag, count_probs, fill=fill, interpolation=interpolation, generator=generator,
                               check_policy=False, compile=compile_)

            captured = self._graphs[key] = CapturedCall(call, batch.device, () if generator is None else (generator,))
        return captured

    def _fill_for(self, inpt: Any) -> Fill:
        """The fill for ``inpt``: ``fill`` itself, or, from its dict form, as torchvision v2 looks it up:
        the input's exact type (``PIL.Image.Image`` for any PIL image), then ``"others"``, else ``None``."""
        fill = self.fill
        if not isinstance(fill, dict):
            return fill
        if type(inpt) in fill:
            return fill[type(inpt)]
        if isinstance(inpt, PIL.Image.Image) and PIL.Image.Image in fill:
            return fill[PIL.Image.Image]
        return fill.get("others")

    # ------------------------------------------------------------------ state
    def get_extra_state(self) -> dict[str, Any]:
        # The epoch goes into state_dict() so that a checkpointed run resumes on the right entry, the
        # schedule's identity so that it resumes on the same schedule.
        return {"epoch": self.epoch, "schedule": self.schedule.name, "schedule_sha256": _schedule_digest(self.schedule)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the epoch. Raises ``ValueError`` if the state was saved with another schedule (states
        saved before the schedule's identity was stored, with the epoch alone, still load)."""
        saved, mine = state.get("schedule_sha256"), _schedule_digest(self.schedule)
        if saved is not None and saved != mine:
            raise ValueError(
                f"this HBAPolicy state was saved with schedule {state.get('schedule')!r} (content {saved}), "
                f"but this policy follows schedule {self.schedule.name!r} (content {mine}): build the policy "
                "from the schedule the state was saved with"
            )
        self.set_epoch(state["epoch"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # device tensors are rebuilt on demand; no CUDA tensors in pickles
        state["_graphs"] = {}  # nor CUDA graphs: recaptured on demand
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Pickles of a policy from before cuda_graphs or compile: eager, as it was.
        super().__setstate__({"cuda_graphs": False, "_graphs": {}, "compile_options": False, **state})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(policy={self.schedule.name}, epoch={self.epoch}, "
            f"total_epochs={self.total_epochs}, interpolation={self.interpolation}, fill={self.fill}"
            + (", cuda_graphs=True" if self.cuda_graphs else "")
            + (f", compile={self.compile_options!r})" if self.compile_options is not False else ")")
        )
