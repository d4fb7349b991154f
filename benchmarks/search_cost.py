"""Cost of the HBA search against plain training of the same network, measured side by side in one run.

Three methods train the same model on the same images with the same batch size, optimizer (SGD, Nesterov
momentum 0.9) and baseline augmentation (standardisation, flip, pad-4 crop, Cutout 16):

* ``plain``: ``hba-augment train``'s own training loop (``hba_augment.train.trainer``) with policy
  ``cutout``: the network without hyper-layers, no learned policy, no validation step;
* ``plain+policy``: the same loop with policy ``hba:<constant schedule>`` (every one of the 30 slots at
  probability ``--policy-prob``, mid-range magnitudes): what the batched augmentation alone adds;
* ``search``: the search's own epoch function (``hba_augment.search.loop._Search.run_epoch``): per outer
  iteration ``t_train = 2`` training steps of the hypernetwork (first-bn strategy) on images augmented with
  a per-image policy ``lambda + eps_i``, then ``t_val = 1`` validation step that computes only
  ``d loss / d lambda`` and an Adam step on ``lambda``.

Nothing is re-implemented: each method runs its real epoch function (``_Trainer.run_epoch`` /
``_Search.run_epoch``) on the same ``t_train * batch_size`` training images (class-balanced from the
lossless CIFAR-10 pickles; the rest of the file is the search's validation set), so that one epoch is
one search outer iteration or ``t_train`` plain steps. The methods take turns epoch by epoch, the order
rotating every round, so that the shared machine's changing load hits all of them alike. Per-step wall
and process-CPU times come from the loops' own per-step (``on_step``) and per-iteration
(``on_iteration``) callbacks; the search's training steps, validation steps and ``functional.augment``
calls are also timed on their own by wrapping them. The first ``warmup`` training steps of each method
are discarded; ``steps`` and ``warmup`` are rounded up to multiples of ``t_train`` for every method, so
all time the same number of training steps. Per-epoch work outside the steps (metrics, and for the
search the schedule entry) is not timed; it is milliseconds on the CPU.

Seconds per epoch are extrapolated to the reduced CIFAR-10 protocol: 4,000 training images at batch 128
are ``ceil(4000 / 128) = 32`` training steps, and for the search ``ceil(32 / 2) = 16`` outer iterations
(16 validation steps). Both assume full batches (the real last batch holds 32 images), so both are
about 2% high. The ratio is search / plain on median wall time and on median CPU time.

``--profile`` additionally records one search iteration and as many plain training steps with
``torch.profiler`` (CPU activities) and lists the top operators by self CPU time, with the search's
augmentation, training and validation steps labelled.

    python benchmarks/search_cost.py                          # defaults: WRN-40-2, batch 128, 8 steps, 1 thread
    python benchmarks/search_cost.py --profile
    python benchmarks/search_cost.py --model wrn-10-1 --steps 2 --warmup 0 --out /tmp/sc   # a smoke test

Writes ``OUT.json`` (everything, per-step times included) and ``OUT.md`` (a table under a header with
machine, torch version, command, date, git commit and load average), ``OUT`` defaulting to
``benchmarks/results/search_cost``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hba_augment import functional
from hba_augment import policy as hba_policy
from hba_augment._cli_common import nonneg_int, positive_int
from hba_augment.datasets import ImageData, load_dataset, reduced_split
from hba_augment.functional._table import OPS
from hba_augment.schedule import Schedule
from hba_augment.search import loop
from hba_augment.train import trainer as evaluate  # policy evaluation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import git

__all__ = ["METHODS", "PROTOCOL", "load_images", "main", "render_markdown", "run_benchmark", "train_images_needed"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "search_cost"
METHODS = ("plain", "plain+policy", "search")
#: The reduced CIFAR-10 search protocol the per-epoch numbers are extrapolated to.
PROTOCOL = {"name": "reduced CIFAR-10", "train_images": 4000, "batch_size": 128}
TARGET_RATIO = 1.5
PAPER_RATIO = 1.6
_TOP_ROWS = 15


# ---------------------------------------------------------------------------------------------- helpers
def _sync_for(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _stamp(sync: Callable[[], None]) -> tuple[float, float]:
    sync()
    return time.perf_counter(), time.process_time()


def _deltas(stamps: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    wall = [b[0] - a[0] for a, b in itertools.pairwise(stamps)]
    cpu = [b[1] - a[1] for a, b in itertools.pairwise(stamps)]
    return wall, cpu


def _summary(wall: list[float], cpu: list[float]) -> dict[str, Any]:
    return {"wall_s": wall, "cpu_s": cpu, "median_wall_s": statistics.median(wall),
            "median_cpu_s": statistics.median(cpu), "min_wall_s": min(wall), "max_wall_s": max(wall)}


def _timed(fn: Callable[..., Any], sink: list[tuple[float, float]], sync: Callable[[], None]) -> Callable[..., Any]:
    """``fn`` that appends its own (wall, CPU) seconds to ``sink`` on every call."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        w0, c0 = _stamp(sync)
        out = fn(*args, **kwargs)
        w1, c1 = _stamp(sync)
        sink.append((w1 - w0, c1 - c0))
        return out
    return wrapper


def _labelled(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)
    return wrapper


def _policy_schedule(prob: float, path: Path) -> str:
    """A one-entry schedule with every slot at ``prob`` and mid-range magnitudes, saved at ``path``."""
    mags = [math.nan if not spec.has_magnitude else 0.5 * (spec.low + spec.high) for spec in OPS]
    schedule = Schedule.constant(torch.full((2, len(OPS)), prob), torch.tensor([mags, mags]), name="benchmark")
    schedule.save(path)
    return str(path)


def _rounded(steps: int, t_train: int) -> int:
    return t_train * math.ceil(steps / t_train)


def train_images_needed(batch_size: int) -> int:
    """Training images :func:`run_benchmark` uses: one search outer iteration, ``t_train * batch_size``."""
    return loop.SearchConfig().t_train * batch_size


def _subset(data: ImageData, n: int) -> ImageData:
    return data.subset(torch.arange(n))


# ---------------------------------------------------------------------------------------------- methods
def _search_config(model: str, batch_size: int, device: str, n_train: int, n_val: int, epochs: int,
                   cuda_graphs: bool = False) -> loop.SearchConfig:
    return loop.SearchConfig.from_preset("cifar10", dataset="cifar10", model=model, batch_size=batch_size,
                                         device=device, epochs=epochs, train_size=n_train, val_size=n_val,
                                         name="benchmark", cuda_graphs=cuda_graphs)


def _train_config(model: str, batch_size: int, device: str, policy: str, search_config: loop.SearchConfig,
                  channels_last: bool) -> evaluate.TrainConfig:
    c = search_config
    # eval_every=0 and more epochs than are run: the loop never stops to test.
    return evaluate.TrainConfig.from_preset(
        "cifar10", dataset="cifar10", model=model, policy=policy, epochs=c.epochs, batch_size=batch_size,
        lr=c.lr, wd=c.wd, momentum=c.momentum, nesterov=c.nesterov, device=device, flip=c.flip,
        crop_padding=c.crop_padding, cutout=c.cutout, eval_every=0, channels_last=channels_last, num_workers=0)


class _Timer:
    """Runs one method's real epoch function and collects per-step (wall, CPU) seconds from its callbacks.

    ``augment``: ``(module, attribute)`` of the augmentation function the method calls at run time; its calls
    are timed too while the method's epochs run (``functional.augment`` for the search, the name
    ``augment`` that :mod:`hba_augment.policy` imported for an HBA policy).
    """

    def __init__(self, name: str, runner: Any, device: torch.device, augment: tuple[Any, str] | None) -> None:
        self.name, self.runner, self.augment = name, runner, augment
        self.sync = _sync_for(device)
        self.steps: list[tuple[float, float]] = []  # per callback: a training step, or a search iteration
        self.parts: dict[str, list[tuple[float, float]]] = {}
        self._stamps: list[tuple[float, float]] = []
        if isinstance(runner, loop._Search):
            runner.on_iteration = self._record
            for part in ("train_step", "val_step"):
                self.parts[part] = []
                setattr(runner, part, _timed(getattr(runner, part), self.parts[part], self.sync))
        else:
            runner.on_step = self._record
        if augment is not None:
            self.parts["augment"] = []

    def _record(self) -> None:
        self._stamps.append(_stamp(self.sync))

    def epoch(self) -> None:
        self._stamps = [_stamp(self.sync)]
        if self.augment is None:
            self.runner.run_epoch()
        else:
            module, attr = self.augment
            original = getattr(module, attr)
            setattr(module, attr, _timed(original, self.parts["augment"], self.sync))
            try:
                self.runner.run_epoch()
            finally:
                setattr(module, attr, original)
        wall, cpu = _deltas(self._stamps)
        self.steps.extend(zip(wall, cpu, strict=True))


def _split(times: list[tuple[float, float]], skip: int) -> dict[str, Any] | None:
    kept = times[skip:]
    return _summary([w for w, _ in kept], [c for _, c in kept]) if kept else None


def _profile_table(prof: Any) -> dict[str, Any]:
    averages = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in averages) or 1.0
    rows = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:_TOP_ROWS]
    top = [{"name": e.key, "calls": e.count, "self_cpu_ms": e.self_cpu_time_total / 1e3,
            "self_cpu_percent": 100.0 * e.self_cpu_time_total / total, "cpu_total_ms": e.cpu_time_total / 1e3}
           for e in rows]
    # Our labelled ranges, with everything they call (their own self time is only Python overhead).
    labelled = [{"name": e.key, "calls": e.count, "cpu_total_ms": e.cpu_time_total / 1e3,
                 "cpu_total_percent": 100.0 * e.cpu_time_total / total}
                for e in averages if e.key.startswith("hba: ")]
    return {"total_self_cpu_ms": total / 1e3, "top": top, "labelled": labelled,
            "table": averages.table(sort_by="self_cpu_time_total", row_limit=_TOP_ROWS)}


def _profile(search_config: loop.SearchConfig, plain_config: evaluate.TrainConfig, train: ImageData,
             val: ImageData, test: ImageData) -> dict[str, Any]:
    """One search iteration and ``t_train`` plain steps under torch.profiler, each after one such epoch."""
    from torch.profiler import ProfilerActivity, profile, schedule

    t = search_config.t_train
    quiet = lambda m: None  # noqa: E731
    search = loop._Search(search_config, train, val, quiet)
    search.train_step = _labelled(search.train_step, "hba: search train_step")
    search.val_step = _labelled(search.val_step, "hba: search val_step")
    original = functional.augment
    functional.augment = _labelled(original, "hba: functional.augment")
    try:
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=1, repeat=1)
                     ) as prof:
            search.on_iteration = prof.step
            for _ in range(2):
                search.run_epoch()
    finally:
        functional.augment = original
    out = {"search": _profile_table(prof)}
    trainer = evaluate._Trainer(plain_config, train, test, quiet)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=t, active=t, repeat=1)) as prof:
        trainer.on_step = prof.step
        for _ in range(2):
            trainer.run_epoch()
    trainer.close()
    out["plain"] = _profile_table(prof)
    return out


# ---------------------------------------------------------------------------------------------- driver
def load_images(data_dir: str | os.PathLike[str], n_train: int, max_val: int = 4000, seed: int = 0
                ) -> tuple[ImageData, ImageData]:
    """Class-balanced disjoint training (``n_train``) and validation images of the lossless CIFAR-10 pickles."""
    full = load_dataset("cifar10", data_dir, split="train")
    n_val = min(max_val, len(full.labels) - n_train)
    if n_val < 2:
        raise ValueError(f"{data_dir} holds {len(full.labels)} CIFAR-10 training images: too few for "
                         f"{n_train} training images plus a validation set; use fewer --steps")
    return reduced_split(full, n_train, n_val, seed=seed)


def run_benchmark(
    train: ImageData,
    val: ImageData,
    *,
    model: str = "wrn-40-2",
    batch_size: int = 128,
    steps: int = 8,
    warmup: int = 2,
    device: str = "cpu",
    policy_prob: float = 0.5,
    profile: bool = False,
    cuda_graphs: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Time the three methods of :data:`METHODS`, interleaved, and extrapolate per-epoch costs.

    Every method runs its own epoch function on the same ``t_train * batch_size`` training images, so
    one epoch is one search outer iteration or ``t_train`` plain steps. The methods take turns epoch by
    epoch (the order rotating every round), so that a change in the machine's load hits all of them
    alike. The first ``warmup`` training steps of each method are discarded.

    Args:
        train: training images, at least ``t_train * batch_size``.
        val: validation images of the search (at least 2; the first 2 are the plain loop's unused test set).
        model: a :func:`~hba_augment.models.create_model` name.
        batch_size: training and validation batch size of every method.
        steps, warmup: training steps timed / discarded per method, each rounded up to a multiple of the
            search's ``t_train``.
        device: torch device string.
        policy_prob: probability of every slot of the ``plain+policy`` constant schedule.
        profile: also profile one search iteration and ``t_train`` plain steps.
        cuda_graphs: the search's ``cuda_graphs``: on CUDA its full batches' augmentation call is replayed from
            a captured graph after :data:`~hba_augment._graphs.GRAPH_WARMUP_STEPS` eager calls (give ``warmup``
            at least that many rounds' steps, so that the timed steps are replays).
        log: receives progress lines.

    Returns:
        A JSON-compatible dict: ``methods`` (per method: per-step medians, raw per-step times, details),
        ``epoch`` (extrapolated seconds per protocol epoch and the ratios) and ``settings``; ``profile``
        when asked.
    """
    if steps < 1 or warmup < 0 or batch_size < 2:
        raise ValueError(f"need steps >= 1, warmup >= 0, batch_size >= 2; got {steps}, {warmup}, {batch_size}")
    dev = torch.device(device)
    t = loop.SearchConfig().t_train
    steps_r, warmup_r = _rounded(steps, t), _rounded(warmup, t)
    rounds, warmup_rounds = (steps_r + warmup_r) // t, warmup_r // t
    n_train = t * batch_size
    if len(train.labels) < n_train:
        raise ValueError(f"{t} steps of batch {batch_size} need {n_train} training images, got {len(train.labels)}")
    if len(val.labels) < 2:
        raise ValueError(f"need at least 2 validation images, got {len(val.labels)}")
    train = _subset(train, n_train)
    test = _subset(val, 2)
    search_config = _search_config(model, batch_size, device, n_train, len(val.labels), epochs=rounds + 1,
                                   cuda_graphs=cuda_graphs)
    channels_last = dev.type == "cpu" if search_config.channels_last is None else search_config.channels_last

    with tempfile.TemporaryDirectory() as tmp:
        policy = "hba:" + _policy_schedule(policy_prob, Path(tmp) / "constant_policy.json")
        plain_configs = {
            "plain": _train_config(model, batch_size, device, "cutout", search_config, channels_last),
            "plain+policy": _train_config(model, batch_size, device, policy, search_config, channels_last),
        }
        quiet = lambda m: None  # noqa: E731
        search = loop._Search(search_config, train, val, quiet)
        timers = {
            "plain": _Timer("plain", evaluate._Trainer(plain_configs["plain"], train, test, quiet), dev, None),
            "plain+policy": _Timer("plain+policy", evaluate._Trainer(plain_configs["plain+policy"], train, test, quiet),
                                   dev, (hba_policy, "augment")),
            # The search's augmentation through its own method (outside any CUDA graph it replays: a timer's
            # synchronisation inside a capture would fail it).
            "search": _Timer("search", search, dev, (search, "_augment")),
        }
        log(f"timing {', '.join(METHODS)}: {rounds} rounds of {t} training steps each ({warmup_rounds} warm-up), "
            f"{model}, batch {batch_size}")
        for r in range(rounds):
            order = METHODS[r % len(METHODS):] + METHODS[: r % len(METHODS)]
            for name in order:
                timers[name].epoch()
            log(f"  round {r + 1}/{rounds}: " + ", ".join(
                f"{n} {sum(w for w, _ in timers[n].steps[-(1 if n == 'search' else t):]):.2f} s"
                for n in METHODS) + f" wall per {t} training steps")
        for name in METHODS:
            runner = timers[name].runner
            if hasattr(runner, "close"):
                runner.close()
        prof = None
        if profile:
            log("profiling one search iteration and the same number of plain steps")
            prof = _profile(search_config, plain_configs["plain"], train, val, test)

    methods: dict[str, Any] = {}
    for name in ("plain", "plain+policy"):
        step = _split(timers[name].steps, warmup_r)
        methods[name] = {"step": step, "median_wall_s": step["median_wall_s"], "median_cpu_s": step["median_cpu_s"],
                         "timed_steps": len(step["wall_s"]), "policy": plain_configs[name].policy,
                         "augment": _split(timers[name].parts.get("augment", []), warmup_r),
                         "channels_last": channels_last}
    methods["plain+policy"]["policy"] = f"constant schedule: all 30 slots p={policy_prob:g}, mid-range magnitudes"
    st = timers["search"]
    iteration = _split(st.steps, warmup_rounds)
    search = timers["search"].runner
    methods["search"] = {
        "iteration": iteration,
        "train_step": _split(st.parts["train_step"], warmup_r),
        "val_step": _split(st.parts["val_step"], warmup_rounds * search_config.t_val),
        "augment": _split(st.parts["augment"], warmup_r),
        # Per training step: an iteration (t_train training steps + t_val validation steps) / t_train.
        "median_wall_s": iteration["median_wall_s"] / t,
        "median_cpu_s": iteration["median_cpu_s"] / t,
        "timed_steps": len(iteration["wall_s"]) * t,
        "hyper_layers": search.hm.hyper_layer_names,
        "strategy": search_config.strategy,
        "t_train": t,
        "t_val": search_config.t_val,
        "channels_last": search.channels_last,
    }

    proto_steps = math.ceil(PROTOCOL["train_images"] / batch_size)
    proto_outer = math.ceil(proto_steps / t)
    epoch: dict[str, Any] = {"train_images": PROTOCOL["train_images"], "training_steps": proto_steps,
                             "search_outer_iterations": proto_outer,
                             "search_validation_steps": proto_outer * search_config.t_val}
    for name, m in methods.items():
        per_epoch = (proto_outer, m["iteration"]) if name == "search" else (proto_steps, m["step"])
        m["epoch_wall_s"] = per_epoch[0] * per_epoch[1]["median_wall_s"]
        m["epoch_cpu_s"] = per_epoch[0] * per_epoch[1]["median_cpu_s"]
    base = methods["plain"]
    for m in methods.values():
        m["ratio_wall"] = m["epoch_wall_s"] / base["epoch_wall_s"]
        m["ratio_cpu"] = m["epoch_cpu_s"] / base["epoch_cpu_s"]
    s = methods["search"]
    epoch["ratio_wall"], epoch["ratio_cpu"] = s["ratio_wall"], s["ratio_cpu"]
    for part in ("train_step", "val_step", "augment"):
        if s[part] is not None:
            epoch[f"search_{part}_over_plain_step_cpu"] = s[part]["median_cpu_s"] / base["median_cpu_s"]
    out: dict[str, Any] = {
        "settings": {"model": model, "batch_size": batch_size, "steps": steps_r, "warmup": warmup_r, "device": device,
                     "rounds": rounds, "torch_threads": torch.get_num_threads(), "policy_prob": policy_prob,
                     "train_images_used": n_train, "val_images": len(val.labels), "target_ratio": TARGET_RATIO,
                     "paper_ratio": PAPER_RATIO, "search_config": search_config.to_dict()},
        "methods": methods,
        "epoch": epoch,
    }
    if prof is not None:
        out["profile"] = prof
    return out


def _header(args: argparse.Namespace, command: str) -> dict[str, Any]:
    import torchvision

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git_commit": commit,
        "git_dirty": bool(dirty) if dirty is not None else None,
        "machine": loop.describe_device(torch.device(args.device)),
        "cpu_count": os.cpu_count(),
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "python": sys.version.split()[0],
        "data": str(Path(args.data_dir).expanduser().resolve()),
        "cuda_graphs": bool(getattr(args, "cuda_graphs", False)),
    }


def _fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def _cell(part: dict[str, Any] | None, plain: dict[str, Any]) -> str:
    if part is None:
        return "-"
    return (f"{part['median_wall_s']:.3f} s wall / {part['median_cpu_s']:.3f} s CPU "
            f"({part['median_cpu_s'] / plain['median_cpu_s']:.2f}x a plain step's CPU)")


def render_markdown(result: dict[str, Any]) -> str:
    """The markdown report of :func:`run_benchmark`'s result (with ``header`` / ``load`` when present)."""
    st, ep, ms = result["settings"], result["epoch"], result["methods"]
    s, p = ms["search"], ms["plain"]
    lines = ["## HBA search cost vs plain training (`benchmarks/search_cost.py`)", ""]
    h = result.get("header")
    if h:
        commit = f"`{h['git_commit']}`" + (" plus uncommitted changes" if h["git_dirty"] else "")
        lines += [f"- Command: `{h['command']}`", f"- Date: {h['date']}; git commit {commit}",
                  f"- Machine: {h['machine']} (python {h['python']}, torchvision {h['torchvision_version']})"]
    load = result.get("load")
    if load:
        lines.append(f"- Load average (1 / 5 / 15 min) before: {' / '.join(f'{v:.2f}' for v in load['before'])}; "
                     f"after: {' / '.join(f'{v:.2f}' for v in load['after'])}." + (f" {load['note']}" if load.get('note') else ""))
    lines += [
        f"- {st['model']}, batch {st['batch_size']}, device {st['device']}, {st['torch_threads']} torch thread(s); "
        f"{st['warmup']} warm-up + {st['steps']} timed training steps per method, the methods taking turns every "
        f"{s['t_train']} steps; medians per step.",
        f"- Per epoch: {ep['train_images']:,} training images ({PROTOCOL['name']}) = {ep['training_steps']} training "
        f"steps; the search adds {ep['search_validation_steps']} validation steps ({ep['search_outer_iterations']} "
        f"outer iterations of {s['t_train']} training + {s['t_val']} validation step). Extrapolated from full "
        "batches (the real last batch holds 32 images); checkpoint writing is not included.",
        "",
        "| method | what one training step runs | wall s/step | CPU s/step | wall s/epoch | CPU s/epoch "
        "| vs plain (wall) | vs plain (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    what = {
        "plain": "network without hyper-layers; standardise, flip, crop, Cutout (`hba-augment train` loop, "
                 "policy `cutout`)",
        "plain+policy": f"as plain, plus the batched HBA policy first ({ms['plain+policy']['policy']})",
        "search": f"hypernetwork ({s['strategy']}), per-image policy from lambda + eps_i, baseline; plus "
                  f"1/{s['t_train']} of a validation step computing only d loss / d lambda (`_Search.run_epoch`)",
    }
    for name in METHODS:
        m = ms[name]
        lines.append(f"| {name} | {what[name]} | {m['median_wall_s']:.3f} | {m['median_cpu_s']:.3f} | "
                     f"{m['epoch_wall_s']:.1f} | {m['epoch_cpu_s']:.1f} | {_fmt_ratio(m['ratio_wall'])} | "
                     f"{_fmt_ratio(m['ratio_cpu'])} |")
    lines += ["", f"**Search / plain per epoch: {_fmt_ratio(ep['ratio_wall'])} wall time, "
              f"{_fmt_ratio(ep['ratio_cpu'])} CPU time** (target <= {TARGET_RATIO}; the paper measured {PAPER_RATIO}).",
              "", "Inside the search (medians):", "",
              f"- training step: {_cell(s['train_step'], p)}",
              f"- of which `functional.augment` (per-image policy): {_cell(s['augment'], p)}",
              f"- validation step: {_cell(s['val_step'], p)}", "",
              f"The plain+policy row's HBA policy alone (`functional.augment` per batch): "
              f"{_cell(ms['plain+policy']['augment'], p)}.", ""]
    spread = []
    for n in METHODS:
        t = ms[n]["iteration" if n == "search" else "step"]
        spread.append(f"{n} {t['min_wall_s']:.3f} / {t['median_wall_s']:.3f} / {t['max_wall_s']:.3f}"
                      + (" (per outer iteration)" if n == "search" else ""))
    lines.append("Wall seconds per step, min / median / max: " + "; ".join(spread) + ".")
    prof = result.get("profile")
    if prof:
        for name, title in (("search", f"one search outer iteration ({s['t_train']} training + {s['t_val']} "
                                       "validation step)"),
                            ("plain", f"{s['t_train']} plain training steps")):
            pr = prof[name]
            lines += ["", f"Profile (torch.profiler, CPU) of {title}: {pr['total_self_cpu_ms']:.0f} ms in all "
                      f"(the profiler's CPU times are wall time inside operators, waiting for a core included); "
                      f"top {_TOP_ROWS} operators by self time", "",
                      "| operator | calls | self CPU ms | self CPU % |", "|---|---:|---:|---:|"]
            lines += [f"| `{e['name']}` | {e['calls']} | {e['self_cpu_ms']:.1f} | {e['self_cpu_percent']:.1f} |"
                      for e in pr["top"]]
            if pr["labelled"]:
                lines += ["", "Labelled ranges (CPU time including callees): " + "; ".join(
                    f"`{e['name'][5:]}` x{e['calls']} {e['cpu_total_ms']:.0f} ms ({e['cpu_total_percent']:.1f}%)"
                    for e in pr["labelled"]) + "."]
    return "\n".join(lines) + "\n"


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="wrn-40-2", help="network (default wrn-40-2)")
    parser.add_argument("--batch-size", type=positive_int, default=128, help="batch size of every method (default 128)")
    parser.add_argument("--steps", type=positive_int, default=8,
                        help="training steps timed per method, rounded up to a multiple of t_train=2 (default 8)")
    parser.add_argument("--warmup", type=nonneg_int, default=2,
                        help="training steps discarded first per method, rounded up likewise (default 2)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default cpu)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA),
                        help="folder holding cifar-10-batches-py/ (default ../shared/data beside the repository)")
    parser.add_argument("--policy-prob", type=_probability, default=0.5,
                        help="probability of every slot in the plain+policy row's constant schedule (default 0.5)")
    parser.add_argument("--note", default="",
                        help="a sentence on the machine's state for the report (e.g. what else ran beside it)")
    parser.add_argument("--profile", action="store_true", help="also profile one search iteration and plain steps")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="the search's --cuda-graphs (its augmentation call replayed from a CUDA graph; use a "
                        "--warmup of at least 8 so that the timed steps are replays)")
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="output path without suffix: writes OUT.json and OUT.md (default benchmarks/results/search_cost)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device} requested but CUDA is not available")
    torch.set_num_threads(args.threads)
    command = shlex.join(["python", "benchmarks/search_cost.py", *(sys.argv[1:] if argv is None else argv)])
    header = _header(args, command)
    load_before = os.getloadavg()
    train, val = load_images(args.data_dir, train_images_needed(args.batch_size))
    result = run_benchmark(train, val, model=args.model, batch_size=args.batch_size, steps=args.steps,
                           warmup=args.warmup, device=args.device, policy_prob=args.policy_prob,
                           profile=args.profile, cuda_graphs=args.cuda_graphs,
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    result = {"header": header, "load": {"before": list(load_before), "after": list(os.getloadavg()),
                                         "note": args.note}, **result}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(result)
    Path(f"{out}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    Path(f"{out}.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
