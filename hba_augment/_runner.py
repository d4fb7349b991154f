"""The run driver shared by the search (:mod:`~hba_augment.search.loop`) and policy evaluation
(:mod:`~hba_augment.train.trainer`): the baseline augmentation, the learning-rate schedule, provenance
helpers, config checks, the output folder, resume, the epoch loop with progress bar, metrics and atomic
checkpoints.

A *worker* (``search.loop._Search``, ``train.trainer._Trainer``, both :class:`WorkerBase`) is a
:class:`DrivenWorker`; :func:`drive` runs either command's skeleton around it, and the progress bar
reaches it through an explicit ``set_tick`` callback of :func:`run_epochs`.

Under ``torchrun`` (:mod:`hba_augment._distributed`) every rank runs the same driver: rank 0 alone
creates the folder, logs and writes files; a checkpoint to resume from is read by rank 0 and sent to
the others, so the output folder need not be shared between machines.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hba_augment import _distributed
from hba_augment._baselines import BASELINES
from hba_augment._cli_common import option
from hba_augment._graphs import GRAPH_WARMUP_STEPS, CapturedCall
from hba_augment._io import atomic_open

__all__ = [
    "BASELINES",
    "LR_SCHEDULES",
    "SLOW_BF16",
    "CapturedStep",
    "DrivenWorker",
    "EpochWorker",
    "Standardisation",
    "WeightEMA",
    "WorkerBase",
    "baseline_augment",
    "check_checkpoint",
    "check_device",
    "check_int",
    "check_lr_schedule",
    "check_nonneg_number",
    "checkpoint_due",
    "checkpoint_state",
    "config_to_dict",
    "cpu_bf16_slowdown",
    "describe_device",
    "drive",
    "evaluate_members",
    "evaluate_model",
    "fingerprint",
    "graph_optimizer",
    "load_optimizer_state",
    "lr_at",
    "open_run",
    "optimizer_state",
    "plural",
    "restore_counters",
    "restore_rng",
    "rng_state",
    "run_epochs",
    "save_checkpoint",
    "source_commit",
    "standardisation",
    "start_session",
    "stderr_log",
    "write_jsonl",
]

LR_SCHEDULES = ("cosine", "step", "constant")


# --------------------------------------------------------------------------------------- augmentation
class Standardisation(NamedTuple):
    """Per-channel standardisation of a training split, on the 0..1 scale: ``(x / 255 - mean) / std``.

    ``mean`` and ``std`` are ``(C,)`` float32 on the CPU (for records); ``scale`` and ``shift`` are
    ``(1, C, 1, 1)`` on the run's device, so that standardising is one fused op per batch.
    """

    mean: Tensor
    std: Tensor
    scale: Tensor
    shift: Tensor

    @classmethod
    def of(cls, mean: Tensor, std: Tensor, device: torch.device) -> Standardisation:
        """The standardisation by float32 ``(C,)`` ``mean`` and ``std`` (computed, or a run's recorded ones)."""
        return cls(mean, std, (1.0 / (255.0 * std)).to(device)[None, :, None, None],
                   (-mean / std).to(device)[None, :, None, None])

    def __call__(self, images: Tensor) -> Tensor:
        """Standardise uint8 (or float levels in 0..255) images ``(B, C, H, W)``; float32."""
        return torch.addcmul(self.shift, images.float(), self.scale)


def standardisation(images: Tensor, device: torch.device, chunk: int = 4096) -> Standardisation:
    """The :class:`Standardisation` of uint8 ``images`` ``(N, C, H, W)`` (the search's and the trainer's one
    home for it): mean and unbiased standard deviation per channel, in float64, two passes over chunks of
    ``chunk`` images (a whole float64 copy of a large split would not fit), the deviation at least 1e-3."""
    n, c, h, w = images.shape
    total = torch.zeros(c, dtype=torch.float64)
    for start in range(0, n, chunk):
        total += images[start : start + chunk].to("cpu", torch.float64).sum(dim=(0, 2, 3))
    count = n * h * w
    mean = total / count / 255.0
    squares = torch.zeros(c, dtype=torch.float64)
    for start in range(0, n, chunk):
        x = images[start : start + chunk].to("cpu", torch.float64).div_(255.0)
        squares += (x - mean[None, :, None, None]).square().sum(dim=(0, 2, 3))
    std = (squares / max(count - 1, 1)).sqrt().clamp_min(1e-3).float()
    mean = mean.float()
    return Standardisation.of(mean, std, device)


def lr_at(config: Any, step: int, steps_per_epoch: int) -> float:
    """SGD learning rate at (0-based, global) training step ``step``.

    ``config`` has ``lr``, ``lr_schedule``, ``epochs``, ``lr_milestones`` and ``lr_gamma``.
    """
    if config.lr_schedule == "cosine":
        total = config.epochs * steps_per_epoch
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * step / total))
    if config.lr_schedule == "step":
        epoch = step / steps_per_epoch
        drops = sum(1 for m in config.lr_milestones if epoch >= m)
        return config.lr * config.lr_gamma**drops
    return config.lr


def baseline_augment(
    images: Tensor,
    *,
    flip: bool = True,
    crop_padding: int = 4,
    cutout: int = 16,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Random horizontal flip, zero-padded random crop and Cutout, per image, as batched tensor ops.

    PBA's ``random_flip(zero_pad_and_crop(x, 4))`` then ``cutout_numpy(x, 16)``: the crop window is a
    uniform offset in ``[0, 2 * crop_padding]`` of the padded image (same size as the input), the crop is
    flipped with probability 0.5, and Cutout zeroes rows ``[max(0, cy - s//2), min(H, cy + s//2))`` and
    likewise columns, with ``(cy, cx)`` uniform over the pixels. Crop and flip are one gather. Random
    draws, in order: flips ``(B,)`` uniforms, crop offsets ``(B, 2)``, Cutout rows ``(B,)``, columns ``(B,)``.

    Args:
        images: float ``(B, C, H, W)`` (standardised, so zero is the mean colour).
        flip: flip each image horizontally with probability 0.5.
        crop_padding: padding of the random crop (0: no crop).
        cutout: side of the Cutout square (0: no Cutout).
        generator: random stream on the images' device.

    Returns:
        A new ``(B, C, H, W)`` tensor.
    """
    b, c, h, w = images.shape
    dev = images.device
    p = crop_padding
    out = images
    if flip or p:
        flips = torch.rand(b, generator=generator, device=dev) < 0.5 if flip else torch.zeros(b, dtype=torch.bool, device=dev)
        offsets = torch.randint(0, 2 * p + 1, (b, 2), generator=generator, device=dev)
        padded = F.pad(images, (p, p, p, p)) if p else images
        rows = torch.arange(h, device=dev) + offsets[:, :1]  # (B, H) into the padded image
        ar_w = torch.arange(w, device=dev)
        # Crop, then flip the crop: output column j reads crop column (w - 1 - j) of a flipped image.
        cols = torch.where(flips[:, None], (w - 1) - ar_w, ar_w) + offsets[:, 1:]
        out = padded.gather(2, rows[:, None, :, None].expand(b, c, h, w + 2 * p))
        out = out.gather(3, cols[:, None, None, :].expand(b, c, h, w))
    if cutout:
        centre = torch.stack([torch.randint(0, h, (b,), generator=generator, device=dev),
                              torch.randint(0, w, (b,), generator=generator, device=dev)], dim=1)
        half = cutout // 2
        ar_h, ar_w = torch.arange(h, device=dev), torch.arange(w, device=dev)
        in_rows = (ar_h >= centre[:, :1] - half) & (ar_h < centre[:, :1] + half)
        in_cols = (ar_w >= centre[:, 1:] - half) & (ar_w < centre[:, 1:] + half)
        out = out.masked_fill((in_rows[:, :, None] & in_cols[:, None, :])[:, None], 0.0)
    return out


# ------------------------------------------------------------------------------------------ CUDA graphs


class CapturedStep(CapturedCall):
    """A training step replayed from one CUDA graph (issue 21: a step of a small network is bound by kernel
    launches, not by the GPU): a :class:`~hba_augment._graphs.CapturedCall` of ``step(x, y)``, whose graph's
    shapes are those of a full batch, known before the first batch arrives.

    ``step(x, y)`` is the whole step on a batch: it sets the gradients to ``None``, runs the forward and
    backward passes and the optimiser step, and accumulates its outputs into tensors that it owns (it returns
    nothing, and reads no value on the host). Full batches on CUDA replay the graph once warmed up; other
    batches (the short last one of an epoch) and every call on other devices run ``step`` eagerly on the
    batch itself, so the same step runs (and is tested) everywhere.

    Args:
        step: the step, ``(uint8 images (B, C, H, W), int64 labels (B,)) -> None``.
        batch_shape: ``(B, C, H, W)`` of a full batch.
        device: where it runs.
        generators: the CUDA generators ``step`` draws from, besides torch's default one.
        warmup: eager calls before the capture.
    """

    def __init__(self, step: Callable[[Tensor, Tensor], None], batch_shape: Sequence[int], device: torch.device,
                 generators: Sequence[torch.Generator] = (), warmup: int = GRAPH_WARMUP_STEPS) -> None:
        shape = torch.Size(batch_shape)
        example = (torch.empty(shape, dtype=torch.uint8, device="meta"),
                   torch.empty(shape[0], dtype=torch.int64, device="meta"))
        super().__init__(step, device, generators, warmup, example)


class WeightEMA:
    """An exponential moving average of a network's weights and buffers (Polyak averaging, as timm's
    ``ModelEmaV2``): after every optimiser step ``average = decay * average + (1 - decay) * weights``.

    Why: a network's validation accuracy at a high learning rate bounces by points from one step to the next;
    the average scores where the weights are, not where the last step threw them (the population search's
    ``score_ema``, docs/contract.md section 6). The update is one fused in-place call and reads nothing on the
    host, so a captured CUDA graph can hold it. The network's parameter and buffer tensors are held, so they
    must be updated in place (``load_state_dict`` does that), not replaced.

    Args:
        model: the network being trained; the average starts at its current weights.
        decay: per step, in (0, 1).
    """

    def __init__(self, model: nn.Module, decay: float) -> None:
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be a number in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self.module = copy.deepcopy(model)
        self.module.requires_grad_(False)
        pairs = list(zip([*self.module.parameters(), *self.module.buffers()],
                         [*model.parameters(), *model.buffers()], strict=True))
        self._avg = [a for a, _ in pairs if a.is_floating_point()]
        self._src = [s for a, s in pairs if a.is_floating_point()]
        self._copied_avg = [a for a, _ in pairs if not a.is_floating_point()]  # e.g. BN's batch counts
        self._copied_src = [s for a, s in pairs if not a.is_floating_point()]

    @torch.no_grad()
    def update(self) -> None:
        """One step of the average towards the network's current weights."""
        torch._foreach_lerp_(self._avg, self._src, 1.0 - self.decay)
        if self._copied_avg:  # one launch for all of them, not one per batch-norm layer
            torch._foreach_copy_(self._copied_avg, self._copied_src)

    def state_dict(self) -> dict[str, Any]:
        return self.module.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.module.load_state_dict(state)


def graph_optimizer(model: nn.Module, config: Any, device: torch.device) -> tuple[torch.optim.SGD, Tensor]:
    """``model``'s SGD for a :class:`CapturedStep`: the fused kernel, reading its learning rate from a
    device tensor (returned) that the caller fills before each step, so the graph holds no host number.
    Same update as :meth:`WorkerBase._trainable`'s optimiser."""
    lr = torch.tensor(float(config.lr), dtype=torch.float32, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=config.momentum, nesterov=config.nesterov,
                          weight_decay=config.wd, fused=True)
    return opt, lr


def optimizer_state(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """``opt.state_dict()`` as every checkpoint holds it: the rate a number, the default kernel (a
    :func:`graph_optimizer`'s device-tensor rate and fused kernel are its own), so that a run with CUDA
    graphs and one without resume each other's checkpoints."""
    state = opt.state_dict()
    for group in state["param_groups"]:
        if isinstance(group["lr"], Tensor):
            group["lr"], group["fused"] = float(group["lr"]), None
    return state


def load_optimizer_state(opt: torch.optim.Optimizer, state: dict[str, Any], lr: Tensor | None = None,
                         captured: CapturedStep | None = None) -> None:
    """Load :func:`optimizer_state` into ``opt``; for a :func:`graph_optimizer` (``lr`` its rate tensor), give
    it back that tensor and the fused kernel, and make ``captured`` capture again (loading replaced the
    momentum buffers its graph holds)."""
    opt.load_state_dict(state)
    if lr is None:
        return
    for group in opt.param_groups:
        group["lr"], group["fused"] = lr, True
    if captured is not None:
        captured.reset()


# ------------------------------------------------------------------------------------------ provenance
def describe_device(device: torch.device) -> str:
    """A human-readable description of the hardware, for provenance."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda}), torch {torch.__version__}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{device.type.upper()}: {cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, "
            f"torch {torch.__version__}")


def source_commit(root: str | os.PathLike[str] | None = None) -> str | None:
    """The git commit of the package's source, for provenance: the short hash of ``HEAD`` of the checkout
    that holds ``root`` (default: this package's folder), with ``+modified`` when the package's files differ
    from it; ``None`` outside a git checkout (an installed wheel) or without git.

    A learned schedule ships with the search's provenance, and the package version alone does not say which
    code between two releases ran it."""
    import subprocess

    folder = Path(root) if root is not None else Path(__file__).resolve().parent

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                              check=False)

    try:
        head = git("rev-parse", "--short", "HEAD")
        # An installed copy inside some other repository (a virtual environment in a project) is not its source.
        if head.returncode != 0 or not git("ls-files", "--", ".").stdout.strip():
            return None
        modified = git("diff", "--quiet", "HEAD", "--", ".").returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+modified" if modified else "")


def fingerprint(*tensors: Tensor) -> str:
    """A short hash of the tensors' bytes (tells a checkpoint's data from other data)."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def write_jsonl(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Write one JSON object per line, atomically (on rank 0 only)."""
    if not _distributed.current().is_main:
        return
    text = "".join(json.dumps(m, sort_keys=False) + "\n" for m in records)
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


# --------------------------------------------------------------------------------------------- config
def config_to_dict(config: Any) -> dict[str, Any]:
    """A config dataclass as plain JSON-compatible values (tuples become lists)."""
    d = dataclasses.asdict(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def check_int(config: Any, name: str, minimum: int, optional: bool = False) -> None:
    """``ValueError`` unless ``config.<name>`` is an int (not a bool) ``>= minimum`` (or ``None`` if optional)."""
    v = getattr(config, name)
    if optional and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"{option(name)} must be an integer >= {minimum}, got {v!r}")


def check_nonneg_number(config: Any, name: str, positive: bool = False) -> None:
    """``ValueError`` unless ``config.<name>`` is a finite number ``>= 0`` (``> 0`` if ``positive``)."""
    v = getattr(config, name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (
            positive and v == 0):
        raise ValueError(f"{option(name)} must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")


def check_lr_schedule(config: Any) -> None:
    """Check ``lr_schedule``, ``lr_milestones`` and Nesterov's need for momentum."""
    if config.lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"Unknown lr_schedule {config.lr_schedule!r}; expected one of {list(LR_SCHEDULES)}")
    ms = tuple(config.lr_milestones)
    if any(isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in ms) or list(ms) != sorted(ms):
        raise ValueError(f"{option('lr_milestones')} must be increasing epochs >= 0, got {config.lr_milestones!r}")
    if config.nesterov and config.momentum == 0:
        raise ValueError("nesterov=True needs momentum > 0")


def check_device(device: str) -> None:
    """``ValueError`` for a string torch cannot parse as a device."""
    try:
        torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"Unknown device {device!r} (e.g. 'cpu', 'cuda', 'cuda:0')") from None


# ---------------------------------------------------------------------------------------- checkpoints
def rng_state(device: torch.device, generators: Mapping[str, torch.Generator]) -> dict[str, Any]:
    """The states of ``generators`` (by name), torch's CPU generator and, on CUDA, its CUDA generators."""
    rng: dict[str, Any] = {k: g.get_state() for k, g in generators.items()}
    rng["torch_cpu"] = torch.get_rng_state()
    if device.type == "cuda":
        rng["torch_cuda"] = torch.cuda.get_rng_state_all()
    return rng


def rank_rng_state(
    device: torch.device, generators: Mapping[str, torch.Generator], dist: _distributed.DistContext
) -> dict[str, Any]:
    """The checkpoint entries of the random streams: ``rng`` (this process's, :func:`rng_state`) and, with
    several processes, ``world_size`` and ``rank_rng`` (every rank's; a collective, call it on every rank)."""
    rng = rng_state(device, generators)
    if not dist.distributed:
        return {"rng": rng}
    return {"rng": rng, "world_size": dist.world_size, "rank_rng": _distributed.all_gather_objects(rng, dist)}


def restore_rank_rng(
    state: Mapping[str, Any], path: Path, what: str, device: torch.device, generators: Mapping[str, torch.Generator],
    dist: _distributed.DistContext,
) -> None:
    """The inverse of :func:`rank_rng_state` for this rank, after checking the checkpoint's process count.

    Raises:
        ValueError: if the checkpoint at ``path`` was written by another number of processes (``what`` names
            the kind of run in the message, e.g. ``"a search"``).
    """
    saved_world = int(state.get("world_size", 1))
    if saved_world != dist.world_size:
        raise ValueError(f"cannot resume from {path}: it was written by {what} of {saved_world} process(es), "
                         f"this one has {dist.world_size}; resume with the same number of processes")
    restore_rng(state["rank_rng"][dist.rank] if dist.distributed else state["rng"], device, generators)


def restore_rng(rng: Mapping[str, Any], device: torch.device, generators: Mapping[str, torch.Generator]) -> None:
    """The inverse of :func:`rng_state`."""
    for k, g in generators.items():
        g.set_state(rng[k])
    torch.set_rng_state(rng["torch_cpu"])
    if device.type == "cuda" and "torch_cuda" in rng:
        torch.cuda.set_rng_state_all(rng["torch_cuda"])


def check_checkpoint(
    state: Mapping[str, Any],
    path: Path,
    *,
    format: str,
    version: int,
    kind: str,
    config: dict[str, Any],
    resume_free: frozenset[str],
    data_fingerprint: str,
    settings: str,
    data_mismatch: str,
    device: torch.device | None = None,
    added_fields: Mapping[str, Any] | None = None,
) -> None:
    """``ValueError`` unless ``state`` is a checkpoint of this kind, settings and data.

    Args:
        kind: what the checkpoint is called in the message, e.g. ``"HBA search"``.
        config: the current config as a dict; fields in ``resume_free`` may differ.
        added_fields: config fields added after checkpoints were first written, with the value that a
            checkpoint without the field was run with (so that such a checkpoint still resumes).
        settings: what the settings are called (``"the search settings"``).
        data_mismatch: the message's tail when the data fingerprint differs.
        device: if given, the checkpoint's device type must be this one's.
    """
    if state.get("format") != format or state.get("version") != version:
        raise ValueError(f"{path} is not a version-{version} {kind} checkpoint")
    saved = {**(added_fields or {}), **state["config"]}
    diff = [k for k in config if k not in resume_free and saved.get(k) != config[k]]
    if device is not None and torch.device(saved.get("device", "cpu")).type != device.type:
        diff.append("device (type)")
    if diff:
        details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {config.get(k)!r}" for k in diff)
        raise ValueError(f"cannot resume from {path}: {settings} differ ({details})")
    if state["data_fingerprint"] != data_fingerprint:
        raise ValueError(f"cannot resume from {path}: {data_mismatch}")


def checkpoint_state(worker: Any, format: str, version: int, *, config: dict[str, Any] | None = None,
                     **parts: Any) -> dict[str, Any]:
    """A worker's checkpoint: format, settings, data fingerprint and counters around its own ``parts``.

    Args:
        config: the settings a resume must match (:func:`check_checkpoint`; ``None``: ``worker.config.to_dict()``).
    """
    return {
        "format": format,
        "version": version,
        "config": worker.config.to_dict() if config is None else config,
        "data_fingerprint": worker.fingerprint,
        "epoch": worker.epoch,
        "step": worker.step,
        **parts,
        "wall_seconds": worker.wall_seconds,
        "sessions": worker.sessions,
    }


def restore_counters(worker: Any, state: Mapping[str, Any]) -> None:
    """Set a worker's epoch, step and wall time from a checkpoint; this is one more session."""
    worker.epoch, worker.step = int(state["epoch"]), int(state["step"])
    worker.wall_seconds = float(state["wall_seconds"])
    worker.sessions = int(state["sessions"]) + 1


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """``torch.save`` atomically (an interrupted write leaves the previous checkpoint), on rank 0 only."""
    if not _distributed.current().is_main:
        return
    with atomic_open(path) as f:
        torch.save(state, f)


# ---------------------------------------------------------------------------------------------- driver
def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """``"1 epoch"``, ``"2 epochs"``: a count and its noun, in the right number."""
    return f"{count} {noun if count == 1 else plural_noun or noun + 's'}"


def stderr_log(msg: str) -> None:
    """The default log: one line to stderr, flushed."""
    print(msg, file=sys.stderr, flush=True)


def _silent(msg: str) -> None:
    pass


def open_run(
    out_dir: str | os.PathLike[str],
    file_names: Mapping[str, str],
    guarded: Sequence[str],
    *,
    device: str,
    resume: bool,
    command: str | None,
    log: Callable[[str], None] | None,
    what: str,
    amp: bool = False,
) -> tuple[Path, dict[str, Path], str, Callable[[str], None]]:
    """Create the output folder and check that a run may start there.

    Args:
        file_names: ``{key: file name}`` of the run's files.
        guarded: keys of the files whose presence means a run already used the folder (refused unless
            ``resume``).
        device: the requested device (``ValueError`` if it is CUDA and CUDA is not available).
        command: the recorded command line (``None``: ``sys.argv``).
        log: the log function (``None``: print to stderr).
        what: the run's name in messages (``"search"``, ``"run"``).
        amp: the run asks for bfloat16 autocast; on a CPU whose bfloat16 matrix products are much slower
            than float32 ones (:func:`cpu_bf16_slowdown`), a warning is logged.

    Returns:
        ``(folder, {key: path}, command, log)``; on ranks other than 0 the default log is silent.
    """
    ctx = _distributed.current()
    out = Path(out_dir)
    files = {key: out / name for key, name in file_names.items()}
    if log is None:
        log = stderr_log if ctx.is_main else _silent
    if command is None:
        command = shlex.join(sys.argv)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    problem = None
    if ctx.is_main:
        out.mkdir(parents=True, exist_ok=True)
        existing = [p.name for key, p in files.items() if key in guarded and p.exists()]
        if existing and not resume:
            problem = (f"{out} already holds {', '.join(existing)}; pass {option('resume', True)} to continue that "
                       f"{what}, or choose another output folder")
    # Every rank fails with rank 0's verdict (a rank that went on alone would wait for the others forever).
    problem = _distributed.broadcast_object(problem, ctx)
    if problem is not None:
        raise ValueError(problem)
    if amp and ctx.is_main and torch.device(device).type == "cpu":
        slowdown = cpu_bf16_slowdown()
        if slowdown > SLOW_BF16:
            log(f"warning: {option('amp', True)} on this CPU: a bfloat16 matrix product took {slowdown:.0f}x as long "
                f"as a float32 one (it seems to lack bfloat16 matrix instructions such as AMX or AVX512-BF16); "
                f"the run will be much slower than without {option('amp', True)}")
    return out, files, command, log


#: How many times a float32 matrix product's time a bfloat16 one may take before ``amp`` on a CPU is warned
#: about (docs/contract.md, section 6, "Running"). Measured (benchmarks/RESULTS.md, "An AVX2-only CPU"): 34x
#: on an AVX2-only AMD EPYC, where one WRN-40-2 epoch had not finished after 9 minutes (13-50 s an epoch on
#: the CPUs with bfloat16 instructions).
SLOW_BF16 = 4.0


def cpu_bf16_slowdown(size: int = 256, repeats: int = 5) -> float:
    """How many times as long a ``size`` x ``size`` bfloat16 matrix product takes as a float32 one on this CPU,
    on one thread (a pool of threads waking up would be most of a small product's time), each the best of
    ``repeats``: about 0.2 s in all where bfloat16 is slow, far less where it is not."""
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for dtype in (torch.float32, torch.bfloat16):
            x = a.to(dtype)
            x @ x  # the first call may pay for a kernel choice
            best = math.inf
            for _ in range(repeats):
                start = time.perf_counter()
                x @ x
                best = min(best, time.perf_counter() - start)
            times.append(best)
    finally:
        torch.set_num_threads(threads)
    return times[1] / max(times[0], 1e-9)


#: A callback of no arguments: one unit of an epoch's progress is done.
Tick = Callable[[], None]


@runtime_checkable
class EpochWorker(Protocol):
    """What :func:`start_session` and :func:`run_epochs` drive: one run (a search, a training run).

    Attributes:
        epoch: the number of completed epochs (what :meth:`load_state_dict` restores).
        wall_seconds: the run's wall time so far, over every session (the driver adds to it).
    """

    epoch: int
    wall_seconds: float

    def run_epoch(self) -> dict[str, Any]:
        """Run the next epoch and return its record (JSON data; ``epoch`` already advanced)."""
        ...

    def save_checkpoint(self, path: Path) -> None:
        """Write everything a later session needs to continue exactly (called on every rank)."""
        ...

    def load_state_dict(self, state: dict[str, Any], path: Path) -> None:
        """Restore a checkpoint read from ``path`` (named in messages), refusing one of another run."""
        ...


@runtime_checkable
class DrivenWorker(EpochWorker, Protocol):
    """What :func:`drive` runs: an :class:`EpochWorker` with its records and progress callback.

    Attributes:
        records: the per-epoch records (:func:`run_epochs` appends to them; the checkpoint keeps them).
        ticks_per_epoch: how many times an epoch calls the callback given to ``set_tick``.
        data_source: where the data came from, for the result (set by :func:`drive`).
    """

    records: list[dict[str, Any]]
    ticks_per_epoch: int
    data_source: str

    def set_tick(self, tick: Tick | None) -> None: ...

    def close(self) -> None: ...


# The members each contract needs, in the order a refusal names the missing ones.
_MEMBERS = {EpochWorker: ("epoch", "wall_seconds", "run_epoch", "save_checkpoint", "load_state_dict")}
_MEMBERS[DrivenWorker] = (*_MEMBERS[EpochWorker], "records", "ticks_per_epoch", "data_source", "set_tick", "close")


def _check_worker(worker: Any, contract: type = EpochWorker) -> Any:
    if not isinstance(worker, contract):
        missing = [name for name in _MEMBERS[contract] if not hasattr(worker, name)]
        article = "an" if contract.__name__[0] in "AEIOU" else "a"
        raise TypeError(f"the run driver needs {article} {contract.__name__}; {type(worker).__name__} lacks {missing}")
    return worker


class WorkerBase:
    """The set-up the search's and the trainer's workers share: settings, process group, device, the
    counters and records every checkpoint keeps (:func:`checkpoint_state`, :func:`restore_counters`). A subclass
    adds the rest of a :class:`DrivenWorker`: ``ticks_per_epoch``, ``set_tick``, ``run_epoch``, ``state_dict``
    and ``load_state_dict``."""

    data_source: str = ""

    def __init__(self, config: Any, log: Callable[[str], None],
                 dist_context: _distributed.DistContext | None = None) -> None:
        self.config = config
        self.log = log
        self.dist = _distributed.current() if dist_context is None else dist_context
        self.device = torch.device(config.device)
        self.epoch = 0  # completed epochs
        self.step = 0  # completed training steps
        self.wall_seconds = 0.0
        self.sessions = 1
        self.records: list[dict[str, Any]] = []  # one per epoch

    def _describe_data(self, train: Any, held_out: Any) -> None:
        """The class count, both splits' fingerprint and the training split's standardisation."""
        self.num_classes = len(train.classes)
        self.fingerprint = fingerprint(train.images, train.labels, held_out.images, held_out.labels)
        self.normalise = standardisation(train.images, self.device)
        self.mean, self.std = self.normalise.mean, self.normalise.std

    def _trainable(self, model: nn.Module) -> tuple[nn.Module, torch.optim.SGD]:
        """The module that trains ``model`` (in DDP with several processes, compiled if ``config.compile``) and
        ``model``'s SGD optimiser; ``model`` stays the plain network (checkpoints, evaluation)."""
        cfg, dev = self.config, self.device
        net = model
        if self.dist.distributed:
            net = nn.parallel.DistributedDataParallel(model, device_ids=[dev] if dev.type == "cuda" else None)
        if cfg.compile:
            net = torch.compile(net)
        return net, torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
                                    weight_decay=cfg.wd)

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def save_checkpoint(self, path: Path) -> None:
        save_checkpoint(self.state_dict(), path)  # every rank builds it (a collective), rank 0 writes

    def close(self) -> None:
        """Release what the run holds besides memory (the trainer's DataLoader workers)."""


def start_session(
    worker: EpochWorker,
    checkpoint: Path,
    *,
    resume: bool,
    epochs: int,
    session_start: float,
    log: Callable[[str], None],
    what: str,
) -> None:
    """Load ``checkpoint`` into ``worker`` when resuming, and count the set-up time as wall time.

    Under torchrun rank 0 reads the checkpoint and sends it to the other ranks.
    """
    worker = _check_worker(worker)
    ctx = _distributed.current()
    state = None
    if resume and ctx.is_main and checkpoint.exists():
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state = _distributed.broadcast_object(state, ctx) if resume else None
    if state is not None:
        worker.load_state_dict(state, checkpoint)
        log(f"resuming {checkpoint} after epoch {worker.epoch} of {epochs}")
    elif resume:
        log(f"no checkpoint in {checkpoint.parent}; starting a new {what}")
    worker.wall_seconds += time.perf_counter() - session_start


def checkpoint_due(epoch: int, epochs: int, every: int) -> bool:
    """Whether a run checkpoints after ``epoch`` of ``epochs`` completed epochs: every ``every`` epochs and after
    the last (``every`` 0: only after the last). A checkpoint is for resuming; where no run will resume (a
    lent GPU's call, whose folders do not come back), writing one every epoch only costs time: a WRN-40-2
    checkpoint is 18 MB: 16 fused runs' took 2.2 s to write on the 2-core CPU here (once, beside a test run)."""
    return epoch == epochs or (every > 0 and epoch % every == 0)


def run_epochs(
    worker: EpochWorker,
    *,
    epochs: int,
    records: list[dict[str, Any]],
    checkpoint: Path,
    records_file: Path,
    seconds_key: str,
    ticks_per_epoch: int,
    set_tick: Callable[[Tick | None], None],
    desc: str,
    unit: str,
    report: Callable[[dict[str, Any], float], tuple[str, dict[str, str]]],
    progress: bool | None,
    log: Callable[[str], None],
    on_epoch_end: Callable[[dict[str, Any]], None] | None,
    checkpoint_every: int = 1,
) -> None:
    """Run ``worker``'s remaining epochs; after each, append its record, checkpoint and rewrite the records.

    Args:
        records: the worker's list of per-epoch records (appended to).
        seconds_key: the record's field with the epoch's duration.
        ticks_per_epoch: progress-bar units per epoch.
        set_tick: installs the worker's per-unit callback: called with the bar's before the first epoch
            and with ``None`` after the last (the worker calls it ``ticks_per_epoch`` times an epoch).
        report: ``(record, seconds remaining) -> (log line, bar postfix)``.
        progress: show a tqdm bar (``None``: only when stderr is a terminal; never on ranks other than 0).
        on_epoch_end: called with each record after its checkpoint is written (on every rank).
        checkpoint_every: checkpoint after every this many epochs and after the last (:func:`checkpoint_due`).

    Under torchrun ``worker.save_checkpoint`` runs on every rank (it may gather the ranks' states) and
    rank 0 writes; the records file is written by rank 0 too.
    """
    from tqdm.auto import tqdm

    worker = _check_worker(worker)
    if not _distributed.current().is_main:
        progress = False
    bar = tqdm(total=epochs * ticks_per_epoch, initial=worker.epoch * ticks_per_epoch, desc=desc, unit=unit,
               dynamic_ncols=True, disable=None if progress is None else not progress, file=sys.stderr)
    set_tick(lambda: bar.update(1))
    try:
        while worker.epoch < epochs:
            record = worker.run_epoch()
            worker.wall_seconds += record[seconds_key]
            record["wall_seconds"] = worker.wall_seconds
            records.append(record)
            if checkpoint_due(worker.epoch, epochs, checkpoint_every):
                worker.save_checkpoint(checkpoint)
            write_jsonl(records_file, records)
            # The others wait for rank 0's files: a rank that stops after this epoch leaves them complete.
            _distributed.barrier(_distributed.current())
            line, postfix = report(record, (epochs - worker.epoch) * record[seconds_key])
            bar.set_postfix(**postfix)
            if bar.disable:
                log(line)
            else:
                bar.write(line, file=sys.stderr)
            if on_epoch_end is not None:
                on_epoch_end(record)
    finally:
        set_tick(None)  # the bar is closed: a later run_epoch (a test, a benchmark) must not update it
        bar.close()


_W = TypeVar("_W", bound=DrivenWorker)


def drive(
    config: Any,
    out_dir: str | os.PathLike[str],
    build: Callable[[Any, Any, Callable[[str], None]], _W],
    *,
    what: str,
    file_names: Mapping[str, str],
    guarded: Sequence[str],
    records_file: str,
    load: Callable[[], tuple[Any, Any, str]],
    introduce: Callable[[_W], str],
    report: Callable[[dict[str, Any], float], tuple[str, dict[str, str]]],
    seconds_key: str,
    desc: str,
    unit: str,
    resume: bool,
    command: str | None,
    progress: bool | None,
    log: Callable[[str], None] | None,
    on_epoch_end: Callable[[dict[str, Any]], None] | None,
    notes: Sequence[str] = (),
    checkpoint_every: int = 1,
) -> tuple[_W, Path, dict[str, Path], str, Callable[[str], None]]:
    """A command's run up to its result, the search's and the trainer's one skeleton: validate ``config``,
    open the folder (:func:`open_run`), load the data, build the worker, resume (:func:`start_session`)
    and run the epochs (:func:`run_epochs`).

    Args:
        config: the run's settings; this reads its ``validate()``, ``epochs``, ``device`` and ``amp``.
        build: ``(train, held_out, log) -> worker``, refused unless a :class:`DrivenWorker`.
        file_names: as in :func:`open_run`; ``"checkpoint"`` and ``records_file`` are keys of it.
        load: ``() -> (train, held_out, data source)``, called once the folder is accepted.
        introduce: the worker's line logged before the first epoch.
        notes: lines logged as soon as the folder is accepted (warnings).

    The other arguments are :func:`open_run`'s and :func:`run_epochs`'s.

    Returns:
        ``(worker, folder, {key: path}, command, log)`` after the last epoch, the worker closed.
    """
    config.validate()
    session_start = time.perf_counter()
    out, files, command, log = open_run(out_dir, file_names, guarded, device=config.device, resume=resume,
                                        command=command, log=log, what=what, amp=config.amp)
    for line in notes:
        log(line)
    train, held_out, source = load()
    worker: _W = _check_worker(build(train, held_out, log), DrivenWorker)
    worker.data_source = source
    start_session(worker, files["checkpoint"], resume=resume, epochs=config.epochs, session_start=session_start,
                  log=log, what=what)
    log(introduce(worker))
    try:
        run_epochs(worker, epochs=config.epochs, records=worker.records, checkpoint=files["checkpoint"],
                   records_file=files[records_file], seconds_key=seconds_key, ticks_per_epoch=worker.ticks_per_epoch,
                   set_tick=worker.set_tick, desc=desc, unit=unit, report=report, progress=progress, log=log,
                   on_epoch_end=on_epoch_end, checkpoint_every=checkpoint_every)
    finally:
        worker.close()
    return worker, out, files, command, log


def evaluate_model(model: nn.Module, images: Tensor, labels: Tensor, normalise: Callable[[Tensor], Tensor],
                   *, batch_size: int = 500, channels_last: bool = False, amp: bool = False,
                   dist_context: _distributed.DistContext = _distributed.SINGLE) -> tuple[float, float]:
    """Mean cross-entropy and error (percent) of ``model`` in eval mode on uint8 ``images`` ``(N, C, H, W)``:
    the trainer's test and the population search's scoring of its members.

    ``images`` and ``labels`` must be on the model's device; ``normalise`` maps uint8 to model input.
    The model's training mode is restored afterwards.

    Args:
        dist_context: with several processes, each evaluates its round-robin share of the batches
            (:func:`hba_augment._distributed.eval_batches`) and the sums are added up, so every image
            counts exactly once, in the batch it would have in a single-process run; every rank gets the
            result. ``images``, ``labels`` and the model must then be the same on every rank.
    """
    (loss,), (error,) = evaluate_members(model, 0, images, labels, normalise, batch_size=batch_size,
                                         channels_last=channels_last, amp=amp, dist_context=dist_context)
    return loss, error


@torch.no_grad()
def evaluate_members(model: nn.Module, members: int, images: Tensor, labels: Tensor,
                     normalise: Callable[[Tensor], Tensor], *, batch_size: int = 500, channels_last: bool = False,
                     amp: bool = False, dist_context: _distributed.DistContext = _distributed.SINGLE,
                     ) -> tuple[list[float], list[float]]:
    """:func:`evaluate_model` of each of ``members`` networks fused into one ``model``
    (:class:`~hba_augment.models.fused.FusedWRN`: ``(K, B, C, H, W)`` in, ``(K, B, classes)`` out), every
    network on the same images; ``members`` 0: a plain network (``(B, C, H, W)`` in, ``(B, classes)`` out).
    Returns each network's mean cross-entropy and error (percent), one list entry each."""
    was_training = model.training
    model.eval()
    dev = images.device
    k = max(members, 1)
    loss_sum = torch.zeros(k, dtype=torch.float64, device=dev)
    wrong = torch.zeros(k, dtype=torch.int64, device=dev)
    try:
        for start, stop in _distributed.eval_batches(len(labels), batch_size, dist_context):
            x = normalise(images[start:stop])
            y = labels[start:stop]
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if members:
                x = x.expand(members, *x.shape)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                logits = model(x).view(k, len(y), -1)
            y = y.expand(k, len(y))
            loss_sum += F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none").sum(1)
            wrong += (logits.argmax(2) != y).sum(1)
    finally:
        model.train(was_training)
    _distributed.all_reduce_sum([loss_sum, wrong], dist_context)
    n = len(labels)
    return (loss_sum / n).tolist(), (100.0 * wrong.double() / n).tolist()
