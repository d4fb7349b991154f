"""Class-balanced, disjoint subsets: the reduced protocols (Reduced CIFAR-10, reduced ImageNet)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hba_augment.datasets._common import ImageData

__all__ = ["balanced_split", "reduced_split"]


def balanced_split(labels: torch.Tensor, sizes: Sequence[int], *, seed: int) -> list[torch.Tensor]:
    """Draw disjoint, class-balanced index sets.

    Set ``k`` takes ``sizes[k]`` indices spread over the classes present in ``labels`` as equally as
    the images left after sets ``0..k-1`` allow: classes with too few images left give all they have
    and the others share the rest, differing by at most one. Which classes get the extra one is drawn
    at random, as are the images within each class; all randomness comes from
    ``torch.Generator().manual_seed(seed)``, so the result depends only on ``labels``, ``sizes`` and
    ``seed``.

    Args:
        labels: integer tensor of shape ``(N,)``.
        sizes: non-negative set sizes; their sum must not exceed ``N``.
        seed: seed of the generator.

    Returns:
        One sorted int64 index tensor per size (on the CPU).

    Raises:
        ValueError: ``labels`` not 1-D integer, a negative size, or ``sum(sizes) > N``.
    """
    labels = torch.as_tensor(labels)
    if (
        labels.ndim != 1
        or labels.dtype.is_floating_point
        or labels.dtype.is_complex
        or labels.dtype == torch.bool
    ):
        raise ValueError(
            f"labels must be a 1-D integer tensor, got dtype {labels.dtype} and shape {tuple(labels.shape)}"
        )
    sizes = [int(s) for s in sizes]
    if any(s < 0 for s in sizes):
        raise ValueError(f"sizes must be non-negative, got {sizes}")
    n = labels.numel()
    if sum(sizes) > n:
        raise ValueError(f"sizes {sizes} need {sum(sizes)} images but labels hold only {n}")

    labels = labels.cpu()
    generator = torch.Generator().manual_seed(int(seed))
    uniq = torch.unique(labels)
    pools = []
    for c in uniq:
        members = torch.nonzero(labels == c).flatten()
        pools.append(members[torch.randperm(members.numel(), generator=generator)])
    tie_break = torch.randperm(len(pools), generator=generator).tolist()
    used = [0] * len(pools)
    out = []
    for size in sizes:
        avail = [p.numel() - u for p, u in zip(pools, used, strict=True)]
        quota = _water_fill(avail, size, tie_break)
        parts = []
        for c, q in enumerate(quota):
            parts.append(pools[c][used[c] : used[c] + q])
            used[c] += q
        idx = torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64)
        out.append(torch.sort(idx).values)
    return out


def reduced_split(data: ImageData, train_size: int, val_size: int, seed: int) -> tuple[ImageData, ImageData]:
    """Class-balanced, disjoint train and validation subsets of ``data`` (see :func:`balanced_split`).

    Reduced CIFAR-10: ``reduced_split(load_dataset("cifar10", root), 4000, 10000, seed)``. Reduced
    ImageNet: the train split of Tiny ImageNet with ``classes=120, image_size=32``, then
    ``reduced_split(data, 6000, 10000, seed)`` (50 train per class, validation from the rest).
    """
    train_idx, val_idx = balanced_split(data.labels, (train_size, val_size), seed=seed)
    return data.subset(train_idx), data.subset(val_idx)


def _water_fill(avail: Sequence[int], total: int, tie_break: Sequence[int]) -> list[int]:
    """Split ``total`` over classes with ``avail`` images left, as equally as they allow.

    Classes are served from the fewest images left up (``tie_break`` ranks equal ones), each taking
    ``ceil(left / classes_left)`` or all it has; since later classes have at least as many images,
    every class that is not emptied ends within one of the others.
    """
    order = sorted(range(len(avail)), key=lambda c: (avail[c], tie_break[c]))
    quota = [0] * len(avail)
    left = total
    for j, c in enumerate(order):
        take = min(avail[c], -(-left // (len(order) - j)))
        quota[c] = take
        left -= take
    if left:  # unreachable while total <= sum(avail), which balanced_split checks
        raise AssertionError(f"could not place {left} of {total}")
    return quota
