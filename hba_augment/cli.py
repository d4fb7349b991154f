"""The ``hba-augment`` command (also ``python -m hba_augment``).

Subcommands are dispatched to modules imported only when chosen, so ``import hba_augment`` never imports
the search, and ``hba-augment show`` does not either (unless it draws a plot). To add a subcommand, add
an entry to :data:`COMMANDS`: ``name -> ("module:function", help)``; the function is called as
``function(argv, prog=...)`` and returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main", "show_main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "show": ("hba_augment.cli:show_main", "print a schedule (a JSON file or a shipped name) and optionally plot it"),
    "search": ("hba_augment.search.cli:main", "learn a schedule with the hypernetwork search"),
    "train": ("hba_augment.train.cli:main", "train a network with a policy and report its test error"),
}


def _top_parser() -> argparse.ArgumentParser:
    from hba_augment._version import __version__

    lines = "\n".join(f"  {name:<10}{text}" for name, (_, text) in COMMANDS.items())
    p = argparse.ArgumentParser(
        prog="hba-augment",
        description="Hypernetwork-Based Augmentation: inspect and learn augmentation schedules.",
        epilog=f"commands:\n{lines}\n\nRun 'hba-augment COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"hba-augment {__version__}")
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of: " + ", ".join(COMMANDS))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hba-augment`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") or argv[0] not in COMMANDS:
        # --help, --version, a missing or unknown command: argparse prints and exits.
        _top_parser().parse_args(argv[:1] if argv and not argv[0].startswith("-") else argv)
        return 2  # pragma: no cover - parse_args exits above
    target, _ = COMMANDS[argv[0]]
    module, function = target.split(":")
    try:
        return int(getattr(importlib.import_module(module), function)(argv[1:], prog=f"hba-augment {argv[0]}") or 0)
    except BrokenPipeError:
        # The reader went away (``hba-augment show cifar10 | head``): stop quietly, as cat or grep do.
        # Python's final flush of stdout would fail again, so stdout is pointed at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + 13  # killed by SIGPIPE, the shell's status for such a pipe


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun if count == 1 else noun + 's'}"


def show_main(argv: Sequence[str], prog: str = "hba-augment show") -> int:
    """``hba-augment show SCHEDULE [--epoch E] [--total-epochs T] [--plot PNG]``."""
    p = argparse.ArgumentParser(prog=prog, description="Print a schedule's policy at one epoch as a table.")
    p.add_argument("schedule", metavar="SCHEDULE", help="a schedule JSON file, or the name of a shipped schedule")
    p.add_argument("--epoch", type=int, default=0, help="training epoch to show (default 0)")
    p.add_argument("--total-epochs", type=int, help="training length the schedule is scaled to (default: its own)")
    p.add_argument("--plot", metavar="PNG", help="also write the schedule plot (magnitudes, probabilities) to this "
                   "file, creating its folder; needs matplotlib (the 'search' extra)")
    p.add_argument("--no-provenance", dest="provenance", action="store_false", help="do not print the provenance")
    args = p.parse_args(list(argv))

    from pathlib import Path

    if args.plot:
        from hba_augment.search.plot import missing_plot_dependency

        missing = missing_plot_dependency()
        if missing is not None:  # checked before anything is printed
            print(f"{prog}: error: cannot draw --plot: {missing}", file=sys.stderr)
            return 2

    from hba_augment.schedule import Schedule

    try:
        path = Path(args.schedule)
        if path.exists() or args.schedule.endswith(".json") or "/" in args.schedule:
            schedule = Schedule.load(path)
            source = str(path)
        else:
            from hba_augment import pretrained

            names = pretrained.available_policies()
            if args.schedule not in names:
                raise ValueError(f"{args.schedule!r} is neither a schedule file nor a shipped schedule {names}")
            shipped = pretrained.pretrained_path(args.schedule)
            schedule = Schedule.load(shipped)
            source = f"{shipped} (shipped with hba_augment)"
        table = schedule.table(args.epoch, args.total_epochs)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    counts = ", ".join(f"{c:g}" for c in schedule.count_probs)
    print(f"Schedule {schedule.name!r}: {_plural(schedule.epochs, 'epoch')}, count_probs ({counts})")
    print(f"source: {source}")
    print(table)
    if args.provenance and schedule.provenance:
        print("provenance:")
        for key, value in schedule.provenance.items():
            print(f"  {key}: {value}")
    if args.plot:
        from hba_augment.search.plot import plot_schedule

        plot = Path(args.plot)
        try:
            plot.parent.mkdir(parents=True, exist_ok=True)
            plot_schedule(schedule, plot)
        except OSError as e:
            print(f"{prog}: error: cannot write {plot}: {e.strerror or e}", file=sys.stderr)
            return 2
        print(f"wrote {plot}")
    return 0
