"""``hba-augment search``: run the hypernetwork search (or, with ``--objective population``, the population
search of :mod:`hba_augment.search.population`) and write a schedule.

Every option left unset takes the value of the preset (the paper's settings for the dataset, see
:data:`hba_augment.search._presets.PRESETS`); ``--preset`` picks another one (e.g. ``--dataset imagefolder
--preset cifar10`` for the CIFAR-10 JPEG copy).

Started by ``torchrun --nproc-per-node N -m hba_augment search ...`` it runs data-parallel on N processes
(``--batch-size`` stays the global batch); see :mod:`hba_augment._distributed`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hba_augment._cli_common import (
    add_torch_arguments,
    classes,
    milestones,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    run_command,
    setup_torch,
)

if TYPE_CHECKING:  # the loop imports torch; --help must not
    from hba_augment.search.loop import SearchConfig
    from hba_augment.search.population import PopulationConfig

__all__ = ["build_parser", "check_objective_options", "config_from_args", "default_name", "main",
           "population_config_from_args"]


def default_name(out: str, dataset: str, model: str) -> str:
    """A search's schedule name when ``--name`` is not given: its output folder's name.

    A run is named after what it is, not after its preset (whose name is also a shipped schedule's), so
    that ``show``, ``repr`` and the plot tell a user's schedule from the shipped one. An output folder
    without a name (the file-system root) gives ``<dataset>-<model>``.
    """
    return Path(out).expanduser().resolve().name or f"{dataset}-{model}"


def _init(text: str) -> str:
    """``--init``: a starting-policy name or schedule file, checked without importing torch (a file's content is
    checked when the search builds its prior)."""
    from hba_augment.search.priors import parse_init

    try:
        parse_init(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _count_probs(text: str) -> tuple[float, ...]:
    """``--count-probs``: comma-separated probabilities (fractions such as 1/14 allowed)."""
    values = []
    for item in text.split(","):
        num, sep, den = item.strip().partition("/")
        try:
            values.append(float(num) / float(den) if sep else float(num))
        except (ValueError, ZeroDivisionError):
            raise argparse.ArgumentTypeError(f"expected comma-separated probabilities such as 0.2,0.3,0.5, "
                                             f"got {text!r}") from None
    from hba_augment._space import check_count_probs  # the package's one check (torch-free)

    try:
        return check_count_probs(values)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected probabilities in [0, 1] summing to 1, got {text!r} ({e})") from None


# Options of the hypernetwork and teacher objectives (attribute names), which a population search refuses
# when they differ from the parser's defaults: its members have no lambda.
_LAMBDA_OPTIONS = ("strategy", "hparam_lr", "sigma", "t_train", "t_val", "prior_decay", "hparam_accumulate",
                   "teacher_estimator", "teacher_weight", "teacher_decay", "val_bn", "hyper_input")
# Options of the population search (default None: "not given"), which the other objectives refuse.
_POPULATION_OPTIONS = ("population", "exploit_every", "member_start", "score_ema", "amount", "amount_profile",
                       "resample", "vary", "population_procs", "population_lanes", "population_fuse")


def _flag(attr: str) -> str:
    return "--" + attr.replace("_", "-")


def _population(text: str) -> int:
    """``--population``: an int >= 2."""
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"a population needs at least 2 members, got {text!r}")
    return value


def check_objective_options(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> None:
    """Refuse options that the chosen ``--objective`` does not use (``parser``: the one that parsed ``args``,
    whose defaults tell what was given; default :func:`build_parser`).

    Raises:
        ValueError: naming the option and the objective.
    """
    if args.objective == "population":
        parser = build_parser() if parser is None else parser
        for attr in _LAMBDA_OPTIONS:
            if getattr(args, attr) != parser.get_default(attr):
                raise ValueError(f"{_flag(attr)} {getattr(args, attr)} does not apply to --objective population (its "
                                 "members have no lambda)")
    else:
        for attr in _POPULATION_OPTIONS:
            if getattr(args, attr) is not None:
                raise ValueError(f"{_flag(attr)} {getattr(args, attr)} applies to --objective population only, not "
                                 f"{args.objective!r}")


def population_config_from_args(args: argparse.Namespace, device: str,
                                search: SearchConfig | None = None) -> PopulationConfig:
    """The :class:`~hba_augment.search.population.PopulationConfig` of parsed ``--objective population``
    arguments: the search's settings (``search``, default :func:`config_from_args`) and the population's."""
    from hba_augment.search.population import PopulationConfig

    # Options not given keep the config's defaults (one home for each).
    given = {k: getattr(args, k) for k in ("population", "member_start", "amount", "amount_profile", "resample",
                                        "vary")
             if getattr(args, k) is not None}
    return PopulationConfig(search=config_from_args(args, device) if search is None else search, **given,
                            exploit_every=args.exploit_every, score_ema=args.score_ema,
                            population_procs=args.population_procs,
                            **({} if args.population_lanes is None else {"population_lanes": args.population_lanes}),
                            **({} if args.population_fuse is None else {"population_fuse": args.population_fuse}))


def _preset_table() -> str:
    from hba_augment.search._presets import DEFAULT_PRESET, PRESETS

    keys = ("epochs", "train_size", "val_size", "lr", "lr_schedule", "lr_milestones", "wd", "hparam_lr", "flip",
            "crop_padding", "cutout", "image_size", "classes")
    lines = ["presets (the paper's search settings; every option overrides its preset value):"]
    for name, values in PRESETS.items():
        used_by = ", ".join(d for d, p in DEFAULT_PRESET.items() if p == name)
        shown = ", ".join(f"{k}={values[k]}" for k in keys if k in values)
        lines.append(f"  {name} (default for {used_by}): {shown}")
    lines.append("Always (unless given): model wrn-40-2, strategy first-bn, batch 128, sigma 1, t_train 2, t_val 1, "
                 "SGD momentum 0.9 Nesterov, Adam for the hyperparameters.")
    return "\n".join(lines)


def build_parser(prog: str = "hba-augment search") -> argparse.ArgumentParser:
    """The argument parser of ``hba-augment search``."""
    # Neither imports torch: --help stays fast.
    from hba_augment.search.config import HYPER_INPUTS, OBJECTIVES, TEACHER_ESTIMATORS, VAL_BN
    from hba_augment.search.pbt import (
        AMOUNTS,
        DEFAULT_MEMBER_START,
        DEFAULT_POPULATION,
        MEMBER_STARTS,
        RESAMPLES,
        VARIES,
    )

    datasets = ("cifar10", "cifar100", "svhn", "imagefolder")
    strategies = ("first-bn", "first-conv", "bn", "conv", "conv+bn", "all")
    p = argparse.ArgumentParser(
        prog=prog,
        description="Learn an HBA augmentation schedule with the hypernetwork search (Chen & Chang 2021, "
        "Algorithm 2), or with PBA's population search (--objective population). Writes OUT/schedule.json, "
        "OUT/metrics.jsonl, OUT/schedule.png and OUT/checkpoint.pt.",
        epilog=_preset_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    preset = " (default: from the preset)"
    g = p.add_argument_group("data")
    g.add_argument("--dataset", choices=datasets, default="cifar10", help="dataset format (default: cifar10)")
    g.add_argument("--data-dir", required=True, help="dataset root (CIFAR: the folder holding cifar-10-batches-py/; "
                   "imagefolder: a tree or a .tar/.tar.gz archive of one)")
    g.add_argument("--train-size", type=positive_int, help="training images, class-balanced" + preset)
    g.add_argument("--val-size", type=positive_int, help="validation images, class-balanced, disjoint" + preset)
    g.add_argument("--image-size", type=positive_int, help="resize images to SIZE x SIZE" + preset)
    g.add_argument("--classes", type=classes, help="the first N classes, or comma-separated class names" + preset)
    g.add_argument("--download", action="store_true", help="download CIFAR/SVHN into --data-dir if missing")
    g = p.add_argument_group("search")
    g.add_argument("--preset", choices=("cifar10", "svhn", "imagenet"),
                   help="settings preset (default: cifar10 for CIFAR-10 and CIFAR-100, svhn for SVHN, imagenet "
                   "for imagefolder). There is no cifar100 preset, unlike 'hba-augment train': the paper "
                   "searches on Reduced CIFAR-10 only and has no CIFAR-100 search settings")
    g.add_argument("--model", default="wrn-40-2", help="model, e.g. wrn-40-2, wrn-28-10, wrn-10-1 (default: wrn-40-2)")
    g.add_argument("--strategy", choices=strategies, default="first-bn",
                   help="layers that get hyper-layers (default: first-bn)")
    g.add_argument("--epochs", type=positive_int, help="search epochs = schedule entries" + preset)
    g.add_argument("--batch-size", type=positive_int, default=128, help="batch size (default: 128)")
    g.add_argument("--lr", type=nonneg_float, help="SGD learning rate of the network" + preset)
    g.add_argument("--lr-schedule", choices=("cosine", "step", "constant"), help="SGD learning-rate schedule" + preset)
    g.add_argument("--lr-milestones", type=milestones, help="epochs of the x0.1 drops of 'step', e.g. 90,180,240"
                   + preset)
    g.add_argument("--wd", type=nonneg_float, help="weight decay" + preset)
    g.add_argument("--hparam-lr", type=nonneg_float, help="Adam learning rate of the hyperparameters" + preset)
    g.add_argument("--sigma", type=nonneg_float, default=1.0, help="std of the per-image perturbation (default: 1)")
    g.add_argument("--t-train", type=positive_int, default=2, help="SGD steps per outer iteration (default: 2)")
    g.add_argument("--t-val", type=nonneg_int, default=1, help="hyperparameter steps per outer iteration (default: 1)")
    g.add_argument("--init", type=_init, default="paper",
                   metavar="{paper,identity,zero,uniform:F,trivialaugment,FILE.json}",
                   help="starting policy (hba_augment.search.priors): paper = every value at 0.95 lo + 0.05 hi "
                   "(default); identity = the same, but the four PIL enhancers' factors start at their identity 1 "
                   "instead of 0.19; zero = PBA's start, every probability 0 and every magnitude at the low end of "
                   "its range; uniform:F = every probability F and every magnitude at the fraction F of its "
                   "range; trivialaugment = TrivialAugment in this space (one op per image, nearly uniform over "
                   "ops, magnitudes at 21%% and 79%% of the range); FILE.json = a schedule file's last entry, with "
                   "its count_probs (refine a schedule you have; its SHA-256 goes into the provenance)")
    g.add_argument("--prior-decay", type=nonneg_float, default=0.0,
                   help="after every hyperparameter step, pull lambda towards its start by hparam_lr x this "
                   "fraction of the distance (0: none, the paper; default: 0)")
    g.add_argument("--hparam-accumulate", type=positive_int, default=1, metavar="N",
                   help="one hyperparameter step per N validation steps, with their mean gradient (default: 1)")
    g.add_argument("--objective", choices=(*OBJECTIVES, "population"), default="hypernetwork",
                   help="what lambda learns from: hypernetwork = the validation loss through the hyper-layers (the "
                   "paper; default); teacher = TeachAugment's: augmentations hard for the network and easy for its "
                   "moving-average teacher, estimated from the per-image perturbations (no validation steps); "
                   "population = no lambda: PBA's population-based training over policies, scored by the "
                   "validation accuracy of networks trained with them (--population networks trained side by "
                   "side; see the population options)")
    g.add_argument("--teacher-estimator", choices=TEACHER_ESTIMATORS, default="applied",
                   help="how the teacher objective's gradient is estimated: applied = from the slots each image "
                   "applied (default), es = from the per-image perturbations alone")
    g.add_argument("--teacher-weight", type=nonneg_float, default=1.0, metavar="W",
                   help="the teacher objective's score is CE(network) - W CE(teacher) (default: 1, TeachAugment's)")
    g.add_argument("--teacher-decay", type=nonneg_float, default=0.99,
                   help="moving-average decay of the teacher's weights per training step (default: 0.99)")
    g.add_argument("--count-probs", type=_count_probs, metavar="P0,P1,...",
                   help="distribution of the number of ops per image (default: the starting policy's: 0.2,0.3,0.5, "
                   "or 1/14,13/14 for trivialaugment)")
    g.add_argument("--val-bn", choices=VAL_BN, default="batch",
                   help="batch norm in the hyperparameter steps: batch = the validation batch's statistics "
                   "(default), running = eval mode, the running statistics, as the network is tested")
    g.add_argument("--hyper-input", choices=HYPER_INPUTS, default="hparams",
                   help="what the hyper-layers are conditioned on: hparams = each image's perturbed lambda_i (the "
                   "paper; default), applied = which slots each image applied and their magnitudes; the "
                   "hyperparameter step then uses the expected value under lambda (hba_augment.search.hyper_input)")
    g.add_argument("--cutout", type=nonneg_int, help="Cutout size after the policy, 0 for none" + preset)
    g.add_argument("--crop-padding", type=nonneg_int, help="padding of the random crop, 0 for no crop" + preset)
    g.add_argument("--no-flip", dest="flip", action="store_false", default=None,
                   help="no random horizontal flip (default: from the preset)")
    g.add_argument("--seed", type=nonneg_int, default=0, help="seed of the split, the model and all draws (default: 0)")
    add_torch_arguments(g)
    g.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None,
                   help="channels-last memory format (default: on for CPU, off otherwise)")
    g.add_argument("--amp", action="store_true", default=None,
                   help="bfloat16 autocast for the network (GPUs, and CPUs with bfloat16 matrix units such as "
                   "Intel AMX, where a WRN trained about 2.5x faster; default: off)")
    g.add_argument("--compile", action="store_true", default=None,
                   help="run the training steps and, on GPUs, the augmentation's pixel work through torch.compile "
                   "(default: off)")
    g.add_argument("--cuda-graphs", action="store_true", default=None,
                   help="on CUDA, replay each full training batch's augmentation call (a population member's "
                   "whole step) from a captured CUDA graph (GPUs, where it is launch bound; default: off)")
    g.add_argument("--dist-timeout", type=positive_float, default=1800.0, metavar="SECONDS",
                   help="under torchrun: how long a process waits for the others before the run fails "
                   "(default: 1800)")
    g = p.add_argument_group(
        "population search (--objective population; hba_augment.search.population)",
        # Wrapped by hand: the parser's formatter keeps descriptions as written (for the preset table).
        "N networks of --model, each with its own policy, trained with the search's optimiser and\n"
        "schedule for --epochs; every E epochs the bottom quarter (by clean validation accuracy) copies\n"
        "the weights and an explored policy of a random member of the top quarter (PBA). The schedule is\n"
        "the best final member's lineage. It costs N trainings side by side; the hypernetwork and\n"
        "teacher options do not apply.")
    g.add_argument("--population", type=_population, metavar="N",
                   help=f"members, at least 2 (default: {DEFAULT_POPULATION})")
    g.add_argument("--exploit-every", type=positive_int, metavar="E",
                   help="epochs per round of selection (default: PBA's 3 per 200 epochs, scaled to --epochs and "
                   "rounded, at least 1); E >= --epochs: one round, a tournament of whole trainings whose best "
                   "member's policy is the schedule")
    g.add_argument("--member-start", choices=MEMBER_STARTS,
                   help="how the members start: 'explored' = member 0 at the --init policy, the others at "
                   "explored copies of it; 'same' = every member at the --init policy, as PBA's search (the "
                   f"schedule keeps the start until a member that copied wins) (default: {DEFAULT_MEMBER_START})")
    g.add_argument("--score-ema", type=positive_float, metavar="DECAY",
                   help="score each member on an exponential moving average of its weights, with this decay per "
                   "training step in (0, 1), e.g. 0.99, instead of on its weights, whose accuracy at a high "
                   "learning rate bounces by points from round to round (default: off, as PBA)")
    g.add_argument("--amount", choices=AMOUNTS,
                   help="'free' = selection may keep any amount of augmentation, as PBA; 'held' = every explored "
                   "policy is shifted back to the --init policy's mean probability and mean magnitude fraction, so "
                   "that selection chooses the mix of ops and magnitudes but not those means (how much images "
                   "change still depends on the mix); 'profile' = every member is shifted, as each round starts, to "
                   "the amount of the --amount-profile schedule at that epoch (default: free)")
    g.add_argument("--amount-profile", metavar="SCHEDULE.json",
                   help="with --amount profile: the schedule file whose amount of augmentation over time (mean "
                   "probability and mean magnitude fraction at each epoch, stretched to --epochs) the members "
                   "follow, e.g. a null search's, while selection chooses the mix")
    g.add_argument("--resample", choices=RESAMPLES,
                   help="where explore's resample puts a value: 'uniform' = a uniform draw over its range, as PBA "
                   "(a walk with no signal forgets the --init policy); 'prior' = back to the --init policy's value, "
                   "so that the walk returns to its start and the schedule stays near it where selection sees "
                   "nothing (default: uniform)")
    g.add_argument("--vary", choices=VARIES,
                   help="which values explore varies: 'all' = every probability and magnitude, as PBA; 'magnitudes' "
                   "= the magnitudes only, so that every member applies each op as often as the --init policy does "
                   "(shifted to the held amount or profile, if any) and selection chooses how strong each op is "
                   "(default: all)")
    g.add_argument("--population-procs", type=nonneg_int, metavar="P",
                   help="worker processes on the device, the members spread over them (default: one per member, "
                   "or one with --population-fuse; 0: every member in this process)")
    g.add_argument("--population-lanes", type=positive_int, metavar="L",
                   help="members each process trains at the same time, in threads with a CUDA stream each (on a "
                   "GPU, with --cuda-graphs, their kernels share it, where processes take turns; default: 1, one "
                   "after another)")
    g.add_argument("--population-fuse", action="store_true", default=None,
                   help="each process trains its members as one fused network, one step of all at once (WRNs; not "
                   "with --cuda-graphs or --population-lanes; a member's augmentation draws then depend on which members "
                   "share its process; default: off)")
    g = p.add_argument_group("output")
    g.add_argument("--out", required=True, help="output folder (schedule.json, metrics.jsonl, schedule.png, "
                   "checkpoint.pt)")
    g.add_argument("--name", help="schedule name, shown by 'show', repr and the plot (default: the name of the "
                   "output folder, e.g. 'demo' for --out runs/demo)")
    g.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if it exists")
    g.add_argument("--no-plot", dest="plot", action="store_false",
                   help="do not write schedule.png (without matplotlib, i.e. without the 'search' extra, the "
                   "plot is skipped with a warning at the start and everything else is written)")
    g.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar (it is shown only on a terminal anyway)")
    return p


def config_from_args(args: argparse.Namespace, device: str) -> SearchConfig:
    """The :class:`~hba_augment.search.config.SearchConfig` that parsed ``search`` arguments describe.

    Unset options (``None``) take the preset's values.
    """
    from hba_augment.search.loop import SearchConfig

    return SearchConfig.from_preset(
        args.preset, dataset=args.dataset, data_dir=args.data_dir, model=args.model, strategy=args.strategy,
        epochs=args.epochs, train_size=args.train_size, val_size=args.val_size, batch_size=args.batch_size,
        lr=args.lr, lr_schedule=args.lr_schedule, lr_milestones=args.lr_milestones, wd=args.wd,
        hparam_lr=args.hparam_lr, sigma=args.sigma, t_train=args.t_train, t_val=args.t_val, val_bn=args.val_bn,
        init=args.init, prior_decay=args.prior_decay, hparam_accumulate=args.hparam_accumulate,
        count_probs=args.count_probs,
        # The population search keeps the SearchConfig's objective (it trains no lambda).
        objective=None if args.objective == "population" else args.objective, teacher_decay=args.teacher_decay,
        teacher_estimator=args.teacher_estimator, teacher_weight=args.teacher_weight, hyper_input=args.hyper_input, seed=args.seed, device=device, image_size=args.image_size,
        classes=args.classes, download=args.download or None, flip=args.flip, crop_padding=args.crop_padding, cutout=args.cutout,
        name=args.name, channels_last=args.channels_last, amp=args.amp, compile=args.compile,
        cuda_graphs=args.cuda_graphs,
    )


def main(argv: Sequence[str] | None = None, prog: str = "hba-augment search") -> int:
    """Entry point; returns the process exit status (0 ok, 1 diverged, 2 bad input, 3 a distributed run lost a
    process or timed out, 130 interrupted)."""
    parser = build_parser(prog)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)

    import torch

    from hba_augment import _distributed
    from hba_augment.search.loop import SearchDivergedError, run_search

    requested = setup_torch(args.threads, args.device)
    if requested.startswith("cuda"):
        # Fixed shapes all run long: let cuDNN pick the fastest kernels.
        torch.backends.cudnn.benchmark = True

    def body() -> str:
        with _distributed.session(requested, timeout=args.dist_timeout) as (ctx, device):
            text = _search(device)
        return text if ctx.is_main else ""

    def _search(device: str) -> str:
        check_objective_options(args, parser)
        config = config_from_args(args, device)
        if args.name is None:
            config.name = default_name(args.out, config.dataset, config.model)
        # Model names are checked before any data is read.
        from hba_augment.models import create_model

        create_model(config.model, 2)
        command = shlex.join([*prog.split(), *argv])
        if args.objective == "population":
            from hba_augment.search.population import run_population_search

            population = population_config_from_args(args, device, search=config)
            result = run_population_search(population, args.out, resume=args.resume, command=command, plot=args.plot)
        else:
            result = run_search(config, args.out, resume=args.resume, command=command, progress=args.progress,
                                plot=args.plot)
        return str(result.files["schedule"])

    return run_command(prog, body, SearchDivergedError, out=args.out)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
