"""``hba-augment train``: train a network with an augmentation policy and report its test error.

Every option left unset takes the paper's value for the preset and the model's family (appendix table
"Hyperparameters for policy evaluation", see :data:`hba_augment.train.config.PAPER_HPARAMS`);
``--preset`` picks the protocol (e.g. ``--dataset imagefolder --preset cifar10`` for the CIFAR-10 JPEG
copy). Writes ``OUT/result.json`` (``test_error`` in percent, ``test_loss``, per-epoch ``history``,
``config``), ``OUT/history.jsonl`` and ``OUT/checkpoint.pt`` (every epoch, or every ``--checkpoint-every``;
``--resume`` continues).

Started by ``torchrun --nproc-per-node N -m hba_augment train ...`` it trains with DistributedDataParallel
on N processes (``--batch-size`` stays the global batch); see :mod:`hba_augment._distributed`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from hba_augment._cli_common import (
    add_torch_arguments,
    classes,
    milestones,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    run_command,
    seeds,
    setup_torch,
)

__all__ = ["add_train_parser", "build_parser", "main", "run_train"]

_DESCRIPTION = (
    "Train a fresh network with an augmentation policy and measure its test error (the paper's policy "
    "evaluation). Unset options take the paper's value for the preset and model."
)
_POLICY_HELP = (
    "none | baseline (flip + pad-4 crop; nothing for SVHN) | cutout (baseline + Cutout) | autoaugment | "
    "randaugment | trivialaugment (torchvision's, then baseline + Cutout) | hba:<shipped name or schedule "
    "JSON> (HBAPolicy scaled to --epochs, then baseline + Cutout)"
)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    # --help needs no torch import: the datasets and learning-rate schedules are spelled out here (their homes
    # import torch; tests/test_cli.py checks them against those), the rest come from the torch-free config.
    # Every help states its default itself: ArgumentDefaultsHelpFormatter would append a second, raw one
    # ("(default: None)").
    from hba_augment.train.config import EVAL_PRESETS, EVAL_SPLITS

    datasets = ("cifar10", "cifar100", "svhn", "imagefolder")
    g = p.add_argument_group("data")
    g.add_argument("--dataset", choices=datasets, default="cifar10", help="dataset format (default: cifar10)")
    g.add_argument("--data-dir", required=True, help="dataset root (CIFAR: holds cifar-10-batches-py/; "
                   "imagefolder: a tree or a .tar/.tar.gz archive with train/ and test/ or val/)")
    g.add_argument("--train-size", type=positive_int, help="class-balanced subset of the train split (default: all)")
    g.add_argument("--test-size", type=positive_int, help="class-balanced subset of the test split (default: all)")
    g.add_argument("--subset-seed", type=nonneg_int, help="seed of those subsets (default: --seed)")
    g.add_argument("--eval-split", choices=EVAL_SPLITS, default="test",
                   help="test: test on the test split (default); val: test on held-out images of the train split, "
                   "disjoint from the --train-size training images (--test-size of them, default all the rest), "
                   "to tune without looking at the test split")
    g.add_argument("--image-size", type=positive_int, help="resize images to SIZE x SIZE (default: keep their size)")
    g.add_argument("--classes", type=classes, help="use the first N classes, or comma-separated class names (default: all)")
    g.add_argument("--download", action="store_true", help="download CIFAR/SVHN into --data-dir if missing")
    g.add_argument("--num-workers", type=nonneg_int,
                   help="DataLoader workers for the per-image torchvision policies (default: min(8, cores - 1); "
                   "results do not depend on it)")
    g = p.add_argument_group("training")
    g.add_argument("--preset", choices=tuple(EVAL_PRESETS),
                   help="protocol whose settings are the defaults (default: the dataset's; imagenet for imagefolder). "
                   "cifar100 is a preset here and not in the search command: the paper's evaluation table has "
                   "CIFAR-100 rows, while its search ran on Reduced CIFAR-10 only")
    g.add_argument("--model", default="wrn-40-2", help="e.g. wrn-40-2, wrn-28-10, shake-shake-26-2x96d, "
                   "pyramidnet-272-200, resnet-50, alexnet-stn (default: wrn-40-2)")
    g.add_argument("--policy", required=True, metavar="POLICY", help=_POLICY_HELP)
    g.add_argument("--epochs", type=positive_int, help="training epochs (default: the paper's)")
    g.add_argument("--batch-size", type=positive_int, help="batch size (default: the paper's)")
    g.add_argument("--lr", type=nonneg_float, help="initial SGD learning rate (default: the paper's)")
    g.add_argument("--lr-schedule", choices=("cosine", "step", "constant"), help="learning-rate schedule (default: the preset's)")
    g.add_argument("--lr-milestones", type=milestones, help="epochs of the x0.1 drops of --lr-schedule step (default: the preset's)")
    g.add_argument("--wd", type=nonneg_float, help="weight decay (default: the paper's)")
    g.add_argument("--cutout", type=nonneg_int, help="Cutout size (default: 16 CIFAR, 20 SVHN, none ImageNet)")
    g.add_argument("--crop-padding", type=nonneg_int, help="padding of the baseline's random crop, 0 for no crop (default: 4, 0 for SVHN)")
    g.add_argument("--no-flip", dest="flip", action="store_false", default=None,
                   help="no random horizontal flip in the baseline (default: flip, except for SVHN)")
    g.add_argument("--seed", type=seeds, default=(0,), metavar="SEED[,SEED...]",
                   help="seed of the model and all random draws (default: 0); several (0,1,2): one run per seed, "
                   "side by side in this process, each in OUT with {seed} replaced (GPUs, with --cuda-graphs: "
                   "the runs share the GPU where separate processes take turns on it)")
    g.add_argument("--fuse", action="store_true",
                   help="with several seeds: train them as one fused network, one step of all at once (WRNs, "
                   "policies applied on the device: none, baseline, cutout, hba:; GPUs, where one small network "
                   "leaves most of the GPU idle). Each run keeps its initial weights, data order, folder and files; "
                   "the runs share one augmentation stream (same distribution, other draws than alone)")
    add_torch_arguments(g)
    g.add_argument("--amp", action="store_true", default=None,
                   help="bfloat16 autocast (GPUs, and CPUs with bfloat16 matrix units such as Intel AMX, where a "
                   "WRN trained about 2.5x faster; default: off)")
    g.add_argument("--compile", action="store_true", default=None,
                   help="train through torch.compile, and on GPUs an hba: policy's pixel work too (GPUs, where steps are "
                   "launch bound; default: off)")
    g.add_argument("--cuda-graphs", action="store_true", default=None,
                   help="replay each training step from one captured CUDA graph (GPUs, where steps are launch "
                   "bound; one process, not with --compile; default: off)")
    g.add_argument("--no-channels-last", dest="channels_last", action="store_false", default=None,
                   help="keep the model in NCHW memory format (default: channels-last)")
    g.add_argument("--eval-every", type=nonneg_int, default=10,
                   help="test every N epochs, 0 for only after the last epoch, which is always tested "
                   "(default: 10)")
    g.add_argument("--eval-batch-size", type=positive_int, default=500, help="batch size of testing (default: 500)")
    g.add_argument("--checkpoint-every", type=nonneg_int, default=1, metavar="N",
                   help="write OUT/checkpoint.pt every N epochs and after the last, 0 for only after the last: "
                   "what an interrupted run loses, against the time writing takes (default: 1)")
    g.add_argument("--dist-timeout", type=positive_float, default=1800.0, metavar="SECONDS",
                   help="under torchrun: how long a process waits for the others before the run fails "
                   "(default: 1800)")
    g = p.add_argument_group("output")
    g.add_argument("--out", required=True, help="output folder: result.json, history.jsonl, checkpoint.pt; "
                   "{seed} in it is replaced by the run's seed (required with several seeds)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if it exists")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar (it is shown only on a terminal anyway)")


def add_train_parser(subparsers: Any, prog: str | None = None) -> argparse.ArgumentParser:
    """Add the ``train`` subcommand to an ``argparse`` subparsers object; returns its parser."""
    kwargs = {"prog": prog} if prog else {}
    p = subparsers.add_parser("train", help="train a network with a policy and report its test error",
                              description=_DESCRIPTION, **kwargs)
    _add_arguments(p)
    p.set_defaults(func=run_train)
    return p


def build_parser(prog: str = "hba-augment train") -> argparse.ArgumentParser:
    """The argument parser of ``hba-augment train``."""
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION)
    _add_arguments(p)
    return p


def run_train(args: argparse.Namespace, prog: str = "hba-augment train", command: str | None = None) -> int:
    """Run ``hba-augment train`` from parsed arguments; returns the exit status.

    0: done; 1: the training diverged; 2: bad input (message on stderr); 3: a distributed run lost a
    process or timed out; 130: interrupted.
    """
    from hba_augment import _distributed
    from hba_augment.train.fused import train_fused
    from hba_augment.train.trainer import (
        TrainConfig,
        TrainingDivergedError,
        train_and_evaluate,
        train_side_by_side,
    )

    requested = setup_torch(args.threads, args.device)

    def body() -> str:
        with _distributed.session(requested, timeout=args.dist_timeout) as (ctx, device):
            text = _train(device)
        return text if ctx.is_main else ""

    def _train(device: str) -> str:
        configs = [_config(device, seed) for seed in args.seed]
        outs = [args.out.replace("{seed}", str(seed)) for seed in args.seed]
        if len(configs) > 1:
            if len(set(outs)) == 1:
                raise ValueError(f"--out {args.out!r} must contain {{seed}} with several seeds (each run writes "
                                 "its own folder), e.g. runs/trivialaugment-{seed}")
            if args.fuse:
                results = train_fused(configs, outs, resume=args.resume, command=command)
                return "\n".join(f"seed {seed}: {_describe(config, result)}"
                                  for seed, config, result in zip(args.seed, configs, results, strict=True))
            return _side_by_side(configs, outs)
        result = train_and_evaluate(configs[0], outs[0], resume=args.resume, command=command, progress=args.progress)
        return _describe(configs[0], result)

    def _side_by_side(configs: list[Any], outs: list[str]) -> str:
        outcomes = train_side_by_side(configs, outs, resume=args.resume, command=command)
        lines = [f"seed {seed}: {_describe(config, o.value)}"
                 for seed, config, o in zip(args.seed, configs, outcomes, strict=True) if o.error is None]
        failed = [(seed, o.error) for seed, o in zip(args.seed, outcomes, strict=True) if o.error is not None]
        if not failed:
            return "\n".join(lines)
        if lines:
            print("\n".join(lines), flush=True)
        for seed, error in failed:
            print(f"{prog}: seed {seed}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        # The exit status of the gravest failure: a bug's traceback, else bad input (2), else divergence (1).
        unexpected = [e for _, e in failed if not isinstance(e, (ValueError, FileNotFoundError, TrainingDivergedError))]
        if unexpected:
            raise unexpected[0]
        seeds_failed = ", ".join(str(seed) for seed, _ in failed)
        if all(isinstance(e, TrainingDivergedError) for _, e in failed):
            raise TrainingDivergedError(f"seed(s) {seeds_failed} diverged (above)")
        raise ValueError(f"seed(s) {seeds_failed} failed (above)")

    def _describe(config: Any, result: Any) -> str:
        what = "test" if config.eval_split == "test" else "validation"
        return f"{what} error {result.test_error:.2f}% ({what} loss {result.test_loss:.4f}): {result.files['result']}"

    def _config(device: str, seed: int) -> Any:
        return TrainConfig.from_preset(
            args.preset, dataset=args.dataset, data_dir=args.data_dir, model=args.model, policy=args.policy,
            epochs=args.epochs, train_size=args.train_size, test_size=args.test_size, subset_seed=args.subset_seed,
            eval_split=args.eval_split,
            batch_size=args.batch_size, lr=args.lr, lr_schedule=args.lr_schedule, lr_milestones=args.lr_milestones,
            wd=args.wd, seed=seed, device=device, image_size=args.image_size, classes=args.classes,
            download=args.download or None, flip=args.flip, crop_padding=args.crop_padding, cutout=args.cutout,
            num_workers=args.num_workers, eval_every=args.eval_every, eval_batch_size=args.eval_batch_size,
            checkpoint_every=args.checkpoint_every,
            channels_last=args.channels_last, amp=args.amp, compile=args.compile, cuda_graphs=args.cuda_graphs,
        )

    return run_command(prog, body, TrainingDivergedError,
                       out=args.out.replace("{seed}", str(args.seed[0])) if len(args.seed) == 1 else None)


def main(argv: Sequence[str] | None = None, prog: str = "hba-augment train") -> int:
    """Entry point (``hba-augment train ...``); returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(prog).parse_args(argv)
    return run_train(args, prog=prog, command=shlex.join([*prog.split(), *argv]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
