"""Policy evaluation: train a fresh network with an augmentation policy and measure its test error.

This is the back end of ``hba-augment train`` (paper section 4.2, "policy evaluation"). A run is described
by a :class:`TrainConfig` (``TrainConfig.from_preset`` fills in the paper's settings) and executed by
:func:`train_and_evaluate`, which writes ``result.json``, ``history.jsonl`` and ``checkpoint.pt``.

Policies (``TrainConfig.policy``):

* ``none``: standardisation only;
* ``baseline``: the dataset's standard augmentation: random horizontal flip and a random crop of the
  image zero-padded by 4 pixels for CIFAR and ImageNet-style data; nothing for SVHN (the paper: "the
  baseline augmentation applied standardization only", and flips would turn digits into other symbols);
* ``cutout``: baseline, then Cutout (16x16 for CIFAR, 20x20 for SVHN as in PBA; none in the ImageNet
  preset, where ``--cutout`` must be given);
* ``autoaugment``, ``randaugment``, ``trivialaugment``: torchvision's ``transforms.v2.AutoAugment`` (the
  CIFAR10 policy for CIFAR presets, SVHN for SVHN, IMAGENET for the ImageNet preset), ``RandAugment()``
  (2 ops, magnitude 9) or ``TrivialAugmentWide()``, each on one uint8 image at a time, then baseline and
  Cutout;
* ``hba:<name or path>``: :class:`~hba_augment.policy.HBAPolicy` with the schedule stretched to the run's
  epochs (``set_epoch`` at the start of every epoch), applied to whole batches on the training device,
  then baseline and Cutout.

The order is the paper's and PBA's ("we applied our augmentation policy, baseline, and Cutout in
sequence"): the policy on uint8 pixels, then standardisation with the training subset's per-channel
mean and std, flip, zero-padded crop and Cutout on the standardised batch (so padding and the Cutout
patch are the mean colour), as :func:`hba_augment._runner.baseline_augment` does for the search.

Training: SGD with Nesterov momentum 0.9 and weight decay on every parameter, learning rate set per step
(cosine to 0 over the run, or a x0.1 step decay at epoch milestones), cross-entropy loss, the last
epoch's model is tested (the paper reports the last epoch). Defaults are the paper's appendix table
"Hyperparameters for policy evaluation" (:data:`PAPER_HPARAMS`).

Randomness and resuming: the model is initialised from ``seed``; the data order comes from a CPU
generator, the batched augmentation from a generator on the device, each image of a per-image
(torchvision) policy from its own seed drawn from the data generator (so the result does not depend on
the number of DataLoader workers), and dropout / Shake-Shake / ShakeDrop from torch's global generator
(seeded here). All of them are saved in the per-epoch checkpoint, so ``resume=True`` continues an
interrupted CPU run bit for bit (on CUDA, up to cuDNN's nondeterminism).

Several runs can train at the same time in one process (:func:`train_side_by_side`, ``hba-augment train
--seed 0,1,2``), each in a lane of :mod:`hba_augment._lanes`; each ends as it would alone. Runs that differ
only in their seed can also train as one fused network (:mod:`hba_augment.train.fused`, ``--fuse``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hba_augment import _cli_common, _distributed, _lanes, _runner, functional
from hba_augment._io import atomic_open
from hba_augment._runner import evaluate_model  # the test; also the population search's (one home)
from hba_augment._version import __version__
from hba_augment.train.config import (  # re-exported: the run's settings, defined there
    _ADDED_FIELDS,
    _PER_IMAGE,
    _RESUME_FREE,
    DEFAULT_PRESET,
    EVAL_PRESETS,
    EVAL_SPLITS,
    PAPER_HPARAMS,
    POLICY_KINDS,
    TrainConfig,
    _load_hba,
    model_family,
    parse_policy,
)

__all__ = [
    "CHECKPOINT_FILE",
    "DEFAULT_PRESET",
    "EVAL_PRESETS",
    "EVAL_SPLITS",
    "HISTORY_FILE",
    "PAPER_HPARAMS",
    "POLICY_KINDS",
    "RESULT_FILE",
    "TrainConfig",
    "TrainResult",
    "TrainingDivergedError",
    "evaluate_model",
    "load_data",
    "model_family",
    "parse_policy",
    "train_and_evaluate",
    "train_side_by_side",
]

RESULT_FILE = "result.json"
HISTORY_FILE = "history.jsonl"
CHECKPOINT_FILE = "checkpoint.pt"
_CHECKPOINT_FORMAT = "hba-train-checkpoint"
_CHECKPOINT_VERSION = 1

class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the run stops and the last good checkpoint is kept."""


@dataclass
class TrainResult:
    """What :func:`train_and_evaluate` returns (the content of ``result.json`` is ``summary``)."""

    test_error: float
    test_loss: float
    history: list[dict[str, Any]]
    summary: dict[str, Any]
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------- data
def load_data(config: TrainConfig) -> tuple[Any, Any, str]:
    """The training and test :class:`~hba_augment.datasets.ImageData` of ``config`` and a description.

    The test set is the dataset's test split (ImageFolder: ``test/``, else ``val/``). ``train_size`` /
    ``test_size`` take class-balanced subsets drawn with ``subset_seed`` (default ``seed``). With
    ``eval_split="val"`` the test set is drawn from the train split instead, after and disjoint from the
    training images, which are the same as with ``"test"``.
    """
    from hba_augment.datasets import balanced_split, load_dataset

    kwargs = {"image_size": config.image_size, "download": config.download,
              "classes": list(config.classes) if isinstance(config.classes, tuple) else config.classes}
    seed = config.seed if config.subset_seed is None else config.subset_seed
    where = Path(config.data_dir).expanduser().resolve()
    if config.eval_split == "val":
        data = load_dataset(config.dataset, config.data_dir, split="train", **kwargs)
        rest = len(data.labels) - config.train_size
        val_size = rest if config.test_size is None else config.test_size
        if rest < 1 or val_size > rest:
            raise ValueError(f"train_size {config.train_size} and a validation set of {val_size} images need "
                             f"{config.train_size + val_size} images; the train split of {config.dataset} at "
                             f"{config.data_dir} has {len(data.labels)}")
        # balanced_split draws set 0 exactly as the one-set call of the "test" case: same training images.
        train_idx, val_idx = balanced_split(data.labels, (config.train_size, val_size), seed=seed)
        source = (f"{config.dataset} at {where}: train split, {config.train_size} training and {val_size} "
                  "held-out validation images (eval_split 'val')")
        return data.subset(train_idx), data.subset(val_idx), source
    parts = []
    for split, size in (("train", config.train_size), ("test", config.test_size)):
        data = load_dataset(config.dataset, config.data_dir, split=split, **kwargs)
        if size is not None:
            if size > len(data.labels):
                raise ValueError(f"{split}_size {size} exceeds the {len(data.labels)} images of the {split} split "
                                 f"of {config.dataset} at {config.data_dir}")
            data = data.subset(balanced_split(data.labels, [size], seed=seed)[0])
        parts.append(data)
    train, test = parts
    if train.classes != test.classes:
        raise ValueError(f"the train and test splits have different classes ({len(train.classes)} vs "
                         f"{len(test.classes)})")
    source = (f"{config.dataset} at {where}: train split ({len(train.labels)} images) and test split "
              f"({len(test.labels)} images)")
    return train, test, source


def _data_key(config: TrainConfig) -> tuple[Any, ...]:
    """The settings :func:`load_data` reads: runs with equal keys train and test on the same images."""
    return (config.dataset, str(Path(config.data_dir).expanduser().resolve()), config.image_size, config.download,
            config.classes, config.eval_split, config.train_size, config.test_size,
            config.seed if config.subset_seed is None else config.subset_seed)


class _PerImage(torch.utils.data.Dataset):
    """Applies a torchvision transform to one uint8 image; item keys are ``(index, seed)``.

    Seeding torch's generator with the image's own seed makes every image's draws independent of which
    process (main or a DataLoader worker) transforms it.
    """

    def __init__(self, images: Tensor, transform: Callable[[Tensor], Tensor]) -> None:
        self.images = images
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, key: tuple[int, int]) -> Tensor:
        index, seed = key
        torch.random.default_generator.manual_seed(int(seed))
        return self.transform(self.images[int(index)])


class _Batches:
    """A batch sampler whose batches are replaced every epoch (persistent DataLoader workers keep it)."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, int]]] = []

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


@contextlib.contextmanager
def _cpu_threads(device: torch.device, n: int = 1) -> Iterator[None]:
    """Run augmentation kernels of small images single-threaded on the CPU.

    They are too small to gain from intra-op threads, and on a busy machine OpenMP's barriers make them
    many times slower.
    """
    before = torch.get_num_threads()
    if device.type != "cpu" or before <= n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _torchvision_policy(kind: str, preset: str) -> Callable[[Tensor], Tensor]:
    from torchvision.transforms import v2

    if kind == "autoaugment":
        return v2.AutoAugment(getattr(v2.AutoAugmentPolicy, EVAL_PRESETS[preset]["autoaugment_policy"]))
    if kind == "randaugment":
        return v2.RandAugment()
    return v2.TrivialAugmentWide()


# ----------------------------------------------------------------------------------------------- train
def data_order(seed: int) -> torch.Generator:
    """The CPU generator of a run's data order (one permutation of the training images per epoch), seeded
    from the run's ``seed`` (the other streams: :meth:`_Trainer._build_streams`)."""
    return torch.Generator().manual_seed(seed * 4 + 1)


class _Trainer(_runner.WorkerBase):
    """State and steps of one training run (one object, so that checkpointing is one place).

    Under torchrun every rank holds one: the same data, model and optimiser; each trains on its shard
    of every global batch through DistributedDataParallel (gradients averaged over the global batch),
    draws its own augmentations, and rank 0's batch-norm statistics are given to all at the end of each
    epoch (so that the checkpoint and the tested model are one model).
    """

    config: TrainConfig

    def __init__(self, config: TrainConfig, train: Any, test: Any, log: Callable[[str], None],
                 dist_context: _distributed.DistContext | None = None) -> None:
        super().__init__(config, log, dist_context)
        self.kind, self.policy_arg = parse_policy(config.policy)
        self.aug = config.augmentation()
        self.per_image = self.kind in _PER_IMAGE
        self._place_data(train, test)
        self._plan_batches()
        self._build_model()
        self._build_streams()
        self._build_loader()
        self.on_step: Callable[[], None] | None = None
        self.captured: _runner.CapturedStep | None = None
        self.lr_tensor: Tensor | None = None  # cuda_graphs: the rate the captured optimiser step reads
        if config.cuda_graphs:
            self._build_graph_step()

    # -- set-up -----------------------------------------------------------------------------------
    def _place_data(self, train: Any, test: Any) -> None:
        """Check the images, compute the standardisation and move the data to the device."""
        dev = self.device
        if train.images.dtype != torch.uint8 or test.images.dtype != torch.uint8:
            raise ValueError("training and test images must be uint8 tensors (N, C, H, W)")
        self.n_train, self.n_test = len(train.labels), len(test.labels)
        if self.n_train < 2 or self.n_test < 1:
            raise ValueError(f"need at least 2 training images and 1 test image, got {self.n_train} and {self.n_test}")
        self._describe_data(train, test)
        self.train_labels = train.labels.to(dev)
        self.test_x, self.test_y = test.images.to(dev), test.labels.to(dev)
        # Per-image (torchvision) policies read the images on the CPU, in DataLoader workers.
        self.train_cpu = train.images.contiguous() if self.per_image else None
        self.train_x = None if self.per_image else train.images.to(dev)

    def _plan_batches(self) -> None:
        b, world = self.config.batch_size, self.dist.world_size
        if world > 1 and b < 2 * world:
            raise ValueError(f"batch_size {b} is too small for {world} processes: each needs at least 2 images "
                             f"of every batch (batch norm); use a batch size >= {2 * world}")
        # A trailing batch that would leave a rank one image breaks batch norm after global pooling; it is
        # dropped (with one process: a trailing batch of one image).
        self.batches_per_epoch = self.n_train // b + (1 if self.n_train % b >= 2 * world else 0)
        self.steps_per_epoch = self.ticks_per_epoch = self.batches_per_epoch  # the progress bar counts steps

    def _build_model(self) -> None:
        from hba_augment.models import create_model

        cfg, dev = self.config, self.device
        with _lanes.GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)  # the same initial weights on every rank
            model = create_model(cfg.model, self.num_classes)
        self.model = model.to(dev)
        if dev.type == "cuda":
            torch.backends.cudnn.benchmark = True  # fixed input shapes; CUDA runs are not bit-exact anyway
        if cfg.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self.net, self.opt = self._trainable(self.model)  # self.model stays the plain network (checkpoints, testing)

    def _build_streams(self) -> None:
        """The random streams: the data order is shared by the ranks, the draws are each rank's own."""
        cfg, rank = self.config, self.dist.rank
        with _lanes.GLOBAL_RNG_LOCK:  # not while another lane draws from it
            torch.manual_seed(_distributed.rank_seed(cfg.seed * 4 + 2, rank))  # dropout, Shake-Shake, ShakeDrop
        self.g_data = data_order(cfg.seed)
        self.g_aug = torch.Generator(device=self.device).manual_seed(_distributed.rank_seed(cfg.seed * 4 + 3, rank))
        self.hba = _load_hba(self.policy_arg, cfg.epochs, cfg.compile) if self.kind == "hba" else None

    def _build_loader(self) -> None:
        cfg, dev = self.config, self.device
        self.loader = None
        self.num_workers = 0
        if not self.per_image:
            return
        self.dataset = _PerImage(self.train_cpu, _torchvision_policy(self.kind, cfg.preset))
        workers = cfg.num_workers
        if workers is None:
            # The machine's cores are shared by the processes torchrun started on it.
            cores = (os.cpu_count() or 1) // self.dist.local_world_size
            workers = max(0, min(8, cores - 1))
        self.num_workers = workers
        self.sampler = _Batches()
        if workers > 0:
            self.loader = torch.utils.data.DataLoader(
                self.dataset, batch_sampler=self.sampler, num_workers=workers, persistent_workers=True,
                pin_memory=dev.type == "cuda", prefetch_factor=4,
            )

    def _build_graph_step(self) -> None:
        """The static buffers, fused optimiser and :class:`~hba_augment._runner.CapturedStep` of ``cuda_graphs``."""
        cfg, dev = self.config, self.device
        if self.dist.distributed:
            raise ValueError(f"{_cli_common.option('cuda_graphs', True)} runs in one process, not under torchrun")
        self.opt, self.lr_tensor = _runner.graph_optimizer(self.model, cfg, dev)
        images = self.train_cpu if self.per_image else self.train_x
        # The epoch's summed loss, correct count and images seen, added to on the device by every step.
        self.sums = torch.zeros(3, dtype=torch.float64, device=dev)
        if self.hba is not None:
            # The epoch's policy, copied in at each epoch (a graph reads these tensors, never new ones).
            self.static_prob, self.static_mag = (t.clone() for t in self.hba.policy_at(dev))
        self.captured = _runner.CapturedStep(self._graph_step, (cfg.batch_size, *images.shape[1:]), dev, [self.g_aug])

    # -- batches ----------------------------------------------------------------------------------
    def _epoch_batches(self) -> Iterator[tuple[Tensor, Tensor, int]]:
        """``(uint8 images on the device, labels, global batch size)`` of this rank's share of every
        training batch of this epoch, in order.

        Every rank draws the same permutation (the data stream is seeded alike and advanced alike, which
        is what ``DistributedSampler.set_epoch`` achieves) and takes its shard of each global batch.
        """
        cfg, dev = self.config, self.device
        perm = torch.randperm(self.n_train, generator=self.g_data)
        global_batches = list(perm.split(cfg.batch_size))[: self.batches_per_epoch]
        sizes = [len(idx) for idx in global_batches]
        index_batches = [_distributed.shard(idx, self.dist) for idx in global_batches]
        if not self.per_image:
            # One copy of the epoch's indices to the device, not one per step (a copy from pageable host
            # memory waits for the host).
            on_device = torch.cat(index_batches).to(dev).split([len(idx) for idx in index_batches])
            for idx, size in zip(on_device, sizes, strict=True):
                yield self.train_x[idx], self.train_labels[idx], size
            return
        # One seed per image of the whole set, drawn on every rank: an image's draws do not depend on
        # which rank or worker transforms it.
        seeds = torch.randint(0, 2**62, (self.n_train,), generator=self.g_data)
        keyed = [list(zip(idx.tolist(), seeds[idx].tolist(), strict=True)) for idx in index_batches]
        if self.loader is not None:
            self.sampler.batches = keyed
            for idx, size, x in zip(index_batches, sizes, self.loader, strict=True):
                yield x.to(dev, non_blocking=True), self.train_labels[idx.to(dev)], size
            return
        for idx, size, keys in zip(index_batches, sizes, keyed, strict=True):
            with _lanes.GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]), _cpu_threads(torch.device("cpu")):
                x = torch.stack([self.dataset[k] for k in keys])
            yield x.to(dev, non_blocking=True), self.train_labels[idx.to(dev)], size

    def _augment(self, x: Tensor, static: bool = False) -> Tensor:
        """The batch's policy (``static``: from the epoch's policy tensors of ``cuda_graphs``, unchecked, since
        the schedule was checked when loaded and a check reads the device), then standardisation and the
        baseline; float ``(B, C, H, W)`` in the model's memory format."""
        with _cpu_threads(self.device):
            if self.hba is not None and static:
                # The trainer's HBAPolicy has the default fill and this interpolation (_load_hba).
                x = functional.augment(x, self.static_prob, self.static_mag, self.hba.schedule.count_probs,
                                       interpolation=self.hba.interpolation, generator=self.g_aug, check_policy=False)
            elif self.hba is not None:
                x = self.hba(x, generator=self.g_aug)
            x = self.normalise(x)
            a = self.aug
            if a["flip"] or a["crop_padding"] or a["cutout"]:
                x = _runner.baseline_augment(x, flip=a["flip"], crop_padding=a["crop_padding"], cutout=a["cutout"],
                                             generator=self.g_aug)
        if self.config.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    # -- epoch ------------------------------------------------------------------------------------
    def _forward(self, x: Tensor, lr: float | None) -> Tensor:
        """The training forward pass of a step at rate ``lr`` (``None``: the optimiser's own, the device tensor
        of ``cuda_graphs``), set here: the logits."""
        if lr is not None:
            for group in self.opt.param_groups:
                group["lr"] = lr
        # With cuda_graphs no autocast cache: a captured step would replay casts of stale weights.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.config.amp,
                            cache_enabled=self.captured is None):
            return self.net(x)

    def _train_step(self, x: Tensor, y: Tensor, global_size: int, lr: float | None) -> tuple[Tensor, Tensor]:
        """One SGD step on this rank's shard at rate ``lr`` (:meth:`_forward`); returns the shard's summed loss
        and correct count."""
        logits = self._forward(x, lr)
        if self.dist.distributed:
            # DDP averages the ranks' gradients; scaling each shard's summed loss by world / global size
            # makes that average the gradient of the global batch's mean loss, shards of unequal size included.
            loss_sum = F.cross_entropy(logits.float(), y, reduction="sum")
            loss = loss_sum * (self.dist.world_size / global_size)
        else:
            loss = F.cross_entropy(logits.float(), y)
            loss_sum = loss * len(y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        with torch.no_grad():
            return loss_sum.detach(), (logits.argmax(1) == y).sum()

    def _graph_step(self, x: Tensor, y: Tensor) -> None:
        """``cuda_graphs``' step on uint8 images ``x`` (``(B, C, H, W)``) and labels ``y``: everything on the
        device, its sums added to ``self.sums``."""
        loss_sum, correct = self._train_step(self._augment(x, static=True), y, len(y), None)
        with torch.no_grad():
            self.sums[0] += loss_sum
            self.sums[1] += correct
            self.sums[2] += len(y)

    def _run_graph_epoch(self) -> tuple[float, float, int, float]:
        """An epoch of ``cuda_graphs`` steps through :attr:`captured` (a short last batch runs eagerly there).
        Returns the summed loss, the correct count, the images seen and the last learning rate."""
        cfg = self.config
        assert self.captured is not None
        if self.hba is not None:
            prob, mag = self.hba.policy_at(self.device)
            self.static_prob.copy_(prob)
            self.static_mag.copy_(mag)
        self.sums.zero_()
        lr = cfg.lr
        for x, y, _ in self._epoch_batches():
            lr = _runner.lr_at(cfg, self.step, self.steps_per_epoch)
            self.lr_tensor.fill_(lr)
            self.captured(x, y)
            self.step += 1
            if (self.device.type == "cpu" or self.step % 50 == 0) and not bool(torch.isfinite(self.sums[0])):
                raise self._diverged(float(self.sums[0]), lr)  # the epoch's summed loss: nan or inf
            if self.on_step is not None:
                self.on_step()
        loss_sum, correct, seen = self.sums.tolist()
        return loss_sum, correct, int(seen), lr

    def run_epoch(self) -> dict[str, Any]:
        cfg, dev = self.config, self.device
        start = time.perf_counter()
        if self.hba is not None:
            self.hba.set_epoch(self.epoch)  # on every rank: each augments its own shard
        if self.captured is not None:
            return self._finish_epoch(start, *self._run_graph_epoch())
        loss_sum = torch.zeros((), dtype=torch.float64, device=dev)
        correct = torch.zeros((), dtype=torch.int64, device=dev)
        seen = torch.zeros((), dtype=torch.int64, device=dev)
        lr = cfg.lr
        for x, y, global_size in self._epoch_batches():
            x = self._augment(x)
            lr = _runner.lr_at(cfg, self.step, self.steps_per_epoch)
            batch_loss, batch_correct = self._train_step(x, y, global_size, lr)
            self.step += 1
            loss_sum += batch_loss
            correct += batch_correct
            seen += len(y)
            # A sync on accelerators; every step on the CPU, where it is free. With several processes the
            # check waits for the epoch's sums, so that every rank stops at the same point.
            if (not self.dist.distributed and (dev.type == "cpu" or self.step % 50 == 0)
                    and not bool(torch.isfinite(loss_sum))):
                raise self._diverged(float(batch_loss) / len(y), lr)
            if self.on_step is not None:
                self.on_step()
        _distributed.all_reduce_sum([loss_sum, correct, seen], self.dist)
        return self._finish_epoch(start, float(loss_sum), float(correct), int(seen), lr)

    def _finish_epoch(self, start: float, loss_sum: float, correct: float, seen_total: int, lr: float) -> dict[str, Any]:
        """The epoch's record from its sums (read on the host), after the divergence check and the test."""
        def test() -> tuple[list[float], list[float]]:
            loss, error = self.evaluate()
            return [loss], [error]

        return self._epoch_records(start, [loss_sum], [correct], seen_total, lr, test)[0]

    def _epoch_records(self, start: float, loss_sums: Sequence[float], corrects: Sequence[float], seen_total: int,
                       lr: float, test: Callable[[], tuple[Sequence[float], Sequence[float]]]) -> list[dict[str, Any]]:
        """The epoch's record of each network trained (one, or the K of fused runs) from its summed loss and
        correct count (read on the host), after the divergence check and, when due, ``test`` (each network's
        test loss and error)."""
        cfg = self.config
        losses = [loss_sum / seen_total for loss_sum in loss_sums]
        for loss in losses:
            if not math.isfinite(loss):
                raise self._diverged(loss, lr)
        # DDP keeps the weights equal but each rank's running statistics are its own: take rank 0's, so
        # that every rank tests, and rank 0 saves, the same model.
        _distributed.broadcast_buffers(self.model, self.dist)
        self.epoch += 1
        train_seconds = time.perf_counter() - start
        entries: list[dict[str, Any]] = [
            {"epoch": self.epoch, "lr": lr, "train_loss": loss, "train_acc": correct / seen_total,
             "train_seconds": train_seconds} for loss, correct in zip(losses, corrects, strict=True)]
        if self.epoch == cfg.epochs or (cfg.eval_every and self.epoch % cfg.eval_every == 0):
            t = time.perf_counter()
            test_losses, test_errors = test()
            for entry, loss, error in zip(entries, test_losses, test_errors, strict=True):
                entry.update(test_loss=loss, test_error=error, test_seconds=time.perf_counter() - t)
        for entry in entries:
            entry["seconds"] = time.perf_counter() - start
            entry["train_images_per_second"] = seen_total / train_seconds
        return entries

    def evaluate(self) -> tuple[float, float]:
        cfg = self.config
        return evaluate_model(self.model, self.test_x, self.test_y, self.normalise, batch_size=cfg.eval_batch_size,
                              channels_last=cfg.channels_last, amp=cfg.amp, dist_context=self.dist)

    def _diverged(self, value: float, lr: float) -> TrainingDivergedError:
        every = self.config.checkpoint_every
        kept = (f"The last checkpoint holds {self.epoch} completed epoch(s)" if every == 1 else
                f"The checkpoint holds the last epoch saved ({_cli_common.option('checkpoint_every', every)})")
        return TrainingDivergedError(
            f"training diverged: the loss became {value} in epoch {self.epoch + 1} (step {self.step}, lr {lr:.4g}); "
            f"no result was written. {kept}. Try a smaller --lr."
        )

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run's state; with several processes it holds every rank's random streams (a collective)."""
        return _runner.checkpoint_state(
            self, _CHECKPOINT_FORMAT, _CHECKPOINT_VERSION,
            model=self.model.state_dict(),
            optimizer=_runner.optimizer_state(self.opt),
            history=json.loads(json.dumps(self.records)),
            **_runner.rank_rng_state(self.device, self._generators(), self.dist),
        )

    def _generators(self) -> dict[str, torch.Generator]:
        return {"data": self.g_data, "augment": self.g_aug}

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        fused = state.get("fused_seeds")
        if fused is not None:
            # Its augmentation stream is the group's: runs of the group resumed alone would draw alike.
            raise ValueError(f"cannot resume from {path} alone: fused runs of the seeds {fused} wrote it, and they "
                             f"resume together ({_cli_common.option('seed', ','.join(map(str, fused)))} "
                             "with --fuse)")
        self._check_checkpoint(state, path, self.config)
        self.model.load_state_dict(state["model"])
        _runner.load_optimizer_state(self.opt, state["optimizer"], self.lr_tensor, self.captured)
        _runner.restore_rank_rng(state, path, "a run", self.device, self._generators(), self.dist)
        _runner.restore_counters(self, state)
        self.records = list(state["history"])

    def _check_checkpoint(self, state: dict[str, Any], path: Path, config: TrainConfig) -> None:
        """``ValueError`` unless ``state`` (read from ``path``) is a checkpoint of a run of ``config`` on this data."""
        _runner.check_checkpoint(
            state, path, format=_CHECKPOINT_FORMAT, version=_CHECKPOINT_VERSION, kind="hba-augment train",
            config=config.to_dict(), resume_free=_RESUME_FREE, data_fingerprint=self.fingerprint,
            settings="the settings", data_mismatch="the training/test images differ from the checkpoint's",
            added_fields=_ADDED_FIELDS,
        )

    def set_tick(self, tick: _runner.Tick | None) -> None:
        """Call ``tick`` after every training step (the run driver's progress bar); ``None``: nothing."""
        self.on_step = tick

    def close(self) -> None:
        # Persistent workers are shut down with their iterator; drop it explicitly.
        self.loader = None


def _versions() -> dict[str, str]:
    import torchvision

    return {"package_version": __version__, "torch_version": torch.__version__,
            "torchvision_version": torchvision.__version__}


def train_and_evaluate(
    config: TrainConfig,
    out_dir: str | os.PathLike[str],
    *,
    resume: bool = False,
    data: tuple[Any, Any] | None = None,
    command: str | None = None,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train ``config.model`` with ``config.policy`` and test it; write the files into ``out_dir``.

    Files: ``result.json`` (at the end: ``test_error`` in percent, ``test_loss``, ``history``, ``config``),
    ``history.jsonl`` (one line per epoch, as it goes) and ``checkpoint.pt`` (atomically, after every
    ``config.checkpoint_every`` epochs and after the last).

    In a process group (``torchrun``, see :func:`hba_augment._distributed.session`) every rank calls this
    with the same arguments: they train one model with DistributedDataParallel on shards of each batch,
    test it once over the whole test set, and rank 0 writes the files. ``resume`` needs the same number
    of processes as the run that wrote the checkpoint.

    Args:
        config: the run's settings (validated here).
        out_dir: output folder (created if missing).
        resume: continue from ``out_dir/checkpoint.pt`` if it exists (else start afresh). Without it, a
            folder that already holds a checkpoint or a result is refused.
        data: ``(train, test)`` :class:`~hba_augment.datasets.ImageData` to use instead of loading them
            (``train_size`` / ``test_size`` are then not applied).
        command: the command line recorded in the result (``None``: ``sys.argv``).
        progress: show a tqdm bar (``None``: only when stderr is a terminal).
        log: receives one line per epoch and status messages (default: print to stderr).
        on_epoch_end: called with each epoch's history entry after its checkpoint is written.

    Returns:
        :class:`TrainResult`.

    Raises:
        ValueError: bad settings, data that does not fit, or an incompatible checkpoint.
        TrainingDivergedError: a NaN/inf training loss; no result is written.
    """
    load = (lambda: load_data(config)) if data is None else (lambda: (*data, "in-memory data passed to train_and_evaluate"))
    return _train(config, out_dir, load, resume=resume, command=command, progress=progress, log=log,
                  on_epoch_end=on_epoch_end)


def _train(config: TrainConfig, out_dir: str | os.PathLike[str], load: Callable[[], tuple[Any, Any, str]], *,
           resume: bool, command: str | None, progress: bool | None, log: Callable[[str], None] | None,
           on_epoch_end: Callable[[dict[str, Any]], None] | None) -> TrainResult:
    """:func:`train_and_evaluate` with the data from ``load()`` (``(train, test, source)``)."""
    def introduce(trainer: _Trainer) -> str:
        world = trainer.dist.world_size
        processes = f" x {world} processes (DDP, {config.batch_size // world}+ images each)" if world > 1 else ""
        return (f"train: {config.model}, policy {config.policy}, {trainer.n_train} train / {trainer.n_test} "
                f"{'test' if config.eval_split == 'test' else 'validation'} images, "
                f"{config.epochs} epochs x {trainer.steps_per_epoch} steps, batch {config.batch_size}, lr {config.lr:g} "
                f"({config.lr_schedule}), wd {config.wd:g}, device {_runner.describe_device(trainer.device)}{processes}")

    def report(entry: dict[str, Any], remaining: float) -> tuple[str, dict[str, str]]:
        tested = (f" | test loss {entry['test_loss']:.4f} error {entry['test_error']:.2f}%"
                  if "test_error" in entry else "")
        line = (f"epoch {entry['epoch']}/{config.epochs}: train loss {entry['train_loss']:.4f} "
                f"acc {entry['train_acc']:.3f}{tested} | lr {entry['lr']:.4g} | {entry['seconds']:.1f} s, "
                f"ETA {remaining / 60:.1f} min")
        return line, {"loss": f"{entry['train_loss']:.3f}"}

    trainer, out, files, command, log = _runner.drive(
        config, out_dir, lambda train, test, log: _Trainer(config, train, test, log), what="run",
        file_names={"result": RESULT_FILE, "history": HISTORY_FILE, "checkpoint": CHECKPOINT_FILE},
        guarded=("result", "checkpoint"), records_file="history", load=load,
        introduce=introduce, report=report, seconds_key="seconds", desc=f"train {config.policy}", unit="step",
        resume=resume, command=command, progress=progress, log=log, on_epoch_end=on_epoch_end,
        checkpoint_every=config.checkpoint_every,
    )
    last = trainer.records[-1]
    if "test_error" not in last:  # a run resumed after its last epoch with an older checkpoint
        last["test_loss"], last["test_error"] = trainer.evaluate()
    return _finish_run(config, trainer, out, files, command, log)


def _finish_run(config: TrainConfig, trainer: Any, out: Path, files: dict[str, Path], command: str,
                log: Callable[[str], None], fused_seeds: Sequence[int] | None = None) -> TrainResult:
    """Write a finished run's ``result.json`` (every rank returns once it is on disk) and its result.

    ``trainer``: the run's :class:`_Trainer`, or a fused run's view of its group (``fused_seeds``: the seeds
    it trained with, :mod:`hba_augment.train.fused`)."""
    last = trainer.records[-1]
    summary = {
        "test_error": last["test_error"],
        "test_loss": last["test_loss"],
        "test_images": trainer.n_test,
        "eval_split": config.eval_split,
        "train_images": trainer.n_train,
        "classes": trainer.num_classes,
        "epochs": trainer.epoch,
        "wall_seconds": trainer.wall_seconds,
        "sessions": trainer.sessions,
        "history": trainer.records,
        "config": {
            **config.to_dict(),
            "augmentation": config.augmentation(),
            "autoaugment_policy": EVAL_PRESETS[config.preset]["autoaugment_policy"]
            if trainer.kind == "autoaugment" else None,
            "num_workers_used": trainer.num_workers,
            "processes": trainer.dist.world_size,
            "standardisation": {"mean": trainer.mean.tolist(), "std": trainer.std.tolist()},
            **_versions(),
            "device_description": _runner.describe_device(trainer.device),
            "torch_threads": torch.get_num_threads(),
            "command": command,
            "data_source": trainer.data_source,
            "data_fingerprint": trainer.fingerprint,
            "fused_seeds": None if fused_seeds is None else list(fused_seeds),
        },
    }
    summary = json.loads(json.dumps(summary, allow_nan=True))
    text = json.dumps(summary, indent=2, allow_nan=True) + "\n"
    if trainer.dist.is_main:
        with atomic_open(files["result"], "w", encoding="utf-8") as f:
            f.write(text)
    # Every rank returns once the result is on disk.
    _distributed.barrier(trainer.dist)
    log(f"test error {summary['test_error']:.2f}% (loss {summary['test_loss']:.4f}) after {trainer.epoch} epochs; "
        f"wrote {files['result']}")
    return TrainResult(test_error=summary["test_error"], test_loss=summary["test_loss"], history=trainer.records,
                       summary=summary, out_dir=out, files=files)


#: Model families whose training draws from torch's default generator (Shake-Shake's coefficients,
#: ShakeDrop), which lanes share: with them, one run per process.
_DRAWING_FAMILIES = frozenset({"shake-shake", "pyramidnet"})


def train_side_by_side(
    configs: Sequence[TrainConfig],
    out_dirs: Sequence[str | os.PathLike[str]],
    *,
    resume: bool = False,
    command: str | None = None,
    log: Callable[[str], None] | None = None,
) -> list[_lanes.Outcome]:
    """Train several runs at the same time in this process, each as :func:`train_and_evaluate` would alone.

    Each run is a lane (:mod:`hba_augment._lanes`): a thread and, on CUDA, a stream of its own, so that on a
    GPU the runs' kernels share it (with ``cuda_graphs`` a step costs its thread one launch). Each run
    writes its own files into its own folder, resumes from its own checkpoint and ends with the result it
    would have alone (on the CPU bit for bit; on CUDA up to cuDNN's nondeterminism, as always). Runs that
    read the same images (e.g. seeds with a fixed ``subset_seed``) share one copy, loaded once. One run
    that fails does not stop the others.

    Args:
        configs: the runs' settings, all on one device.
        out_dirs: one output folder each, all different.
        resume: as :func:`train_and_evaluate`'s, for every run.
        command: the command line recorded in each result (``None``: ``sys.argv``).
        log: receives every run's lines, each prefixed with its folder's name (default: stderr).

    Returns:
        One :class:`~hba_augment._lanes.Outcome` per run: its :class:`TrainResult`, or the error it raised.

    Raises:
        ValueError: no runs, folders not one per run or repeated, runs on different devices, ``compile``,
            a process group (torchrun), or, with several runs, a model whose training draws from torch's
            default generator (Shake-Shake, PyramidNet).
    """
    if not configs or len(configs) != len(out_dirs):
        raise ValueError(f"need one output folder per run, got {len(configs)} runs and {len(out_dirs)} folders")
    outs = [Path(out) for out in out_dirs]
    resolved = [str(out.expanduser().resolve()) for out in outs]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"every run needs its own output folder, got {[str(out) for out in outs]}")
    devices = {torch.device(config.device) for config in configs}
    if len(devices) != 1:
        raise ValueError(f"runs side by side share one device, got {sorted(map(str, devices))}")
    if len(configs) > 1:
        if any(config.compile for config in configs):
            raise ValueError(f"{_cli_common.option('compile', True)} trains one run per process")
        if _distributed.launched():
            raise ValueError("runs side by side run in one process, not under torchrun")
        drawing = sorted({config.model for config in configs if model_family(config.model) in _DRAWING_FAMILIES})
        if drawing:
            raise ValueError(f"{', '.join(drawing)} draw from torch's default generator while training, which "
                             "runs side by side would share: train these one run per process")
    emit = _runner.stderr_log if log is None else log
    loaded: dict[tuple[Any, ...], tuple[Any, Any, str]] = {}
    loading = threading.Lock()

    def load(config: TrainConfig) -> tuple[Any, Any, str]:
        with loading:  # the first run of a key loads it, the others wait for it
            key = _data_key(config)
            if key not in loaded:
                loaded[key] = load_data(config)
            return loaded[key]

    def run(config: TrainConfig, out: Path) -> TrainResult:
        prefix = f"[{out.name}] " if len(configs) > 1 else ""
        return _train(config, out, lambda: load(config), resume=resume, command=command,
                      progress=False if len(configs) > 1 else None, log=lambda line: emit(prefix + line),
                      on_epoch_end=None)

    return _lanes.side_by_side([functools.partial(run, config, out) for config, out in zip(configs, outs, strict=True)],
                               next(iter(devices)))
