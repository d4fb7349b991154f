"""The HBA search loop (paper Algorithm 2, the contract, section 6).

One *outer iteration*:

1. ``t_train`` SGD steps (momentum 0.9, Nesterov, weight decay) on every network parameter (``phi``). In
   each, image ``i`` of a training batch gets its own ``lambda_i = lambda + eps_i``, ``eps_i ~ N(0, sigma^2)``:
   it is augmented with the policy ``hparams_to_policy(lambda_i)`` through
   :func:`hba_augment.functional.augment` and the hyper-layers see ``lambda_i`` as well. ``lambda`` gets no
   gradient here (augmentation is not differentiable and the step updates ``phi`` only).
2. ``t_val`` Adam steps on ``lambda`` on an un-augmented validation batch, every hyper-layer fed the shared
   ``lambda``; only ``d loss / d lambda`` is computed (no weight gradients).

Training images are processed in this order, on the training device, on whole batches (no per-image
Python loop): the HBA policy on uint8 images, then standardisation with the training split's per-channel
mean/std, random horizontal flip, random crop of the image zero-padded by ``crop_padding`` pixels, and
Cutout (a ``cutout x cutout`` zero patch centred on a uniform pixel, clipped at the borders). This is
the paper's order ("policy, baseline, Cutout in sequence", baseline = standardisation, flip, crop) and
PBA's code: padding and Cutout are zeros *after* standardisation, i.e. the mean colour.

Batch norm in the validation step (``val_bn``): ``"batch"`` (default, this package's first choice; the
paper does not say) normalises the validation batch with its own statistics, as the training steps do,
and leaves the running statistics untouched, so they keep describing (augmented) training batches only;
``"running"`` runs the network in eval mode, as STN's hyper step does (``cnn.eval()``) and as the network
is tested: the running statistics, gathered on augmented images, normalise clean ones, so ``lambda``'s
gradient also sees what augmentation does to the statistics a tested network uses. Measured on the
Reduced CIFAR-10 protocol (benchmarks/RESULTS.md, ablations), ``"running"`` learns a much stronger
schedule that trains a worse network (validation error 28.33% vs 26.38%), so ``"batch"`` stays the default.

An *epoch* is one pass over the training split: a fresh random permutation cut into
``steps_per_epoch = ceil(N_train / batch_size)`` batches (the last one may be smaller), processed by
``ceil(steps_per_epoch / t_train)`` outer iterations (the last may have fewer training steps). Validation
batches (``min(batch_size, N_val)`` images) come from a separate stream of permutations of the validation
split that runs on across epochs. The learning rate is set per training step (cosine from ``lr`` to 0
over all steps, or a step decay at epoch milestones); ``lambda``'s learning rate is constant (paper).
At the end of every epoch the policy ``hparams_to_policy(lambda)`` is recorded as one schedule entry,
metrics are appended, and a checkpoint is written atomically, so that ``resume=True`` continues an
interrupted search bit for bit (every random draw comes from explicit generators saved in it).

Whether ``lambda`` follows a signal or a random walk is measured, not assumed: every epoch's metrics give,
for each hyperparameter, the t statistic of its ``t_val`` gradients over the epoch (their mean over their
standard error, :func:`hypergradient_consistency`). Adam moves ``lambda`` by about its learning rate per
step even when the gradients are pure noise; with ``k`` steps of zero-mean noise, ``|t| > 2`` holds for
about 5-7% of the hyperparameters (the t distribution's tail with ``k - 1`` degrees of freedom). Each
hyperparameter's mean gradient of the epoch is logged too, so that epochs can be pooled: a push too small
to show in one epoch's 16 steps adds up over a search's 200 epochs.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hba_augment import _cli_common, _distributed, _runner, functional
from hba_augment._graphs import CapturedCall
from hba_augment._runner import (
    LR_SCHEDULES as LR_SCHEDULES,  # re-exported (this module defined it before _runner existed)
)
from hba_augment._runner import baseline_augment, describe_device, lr_at, source_commit
from hba_augment._version import __version__
from hba_augment.functional import MAGNITUDE_OPS, OPS
from hba_augment.models import create_model
from hba_augment.schedule import Schedule
from hba_augment.search._hyperize import HyperModel, hyperize
from hba_augment.search._presets import PRESETS
from hba_augment.search.config import (  # re-exported: the search's settings, defined there
    _ADDED_FIELDS,
    _RESUME_FREE,
    VAL_BN,
    SearchConfig,
)
from hba_augment.search.hparams import (
    NUM_HPARAMS,
    NUM_PROB_HPARAMS,
    _magnitude_index,
    hparams_to_policy,
    init_hparams,
)
from hba_augment.search.hyper_input import applied_input, expected_applied_input
from hba_augment.search.priors import init_provenance

__all__ = [
    "CHECKPOINT_FILE",
    "METRICS_FILE",
    "PLOT_FILE",
    "PRESETS",
    "SCHEDULE_FILE",
    "VAL_BN",
    "SearchConfig",
    "SearchDivergedError",
    "SearchResult",
    "baseline_augment",
    "describe_device",
    "finite_provenance",
    "hypergradient_consistency",
    "load_search_data",
    "lr_at",
    "run_search",
    "training_provenance",
]

SCHEDULE_FILE = "schedule.json"
METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "schedule.png"
CHECKPOINT_FILE = "checkpoint.pt"
_CHECKPOINT_FORMAT = "hba-search-checkpoint"
_CHECKPOINT_VERSION = 1

class SearchDivergedError(RuntimeError):
    """A loss or ``lambda`` became NaN or infinite; the search stops and writes no schedule."""


@dataclass
class SearchResult:
    """What :func:`run_search` returns."""

    schedule: Schedule
    metrics: list[dict[str, Any]]
    out_dir: Path
    files: dict[str, Path] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def _frozen_bn_statistics(model: nn.Module) -> Iterator[None]:
    """Batch norm in training mode uses batch statistics but leaves running statistics (and counts) alone."""
    bns = [m for m in model.modules() if hasattr(m, "track_running_stats") and hasattr(m, "running_mean")]
    saved = [m.track_running_stats for m in bns]
    for m in bns:
        m.track_running_stats = False
    try:
        yield
    finally:
        for m, s in zip(bns, saved, strict=True):
            m.track_running_stats = s


def load_search_data(config: SearchConfig) -> tuple[Any, Any, str]:
    """The search's training and validation splits of ``config``'s dataset (class-balanced, held-out
    training images for validation) and a description of where they came from, ``(train, val, source)``."""
    from hba_augment.datasets import load_dataset, reduced_split

    full = load_dataset(config.dataset, config.data_dir, split="train", image_size=config.image_size,
                        classes=list(config.classes) if isinstance(config.classes, tuple) else config.classes,
                        download=config.download)
    train, val = reduced_split(full, config.train_size, config.val_size, seed=config.seed)
    if len(train.labels) < config.train_size or len(val.labels) < config.val_size:
        raise ValueError(f"{config.dataset} at {config.data_dir} has {len(full.labels)} training images; "
                         f"train_size {config.train_size} + val_size {config.val_size} do not fit")
    source = f"{config.dataset} train split at {Path(config.data_dir).expanduser().resolve()}"
    return train, val, source


class _ValStream:
    """Batches of validation indices from successive random permutations (a pass's short tail is dropped)."""

    def __init__(self, n: int, batch: int, generator: torch.Generator) -> None:
        self.n, self.batch, self.generator = n, batch, generator
        self.perm = torch.randperm(n, generator=generator)
        self.pos = 0

    def next(self) -> Tensor:
        if self.pos + self.batch > self.n:
            self.perm = torch.randperm(self.n, generator=self.generator)
            self.pos = 0
        idx = self.perm[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return idx


def hypergradient_consistency(moments: Tensor, steps: int) -> tuple[float, float]:
    """How consistently the hyperparameter gradients of one epoch point one way.

    Args:
        moments: ``(2, n)`` sums over the epoch's steps of each hyperparameter's gradient and of its square.
        steps: the number of gradients summed, ``k``.

    Returns:
        ``(mean |t|, fraction of |t| > 2)`` over the ``n`` hyperparameters, where ``t`` is the mean gradient
        over its standard error, ``mean / sqrt(var / k)`` (``var`` the sample variance). Both are ``nan``
        with fewer than two steps. Zero-mean noise gives a mean ``|t|`` of about 0.8 and a fraction of
        about 0.05-0.07; a gradient that keeps its sign gives large values.
    """
    if steps < 2:
        return math.nan, math.nan
    m = moments.detach().double().cpu()
    mean = m[0] / steps
    var = ((m[1] - steps * mean * mean) / (steps - 1)).clamp_min(0)
    # The tiny floor keeps a gradient that never varies finite (and huge) instead of inf.
    t = mean / (var / steps + 1e-300).sqrt()
    return float(t.abs().mean()), float((t.abs() > 2).double().mean())


# --------------------------------------------------------------------------------------------- search
def finite_provenance(provenance: dict[str, Any]) -> dict[str, Any]:
    """``provenance`` with its non-finite numbers as ``None`` (a schedule's provenance is strict JSON; a
    search that ended without a validation loss, for one, records none)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in provenance.items()}


def training_provenance(cfg: SearchConfig) -> dict[str, Any]:
    """The training settings a schedule's provenance records, the same for every objective (the
    networks trained during a search: preset, batch, learning-rate schedule, SGD, weight decay)."""
    return {"preset": cfg.preset, "batch_size": cfg.batch_size, "lr": cfg.lr, "lr_schedule": cfg.lr_schedule,
            "lr_milestones": list(cfg.lr_milestones), "momentum": cfg.momentum, "nesterov": cfg.nesterov,
            "wd": cfg.wd}


class _Search(_runner.WorkerBase):
    """State and steps of one search (kept in one object so that checkpointing is one place)."""

    config: SearchConfig

    def __init__(self, config: SearchConfig, train: Any, val: Any, log: Callable[[str], None],
                 dist_context: _distributed.DistContext | None = None) -> None:
        super().__init__(config, log, dist_context)
        self.commit = source_commit()  # the code this session runs: taken now, not when the schedule is written
        self._place_data(train, val)
        self._plan_batches()
        self._build_model()
        self._build_streams()
        self.augment_call: Callable[..., Tensor | tuple[Tensor, Tensor]] | None = None  # made by _augment
        self.prob_history: list[Tensor] = []
        self.mag_history: list[Tensor] = []
        # This epoch's sums of the hyperparameter gradients and their squares, kept on the device (no sync) in
        # float64: the variance is a difference of two sums over up to thousands of steps (MPS has no float64).
        self.hgrad_moments = torch.zeros(2, NUM_HPARAMS, device=self.device,
                                         dtype=torch.float32 if self.device.type == "mps" else torch.float64)
        self.hgrad_steps = 0

    # -- set-up -----------------------------------------------------------------------------------
    def _place_data(self, train: Any, val: Any) -> None:
        """Check the images, move them to the device and compute the standardisation."""
        dev = self.device
        self.train_x = train.images.to(dev)
        self.train_y = train.labels.to(dev)
        self.val_x = val.images.to(dev)
        self.val_y = val.labels.to(dev)
        if self.train_x.dtype != torch.uint8 or self.val_x.dtype != torch.uint8:
            raise ValueError("training and validation images must be uint8 tensors (N, C, H, W)")
        self.n_train, self.n_val = len(self.train_y), len(self.val_y)
        if self.n_train < 2 or self.n_val < 2:
            raise ValueError(f"need at least 2 training and 2 validation images, got {self.n_train} and {self.n_val}")
        self._describe_data(train, val)  # standardised as the (reduced) training split

    def _plan_batches(self) -> None:
        cfg, world = self.config, self.dist.world_size
        b = cfg.batch_size
        self.val_batch = min(b, self.n_val)
        if world > 1 and min(b, self.val_batch) < 2 * world:
            raise ValueError(f"batches of {min(b, self.val_batch)} images are too small for {world} processes: each "
                             f"needs at least 2 images of every batch (batch norm); use a batch size and a "
                             f"validation set of at least {2 * world} images")
        self.steps_per_epoch = math.ceil(self.n_train / b)
        if world > 1 and 0 < self.n_train % b < 2 * world:
            # A trailing batch that would leave a rank fewer than 2 images is dropped.
            self.steps_per_epoch -= 1
        self.outer_per_epoch = math.ceil(self.steps_per_epoch / cfg.t_train)
        self.ticks_per_epoch = self.outer_per_epoch  # the progress bar counts iterations

    def _build_model(self) -> None:
        """The hypernetwork, lambda and their optimisers (the same initial values on every rank)."""
        cfg, dev = self.config, self.device
        # Model initialisation from the seed without disturbing the caller's global RNG.
        # (Models are built on the CPU, so only the CPU generator is seeded, and restored afterwards.)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(cfg.seed)
            model = create_model(cfg.model, self.num_classes)
            self.hm: HyperModel = hyperize(model, NUM_HPARAMS, cfg.strategy, inplace=True)
        self.channels_last = dev.type == "cpu" if cfg.channels_last is None else bool(cfg.channels_last)
        self.hm.to(dev).train()
        if self.channels_last:
            self.hm.to(memory_format=torch.channels_last)
        self.hparams = init_hparams(cfg.init, device=dev).requires_grad_(True)
        self.hparams_start = self.hparams.detach().clone()  # what --prior-decay pulls back to
        # Read with the start: a schedule file's hash is among the settings a resume must match.
        self.init_source = init_provenance(cfg.init)
        # --hparam-accumulate: the sum of the gradients since lambda's last step, and their number.
        self.hgrad_pending = torch.zeros_like(self.hparams_start)
        self.hgrad_pending_steps = 0
        # objective "teacher": an exponential moving average of the network, never trained by gradients.
        self.teacher: HyperModel | None = None
        if cfg.objective == "teacher":
            self.teacher = copy.deepcopy(self.hm).requires_grad_(False)
        self.hopt = torch.optim.Adam([self.hparams], lr=cfg.hparam_lr)
        # DDP all-reduces the weights' gradients of the training steps; lambda's (validation steps) are
        # all-reduced by hand. self.hm stays the plain network (validation steps, checkpoints).
        self.net, self.opt = self._trainable(self.hm)

    def _build_streams(self) -> None:
        """The random streams: the data order (and the validation stream) is shared by the ranks; noise
        and augmentation draws are each rank's own (rank 0 keeps the single-process seeds)."""
        seed, dev, rank = self.config.seed, self.device, self.dist.rank
        self.g_data = torch.Generator().manual_seed(seed * 4 + 1)  # data order: CPU, device independent
        self.g_noise = torch.Generator(device=dev).manual_seed(_distributed.rank_seed(seed * 4 + 2, rank))
        self.g_aug = torch.Generator(device=dev).manual_seed(_distributed.rank_seed(seed * 4 + 3, rank))
        self.val_stream = _ValStream(self.n_val, self.val_batch, self.g_data)

    # -- data -------------------------------------------------------------------------------------
    def _layout(self, x: Tensor) -> Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    # -- steps ------------------------------------------------------------------------------------
    def _needs_applied(self) -> bool:
        """Whether a training step needs what each image applied (``functional.augment``'s ``return_applied``)."""
        cfg = self.config
        return cfg.hyper_input == "applied" or (self.teacher is not None and cfg.teacher_estimator == "applied")

    def _augment(self, x: Tensor, prob: Tensor, mag: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """A training batch through ``functional.augment`` with its per-image policies; with ``cuda_graphs``,
        full batches replay one captured CUDA graph of the call (:class:`~hba_augment._graphs.CapturedCall`)."""
        if self.augment_call is None:
            cfg, applied = self.config, self._needs_applied()
            # The policies are valid by construction; on a GPU, checking them would wait for the device every
            # step (a NaN lambda is caught at the end of the epoch instead, as a non-finite loss or lambda).
            options = {"generator": self.g_aug, "check_policy": self.device.type == "cpu", "return_applied": applied,
                       "compile": cfg.compile}

            def call(x: Tensor, prob: Tensor, mag: Tensor) -> Tensor | tuple[Tensor, Tensor]:
                return functional.augment(x, prob, mag, cfg.count_probs, **options)

            self.augment_call = CapturedCall(call, self.device, (self.g_aug,)) if cfg.cuda_graphs else call
        return self.augment_call(x, prob, mag)

    def train_step(self, idx: Tensor, acc: dict[str, Tensor]) -> None:
        cfg = self.config
        global_size = len(idx)
        idx = _distributed.shard(idx, self.dist).to(self.device, non_blocking=True)
        x, y = self.train_x[idx], self.train_y[idx]
        n = x.shape[0]
        eps = torch.randn(n, NUM_HPARAMS, generator=self.g_noise, device=self.device)
        lam = self.hparams.detach() + cfg.sigma * eps
        prob, mag = hparams_to_policy(lam)
        applied = None
        if self._needs_applied():
            x, applied = self._augment(x, prob, mag)
        else:
            x = self._augment(x, prob, mag)
        condition = applied_input(applied, lam) if cfg.hyper_input == "applied" else lam
        x = baseline_augment(self.normalise(x), flip=cfg.flip, crop_padding=cfg.crop_padding, cutout=cfg.cutout,
                             generator=self.g_aug)
        lr = lr_at(cfg, self.step, self.steps_per_epoch)
        for group in self.opt.param_groups:
            group["lr"] = lr
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cfg.amp):
            logits = self.net(self._layout(x), condition)
        logits = logits.float()
        if self.teacher is not None:
            self._teacher_step(x, condition, logits, y, eps, applied, global_size)
        if self.dist.distributed:
            # DDP averages the ranks' gradients; scaling each shard's summed loss by world / global size
            # makes that average the gradient of the global batch's mean loss, shards of unequal size included.
            loss_sum = F.cross_entropy(logits, y, reduction="sum")
            loss = loss_sum * (self.dist.world_size / global_size)
        else:
            loss = F.cross_entropy(logits, y)
            loss_sum = loss * n
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if self.teacher is not None:
            with torch.no_grad():
                teacher, student = list(self.teacher.parameters()), list(self.hm.parameters())
                torch._foreach_lerp_(teacher, student, 1.0 - self.config.teacher_decay)
        self.step += 1
        with torch.no_grad():
            acc["train_loss"] += loss_sum.detach()
            acc["train_correct"] += (logits.argmax(1) == y).sum()
            acc["train_n"] += n

    def _teacher_step(self, x: Tensor, condition: Tensor, logits: Tensor, y: Tensor, eps: Tensor,
                      applied: Tensor | None, global_size: int) -> None:
        """Objective ``"teacher"``: step ``lambda`` up an estimate of the gradient of the mean score
        ``CE(network) - CE(teacher)`` over this batch's augmented images (see SearchConfig)."""
        with torch.no_grad():
            with _frozen_bn_statistics(self.teacher), torch.autocast(self.device.type, dtype=torch.bfloat16,
                                                                      enabled=self.config.amp):
                teacher_logits = self.teacher(self._layout(x), condition)
            score = (F.cross_entropy(logits.detach(), y, reduction="none")
                     - self.config.teacher_weight * F.cross_entropy(teacher_logits.float(), y, reduction="none"))
            # The batch's mean score as the baseline (it lowers the variance; each rank uses its own shard's).
            weights = (score - score.mean()).to(eps.dtype)
            if applied is None:  # "es": every image's perturbation of every hyperparameter
                ascent = weights @ eps / (global_size * self.config.sigma)
            else:
                ascent = self._applied_ascent(weights, eps, applied, global_size)
        _distributed.all_reduce_sum([ascent], self.dist)
        grad = -ascent.to(self.hparams.dtype)  # Adam descends
        self._hparam_step(grad)
        self._record_hypergradient(grad)

    def _applied_ascent(self, weights: Tensor, eps: Tensor, applied: Tensor, global_size: int) -> Tensor:
        """Estimator ``"applied"``: what each image's score says about the slots it applied.

        A probability's entry is the covariance of the score with applying that slot (images that applied it
        scoring above the batch's mean push it up), as REINFORCE's gradient for an independent coin would be.
        A magnitude's entry is the evolution-strategies term restricted to the images that applied its slot:
        the perturbation of a magnitude that an image never used is pure noise in the plain estimate (with
        about one op per image, 29 of the 30 slots' terms), and dropping those zero-mean terms leaves the
        estimate unbiased.
        """
        a = applied.reshape(applied.shape[0], -1).to(weights.dtype)  # (n, 30), in lambda's probability order
        prob_part = weights @ (a - a.mean(0)) / global_size
        # A cached device index: a Python list would be copied to the device on every step.
        used = applied.index_select(2, _magnitude_index(applied.device)).reshape(applied.shape[0], -1)
        used = used.to(weights.dtype)  # (n, 24)
        mag_part = weights @ (used * eps[:, NUM_PROB_HPARAMS:]) / (global_size * self.config.sigma)
        return torch.cat([prob_part, mag_part])

    def _record_hypergradient(self, grad: Tensor) -> None:
        """Add one gradient of ``lambda`` to the epoch's consistency statistics."""
        with torch.no_grad():
            g = grad.to(self.hgrad_moments.dtype)
            self.hgrad_moments[0] += g
            self.hgrad_moments[1] += g * g
            self.hgrad_steps += 1

    def val_step(self, acc: dict[str, Tensor]) -> None:
        idx = self.val_stream.next()
        global_size = len(idx)
        idx = _distributed.shard(idx, self.dist).to(self.device, non_blocking=True)
        x, y = self._layout(self.normalise(self.val_x[idx])), self.val_y[idx]
        running = self.config.val_bn == "running"
        if self.config.hyper_input == "applied":
            condition = expected_applied_input(self.hparams, self.config.count_probs)
        else:
            condition = self.hparams
        if running:
            self.hm.eval()
        try:
            with _frozen_bn_statistics(self.hm), torch.autocast(self.device.type, dtype=torch.bfloat16,
                                                                enabled=self.config.amp):
                logits = self.hm(x, condition)
        finally:
            if running:
                self.hm.train()
        logits = logits.float()
        if self.dist.distributed:
            # Each rank's loss is its shard's part of the global batch's mean loss, so the sum of the ranks'
            # gradients is the global batch's: the same lambda step on every rank.
            loss_sum = F.cross_entropy(logits, y, reduction="sum")
            loss = loss_sum / global_size
        else:
            loss = F.cross_entropy(logits, y)
            loss_sum = loss * len(y)
        # Only d loss / d lambda: autograd skips every weight gradient.
        (grad,) = torch.autograd.grad(loss, [self.hparams])
        _distributed.all_reduce_sum([grad], self.dist)
        self._hparam_step(grad)
        self._record_hypergradient(grad)
        with torch.no_grad():
            acc["val_loss"] += loss_sum.detach()
            acc["val_correct"] += (logits.argmax(1) == y).sum()
            acc["val_n"] += len(y)

    def _hparam_step(self, grad: Tensor) -> None:
        """Step ``lambda`` with ``grad`` (every ``hparam_accumulate`` calls, with their mean), then pull it
        towards its start by ``hparam_lr * prior_decay`` of the distance."""
        cfg = self.config
        if cfg.hparam_accumulate > 1:
            self.hgrad_pending += grad
            self.hgrad_pending_steps += 1
            if self.hgrad_pending_steps < cfg.hparam_accumulate:
                return
            grad = self.hgrad_pending / self.hgrad_pending_steps
        self.hparams.grad = grad
        self.hopt.step()
        self.hparams.grad = None
        if cfg.hparam_accumulate > 1:
            self.hgrad_pending.zero_()
            self.hgrad_pending_steps = 0
        if cfg.prior_decay:
            with torch.no_grad():
                self.hparams.sub_(self.hparams - self.hparams_start, alpha=cfg.hparam_lr * cfg.prior_decay)

    def run_epoch(self) -> dict[str, Any]:
        start = time.perf_counter()
        sums = self._run_iterations()
        totals = self._epoch_totals(sums)
        with torch.no_grad():
            prob, mag = hparams_to_policy(self.hparams.detach().cpu().double())
        self.prob_history.append(prob)
        self.mag_history.append(mag)
        self.epoch += 1
        agreement = self._check_ranks_agree()
        return {**self._epoch_metrics(totals, prob, mag, time.perf_counter() - start), **agreement}

    def _run_iterations(self) -> dict[str, Tensor]:
        """One pass over the training split; returns the (device) sums of losses, hits and images."""
        cfg = self.config
        sums = {k: torch.zeros((), device=self.device)
                for k in ("train_loss", "train_correct", "train_n", "val_loss", "val_correct", "val_n")}
        self.hgrad_moments.zero_()
        self.hgrad_steps = 0
        perm = torch.randperm(self.n_train, generator=self.g_data)
        batches = list(perm.split(cfg.batch_size))[: self.steps_per_epoch]
        try:
            for o in range(self.outer_per_epoch):
                for idx in batches[o * cfg.t_train : (o + 1) * cfg.t_train]:
                    self.train_step(idx, sums)
                # The teacher objective steps lambda in the training steps: no validation steps.
                for _ in range(cfg.t_val if self.teacher is None else 0):
                    self.val_step(sums)
                if self.on_iteration is not None:
                    self.on_iteration()
        except ValueError as e:
            # A NaN lambda makes the policy invalid, and augment() rejects it.
            if not bool(torch.isfinite(self.hparams).all()):
                raise self._diverged("lambda") from e
            raise
        return sums

    def _epoch_totals(self, sums: dict[str, Tensor]) -> dict[str, float]:
        """The sums over all ranks as numbers; ``SearchDivergedError`` if a loss or lambda is not finite."""
        _distributed.all_reduce_sum(list(sums.values()), self.dist)
        # Rank 0's running statistics for every rank: the checkpoint describes the model all ranks hold.
        _distributed.broadcast_buffers(self.hm, self.dist)
        m = {k: float(v) for k, v in sums.items()}
        train_loss = m["train_loss"] / m["train_n"]
        val_loss = m["val_loss"] / m["val_n"] if m["val_n"] else math.nan
        if not math.isfinite(train_loss):
            raise self._diverged("training loss", train_loss)
        if m["val_n"] and not math.isfinite(val_loss):
            raise self._diverged("validation loss", val_loss)
        if not bool(torch.isfinite(self.hparams).all()):
            raise self._diverged("lambda")
        return m

    def _epoch_metrics(self, m: dict[str, float], prob: Tensor, mag: Tensor, seconds: float) -> dict[str, Any]:
        """The epoch's line of ``metrics.jsonl`` (after ``self.epoch`` was counted)."""
        cfg = self.config
        lo = torch.tensor([OPS[k].low for k in MAGNITUDE_OPS], dtype=torch.float64)
        hi = torch.tensor([OPS[k].high for k in MAGNITUDE_OPS], dtype=torch.float64)
        frac = (mag[:, list(MAGNITUDE_OPS)] - lo) / (hi - lo)
        lam = self.hparams.detach().cpu().double()
        t_abs, t_frac = hypergradient_consistency(self.hgrad_moments, self.hgrad_steps)
        return {
            "epoch": self.epoch - 1,
            "train_loss": m["train_loss"] / m["train_n"],
            "train_acc": m["train_correct"] / m["train_n"],
            "val_loss": m["val_loss"] / m["val_n"] if m["val_n"] else math.nan,
            "val_acc": m["val_correct"] / m["val_n"] if m["val_n"] else math.nan,
            "lr": lr_at(cfg, self.step - 1, self.steps_per_epoch),
            "hparam_lr": cfg.hparam_lr,
            "mean_prob": float(prob.mean()),
            "max_prob": float(prob.max()),
            "mean_mag_fraction": float(frac.mean()),
            "lambda_mean_prob_logit": float(lam[:NUM_PROB_HPARAMS].mean()),
            "lambda_mean_mag_logit": float(lam[NUM_PROB_HPARAMS:].mean()),
            # How far the search has gone from where it started (root mean square over the 54 logits).
            "lambda_rms_from_start": float((lam - self.hparams_start.cpu().double()).square().mean().sqrt()),
            "hypergrad_abs_t_mean": t_abs,
            "hypergrad_t_over_2_fraction": t_frac,
            # Per hyperparameter: lets an analysis pool epochs, where a small steady push adds up.
            "hypergrad_mean": (self.hgrad_moments[0].double().cpu() / max(self.hgrad_steps, 1)).tolist(),
            "train_steps": self.step,
            "epoch_seconds": seconds,
            "train_images_per_second": m["train_n"] / seconds,
            "wall_seconds": self.wall_seconds + seconds,
        }

    def _check_ranks_agree(self) -> dict[str, Any]:
        """With several processes: a hash of lambda, the weights and the buffers from every rank, which
        must be equal (the all-reduced steps keep them so bit for bit); ``{}`` with one process."""
        if not self.dist.distributed:
            return {}
        mine = _runner.fingerprint(self.hparams, *self.hm.state_dict().values())
        hashes = _distributed.all_gather_objects(mine, self.dist)
        if len(set(hashes)) != 1:
            raise _distributed.DistributedError(
                f"the ranks' hypernetworks differ after epoch {self.epoch} (hashes {hashes}); the search stops")
        return {"processes": self.dist.world_size, "rank_hashes": hashes}

    on_iteration: Callable[[], None] | None = None

    def set_tick(self, tick: _runner.Tick | None) -> None:
        """The run driver's per-iteration callback (the progress bar), or ``None`` for none."""
        self.on_iteration = tick

    def _diverged(self, what: str, value: float | None = None) -> SearchDivergedError:
        shown = "" if value is None else f" ({value})"
        kept = (f"The last good checkpoint holds {self.epoch} epoch(s)." if self.epoch
                else "No checkpoint was written.")
        lr = lr_at(self.config, max(self.step - 1, 0), self.steps_per_epoch)
        return SearchDivergedError(
            f"search diverged: non-finite {what}{shown} in epoch {self.epoch} (SGD lr {lr:.4g}, "
            f"hparam lr {self.config.hparam_lr:g}); no schedule was written. Try a smaller --lr or "
            f"--hparam-lr. {kept}"
        )

    # -- schedule ---------------------------------------------------------------------------------
    def schedule(self, command: str | None) -> Schedule:
        cfg = self.config
        provenance = {
            "dataset": cfg.dataset,
            "data_source": self.data_source,
            "train_images": self.n_train,
            "val_images": self.n_val,
            "classes": self.num_classes,
            "image_size": list(self.train_x.shape[-2:]),
            "model": cfg.model,
            "strategy": cfg.strategy,
            "search_epochs": self.epoch,
            "seed": cfg.seed,
            "wall_seconds": round(self.wall_seconds, 1),
            "device": describe_device(self.device),
            "package_version": __version__,
            "git_commit": self.commit,
            "command": command,
            **training_provenance(cfg),
            "hparam_lr": cfg.hparam_lr,
            "sigma": cfg.sigma,
            "t_train": cfg.t_train,
            "t_val": cfg.t_val,
            "val_bn": cfg.val_bn,
            **self.init_source,
            "prior_decay": cfg.prior_decay,
            "hparam_accumulate": cfg.hparam_accumulate,
            "objective": cfg.objective,
            **({"teacher_decay": cfg.teacher_decay, "teacher_estimator": cfg.teacher_estimator,
                "teacher_weight": cfg.teacher_weight} if cfg.objective == "teacher" else {}),
            "hyper_input": cfg.hyper_input,
            "channels_last": self.channels_last,
            "amp": cfg.amp,
            "compile": cfg.compile,
            "baseline": {"flip": cfg.flip, "crop_padding": cfg.crop_padding, "cutout": cfg.cutout},
            "sessions": self.sessions,
            **({"processes": self.dist.world_size} if self.dist.distributed else {}),
            "final_val_loss": self.records[-1]["val_loss"] if self.records else None,
            "final_val_acc": self.records[-1]["val_acc"] if self.records else None,
        }
        provenance = finite_provenance(provenance)
        return Schedule(torch.stack(self.prob_history), torch.stack(self.mag_history), name=cfg.name,
                        count_probs=cfg.count_probs, provenance=provenance)

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The search's state; with several processes it holds every rank's random streams (a collective)."""
        return _runner.checkpoint_state(
            self, _CHECKPOINT_FORMAT, _CHECKPOINT_VERSION, config=self._settings(),
            **_runner.rank_rng_state(self.device, self._generators(), self.dist),
            model=self.hm.state_dict(),
            optimizer=self.opt.state_dict(),
            hparam_optimizer=self.hopt.state_dict(),
            hparams=self.hparams.detach().cpu().clone(),
            **({"teacher": self.teacher.state_dict()} if self.teacher is not None else {}),
            hgrad_pending=self.hgrad_pending.cpu().clone(),
            hgrad_pending_steps=self.hgrad_pending_steps,
            val_stream={"perm": self.val_stream.perm.clone(), "pos": self.val_stream.pos},
            prob_history=[t.clone() for t in self.prob_history],
            mag_history=[t.clone() for t in self.mag_history],
            metrics=json.loads(json.dumps(self.records)),
        )

    def _settings(self) -> dict[str, Any]:
        """What a checkpoint's resume must match: the config, and an ``init`` schedule file's hash as it was
        read when this session built ``lambda``'s start (an edited file does not resume)."""
        return {**self.config.to_dict(), **self.init_source}

    def _generators(self) -> dict[str, torch.Generator]:
        return {"data": self.g_data, "noise": self.g_noise, "augment": self.g_aug}

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        _runner.check_checkpoint(
            state, path, format=_CHECKPOINT_FORMAT, version=_CHECKPOINT_VERSION, kind="HBA search",
            config=self._settings(), resume_free=_RESUME_FREE, data_fingerprint=self.fingerprint,
            settings="the search settings", device=self.device, added_fields=_ADDED_FIELDS,
            data_mismatch="the training/validation images differ from the checkpoint's (different data files?)",
        )
        self.hm.load_state_dict(state["model"])
        if self.teacher is not None:
            self.teacher.load_state_dict(state["teacher"])
        self.opt.load_state_dict(state["optimizer"])
        self.hopt.load_state_dict(state["hparam_optimizer"])
        with torch.no_grad():
            self.hparams.copy_(state["hparams"].to(self.device))
        # Adam's state must refer to the live hparams tensor (load_state_dict maps it by position).
        if "hgrad_pending" in state:  # checkpoints from before --hparam-accumulate had none pending
            self.hgrad_pending.copy_(state["hgrad_pending"].to(self.device))
            self.hgrad_pending_steps = int(state["hgrad_pending_steps"])
        _runner.restore_rank_rng(state, path, "a search", self.device, self._generators(), self.dist)
        self.val_stream.perm = state["val_stream"]["perm"]
        self.val_stream.pos = int(state["val_stream"]["pos"])
        _runner.restore_counters(self, state)
        self.prob_history = list(state["prob_history"])
        self.mag_history = list(state["mag_history"])
        self.records = list(state["metrics"])


def run_search(
    config: SearchConfig,
    out_dir: str | os.PathLike[str],
    *,
    resume: bool = False,
    data: tuple[Any, Any] | None = None,
    command: str | None = None,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
    plot: bool = True,
) -> SearchResult:
    """Run (or resume) a search and write its files into ``out_dir``.

    Files: ``schedule.json`` (the :class:`~hba_augment.schedule.Schedule`, written once at the end),
    ``metrics.jsonl`` (one JSON object per epoch), ``schedule.png`` (plot, at the end) and
    ``checkpoint.pt`` (after every epoch, atomically).

    Args:
        config: the search settings (validated here).
        out_dir: output folder (created if missing).
        resume: continue from ``out_dir/checkpoint.pt`` if it exists (else start afresh). Without it, a
            folder that already holds a checkpoint or a schedule is refused.
        data: ``(train, val)`` :class:`~hba_augment.datasets.ImageData` to use instead of loading
            ``config.dataset`` (the provenance then names the data as given by the caller).
        command: the command line recorded in the provenance (``None``: ``sys.argv``).
        progress: show a tqdm bar (``None``: only when stderr is a terminal).
        log: receives one line per epoch and status messages (default: print to stderr).
        on_epoch_end: called with each epoch's metrics after its checkpoint is written.
        plot: write ``schedule.png`` at the end. Without matplotlib (an optional dependency, the
            ``search`` extra) the plot is skipped with a warning given before the first epoch; the
            other files are written as usual.

    Returns:
        :class:`SearchResult`.

    Raises:
        ValueError: bad settings, data that does not fit, or an incompatible checkpoint.
        SearchDivergedError: a NaN/inf loss or ``lambda``; no schedule is written.
    """
    notes: list[str] = []
    if plot:
        from hba_augment.search.plot import missing_plot_dependency

        # Checked before any work: a search of hours must not end in an ImportError.
        missing = missing_plot_dependency()
        if missing is not None:
            notes.append(f"warning: {missing}; {PLOT_FILE} will not be written "
                         f"({_cli_common.option('plot', False)} silences this)")
            plot = False

    def introduce(search: _Search) -> str:
        # One iteration = t_train SGD steps then t_val hyperparameter steps; the metrics count the SGD steps.
        return (f"search: {config.model} ({config.strategy}) on {search.n_train} train / {search.n_val} val images, "
                f"{_runner.plural(config.epochs, 'epoch')} x {_runner.plural(search.steps_per_epoch, 'SGD step')} "
                + (f"({_runner.plural(search.outer_per_epoch, 'iteration')} of "
                   f"{_runner.plural(config.t_train, 'SGD step')} + {_runner.plural(config.t_val, 'hyperparameter step')})"
                   if config.objective == "hypernetwork" else "(objective teacher: a step of lambda in every SGD step)")
                + f", device {describe_device(search.device)}"
                + (f" x {search.dist.world_size} processes (DDP)" if search.dist.distributed else ""))

    def report(metrics: dict[str, Any], remaining: float) -> tuple[str, dict[str, str]]:
        val = (f" | val loss {metrics['val_loss']:.4f} acc {metrics['val_acc']:.3f}"
               if math.isfinite(metrics["val_loss"]) else "")  # the teacher objective has no validation steps
        line = (f"epoch {metrics['epoch'] + 1}/{config.epochs}: train loss {metrics['train_loss']:.4f} "
                f"acc {metrics['train_acc']:.3f}{val} "
                f"| lr {metrics['lr']:.4g} | mean p {metrics['mean_prob']:.3f} | "
                f"{metrics['epoch_seconds']:.1f} s/epoch, ETA {remaining / 60:.1f} min")
        return line, {"loss": f"{metrics['train_loss']:.3f}", "val": f"{metrics['val_loss']:.3f}"}

    search, out, files, command, log = _runner.drive(
        config, out_dir, lambda train, val, log: _Search(config, train, val, log), what="search",
        file_names={"schedule": SCHEDULE_FILE, "metrics": METRICS_FILE, "plot": PLOT_FILE, "checkpoint": CHECKPOINT_FILE},
        guarded=("schedule", "checkpoint"), records_file="metrics",
        load=(lambda: load_search_data(config)) if data is None else (lambda: (*data, "in-memory data passed to run_search")),
        introduce=introduce, report=report, seconds_key="epoch_seconds", desc="search", unit="it", resume=resume,
        command=command, progress=progress, log=log, on_epoch_end=on_epoch_end, notes=notes,
    )
    schedule = search.schedule(command)
    if search.dist.is_main:  # every rank holds the same schedule; one writes it
        schedule.save(files["schedule"])
        _runner.write_jsonl(files["metrics"], search.records)
        if plot:
            from hba_augment.search.plot import plot_schedule

            try:
                plot_schedule(schedule, files["plot"])
            except ImportError as e:  # a broken matplotlib install: the schedule is written, keep it
                log(f"warning: could not write {files['plot']} ({e}); the schedule is in {files['schedule']}")
                plot = False
    # Every rank returns once the files are on disk.
    _distributed.barrier(search.dist)
    if not plot:
        files.pop("plot")
    log(f"wrote {files['schedule']} ({_runner.plural(schedule.epochs, 'entry', 'entries')}, "
        f"{search.wall_seconds:.0f} s)")
    return SearchResult(schedule=schedule, metrics=list(search.records), out_dir=out, files=files)
