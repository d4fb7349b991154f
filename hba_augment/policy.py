"""``HBAPolicy``: a learned, epoch-aware HBA schedule as a torchvision-style transform (SPEC section 5)."""

from __future__ import annotations

import os
from typing import Any

import PIL.Image
import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode

from . import pretrained
from .functional import augment
from .functional._augment import augment_drawn, draw_one
from .functional._validation import fill_levels, interpolation_mode
from .schedule import Schedule, _check_int

__all__ = ["HBAPolicy"]

_PIL_MODES = ("L", "RGB")
# Inputs whose geometry would have to follow the image's; HBAPolicy cannot transform them consistently.
_UNSUPPORTED = tuple(
    getattr(tv_tensors, name) for name in ("BoundingBoxes", "Mask", "KeyPoints", "Video") if hasattr(tv_tensors, name)
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
    def ok(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 255.0

    if fill is None or ok(fill):
        return fill
    if isinstance(fill, (list, tuple)) and fill and all(ok(v) for v in fill):
        return fill
    raise ValueError(
        "fill must be None, a number or a sequence of one number per channel, in [0, 255] for uint8 and "
        f"PIL images or [0, 1] for float images, got {fill!r}"
    )


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
    raise ValueError(
        f"policy must be a shipped schedule name, a path to a schedule JSON file or a Schedule, got {policy!r}"
    )


class HBAPolicy(torch.nn.Module):
    r"""Augment images with a learned HBA schedule (Chen & Chang, ICCV 2021), one policy per epoch.

    Each call augments every image independently with PBA's template (SPEC section 2): draw the number of
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
    - ``tv_tensors.Image`` stays an Image. Like the v2 transforms, a sample such as ``(image, label)`` or
      a dict may be passed: the one image in it is augmented and everything else passes through (a pure
      tensor counts as the image only if there is no PIL image or ``tv_tensors.Image``, and only the
      first one). Bounding boxes, masks, key points and videos raise ``TypeError``.

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
        interpolation (InterpolationMode): ``InterpolationMode.NEAREST`` (default, as AutoAugment) or
            ``InterpolationMode.BILINEAR``, for the geometric ops.
        fill (number or sequence of numbers, optional): value of the pixels uncovered by geometric ops
            and of the Cutout patch, on the images' own scale (0..255 for uint8 and PIL, 0..1 for float);
            one number, or one per channel. ``None`` means 0 (black).

    Raises:
        ValueError: for an unknown policy name, an invalid schedule file, ``total_epochs`` < 1, an
            interpolation other than NEAREST or BILINEAR, or a bad ``fill``.
    """

    def __init__(
        self,
        policy: str | os.PathLike[str] | Schedule = "cifar10",
        total_epochs: int | None = None,
        interpolation: InterpolationMode = InterpolationMode.NEAREST,
        fill: float | int | list[float] | tuple[float, ...] | None = None,
    ) -> None:
        super().__init__()
        # One check for the whole package (raises ValueError for anything but NEAREST / BILINEAR).
        interpolation = InterpolationMode(interpolation_mode(interpolation))
        self.schedule = _resolve_policy(policy)
        self.total_epochs = None if total_epochs is None else _check_int(total_epochs, "total_epochs", 1)
        self.interpolation = interpolation
        self.fill = _check_fill(fill)
        # Shared memory: forked workers map the same page, spawned workers receive it through torch's
        # multiprocessing pickler, so set_epoch in the main process reaches every worker.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._cache: dict[torch.device, tuple[int, Tensor, Tensor]] = {}

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
        index = self.schedule.index(self.epoch, self.total_epochs)
        cached = self._cache.get(device)
        if cached is None or cached[0] != index:
            prob, mag = self.schedule.at(index)
            cached = (index, prob.to(device), mag.to(device))
            self._cache[device] = cached
        return cached[1], cached[2]

    # ------------------------------------------------------------------ transform
    def forward(self, *inputs: Any, generator: torch.Generator | None = None) -> Any:
        """Augment an image, a batch of images, or the image of a sample.

        Args:
            inputs: a PIL image, a tensor ``[..., C, H, W]``, a ``tv_tensors.Image``, or a sample
                (tuple/list/dict) holding exactly one of them.
            generator (torch.Generator, optional): random stream on the images' device; default torch's.

        Returns:
            The augmented image(s), of the input's type, mode, dtype, shape and device; or the sample
            with its image replaced.
        """
        if len(inputs) == 1 and isinstance(inputs[0], (Tensor, PIL.Image.Image)):
            return self._augment_image(inputs[0], generator)
        if not inputs:
            raise TypeError("HBAPolicy() needs an image")
        flat, spec = tree_flatten(inputs if len(inputs) > 1 else inputs[0])
        explicit = any(isinstance(x, (tv_tensors.Image, PIL.Image.Image)) for x in flat)
        found = []
        for i, x in enumerate(flat):
            if isinstance(x, _UNSUPPORTED):
                raise TypeError(f"Inputs of type {type(x).__name__} are not supported by HBAPolicy()")
            if isinstance(x, (tv_tensors.Image, PIL.Image.Image)) or (_is_pure_tensor(x) and not explicit and not found):
                found.append(i)
        if len(found) != 1:
            raise TypeError(
                f"HBAPolicy() augments a single image (PIL, tensor or tv_tensors.Image) per sample, found {len(found)}"
            )
        flat[found[0]] = self._augment_image(flat[found[0]], generator)
        return tree_unflatten(flat, spec)

    def _augment_image(self, img: Tensor | PIL.Image.Image, generator: torch.Generator | None) -> Any:
        if isinstance(img, PIL.Image.Image):
            return self._augment_pil(img, generator)
        if isinstance(img, tv_tensors.Image):
            return tv_tensors.wrap(self._augment_tensor(img.as_subclass(Tensor), generator), like=img)
        return self._augment_tensor(img, generator)

    def _augment_pil(self, img: PIL.Image.Image, generator: torch.Generator | None) -> PIL.Image.Image:
        if img.mode not in _PIL_MODES:
            raise ValueError(f"PIL images must have mode 'L' or 'RGB', got {img.mode!r}; convert them first")
        # The template first: an image that draws no op (20% under issue 6's stress schedule, 39-50% under
        # the shipped cifar10 one) is copied as it is, without the conversions to a tensor and back. Same
        # draws as the tensor path.
        prob, mag = self.policy_at("cpu")
        drawn = draw_one(prob, mag, self.schedule.count_probs, generator=generator)
        if not drawn.entries:
            fill_levels(self.fill, len(img.getbands()), True, torch.device("cpu"), torch.float32)  # reports a bad fill
            return img.copy()
        out = augment_drawn(
            _pil_to_batch(img), drawn, fill=self.fill, interpolation=self.interpolation, generator=generator
        )
        return _batch_to_pil(out, img.mode)

    def _augment_tensor(self, img: Tensor, generator: torch.Generator | None) -> Tensor:
        if img.ndim < 3:
            raise ValueError(f"image tensors must have shape [..., C, H, W], got {tuple(img.shape)}")
        if img.dtype != torch.uint8 and not img.dtype.is_floating_point:
            raise ValueError(f"image tensors must be uint8 or floating point, got dtype {img.dtype}")
        batch = img.reshape(-1, *img.shape[-3:])
        return self._augment_batch(batch, generator).reshape(img.shape)

    def _augment_batch(self, batch: Tensor, generator: torch.Generator | None) -> Tensor:
        prob, mag = self.policy_at(batch.device)
        return augment(
            batch,
            prob,
            mag,
            self.schedule.count_probs,
            fill=self.fill,
            interpolation=self.interpolation,
            generator=generator,
        )

    # ------------------------------------------------------------------ state
    def get_extra_state(self) -> dict[str, int]:
        # The epoch goes into state_dict() so a checkpointed run resumes on the right entry.
        return {"epoch": self.epoch}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.set_epoch(state["epoch"])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # device tensors are rebuilt on demand; no CUDA tensors in pickles
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(policy={self.schedule.name}, epoch={self.epoch}, "
            f"total_epochs={self.total_epochs}, interpolation={self.interpolation}, fill={self.fill})"
        )
