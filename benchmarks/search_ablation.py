"""Search ablations (issue 10, section 5): search variants, each judged on validation data only.

Every variant is one full ``hba-augment search`` of the Reduced CIFAR-10 protocol (4,000 train / 10,000
validation images of the CIFAR-10 JPEG copy, split seed 0) that differs from the shipped ``cifar10``
search in one setting. Each learned schedule then trains the benchmark network (the policy-quality
regime: WRN-16-1, 100 epochs, the same 4,000 training images) and is tested on held-out images of the
train split (``hba-augment train --eval-split val``), next to the shipped schedule (the search each
variant changes; ``--references`` adds the hand-designed policies and PBA's schedule) tested the same way.
A variant that beats the shipped schedule there earns its place in the test-set comparison. The test split is never looked at here: it is for the final comparison
(``policy_quality.py``), once per configuration. The validation images are the searches' own (the same
class-balanced draw of split seed 0): every HBA schedule was fit to them, through 54 numbers per epoch, so
it may be slightly favoured over the references; the variants are compared with each other on equal terms.

Resumable across sessions and machines: a search writes into ``OUT/searches/<variant>/`` (its
``checkpoint.pt`` is git-ignored as ``*.pt``; ``git add -f`` it to carry an unfinished search to another
machine), a finished one leaves ``schedule.json`` there, and the evaluation is ``policy_quality.py``'s
(one small ``OUT/val/results/<run>.json`` per finished run, reused by key).

    python benchmarks/search_ablation.py --variants epochs-100,sigma-0.5 --seeds 0        # searches, then training
    python benchmarks/search_ablation.py --variants epochs-100 --searches-only              # only the searches
    python benchmarks/search_ablation.py --variants epochs-100 --seeds 0,1 --report-only    # the table so far
    python benchmarks/search_ablation.py --list                                             # the variants
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import policy_quality  # noqa: E402  (a sibling script, not a package)

DEFAULT_DATA = REPO.parent / "shared" / "data" / "cifar-10-jpeg.tar.gz"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "ablations"
#: The comparison's peer and control schedules (``control_schedules.py``), relative to the repository.
SCHEDULES = "benchmarks/results/reduced_cifar10/schedules"
PBA = f"{SCHEDULES}/pba.json"

#: The shipped search's settings are the paper's (lr 0.05 cosine, wd 0.005, hparam lr 0.03, sigma 1,
#: T_train 2, T_val 1, first-bn, 200 epochs) and batch norm on the validation batch's statistics in the
#: hyperparameter steps (the paper does not say; STN uses eval mode); each variant changes one of them.
VARIANTS: dict[str, list[str]] = {
    "val-bn-running": ["--val-bn", "running"],
    "init-identity": ["--init", "identity"],
    "hyper-input-applied": ["--hyper-input", "applied"],
    "epochs-100": ["--epochs", "100"],
    "sigma-0.5": ["--sigma", "0.5"],
    "sigma-2": ["--sigma", "2"],
    "hparam-lr-0.01": ["--hparam-lr", "0.01"],
    "hparam-lr-0.1": ["--hparam-lr", "0.1"],
    "strategy-bn": ["--strategy", "bn"],
    "strategy-conv+bn": ["--strategy", "conv+bn"],
    "t-train-5": ["--t-train", "5"],
    "t-val-2": ["--t-val", "2"],
}
#: Policies that can be tested on the validation split beside the variants (``paper``: the shipped schedule,
#: the search every variant changes one setting of; ``initial`` / ``last`` / ``shuffled``: the comparison's
#: controls of it, so that what they show on the test split can be checked on validation data).
REFERENCES = {"paper": "paper=hba:cifar10", "baseline": "baseline", "autoaugment": "autoaugment",
              "randaugment": "randaugment", "trivialaugment": "trivialaugment", "pba": f"pba=hba:{PBA}",
              **{c: f"{c}=hba:{SCHEDULES}/{c}.json" for c in ("initial", "last", "shuffled")}}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="", help="comma-separated names of VARIANTS (see --list)")
    p.add_argument("--seeds", default="0", help="training seeds of the evaluation, comma-separated")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA), help="the CIFAR-10 JPEG copy (ImageFolder archive)")
    p.add_argument("--model", default="wrn-16-1", help="network of the searches and the evaluation")
    p.add_argument("--epochs", type=int, default=100, help="training epochs of the evaluation")
    p.add_argument("--references", default="paper",
                   help=f"comma-separated policies tested beside the variants, of {list(REFERENCES)} (default: "
                   "paper; each costs one training run per seed); empty for none")
    p.add_argument("--searches-only", action="store_true", help="run the searches, not the evaluation")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: the validation table of the finished runs (policy_quality.py --report-only)")
    p.add_argument("--jobs", type=int, default=1, help="evaluation runs at a time (searches run one at a time)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output folder (searches/, val/)")
    p.add_argument("--list", action="store_true", help="print the variants and exit")
    return p


def search_command(variant: str, args: argparse.Namespace, folder: Path) -> list[str]:
    """The ``hba-augment search`` of ``variant``: the shipped search's command with one setting changed."""
    return [sys.executable, "-m", "hba_augment", "search", "--dataset", "imagefolder", "--data-dir", args.data_dir,
            "--preset", "cifar10", "--model", args.model, "--train-size", "4000", "--val-size", "10000",
            "--seed", "0", "--threads", "1", "--name", variant, "--no-progress", "--resume", "--out", str(folder),
            *VARIANTS[variant]]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name, extra in VARIANTS.items():
            print(f"{name}: {shlex.join(extra)}")
        return 0
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; expected some of {list(VARIANTS)}")
    references = [r for r in args.references.split(",") if r]
    unknown = [r for r in references if r not in REFERENCES]
    if unknown:
        raise SystemExit(f"unknown reference(s) {unknown}; expected some of {list(REFERENCES)}")
    out = Path(args.out).resolve()
    for variant in [] if args.report_only else variants:
        folder = out / "searches" / variant
        if (folder / "schedule.json").exists():
            print(f"search {variant}: done ({folder / 'schedule.json'})", flush=True)
            continue
        cmd = search_command(variant, args, folder)
        print(f"search {variant}: $ {shlex.join(cmd)}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "log.txt", "a", encoding="utf-8") as log:
            if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode != 0:
                raise SystemExit(f"search {variant} failed; see {folder / 'log.txt'}")
    if args.searches_only:
        return 0
    if args.report_only:  # a search not finished yet has no schedule to table
        unfinished = [v for v in variants if not (out / "searches" / v / "schedule.json").exists()]
        if unfinished:
            print(f"searches not finished, left out of the table: {unfinished}", flush=True)
        variants = [v for v in variants if v not in unfinished]
    policies = [REFERENCES[r] for r in references] + [
        f"{v}=hba:{(out / 'searches' / v / 'schedule.json').relative_to(REPO)}" for v in variants]
    return policy_quality.main([
        "--model", args.model, "--epochs", str(args.epochs), "--train-size", "4000", "--test-size", "10000",
        "--subset-seed", "0", "--seeds", args.seeds, "--threads", "1", "--jobs", str(args.jobs),
        "--num-workers", "0", "--data-name", "CIFAR-10 (JPEG q75 copy), validation: 10,000 held-out train images",
        "--extra", "--eval-split val", "--policies", ",".join(policies), "--out", str(out / "val"),
        *(["--report-only"] if args.report_only else []),
    ])


if __name__ == "__main__":
    sys.exit(main())
