"""The members of a population search: plain networks, each trained with its own constant HBA policy.

A :class:`Worker` holds the images on its device and some members; the driver
(:mod:`~hba_augment.search.population`) runs one per process (``serve``) or one in its own process
(``population_procs=0``). Per round it is told, for each of its members, which file to copy weights and
optimiser state from (an exploit, or a resume), which policy to train with and for how many epochs; it
trains, tests on the clean validation images, writes each member's state file and returns plain numbers.

Everything random in a member comes from its own generators, seeded from ``(seed, member)`` and saved in
its state file, so a search does not depend on how members are spread over processes. A member's
training steps are the search's (:mod:`~hba_augment.search.loop`) without hyper-layers: its policy on
uint8 images on the device (:func:`hba_augment.functional.augment`), then standardisation, flip, crop and
Cutout, SGD with Nesterov momentum at the search's learning-rate schedule. Within a round the host waits
for the device twice: at the first step, where ``augment`` checks the round's new policy (once: checked
policies are remembered), and at the end (losses and hits are summed on the device).

With the search's ``cuda_graphs`` a member's full batches replay one captured CUDA graph of its whole step
(:class:`~hba_augment._runner.CapturedStep`, as ``hba-augment train --cuda-graphs``): its policy then lives
in static tensors that each round overwrites (unchecked: explore keeps every value in its range), its SGD is
the fused kernel at a rate held in a device tensor, and a copy of another member's weights and momentum
(an exploit) is followed by a new capture.

With ``score_ema`` a member also keeps an exponential moving average of its weights
(:class:`~hba_augment._runner.WeightEMA`, updated after every step, inside the captured graph where there is
one), which is what its round is scored on; an exploit copies the donor's average with its weights.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import queue
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from hba_augment import _lanes, _runner, functional
from hba_augment._space import NUM_COPIES, NUM_OPS
from hba_augment.models import create_model

__all__ = ["FusedWorker", "Worker", "member_seed", "serve"]

# How often an idle worker process checks that its driver is still there.
_PARENT_CHECK_SECONDS = 5.0


def member_seed(seed: int, member: int, stream: int) -> int:
    """A 63-bit seed for one random stream of one member (independent of the other members' seeds)."""
    return int(np.random.SeedSequence([seed, member, stream]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def _sgd(model: torch.nn.Module, config: Any) -> torch.optim.SGD:
    """A member's optimiser: the search's SGD (rate, momentum, Nesterov, weight decay) over ``model``."""
    return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum, nesterov=config.nesterov,
                           weight_decay=config.wd)


class _Member:
    """One network, its SGD and its random streams, trained with one policy at a time."""

    def __init__(self, index: int, worker: Worker) -> None:
        cfg, dev = worker.config, worker.device
        self.index, self.worker = index, worker
        # Each member its own initialisation, as PBT's trials (the caller's global RNG is left alone).
        with _lanes.GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(member_seed(cfg.seed, index, 0))
            self.model = create_model(cfg.model, worker.num_classes)
        self.model.to(dev).train()
        if worker.channels_last:
            self.model.to(memory_format=torch.channels_last)
        self.g_data = torch.Generator().manual_seed(member_seed(cfg.seed, index, 1))
        self.g_aug = torch.Generator(device=dev).manual_seed(member_seed(cfg.seed, index, 2))
        self.ema = _runner.WeightEMA(self.model, worker.score_ema) if worker.score_ema is not None else None
        self.step = 0
        self.epoch = 0
        self.prob: Tensor | None = None
        self.mag: Tensor | None = None
        # A round's summed training loss, correct count and images, added to on the device by every step.
        self.sums = torch.zeros(3, dtype=torch.float64, device=dev)
        self.captured: _runner.CapturedStep | None = None
        self.lr_tensor: Tensor | None = None  # cuda_graphs: the rate the captured optimiser step reads
        if not worker.cuda_graphs:
            self.opt = _sgd(self.model, cfg)
            return
        self.opt, self.lr_tensor = _runner.graph_optimizer(self.model, cfg, dev)
        self.prob = torch.zeros((NUM_COPIES, NUM_OPS), dtype=torch.float32, device=dev)
        self.mag = torch.zeros((NUM_COPIES, NUM_OPS), dtype=torch.float32, device=dev)
        self.captured = _runner.CapturedStep(lambda x, y: self._step(x, y, None),
                                             (cfg.batch_size, *worker.train_x.shape[1:]), dev, [self.g_aug])

    def set_policy(self, prob: np.ndarray, mag: np.ndarray) -> None:
        dev = self.worker.device
        prob_t = torch.as_tensor(np.asarray(prob), dtype=torch.float32).to(dev)
        mag_t = torch.as_tensor(np.asarray(mag), dtype=torch.float32).to(dev)
        if self.captured is not None:  # the graph reads these tensors: overwrite them
            self.prob.copy_(prob_t)
            self.mag.copy_(mag_t)
            return
        # New tensors once per round: augment() caches its checks and warp maps per policy tensor.
        self.prob, self.mag = prob_t, mag_t

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        ema = {} if self.ema is None else {"ema": self.ema.state_dict()}
        return {
            "model": self.model.state_dict(),
            **ema,
            "optimizer": _runner.optimizer_state(self.opt),
            "g_data": self.g_data.get_state(),
            "g_aug": self.g_aug.get_state(),
            "step": self.step,
            "epoch": self.epoch,
        }

    def load(self, weights: Path | None, streams: Path | None) -> None:
        """Take the weights and optimiser state of ``weights`` (another member's file: an exploit) and the
        random streams and counters of ``streams`` (this member's own file: a resume)."""
        dev = self.worker.device
        if weights is not None:
            state = torch.load(weights, map_location=dev, weights_only=True)
            self.model.load_state_dict(state["model"])
            if self.ema is not None:
                self.ema.load_state_dict(state["ema"])
            _runner.load_optimizer_state(self.opt, state["optimizer"], self.lr_tensor, self.captured)
        if streams is not None:
            state = torch.load(streams, map_location="cpu", weights_only=True)
            self.g_data.set_state(state["g_data"])
            self.g_aug.set_state(state["g_aug"])
            self.step, self.epoch = int(state["step"]), int(state["epoch"])

    def save(self, path: Path) -> None:
        _runner.save_checkpoint(self.state_dict(), path)

    # -- training ---------------------------------------------------------------------------------
    def _step(self, x: Tensor, y: Tensor, lr: float | None) -> None:
        """One SGD step on uint8 images ``x`` and labels ``y`` at rate ``lr`` (``None``: the optimiser's own,
        the device tensor of ``cuda_graphs``); its sums are added to ``self.sums``."""
        w, cfg, dev = self.worker, self.worker.config, self.worker.device
        # Checked unless captured (one wait for the device per round, at its first step): a checked policy
        # tensor is remembered with its warp maps and tables, which an unchecked one would rebuild every step.
        x = w.augment(x, self.prob, self.mag, self.g_aug, check_policy=self.captured is None)
        if lr is not None:
            for group in self.opt.param_groups:
                group["lr"] = lr
        # Captured: no autocast cache, which would replay casts of stale weights.
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.amp, cache_enabled=self.captured is None):
            logits = self.model(w.layout(x))
        logits = logits.float()
        loss = F.cross_entropy(logits, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if self.ema is not None:
            self.ema.update()
        with torch.no_grad():
            self.sums[0] += loss.detach() * len(y)
            self.sums[1] += (logits.argmax(1) == y).sum()
            self.sums[2] += len(y)

    def train_epochs(self, epochs: int) -> dict[str, Tensor]:
        """``epochs`` passes over the training images; the sums stay on the device."""
        w, cfg, dev = self.worker, self.worker.config, self.worker.device
        self.sums.zero_()
        for _ in range(epochs):
            # One copy to the device per epoch, not one per step (the order stays the CPU generator's, so a
            # member's data order does not depend on the device).
            perm = torch.randperm(w.n_train, generator=self.g_data).to(dev)
            for idx in perm.split(cfg.batch_size):
                x, y = w.train_x[idx], w.train_y[idx]
                lr = _runner.lr_at(cfg, self.step, w.steps_per_epoch)
                if self.captured is None:
                    self._step(x, y, lr)
                else:
                    self.lr_tensor.fill_(lr)
                    self.captured(x, y)  # a short last batch runs eagerly there
                self.step += 1
            self.epoch += 1
        return {"loss": self.sums[0], "correct": self.sums[1], "n": self.sums[2]}

    def evaluate(self) -> tuple[float, float]:
        """Loss and accuracy on the clean validation images (eval mode: the running statistics) of the network,
        or of its weights' average with ``score_ema``, read on the host: once per round."""
        w = self.worker
        model = self.model if self.ema is None else self.ema.module
        loss, error = _runner.evaluate_model(model, w.val_x, w.val_y, w.normalise, channels_last=w.channels_last,
                                             amp=w.config.amp)
        return loss, 1.0 - error / 100.0


class Worker:
    """The images on one device and the members this process trains.

    Args:
        config: the search's :class:`~hba_augment.search.config.SearchConfig` (model, optimiser, schedule,
            baseline augmentation, ``count_probs``, ``amp``, ``channels_last``, ``cuda_graphs``, ``seed``,
            ``device``).
        train, val: :class:`~hba_augment.datasets.ImageData` (uint8), the search's split.
        members: the indices of the members it holds.
        score_ema: score each member on an exponential moving average of its weights with this decay per
            step (``None``: on its weights; see the module docstring).
        lanes: members trained at the same time, each in a lane (:func:`hba_augment._lanes.side_by_side`).
    """

    def __init__(self, config: Any, train: Any, val: Any, members: list[int], score_ema: float | None = None,
                 lanes: int = 1) -> None:
        self.config = config
        self.lanes = lanes
        self.cuda_graphs = config.cuda_graphs
        self.score_ema = score_ema
        self.device = dev = torch.device(config.device)
        self.num_classes = len(train.classes)
        self.train_x, self.train_y = train.images.to(dev), train.labels.to(dev)
        self.val_x, self.val_y = val.images.to(dev), val.labels.to(dev)
        self.n_train = len(self.train_y)
        self.normalise = _runner.standardisation(train.images, dev)
        self.steps_per_epoch = math.ceil(self.n_train / config.batch_size)
        self.channels_last = dev.type == "cpu" if config.channels_last is None else bool(config.channels_last)
        self.members = {m: _Member(m, self) for m in members}

    def augment(self, x: Tensor, prob: Tensor, mag: Tensor, generator: torch.Generator,
                check_policy: bool = True) -> Tensor:
        """A member's training augmentation of uint8 images ``x`` ``(B, C, H, W)``: its policy (``prob``,
        ``mag``: ``(2, 15)``, or ``(B, 2, 15)`` per image), standardisation, flip, crop and Cutout."""
        cfg = self.config
        x = functional.augment(x, prob, mag, cfg.count_probs, generator=generator, check_policy=check_policy)
        return _runner.baseline_augment(self.normalise(x), flip=cfg.flip, crop_padding=cfg.crop_padding,
                                        cutout=cfg.cutout, generator=generator)

    def layout(self, x: Tensor) -> Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def run_round(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run one round for the members named in ``tasks``.

        Each task: ``member``, ``prob``, ``mag``, ``epochs``, ``save`` (the state file to write after the
        round), ``weights`` and ``streams`` (files to load first, or ``None``). Every load happens before
        any training, so a donor's file is read before this round can overwrite anything.

        Returns:
            One record per task: ``member``, ``train_loss``, ``train_acc``, ``val_loss``, ``val_acc``,
            ``seconds``, ``finite``.
        """
        for task in tasks:
            member = self.members[task["member"]]
            member.load(task["weights"], task["streams"])
            member.set_policy(task["prob"], task["mag"])
        records = []
        for first in range(0, len(tasks), self.lanes):
            group = tasks[first:first + self.lanes]
            outcomes = _lanes.side_by_side([functools.partial(self._train_member, task) for task in group],
                                           self.device)
            for outcome in outcomes:
                if outcome.error is not None:
                    raise outcome.error
                records.append(outcome.value)
        return records

    def _train_member(self, task: dict[str, Any]) -> dict[str, Any]:
        """One member's round (its policy set, its files loaded): train, test, save; its record."""
        member = self.members[task["member"]]
        start = time.perf_counter()
        train = member.train_epochs(task["epochs"])
        val_loss, val_acc = member.evaluate()  # the round's reads of device values
        t = {k: float(v) for k, v in train.items()}
        member.save(Path(task["save"]))
        record = {
            "member": member.index,
            "train_loss": t["loss"] / t["n"],
            "train_acc": t["correct"] / t["n"],
            "val_loss": val_loss,
            "val_acc": val_acc,
            "seconds": time.perf_counter() - start,
        }
        record["finite"] = math.isfinite(record["train_loss"]) and math.isfinite(record["val_loss"])
        return record


class FusedWorker(Worker):
    """A :class:`Worker` whose members train as one :class:`~hba_augment.models.fused.FusedWRN`: a round's
    step is one augmentation call on every member's batch (each image with its member's policy), one forward
    and backward of the fused network and one SGD step, so a process launches one training's kernels for all
    its members (``population_fuse``; why: :mod:`hba_augment.train.fused`).

    Each member keeps its own initial weights, data order (its own generator), weights, momentum, counters
    and state file, in :class:`Worker`'s format, so exploits and resumes read and write the same files. The
    members share one augmentation stream (seeded by the search's seed and the process's members): a
    member's draws, of its own policy's distribution, depend on which members share its process. Every
    member of the process trains in every round, for the same epochs. With ``score_ema`` the average is of the
    fused network (the same elementwise average, member by member). WRN models; not with ``cuda_graphs``.
    """

    def __init__(self, config: Any, train: Any, val: Any, members: list[int], score_ema: float | None = None,
                 lanes: int = 1) -> None:
        from hba_augment.models.fused import FusedWRN

        if config.cuda_graphs:
            raise ValueError("fused members (population_fuse) train eagerly, not with cuda_graphs")
        super().__init__(config, train, val, members, None, 1)
        self.order = sorted(members)
        self.slot = {m: k for k, m in enumerate(self.order)}
        try:
            self.fused = FusedWRN([self.members[m].model for m in self.order]).to(self.device)
        except TypeError as e:
            raise ValueError(f"fused members (population_fuse) need a WRN model, got {config.model!r}") from e
        if self.channels_last:
            self.fused = self.fused.to(memory_format=torch.channels_last)
        self.fused.train()
        for m in self.order:  # the members' own networks and optimisers are the fused one's slices now
            self.members[m].model = self.members[m].opt = None
        self.opt = _sgd(self.fused, config)
        self.score_ema = score_ema
        self.ema = None if score_ema is None else _runner.WeightEMA(self.fused, score_ema)
        seed = int(np.random.SeedSequence([config.seed, *self.order, 3]).generate_state(2, np.uint64)[0] >> np.uint64(1))
        self.g_aug = torch.Generator(device=self.device).manual_seed(seed)

    def run_round(self, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """:meth:`Worker.run_round` for every member of this process at once."""
        if sorted(task["member"] for task in tasks) != self.order:
            raise ValueError(f"fused members train together: a round needs tasks for members {self.order}, got "
                             f"{sorted(task['member'] for task in tasks)}")
        epochs = {task["epochs"] for task in tasks}
        if len(epochs) != 1:
            raise ValueError(f"fused members train the same epochs in a round, got {sorted(epochs)}")
        dev = self.device
        for task in tasks:  # every load before any training, as Worker.run_round
            member, k = self.members[task["member"]], self.slot[task["member"]]
            if task["weights"] is not None:
                state = torch.load(task["weights"], map_location=dev, weights_only=True)
                self.fused.load_member_state_dict(k, state["model"])
                if self.ema is not None:
                    self.ema.module.load_member_state_dict(k, state["ema"])
                self.fused.load_member_optimizer_state(self.opt, k, state["optimizer"])
            if task["streams"] is not None:
                state = torch.load(task["streams"], map_location="cpu", weights_only=True)
                member.g_data.set_state(state["g_data"])
                self.g_aug.set_state(state["g_aug"])  # the shared stream: every member saved the same
                member.step, member.epoch = int(state["step"]), int(state["epoch"])
            member.set_policy(task["prob"], task["mag"])
        steps = {self.members[m].step for m in self.order}
        if len(steps) != 1:
            raise ValueError(f"fused members must be at the same step, got {sorted(steps)}")
        start = time.perf_counter()
        sums = self._train(next(iter(epochs)))
        scored = self.fused if self.ema is None else self.ema.module
        val_loss, val_err = _runner.evaluate_members(scored, len(self.order), self.val_x, self.val_y,
                                                     self.normalise, channels_last=self.channels_last,
                                                     amp=self.config.amp)
        loss, correct, n = (row.tolist() for row in sums.t())
        optimizer = _runner.optimizer_state(self.opt)
        records = []
        for task in tasks:
            member, k = self.members[task["member"]], self.slot[task["member"]]
            ema = {} if self.ema is None else {"ema": self.ema.module.member_state_dict(k)}
            _runner.save_checkpoint({
                "model": self.fused.member_state_dict(k),
                **ema,
                "optimizer": self.fused.member_optimizer_state(optimizer, k),
                "g_data": member.g_data.get_state(),
                "g_aug": self.g_aug.get_state(),
                "step": member.step,
                "epoch": member.epoch,
            }, Path(task["save"]))
            record = {"member": member.index, "train_loss": loss[k] / n[k], "train_acc": correct[k] / n[k],
                      "val_loss": val_loss[k], "val_acc": 1.0 - val_err[k] / 100.0,
                      "seconds": time.perf_counter() - start}
            record["finite"] = math.isfinite(record["train_loss"]) and math.isfinite(record["val_loss"])
            records.append(record)
        return records

    def _train(self, epochs: int) -> Tensor:
        """``epochs`` passes of every member over the training images, each in its own order; per member its
        summed loss, correct count and images, ``(K, 3)`` on the device."""
        cfg, dev = self.config, self.device
        members = [self.members[m] for m in self.order]
        k, b = len(members), cfg.batch_size
        prob, mag = torch.stack([m.prob for m in members]), torch.stack([m.mag for m in members])
        per_image: dict[int, tuple[Tensor, Tensor]] = {}  # by batch size; made once a round (augment caches
        # its checks per policy tensor)
        sums = torch.zeros(k, 3, dtype=torch.float64, device=dev)
        step = members[0].step
        for _ in range(epochs):
            order = torch.stack([torch.randperm(self.n_train, generator=m.g_data) for m in members]).to(dev)
            for first in range(0, self.n_train, b):
                idx = order[:, first:first + b]
                size = idx.shape[1]
                if size not in per_image:
                    per_image[size] = (prob.repeat_interleave(size, 0), mag.repeat_interleave(size, 0))
                x = self.augment(self.train_x[idx].flatten(0, 1), *per_image[size], self.g_aug)
                x = self.layout(x).view(k, size, *x.shape[1:])
                y = self.train_y[idx]
                for group in self.opt.param_groups:
                    group["lr"] = _runner.lr_at(cfg, step, self.steps_per_epoch)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.amp):
                    logits = self.fused(x)
                losses = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none").sum(1)
                self.opt.zero_grad(set_to_none=True)
                (losses.sum() / size).backward()  # each member's gradient: its own mean loss's
                self.opt.step()
                if self.ema is not None:
                    self.ema.update()
                with torch.no_grad():
                    sums[:, 0] += losses.detach()
                    sums[:, 1] += (logits.argmax(2) == y).sum(1)
                    sums[:, 2] += size
                step += 1
        for m in members:  # every member is at the same step (run_round checks it)
            m.step, m.epoch = step, m.epoch + epochs
        return sums


def serve(config: Any, members: list[int], threads: int, tasks: Any, results: Any,
          score_ema: float | None = None, lanes: int = 1, fuse: bool = False) -> None:
    """A worker process's main loop (started with the 'spawn' method): build a :class:`Worker` from the
    first message on ``tasks``, the training and validation images as ``(images, labels, classes)`` numpy
    arrays (a :class:`FusedWorker` with ``fuse``), then run each list of tasks that arrives on ``tasks`` until ``None``; every answer goes to
    ``results`` as ``("ready", members)``, ``("ok", records)`` or ``("error", kind, message)``."""
    try:
        from hba_augment.datasets import ImageData

        data = _next_message(tasks)
        if data is None:
            return
        # The driver sends the images as numpy arrays (see population._Pool).
        train, val = (ImageData(torch.from_numpy(x), torch.from_numpy(y), classes) for x, y, classes in data)
        torch.set_num_threads(threads)
        if config.device.startswith("cuda"):
            torch.backends.cudnn.benchmark = True  # fixed shapes, long runs
        worker = (FusedWorker if fuse else Worker)(config, train, val, members, score_ema, lanes)
        results.put(("ready", members))
        while (job := _next_message(tasks)) is not None:
            results.put(("ok", worker.run_round(job)))
    except KeyboardInterrupt:  # the driver reports the interruption
        return
    except BaseException as e:  # sent to the driver, which raises it there
        kind = "value" if isinstance(e, ValueError) else "other"
        results.put(("error", kind, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def _next_message(tasks: Any) -> Any:
    """The driver's next message on ``tasks``; ``None`` (stop) once the driver is gone: a driver killed
    without a chance to send ``None`` (SIGTERM, SIGKILL) must not leave its members training on."""
    while True:
        try:
            return tasks.get(timeout=_PARENT_CHECK_SECONDS)
        except queue.Empty:
            if not multiprocessing.parent_process().is_alive():
                return None
