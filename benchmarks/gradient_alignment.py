"""Does a horizon-free objective see which ops help? Per-op gradient alignment along a training (issue 20)

The paper's objective is greedy: its hypernetwork estimates how the validation loss changes after one SGD
step on augmented images, a change whose first-order term is ``-lr <g_aug, g_val>`` (the training gradient on
the augmented batch against the validation gradient). Measured, the hypergradient is mostly noise (|t| about
1-2 per epoch) and, where it separates the ops, it takes augmentation away late in training. Deep
AutoAugment (Zheng et al., ICLR 2022) scores augmentations by the *cosine* of the same two gradients
instead: an augmentation is good when the step it causes points where the validation loss falls, whatever
the step's length. This probe measures, without any search, what both scores say about each op of this
space along one training:

1. a *trunk* network trained with the ``--init`` policy held (the search's model, split, optimiser and
   learning-rate schedule; :class:`hba_augment.search._member.Worker`), stopped at each ``--at`` epoch;
2. there, the network (batch norm in training mode, its running statistics left alone) gives the
   gradient of the mean loss over ``--val-images`` clean validation images, ``g_val``, and for each of
   ``--batches`` fixed training batches the gradient of the same images with every *variant* applied to all
   of them: no op (``identity``), and each op at each ``--fractions`` of its range (a random sign per image
   for the signed ops; the three ops without a magnitude once). Flip, crop and Cutout follow the policy op
   with the same draws for every variant, so within a batch the variants differ only by the op (common
   random numbers): a variant's difference from ``identity`` is paired. Two references are scored beside
   them: ``held-out``, a batch of clean validation images outside ``g_val``'s (new data: what augmentation
   at best stands in for; other images, so not paired), and ``wrong-labels``, the batch's own images with
   every label replaced by another class (a gradient that only unlearns, which a useful score must not
   reward).

The report gives, per epoch and variant, the paired difference from ``identity`` of

- ``cos``: Deep AutoAugment's alignment, the cosine of ``g_aug`` and ``g_val``;
- ``dot``: a one-step look-ahead's first-order gain, ``<g_aug, g_val> / |g_val|^2`` (a step of rate ``lr``
  along ``g_aug`` lowers the validation loss by about ``lr |g_val|^2`` times it);
- ``dot_head``: the part of ``dot`` in the classifier (the last linear layer), where a gradient that only
  makes the network less confident, or shifts its class priors, shows most;

with their paired t over batches, and, with several ``--seeds``, the rank correlation (Spearman) of the
variants' mean scores between seeds. What would make such a score a search signal: |t| well above the
hypergradient's 1-2 from a few batches, a ranking two seeds share, and not a preference for ``identity``
over every op (that would be the greedy objective's drift to no augmentation again), nor a high score for
``wrong-labels``.

Results are one JSON file per (seed, epoch) under ``--out`` (reused on a rerun, so an interrupted probe
continues); ``--report-only`` writes the table from them.

Usage::

    python benchmarks/gradient_alignment.py --data-dir ../shared/data/cifar-10-jpeg.tar.gz --model wrn-16-1 \\
        --epochs 100 --at 1,10,30,60,90 --seeds 0 --batches 12 --out benchmarks/results/gradient_alignment/proxy_controls
    python benchmarks/gradient_alignment.py --out benchmarks/results/gradient_alignment/proxy_controls --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hba_augment import functional
from hba_augment._runner import baseline_augment, source_commit
from hba_augment.search._member import Worker, member_seed
from hba_augment.search.loop import SearchConfig, _frozen_bn_statistics, load_search_data
from hba_augment.search.priors import prior_policy

RESULTS_FOLDER = "results"
REPORT_FILE = "gradient_alignment.md"
IDENTITY = "identity"
# Two references beside the ops: new clean images (what an augmentation at best stands in for), and the
# batch's own images with every label wrong (a gradient that only unlearns: what a score must not reward).
HELD_OUT, WRONG_LABELS = "held-out", "wrong-labels"
CONTROLS = (HELD_OUT, WRONG_LABELS)
# Seed streams of the probe's own draws (the trunk's use member_seed(seed, 0, 0..2)).
_BATCH_STREAM, _SIGN_STREAM, _BASELINE_STREAM, _VAL_STREAM = 11, 12, 13, 14


def variants(fractions: list[float]) -> dict[str, tuple[str | None, float | None]]:
    """Every variant the probe compares, by name: ``(op, fraction of its range)``; ``identity`` is ``(None,
    None)`` and an op without a magnitude has fraction ``None``."""
    out: dict[str, tuple[str | None, float | None]] = {IDENTITY: (None, None)}
    for spec in functional.OPS:
        if not spec.has_magnitude:
            out[spec.name] = (spec.name, None)
            continue
        for f in fractions:
            out[f"{spec.name}@{f:g}"] = (spec.name, f)
    return out


def apply_variant(x: Tensor, op: str | None, fraction: float | None, sign: Tensor,
                  generator: torch.Generator) -> Tensor:
    """uint8 images ``x`` ``(B, C, H, W)`` with ``op`` at ``fraction`` of its range applied to all of them
    (``sign`` ``(B,)`` of +-1 for the signed ops; ``generator`` draws the Cutout op's centres)."""
    if op is None:
        return x
    spec = functional.OPS[functional.op_index(op)]
    if fraction is None:
        return functional.apply_op(x, op)
    value = spec.low + fraction * (spec.high - spec.low)
    magnitude = torch.full((len(x),), value, dtype=torch.float32, device=x.device)
    return functional.apply_op(x, op, magnitude * sign if spec.signed else magnitude, generator=generator)


def validation_parts(images: Tensor, labels: Tensor, count: int, seed: int) -> tuple[tuple[Tensor, Tensor], ...]:
    """The validation split in two: ``count`` images for ``g_val`` and the rest for the held-out batches,
    each ``(images, labels)``.

    A split lists its images in the dataset's order, which for an image folder is class by class: a prefix
    would hold only some classes. A fixed shuffle gives both parts every class."""
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(member_seed(seed, _VAL_STREAM, 0)))
    order = order.to(labels.device)
    return (images[order[:count]], labels[order[:count]]), (images[order[count:]], labels[order[count:]])


def _head_mask(model: nn.Module, params: list[Tensor]) -> Tensor:
    """1 on the flat gradient's entries of the classifier (the network's last ``nn.Linear``), 0 elsewhere."""
    head = {id(p) for p in [m for m in model.modules() if isinstance(m, nn.Linear)][-1].parameters()}
    return torch.cat([torch.full((p.numel(),), float(id(p) in head), device=p.device) for p in params])


def _flat_grad(model: nn.Module, params: list[Tensor], x: Tensor, y: Tensor,
               layout: Callable[[Tensor], Tensor]) -> Tensor:
    loss = F.cross_entropy(model(layout(x)).float(), y)
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])


def probe(worker: Worker, args: argparse.Namespace, seed: int) -> dict:
    """The scores of every variant on ``worker``'s member 0 as it is now (see the module docstring)."""
    model = worker.members[0].model
    # Training mode, as a step sees the network; batch statistics, the running ones left alone (the trunk
    # trains on after the probe). torch.autograd.grad leaves the parameters' .grad untouched.
    with _frozen_bn_statistics(model):
        return _probe(worker, model.train(), args, seed)


def _probe(worker: Worker, model: nn.Module, args: argparse.Namespace, seed: int) -> dict:
    cfg = worker.config
    params = [p for p in model.parameters() if p.requires_grad]
    head = _head_mask(model, params)
    (val_x, val_y), (fresh_x, fresh_y) = validation_parts(worker.val_x, worker.val_y, args.val_images, seed)
    g_val = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32, device=worker.device)
    for start in range(0, len(val_y), args.batch_size):  # the mean loss's gradient, chunk by chunk
        x, y = val_x[start : start + args.batch_size], val_y[start : start + args.batch_size]
        g_val += _flat_grad(model, params, worker.normalise(x), y, worker.layout) * (len(y) / len(val_y))
    val_sq = g_val.dot(g_val)
    val_head = g_val * head
    names = variants(args.fractions)
    # Per variant and batch: |g|, <g, g_val>, <g, g_val in the classifier>; read on the host once, at the end.
    sums: dict[str, list[Tensor]] = {n: [] for n in [*names, *CONTROLS]}
    g_batch = torch.Generator().manual_seed(member_seed(seed, _BATCH_STREAM, 0))
    for b in range(args.batches):
        idx = torch.randperm(worker.n_train, generator=g_batch)[: args.batch_size].to(worker.device)
        x, y = worker.train_x[idx], worker.train_y[idx]
        g_sign = torch.Generator(device=worker.device).manual_seed(member_seed(seed, _SIGN_STREAM, b))
        sign = torch.randint(0, 2, (len(y),), generator=g_sign, device=worker.device).float().mul_(2).sub_(1)
        wrong = (y + torch.randint(1, worker.num_classes, y.shape, generator=g_sign, device=y.device)) % worker.num_classes
        fresh = torch.arange(b * len(y), (b + 1) * len(y), device=worker.device) % len(fresh_y)
        batches = {name: (apply_variant(x, op, fraction, sign, g_sign), y) for name, (op, fraction) in names.items()}
        batches[HELD_OUT] = (fresh_x[fresh], fresh_y[fresh])
        batches[WRONG_LABELS] = (x, wrong)
        for name, (images, labels) in batches.items():
            g_base = torch.Generator(device=worker.device).manual_seed(member_seed(seed, _BASELINE_STREAM, b))
            z = baseline_augment(worker.normalise(images), flip=cfg.flip, crop_padding=cfg.crop_padding,
                                 cutout=cfg.cutout, generator=g_base)
            g = _flat_grad(model, params, z, labels, worker.layout)
            sums[name].append(torch.stack([g.norm(), g.dot(g_val), g.dot(val_head)]))
    val_sq = float(val_sq)
    scores = {}
    for name, rows in sums.items():
        norm, dot, dot_head = torch.stack(rows).T.double().tolist()
        scores[name] = {"cos": [d / (n * math.sqrt(val_sq)) for d, n in zip(dot, norm, strict=True)],
                        "dot": [d / val_sq for d in dot], "dot_head": [h / val_sq for h in dot_head], "norm": norm}
    return {"val_grad_norm": math.sqrt(val_sq), "scores": scores}


def _config(args: argparse.Namespace, seed: int) -> SearchConfig:
    config = SearchConfig.from_preset(
        args.preset, dataset=args.dataset, data_dir=args.data_dir, model=args.model, epochs=args.epochs,
        init=args.init, lr=args.lr, wd=args.wd, seed=seed, device=args.device, amp=args.amp,
        train_size=args.train_size, val_size=args.val_size, batch_size=args.batch_size)
    config.validate()
    return config


def _result_path(out: Path, seed: int, epoch: int) -> Path:
    return out / RESULTS_FOLDER / f"seed{seed}_epoch{epoch:03d}.json"


def run(args: argparse.Namespace) -> None:
    out = Path(args.out)
    (out / RESULTS_FOLDER).mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(args.threads)
    start = prior_policy(args.init)
    for seed in args.seeds:
        todo = [e for e in args.at if not _result_path(out, seed, e).exists()]
        if not todo:
            continue
        config = _config(args, seed)
        train, val, source = load_search_data(config)
        worker = Worker(config, train, val, [0])
        done = 0
        with tempfile.TemporaryDirectory() as tmp:
            for epoch in sorted(args.at):  # the trunk walks through every probe epoch, done or not
                t0 = time.perf_counter()
                if epoch > done:
                    record = worker.run_round([{"member": 0, "prob": start.prob, "mag": start.mag,
                                                "epochs": epoch - done, "save": str(Path(tmp) / "trunk.pt"),
                                                "weights": None, "streams": None}])[0]
                    done = epoch
                    print(f"seed {seed}: trunk at epoch {epoch} (val acc {record['val_acc']:.4f}, "
                          f"{time.perf_counter() - t0:.0f} s)", flush=True)
                if epoch not in todo:
                    continue
                t0 = time.perf_counter()
                result = probe(worker, args, seed)
                result.update({
                    "seed": seed, "epoch": epoch, "trunk_val_acc": record["val_acc"],
                    "trunk_train_acc": record["train_acc"], "batches": args.batches,
                    "config": {"model": config.model, "epochs": config.epochs, "init": args.init, "amp": config.amp,
                               "lr": config.lr, "wd": config.wd, "train_size": config.train_size,
                               "val_size": config.val_size, "val_images": args.val_images, "batch_size": args.batch_size,
                               "fractions": args.fractions, "device": args.device, "source": source},
                    "seconds": time.perf_counter() - t0,
                    "command": args.command,
                })
                _result_path(out, seed, epoch).write_text(json.dumps(result, indent=1) + "\n")
                print(f"seed {seed}: probed epoch {epoch} ({result['seconds']:.0f} s)", flush=True)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _paired(result: dict, name: str, score: str) -> tuple[float, float]:
    """Mean and paired t over batches of ``name``'s ``score`` minus ``identity``'s."""
    diff = np.array(result["scores"][name][score]) - np.array(result["scores"][IDENTITY][score])
    se = float(np.std(diff, ddof=1)) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
    return float(np.mean(diff)), (float(np.mean(diff)) / se if se > 0 else math.nan)


def report(out: Path, command: str) -> str:
    """The Markdown tables of every result under ``out``."""
    results = [json.loads(p.read_text()) for p in sorted((out / RESULTS_FOLDER).glob("*.json"))]
    if not results:
        raise SystemExit(f"no results under {out / RESULTS_FOLDER}")
    cfg = results[0]["config"]
    runs = sorted({r["command"] for r in results})
    seeds = sorted({r["seed"] for r in results})
    epochs = sorted({r["epoch"] for r in results})
    names = [n for n in results[0]["scores"] if n != IDENTITY and n not in CONTROLS]
    lines = [
        "# Per-op gradient alignment along a training",
        "",
        *[f"- Run: `{run}`" for run in runs],
        f"- Report: `{command}`",
        f"- Commit: {source_commit() or 'unknown'}; date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}; "
        f"{platform.machine()}, torch {torch.__version__}",
        f"- Trunk: {cfg['model']}, {cfg['epochs']}-epoch cosine schedule, lr {cfg['lr']}, wd {cfg['wd']}, "
        f"{cfg['train_size']} training images ({cfg['source']}), `{cfg['init']}` held; seeds {seeds}",
        f"- Probe: {cfg['val_images']} clean validation images for `g_val`; {results[0]['batches']} fixed training "
        f"batches of {cfg['batch_size']}, every variant on all of a batch's images, flip, crop and Cutout drawn "
        "alike for every variant",
        "- `cos`: cosine of the augmented batch's gradient with `g_val` (Deep AutoAugment's score); `dot`: "
        "`<g_aug, g_val> / |g_val|^2` (a one-step look-ahead's first-order gain); `dot_head`: the part of "
        "`dot` in the classifier's weights and bias. Each: the variant minus `identity` on the same batch, mean "
        "and paired t over batches, per seed (`s0 / s1 / ...`).",
        "",
        "| epoch | seed | trunk val acc | identity cos | identity dot | variants with cos above identity (t > 2) "
        "| below (t < -2) | dot above (t > 2) | below (t < -2) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by_key = {(r["seed"], r["epoch"]): r for r in results}
    for epoch in epochs:
        for seed in seeds:
            r = by_key.get((seed, epoch))
            if r is None:
                continue
            counts = []
            for score in ("cos", "dot"):
                ts = [_paired(r, n, score)[1] for n in names]
                counts += [sum(t > 2 for t in ts), sum(t < -2 for t in ts)]
            ident = r["scores"][IDENTITY]
            lines.append(f"| {epoch} | {seed} | {r['trunk_val_acc']:.3f} | {np.mean(ident['cos']):.3f} | "
                         f"{np.mean(ident['dot']):.3f} | {counts[0]} | {counts[1]} | {counts[2]} | {counts[3]} |")
    for score in ("cos", "dot", "dot_head"):
        lines += ["", f"## `{score}`: variant minus identity, mean (paired t), per seed", "",
                  "| variant | " + " | ".join(f"epoch {e}" for e in epochs) + " |",
                  "|---|" + "---|" * len(epochs)]
        scale = 1000.0 if score == "cos" else 100.0
        controls = [c for c in CONTROLS if c in results[0]["scores"]]
        for n in [*names, *controls]:
            cells = []
            for e in epochs:
                parts = []
                for s in seeds:
                    r = by_key.get((s, e))
                    if r is not None:
                        m, t = _paired(r, n, score)
                        parts.append(f"{m * scale:+.2f} ({t:+.1f})")
                cells.append(" / ".join(parts))
            lines.append(f"| {'*' + n + '*' if n in controls else n} | " + " | ".join(cells) + " |")
        lines.append(f"\n(`{score}` differences times {scale:,.0f}. In italics, the references: *{HELD_OUT}*, a batch "
                     f"of clean validation images outside `g_val`'s (not paired: other images); *{WRONG_LABELS}*, "
                     "the batch's own images with every label wrong.)")
        if len(seeds) > 1:
            rows = []
            for e in epochs:
                means = {s: np.array([_paired(by_key[(s, e)], n, score)[0] for n in names])
                         for s in seeds if (s, e) in by_key}
                if len(means) > 1:
                    ks = sorted(means)
                    rho = [_spearman(means[a], means[b]) for i, a in enumerate(ks) for b in ks[i + 1:]]
                    rows.append(f"| {e} | {', '.join(f'{x:+.2f}' for x in rho)} |")
            lines += ["", f"Rank agreement of the variants' mean `{score}` between seeds (Spearman):", "",
                      "| epoch | rho between seeds |", "|---|---|", *rows]
    return "\n".join(lines) + "\n"


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder of the results and the report")
    p.add_argument("--report-only", action="store_true", help="write the report from the results found")
    p.add_argument("--dataset", default="imagefolder")
    p.add_argument("--data-dir", default="../shared/data/cifar-10-jpeg.tar.gz")
    p.add_argument("--preset", default="cifar10")
    p.add_argument("--model", default="wrn-16-1")
    p.add_argument("--epochs", type=int, default=100, help="the trunk's learning-rate schedule length (epochs)")
    p.add_argument("--at", type=_ints, default=[1, 10, 30, 60, 90], help="comma-separated probe epochs")
    p.add_argument("--seeds", type=_ints, default=[0], help="comma-separated seeds (split, network, draws)")
    p.add_argument("--init", default="zero", help="the trunk's policy, as the search's --init (default: zero, "
                   "PBA's start: flip, crop and Cutout only)")
    p.add_argument("--fractions", type=_floats, default=[0.3, 0.9],
                   help="comma-separated fractions of each op's range")
    p.add_argument("--batches", type=int, default=12, help="training batches per probe")
    p.add_argument("--val-images", type=int, default=1024, help="validation images of g_val")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--wd", type=float, default=0.0005)
    p.add_argument("--train-size", type=int, default=4000)
    p.add_argument("--val-size", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast for the trunk's training (GPUs); the "
                   "probe's gradients stay float32")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    args.command = "python " + " ".join([Path(sys.argv[0]).as_posix() if argv is None else "gradient_alignment.py",
                                         *(sys.argv[1:] if argv is None else argv)])
    out = Path(args.out)
    if not args.report_only:
        if any(f < 0 or f > 1 for f in args.fractions):
            p.error(f"--fractions must lie in [0, 1], got {args.fractions}")
        if not args.at or min(args.at) < 1 or max(args.at) > args.epochs:
            p.error(f"--at must name epochs in [1, --epochs = {args.epochs}], got {args.at}")
        if args.val_size < args.val_images + args.batch_size:
            p.error(f"--val-size ({args.val_size}) must hold --val-images ({args.val_images}) and one more batch "
                    f"({args.batch_size}) of held-out images")
        run(args)
    text = report(out, args.command)
    (out / REPORT_FILE).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
