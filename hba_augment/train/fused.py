"""Several runs of one configuration, differing only in their seed, trained as one fused network.

``hba-augment train --seed 0,1,2 --fuse``: the K runs' WRNs become one :class:`~hba_augment.models.fused.FusedWRN`
(grouped layers that never mix the networks), so a step launches the kernels of one training for all K.
Why: on a GPU one small training uses a fraction of it, and separate processes take turns on it instead of
sharing it (``benchmarks/fused_models.py`` measures the gain).

What each run keeps as its own, as if it trained alone: its initial weights (built from its seed), its data
order (its own data generator), its weights, gradients, batch-norm statistics and SGD update, its records,
checkpoint and ``result.json`` in its own folder, in the formats of :func:`~.trainer.train_and_evaluate`
(its checkpoint and ``result.json`` name the seeds it trained with, ``fused_seeds``: it resumes only with
them, since they share its augmentation stream). What the K runs share: one augmentation call per step on all K batches, from one
generator (seeded by the group's seeds), so a fused run's augmentation draws, though of
the same distribution, are not those of the same seed trained alone; and one learning rate, the same for
all by construction. With no random augmentation (policy ``none``) a fused run is its run alone, up to the
order of floating-point sums (``tests/test_fused.py``).

Limits, refused at the door: WRN models (:class:`~hba_augment.models.fused.FusedWRN`), policies applied to
whole batches on the device (``none``, ``baseline``, ``cutout``, ``hba:``; not the per-image torchvision
ones), one process, no ``compile``; the runs' settings equal but for the seed. They all resume together,
from checkpoints of the same epoch. With ``cuda_graphs`` the whole fused step of a full batch is replayed
from one CUDA graph (as a plain run's: the epoch's policy in static tensors, a fused SGD step reading its
rate from a device tensor; elsewhere the same step runs eagerly).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from hba_augment import _cli_common, _distributed, _lanes, _runner
from hba_augment._graphs import CapturedCall
from hba_augment.models import create_model
from hba_augment.models.fused import FusedWRN, fuses
from hba_augment.train import trainer as T

__all__ = ["fusable", "train_fused"]

_FILES = {"result": T.RESULT_FILE, "history": T.HISTORY_FILE, "checkpoint": T.CHECKPOINT_FILE}


def train_fused(
    configs: Sequence[T.TrainConfig],
    out_dirs: Sequence[str | os.PathLike[str]],
    *,
    resume: bool = False,
    command: str | None = None,
    log: Callable[[str], None] | None = None,
    on_epoch_end: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[T.TrainResult]:
    """Train runs that differ only in ``seed`` as one fused network (see the module docstring).

    Args:
        configs: the runs' settings: equal but for ``seed``, all different seeds.
        out_dirs: one output folder each, all different.
        resume: continue every run from its folder's checkpoint (all of the same epoch), or start them all
            afresh where none has one.
        command: the command line recorded in each result (``None``: ``sys.argv``).
        log: receives every run's lines, each prefixed with its folder's name (default: stderr).
        on_epoch_end: called with the runs' records of each epoch once their checkpoints are written.

    Returns:
        One :class:`~.trainer.TrainResult` per run, in order.

    Raises:
        ValueError: settings that differ but for the seed, repeated seeds or folders, a model that is not a
            WRN, a per-image policy, ``compile``, a process group (torchrun), checkpoints of
            different epochs or of only some runs, or a folder refused as :func:`~.trainer.train_and_evaluate`
            refuses one.
        TrainingDivergedError: a run's training loss became NaN or infinite (every run stops).
    """
    _check(configs, out_dirs)
    session_start = time.perf_counter()
    emit = _runner.stderr_log if log is None else log
    opened = []
    for out_dir in out_dirs:
        name = Path(out_dir).name
        opened.append(_runner.open_run(out_dir, _FILES, ("result", "checkpoint"), device=configs[0].device,
                                       resume=resume, command=command, what="run", amp=configs[0].amp and not opened,
                                       log=lambda line, name=name: emit(f"[{name}] {line}")))
    train, test, source = T.load_data(configs[0])
    group = _FusedTrainer(configs, train, test, emit)
    group.data_source = source
    if resume:
        group.resume([files["checkpoint"] for _, files, _, _ in opened], [run_log for *_, run_log in opened])
    for run in group.runs:
        run.wall_seconds += time.perf_counter() - session_start
    cfg = configs[0]
    emit(f"train (fused): {cfg.model} x {len(configs)} (seeds {', '.join(str(c.seed) for c in configs)}), policy "
         f"{cfg.policy}, {group.n_train} train / {group.n_test} {'test' if cfg.eval_split == 'test' else 'validation'} "
         f"images, {cfg.epochs} epochs x {group.steps_per_epoch} steps, batch {cfg.batch_size} each, lr {cfg.lr:g} "
         f"({cfg.lr_schedule}), wd {cfg.wd:g}, device {_runner.describe_device(group.device)}")
    while group.epoch < cfg.epochs:
        for run, record, (_, files, _, run_log) in zip(group.runs, group.run_epoch(), opened, strict=True):
            run.wall_seconds += record["seconds"]
            record["wall_seconds"] = run.wall_seconds
            run.records.append(record)
            if _runner.checkpoint_due(group.epoch, cfg.epochs, cfg.checkpoint_every):
                _runner.save_checkpoint(group.state_dict(run.index), files["checkpoint"])
            _runner.write_jsonl(files["history"], run.records)
            tested = f" | test error {record['test_error']:.2f}%" if "test_error" in record else ""
            run_log(f"epoch {record['epoch']}/{cfg.epochs}: train loss {record['train_loss']:.4f} acc "
                    f"{record['train_acc']:.3f}{tested} | {record['seconds']:.1f} s")
        if on_epoch_end is not None:
            on_epoch_end([run.records[-1] for run in group.runs])
    seeds = [c.seed for c in configs]
    return [T._finish_run(config, run, out, files, cmd, run_log, fused_seeds=seeds)
            for config, run, (out, files, cmd, run_log) in zip(configs, group.runs, opened, strict=True)]


def fusable(model: str, policy: str) -> str | None:
    """Why runs of ``model`` and ``policy`` cannot train fused, or ``None`` when they can (a WRN, a policy
    applied to whole batches on the device)."""
    if not fuses(model):
        return f"fused runs train WRNs (hba_augment.models.fused.FusedWRN), got model {model!r}"
    if T.parse_policy(policy)[0] in T._PER_IMAGE:
        return ("fused runs need a policy applied to whole batches on the device (none, baseline, cutout, "
                f"hba:...), got the per-image {policy!r}")
    return None


def _check(configs: Sequence[T.TrainConfig], out_dirs: Sequence[str | os.PathLike[str]]) -> None:
    if not configs or len(configs) != len(out_dirs):
        raise ValueError(f"need one output folder per run, got {len(configs)} runs and {len(out_dirs)} folders")
    for config in configs:
        config.validate()
    resolved = [str(Path(out).expanduser().resolve()) for out in out_dirs]
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"every run needs its own output folder, got {[str(out) for out in out_dirs]}")
    seeds = [c.seed for c in configs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"fused runs need different seeds, got {seeds}")
    first = {k: v for k, v in configs[0].to_dict().items() if k != "seed"}
    for config in configs[1:]:
        other = {k: v for k, v in config.to_dict().items() if k != "seed"}
        diff = sorted(k for k in first if first[k] != other[k])
        if diff:
            raise ValueError(f"fused runs differ only in their seed; these settings differ too: {diff}")
    cfg = configs[0]
    reason = fusable(cfg.model, cfg.policy)
    if reason is not None:
        raise ValueError(reason)
    if cfg.compile:
        raise ValueError(f"fused runs do not take {_cli_common.option('compile', True)}")
    if _distributed.launched():
        raise ValueError("fused runs train in one process, not under torchrun")


class _Run:
    """One fused run's own state: what its checkpoint and ``result.json`` hold besides the shared parts
    (read through :attr:`group`, so that :func:`~.trainer._finish_run` reads it as it reads a trainer)."""

    def __init__(self, group: _FusedTrainer, index: int, config: T.TrainConfig) -> None:
        self.group, self.index, self.config = group, index, config
        self.records: list[dict[str, Any]] = []
        self.wall_seconds = 0.0
        self.sessions = 1
        self.g_data = T.data_order(config.seed)  # the data order of the run alone

    def __getattr__(self, name: str) -> Any:  # the shared parts: data, device, counters, description
        return getattr(self.group, name)


class _FusedTrainer(T._Trainer):
    """The K runs' shared state and steps: :class:`~.trainer._Trainer`'s set-up (data on the device, the
    standardisation, the batch plan, the policy) with the K networks fused, one epoch of all K at a time."""

    def __init__(self, configs: Sequence[T.TrainConfig], train: Any, test: Any, log: Callable[[str], None]) -> None:
        self.configs = list(configs)
        super().__init__(configs[0], train, test, log)
        self.runs = [_Run(self, k, config) for k, config in enumerate(self.configs)]

    def _build_model(self) -> None:
        cfg, dev = self.config, self.device
        models = []
        for config in self.configs:
            with _lanes.GLOBAL_RNG_LOCK, torch.random.fork_rng(devices=[]):
                torch.manual_seed(config.seed)  # each network's initial weights: those of its run alone
                models.append(create_model(config.model, self.num_classes))
        if dev.type == "cuda":
            torch.backends.cudnn.benchmark = True
        self.model = FusedWRN(models).to(dev)
        if cfg.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self.net, self.opt = self._trainable(self.model)

    def _build_streams(self) -> None:
        super()._build_streams()
        # The shared augmentation stream, seeded by the group's seeds (one run alone: its own stream).
        seeds = [c.seed for c in self.configs]
        if len(seeds) > 1:
            digest = hashlib.sha256(("fused " + ",".join(map(str, seeds))).encode()).digest()
            self.g_aug.manual_seed(int.from_bytes(digest[:8], "little") >> 1)

    def _epoch_batches(self) -> Iterator[tuple[Tensor, Tensor, int]]:
        """``(uint8 images (K, B, C, H, W), labels (K, B), B)`` of every step: each run's batch in its own
        order."""
        b, n = self.config.batch_size, self.batches_per_epoch
        perms = [torch.randperm(self.n_train, generator=run.g_data) for run in self.runs]
        index = torch.stack([p[: n * b] if n * b <= self.n_train else p for p in perms]).to(self.device)
        for step in range(n):
            idx = index[:, step * b : (step + 1) * b]
            yield self.train_x[idx], self.train_labels[idx], idx.shape[1]

    def _build_graph_step(self) -> None:
        """``cuda_graphs``: the fused optimiser reading its rate from a device tensor, the epoch's policy in
        static tensors, every run's sums on the device, and the whole fused step of a full batch (the K
        batches) captured as one :class:`~hba_augment._graphs.CapturedCall` (its short last batch eager)."""
        cfg, dev = self.config, self.device
        self.opt, self.lr_tensor = _runner.graph_optimizer(self.model, cfg, dev)
        k, b = len(self.configs), cfg.batch_size
        self.sums = torch.zeros(k, 3, dtype=torch.float64, device=dev)  # per run: loss, correct, images
        if self.hba is not None:
            self.static_prob, self.static_mag = (t.clone() for t in self.hba.policy_at(dev))
        example = (torch.empty(k, b, *self.train_x.shape[1:], dtype=torch.uint8, device="meta"),
                   torch.empty(k, b, dtype=torch.int64, device="meta"))
        self.captured = CapturedCall(self._graph_step, dev, [self.g_aug], example=example)

    def _train_step(self, x: Tensor, y: Tensor, global_size: int, lr: float | None,
                    static: bool = False) -> tuple[Tensor, Tensor]:
        """One SGD step of the K networks on uint8 images ``x`` ``(K, B, C, H, W)`` at rate ``lr`` (``None``:
        the optimiser's own, ``cuda_graphs``' device tensor); each network's summed loss and correct count,
        ``(K,)`` each. ``static``: the policy from ``cuda_graphs``' static tensors."""
        k, b = y.shape
        x = self._augment(x.flatten(0, 1), static=static)
        logits = self._forward(x.view(k, b, *x.shape[1:]), lr)
        losses = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none").sum(1)  # (K,)
        self.opt.zero_grad(set_to_none=True)
        # The sum of the networks' mean losses: each network's gradient is that of its own mean loss.
        (losses.sum() / b).backward()
        self.opt.step()
        with torch.no_grad():
            return losses.detach(), (logits.argmax(2) == y).sum(1)

    def _graph_step(self, x: Tensor, y: Tensor) -> None:
        """``cuda_graphs``' step: :meth:`_train_step` from the static policy, its sums added to ``self.sums``."""
        losses, correct = self._train_step(x, y, y.shape[1], None, static=True)
        with torch.no_grad():
            self.sums[:, 0] += losses
            self.sums[:, 1] += correct
            self.sums[:, 2] += y.shape[1]

    def _epoch_sums(self) -> tuple[Tensor, Tensor, int, float]:
        """Train one epoch of every run: each run's summed loss and correct count ``(K,)`` on the device, the
        images each run saw, and the last learning rate."""
        cfg, dev = self.config, self.device
        lr = cfg.lr
        if self.captured is not None:
            if self.hba is not None:  # the graph reads these tensors: overwrite them
                prob, mag = self.hba.policy_at(dev)
                self.static_prob.copy_(prob)
                self.static_mag.copy_(mag)
            self.sums.zero_()
            for x, y, _ in self._epoch_batches():
                lr = _runner.lr_at(cfg, self.step, self.steps_per_epoch)
                self.lr_tensor.fill_(lr)
                self.captured(x, y)
                self.step += 1
            return self.sums[:, 0], self.sums[:, 1], int(self.sums[0, 2]), lr
        loss_sum = torch.zeros(len(self.runs), dtype=torch.float64, device=dev)
        correct = torch.zeros(len(self.runs), dtype=torch.int64, device=dev)
        seen = 0
        for x, y, size in self._epoch_batches():
            lr = _runner.lr_at(cfg, self.step, self.steps_per_epoch)
            batch_loss, batch_correct = self._train_step(x, y, size, lr)
            self.step += 1
            loss_sum += batch_loss
            correct += batch_correct
            seen += size
            if (dev.type == "cpu" or self.step % 50 == 0) and not bool(torch.isfinite(loss_sum).all()):
                raise self._diverged(float(loss_sum.max()), lr)
        return loss_sum, correct, seen, lr

    def run_epoch(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """One epoch of every run; one record per run (the epoch's time is the group's)."""
        start = time.perf_counter()
        if self.hba is not None:
            self.hba.set_epoch(self.epoch)
        loss_sum, correct, seen, lr = self._epoch_sums()
        entries = self._epoch_records(start, loss_sum.tolist(), correct.tolist(), seen, lr, self.evaluate)
        for run in self.runs:
            run.epoch, run.step = self.epoch, self.step
        return entries

    def evaluate(self) -> tuple[list[float], list[float]]:  # type: ignore[override]
        cfg = self.config
        return _runner.evaluate_members(self.model, len(self.runs), self.test_x, self.test_y, self.normalise,
                                        batch_size=cfg.eval_batch_size, channels_last=cfg.channels_last, amp=cfg.amp)

    # -- checkpoints: each run's, in a plain run's format with the group's seeds ----------------------
    def state_dict(self, index: int) -> dict[str, Any]:  # type: ignore[override]
        """Run ``index``'s checkpoint: its network, its part of the optimiser's state, its records and streams."""
        run = self.runs[index]
        return _runner.checkpoint_state(
            run, T._CHECKPOINT_FORMAT, T._CHECKPOINT_VERSION,
            model=self.model.member_state_dict(index),
            optimizer=self.model.member_optimizer_state(_runner.optimizer_state(self.opt), index),
            history=[dict(r) for r in run.records],
            rng=_runner.rng_state(self.device, {"data": run.g_data, "augment": self.g_aug}),
            fused_seeds=[c.seed for c in self.configs],  # the augmentation stream is the group's
        )

    def resume(self, paths: Sequence[Path], logs: Sequence[Callable[[str], None]]) -> None:
        """Load every run's checkpoint (all or none must exist, all of one epoch)."""
        present = [p.exists() for p in paths]
        if not any(present):
            for run_log, path in zip(logs, paths, strict=True):
                run_log(f"no checkpoint in {path.parent}; starting a new run")
            return
        if not all(present):
            missing = [str(p.parent) for p, there in zip(paths, present, strict=True) if not there]
            raise ValueError(f"fused runs resume together, but {missing} hold no checkpoint: remove the others' "
                             "checkpoints to start the group afresh")
        states = [torch.load(p, map_location="cpu", weights_only=True) for p in paths]
        epochs = sorted({int(s["epoch"]) for s in states})
        if len(epochs) != 1:
            raise ValueError(f"fused runs resume together from checkpoints of one epoch, got epochs {epochs} in "
                             f"{[str(p) for p in paths]}")
        seeds = [c.seed for c in self.configs]
        for run, state, path, run_log in zip(self.runs, states, paths, logs, strict=True):
            if state.get("fused_seeds") != seeds:
                wrote = ("a run alone" if state.get("fused_seeds") is None
                         else f"fused runs of the seeds {state['fused_seeds']}")
                raise ValueError(f"cannot resume from {path} with the fused seeds {seeds}: {wrote} wrote it")
            self._check_checkpoint(state, path, run.config)
            self.model.load_member_state_dict(run.index, state["model"])
            self.model.load_member_optimizer_state(self.opt, run.index, state["optimizer"])
            run.g_data.set_state(state["rng"]["data"])
            _runner.restore_counters(run, state)
            run.records = list(state["history"])
            run_log(f"resuming {path} after epoch {run.epoch} of {run.config.epochs}")
        # The shared streams: the first run's record of them (every run saved the same).
        rng = states[0]["rng"]
        self.g_aug.set_state(rng["augment"])
        torch.set_rng_state(rng["torch_cpu"])
        self.epoch, self.step = self.runs[0].epoch, self.runs[0].step
