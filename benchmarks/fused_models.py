"""How fast N networks train as one, their weights stacked and the step vectorised with ``torch.func.vmap``,
against the same N trained one after another in one process (issue 21, item 2; issue 20's campaigns).

Why: a paper-scale training (WRN-40-2, 128 images a step) is too small to fill a GPU. Eight processes at once
reached only 3.7x the steps per second of one on an H100, because a GPU runs one process's kernels at a time
(``benchmarks/RESULTS.md``, "PBA's schedule is a curriculum, and eight processes share the GPU by turns"),
and threads with a stream each ("lanes", :mod:`hba_augment._lanes`) about 2x more, with one capture failure
in eight processes on an H200. Stacking N networks' weights and vectorising the step (``vmap`` turns every
convolution into one grouped convolution of the N networks: HFTA's horizontal fusion, Wang et al., MLSys
2021) launches one network's kernels for all N, each N times larger; every network still gets its own
images, its own augmentation draws and its own SGD update (the optimiser is elementwise). If that pays on a
GPU, the population search's members and ``policy_quality.py``'s seeds train that way (``hba-augment train
--fuse`` already does for seeds); this measures it.

Each mode trains ``N`` networks for ``--steps`` timed steps after ``--warmup`` untimed ones, on random
uint8 images resident on the device (the trainer's own layout for a 4,000-image set):

- ``loop``: N networks and N optimisers, each step one after another (one process of N trainings);
- ``loop-graphs``: the same N steps replayed from one CUDA graph (no fusion: N sets of small kernels in
  a row, launched once; what fusing must beat where grouped convolutions are slow);
- ``vmap``: one set of stacked weights (``torch.func.stack_module_state``), one forward and backward of
  ``vmap(functional_call)`` over the N batches, one optimiser over the stacked weights;
- ``grouped`` (WRNs only): :class:`hba_augment.models.fused.FusedWRN`, the N networks as one network N
  times as wide whose layers never mix them (grouped convolutions, batch norm over N x C channels, a batched
  classifier; ``hba-augment train --seed 0,1,2 --fuse``), what ``vmap`` derives, written out: batch norm
  stays one kernel, where ``vmap`` adds its affine part as two more passes;
- ``grouped-graphs``: the same step replayed from one CUDA graph after warm-up (``train --fuse
  --cuda-graphs``: the fused SGD kernel reading its rate from a device tensor; eager on the CPU).

A step is the trainer's: the batched ``HBAPolicy`` call (cifar10's schedule at its last epoch; ``loop``:
one call a network, ``vmap``: one call on all N x B images, each network's rows with its own policy
tensor, as population members would), standardisation, flip, crop and Cutout (``_runner.baseline_augment``),
forward, cross-entropy, backward and SGD (Nesterov 0.9, weight decay 5e-4, the ``foreach`` kernels);
``--no-augment`` drops the augmentation. Before timing, a check runs one step of each fused mode and of
``loop`` from the same weights and inputs and records the largest difference of the logits and of the
weights after the step (float32, no autocast: the same arithmetic up to the order of sums).

Notes: under ``vmap`` a channels-last network's global pooling goes through functorch's slow per-network
fallback (``as_strided_`` has no batching rule; it warns), a small tensor. ``torch.autocast`` on the CPU
does not reach convolutions under ``vmap`` (functorch skips the CPU's
autocast for the ops it decomposes), so ``--amp`` is a GPU measurement; the table records the logits'
dtype of each mode.

Usage (on the lent GPU; not yet timed there)::

    python3 benchmarks/fused_models.py --device cuda --amp --members 1,4,8,16 --out $OUT/fused_models

writes ``OUT.json`` and ``OUT.md``. On the CPU, ``--device cpu --model wrn-10-1 --batch-size 8`` runs the
same at a toy size (what the test does).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from hba_augment import HBAPolicy, _runner, functional
from hba_augment._graphs import CapturedCall
from hba_augment.models import create_model
from hba_augment.models.fused import FusedWRN

MODES = ("loop", "loop-graphs", "vmap", "grouped", "grouped-graphs")
#: The trainer's SGD (``hba_augment.train.TrainConfig`` defaults of the cifar10 preset).
SGD = {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4, "foreach": True}
#: CIFAR-10's channel statistics, the standardisation the trainer computes from its training set.
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class Vmapped(nn.Module):
    """N networks of one architecture as stacked weights, called on ``(N, B, C, H, W)`` batches.

    Args:
        models: the N networks (same architecture); their weights are copied, not shared.
    """

    def __init__(self, models: list[nn.Module]) -> None:
        super().__init__()
        params, buffers = stack_module_state(models)
        self.names = list(params)
        self.stacked = nn.ParameterList([nn.Parameter(params[n].detach().clone()) for n in self.names])
        self.buffer_names = list(buffers)
        for i, name in enumerate(self.buffer_names):
            self.register_buffer(f"b{i}", buffers[name].clone())
        # Not a submodule: its (meta) weights are not the fused network's parameters.
        self.__dict__["base"] = copy.deepcopy(models[0]).to("meta")

    def forward(self, x: Tensor) -> Tensor:
        """``(N, B, C, H, W)`` -> ``(N, B, classes)``."""
        params = dict(zip(self.names, self.stacked, strict=True))
        buffers = {name: getattr(self, f"b{i}") for i, name in enumerate(self.buffer_names)}

        def one(p: dict[str, Tensor], b: dict[str, Tensor], images: Tensor) -> Tensor:
            return functional_call(self.base, (p, b), (images,))

        return vmap(one, randomness="different")(params, buffers, x)

    def member_state_dict(self, i: int) -> dict[str, Tensor]:
        """Network ``i``'s state dict (weights and buffers)."""
        state = {n: p[i] for n, p in zip(self.names, self.stacked, strict=True)}
        state.update({n: getattr(self, f"b{k}")[i] for k, n in enumerate(self.buffer_names)})
        return state


#: The fused modes: how each stacks the N networks.
FUSED: dict[str, Callable[[list[nn.Module]], nn.Module]] = {"vmap": Vmapped, "grouped": FusedWRN}


def build(model: str, n: int, device: torch.device, channels_last: bool) -> list[nn.Module]:
    """N networks ``model`` with 10 classes, seeds 0..N-1, in training mode on ``device``."""
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        net = create_model(model, 10).to(device).train()
        out.append(net.to(memory_format=torch.channels_last) if channels_last else net)
    return out


class Pipeline:
    """The trainer's augmentation of uint8 batches on one device: the cifar10 policy, standardisation, the
    baseline (flip, crop 4, Cutout 16)."""

    def __init__(self, device: torch.device, augment: bool, seed: int = 0) -> None:
        self.augment = augment
        self.policy = HBAPolicy("cifar10", total_epochs=200)
        self.policy.set_epoch(199)
        self.generator = torch.Generator(device).manual_seed(seed)
        self.mean = torch.tensor(MEAN, device=device).view(3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(3, 1, 1)
        prob, mag = self.policy.policy_at(device)
        self.prob, self.mag = prob, mag

    def __call__(self, x: Tensor, members: int = 1) -> Tensor:
        """uint8 ``(M B, 3, H, W)`` -> standardised float ``(M B, 3, H, W)``; with ``members`` > 1 each
        member's rows get their own copy of the policy (per-image policy tensors, as a population has)."""
        if self.augment:
            prob, mag = self.prob, self.mag
            if members > 1:
                prob, mag = (t.expand(len(x), *t.shape) for t in (prob, mag))
            x = functional.augment(x, prob, mag, self.policy.schedule.count_probs, generator=self.generator,
                                   check_policy=False)
        x = (x.float() / 255 - self.mean) / self.std
        if self.augment:
            x = _runner.baseline_augment(x, generator=self.generator)
        return x


def _loss(logits: Tensor, y: Tensor) -> Tensor:
    # Summed over the networks (disjoint weights: each one's gradient is its own mean loss's).
    return F.cross_entropy(logits.float().flatten(0, -2), y.flatten(), reduction="sum") / y.shape[-1]


def loop_step(models: list[nn.Module], opts: list[torch.optim.Optimizer], pipe: Pipeline, x: Tensor,
              y: Tensor, amp: bool, channels_last: bool, captured: bool = False) -> Tensor:
    """One step of each network in turn; ``x`` uint8 ``(N, B, 3, H, W)``, ``y`` ``(N, B)``. The last logits."""
    logits = x
    for net, opt, images, labels in zip(models, opts, x, y, strict=True):
        images = pipe(images)
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=amp, cache_enabled=not captured):
            logits = net(images)
        opt.zero_grad(set_to_none=True)
        _loss(logits, labels).backward()
        opt.step()
    return logits


def fused_step(fused: nn.Module, opt: torch.optim.Optimizer, pipe: Pipeline, x: Tensor, y: Tensor, amp: bool,
              channels_last: bool, captured: bool = False) -> Tensor:
    """One step of all networks at once (a :data:`FUSED` network); shapes as :func:`loop_step`. The logits
    ``(N, B, classes)``."""
    n, b = x.shape[:2]
    images = pipe(x.flatten(0, 1), members=n)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    # Captured: no autocast cache, which would replay casts of stale weights.
    with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=amp, cache_enabled=not captured):
        logits = fused(images.view(n, b, *images.shape[1:]))
    opt.zero_grad(set_to_none=True)
    _loss(logits, y).backward()
    opt.step()
    return logits


def check(model: str, n: int, batch: int, device: torch.device) -> dict[str, dict[str, float]]:
    """One float32 step of each fused mode and of ``loop`` from the same weights and inputs, no augmentation:
    per fused mode, the largest absolute difference of the logits, of the weights after the step, and of the
    BN running statistics."""
    pipe = Pipeline(device, augment=False)
    g = torch.Generator(device).manual_seed(1)
    x = torch.randint(0, 256, (n, batch, 3, 32, 32), dtype=torch.uint8, device=device, generator=g)
    y = torch.randint(0, 10, (n, batch), device=device, generator=g)
    models = build(model, n, device, channels_last=False)
    fused = {mode: FUSED[mode](models) for mode in FUSED}
    fused_logits = {mode: fused_step(net, torch.optim.SGD(net.parameters(), **SGD), pipe, x, y, False, False)
                    for mode, net in fused.items()}
    worst = {mode: {"logits": 0.0, "weights": 0.0, "buffers": 0.0} for mode in FUSED}
    for i, net in enumerate(models):
        logits = loop_step([net], [torch.optim.SGD(net.parameters(), **SGD)], pipe, x[i : i + 1], y[i : i + 1],
                           False, False)
        weights = {name for name, _ in net.named_parameters()}
        for mode, stacked in fused.items():
            w = worst[mode]
            w["logits"] = max(w["logits"], (logits - fused_logits[mode][i]).abs().max().item())
            member = stacked.member_state_dict(i)
            for name, value in net.state_dict().items():
                if value.dtype.is_floating_point:
                    key = "weights" if name in weights else "buffers"
                    w[key] = max(w[key], (value - member[name]).abs().max().item())
    return worst


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_mode(mode: str, n: int, args: argparse.Namespace, device: torch.device) -> dict[str, object]:
    """Seconds per step of ``mode`` with ``n`` networks (median of ``--repeats`` timings of ``--steps``)."""
    models = build(args.model, n, device, args.channels_last)
    pipe = Pipeline(device, augment=not args.no_augment)
    g = torch.Generator(device).manual_seed(2)
    data = torch.randint(0, 256, (args.pool, 3, 32, 32), dtype=torch.uint8, device=device, generator=g)
    labels = torch.randint(0, 10, (args.pool,), device=device, generator=g)
    step: Callable[[Tensor, Tensor], Tensor]
    example = (torch.empty(n, args.batch_size, 3, 32, 32, dtype=torch.uint8, device="meta"),
               torch.empty(n, args.batch_size, dtype=torch.int64, device="meta"))
    if mode == "loop":
        opts = [torch.optim.SGD(m.parameters(), **SGD) for m in models]

        def step(x: Tensor, y: Tensor) -> Tensor:
            return loop_step(models, opts, pipe, x, y, args.amp, args.channels_last)
    elif mode == "loop-graphs":
        lr = torch.tensor(SGD["lr"], device=device)
        opts = [torch.optim.SGD(m.parameters(), **{**SGD, "lr": lr, "foreach": None, "fused": True}) for m in models]
        looped = CapturedCall(lambda x, y: loop_step(models, opts, pipe, x, y, args.amp, args.channels_last, True),
                              device, [pipe.generator], example=example)

        def step(x: Tensor, y: Tensor) -> Tensor:
            return looped(x, y)
    elif mode == "grouped-graphs":
        # train --fuse --cuda-graphs: the whole step replayed from one graph, the fused SGD kernel reading its
        # rate from a device tensor (on the CPU the same step runs eagerly).
        fused = FusedWRN(models)
        del models
        lr = torch.tensor(SGD["lr"], device=device)
        opt = torch.optim.SGD(fused.parameters(), **{**SGD, "lr": lr, "foreach": None, "fused": True})
        captured = CapturedCall(lambda x, y: fused_step(fused, opt, pipe, x, y, args.amp, args.channels_last, True),
                                device, [pipe.generator], example=example)

        def step(x: Tensor, y: Tensor) -> Tensor:
            return captured(x, y)
    else:
        fused = FUSED[mode](models)
        del models
        opt = torch.optim.SGD(fused.parameters(), **SGD)

        def step(x: Tensor, y: Tensor) -> Tensor:
            return fused_step(fused, opt, pipe, x, y, args.amp, args.channels_last)

    def batch() -> tuple[Tensor, Tensor]:
        idx = torch.randint(0, args.pool, (n, args.batch_size), device=device, generator=g)
        return data[idx], labels[idx]

    logits = None
    for _ in range(args.warmup):
        logits = step(*batch())
    times = []
    for _ in range(args.repeats):
        _sync(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            logits = step(*batch())
        _sync(device)
        times.append((time.perf_counter() - start) / args.steps)
    seconds = sorted(times)[len(times) // 2]
    return {"mode": mode, "members": n, "step_seconds": seconds, "images_per_second": n * args.batch_size / seconds,
            "logits_dtype": str(logits.dtype).replace("torch.", "") if logits is not None else None}


def markdown(meta: dict[str, object], rows: list[dict[str, object]]) -> str:
    lines = [
        f"# N networks trained as one (`vmap`, `grouped`) or one after another (`loop`): {meta['device_name']}",
        "",
        f"`{meta['command']}`; {meta['date']}, commit {meta['commit']}, torch {meta['torch']}. {meta['model']}, "
        f"{meta['batch_size']} images a network a step, augmentation {'off' if meta['no_augment'] else 'on'}, "
        f"autocast {'bfloat16' if meta['amp'] else 'off'}, channels-last {'on' if meta['channels_last'] else 'off'}.",
        "",
        "Check (float32, one step of each mode and of `loop`, same weights and inputs), largest difference: "
        + "; ".join(f"`{mode}`: logits {w['logits']:.2e}, weights after the step {w['weights']:.2e}, running "
                    f"statistics {w['buffers']:.2e}" for mode, w in meta["check"].items()) + ".",
        "",
        "| N | mode | ms per step | images/s (all N) | vs `loop` N = 1 | vs `loop` same N | logits |",
        "|---|---|---|---|---|---|---|",
    ]
    base = next((r for r in rows if r["mode"] == "loop" and r["members"] == 1), None)
    for r in rows:
        same = next((s for s in rows if s["mode"] == "loop" and s["members"] == r["members"]), None)
        ips = r["images_per_second"]
        vs1 = f"{ips / base['images_per_second']:.2f}x" if base else "-"
        vsn = f"{ips / same['images_per_second']:.2f}x" if same else "-"
        lines.append(f"| {r['members']} | {r['mode']} | {1000 * r['step_seconds']:.2f} | {ips:,.0f} | {vs1} | {vsn} "
                     f"| {r['logits_dtype']} |")
    return "\n".join(lines) + "\n"


def _members(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated network counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"network counts must be >= 1, got {text!r}")
    return values


def _modes(text: str) -> list[str]:
    values = text.split(",")
    if not values or any(v not in MODES for v in values):
        raise argparse.ArgumentTypeError(f"expected modes among {MODES}, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--model", default="wrn-40-2")
    p.add_argument("--members", type=_members, default=[1, 4, 8, 16], help="network counts N (default: 1,4,8,16)")
    p.add_argument("--modes", type=_modes, default=list(MODES),
                   help="comma-separated, of loop, vmap, grouped (default: all)")
    p.add_argument("--batch-size", type=int, default=128, help="images a network a step (default: 128)")
    p.add_argument("--steps", type=int, default=20, help="steps per timing (default: 20)")
    p.add_argument("--repeats", type=int, default=3, help="timings per row, the median kept (default: 3)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (default: 5)")
    p.add_argument("--pool", type=int, default=4000, help="images resident on the device (default: 4000)")
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast (GPU)")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--no-augment", action="store_true", help="the network's step alone")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--commit", default=None, help="commit to record (default: the repository's)")
    p.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    meta: dict[str, object] = {
        "command": " ".join(["python", "benchmarks/fused_models.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": args.commit or _runner.source_commit(), "torch": torch.__version__,
        "device_name": _runner.describe_device(device), "model": args.model, "batch_size": args.batch_size,
        "amp": args.amp, "channels_last": args.channels_last, "no_augment": args.no_augment,
        "check": check(args.model, min(2, max(args.members)), min(args.batch_size, 8), device),
    }
    print(f"check: {meta['check']}", flush=True)
    rows = []
    for n in args.members:
        for mode in args.modes:
            row = time_mode(mode, n, args, device)
            print(json.dumps(row), flush=True)
            rows.append(row)
    text = markdown(meta, rows)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
