"""What the ``search`` and ``train`` command lines (and the benchmarks' scripts) share: argument types,
torch set-up from ``--threads`` / ``--device``, and the mapping of outcomes to exit statuses.

Only the standard library at import time, so that parsing arguments stays cheap.
"""

from __future__ import annotations

import argparse
import contextvars
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "add_torch_arguments",
    "classes",
    "milestones",
    "nonneg_float",
    "nonneg_int",
    "option",
    "positive_float",
    "positive_int",
    "run_command",
    "seeds",
    "setup_torch",
]


# Whether the code running now was started by a command line (run_command sets it), so that messages name
# the flag a user types (--resume) instead of the Python argument a library caller passes (resume=True).
_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("hba_augment_command_line", default=False)


_NAME_ONLY: Any = object()


def option(name: str, value: Any = _NAME_ONLY, *, placeholder: bool = False) -> str:
    """How the caller spells the setting ``name`` (``= value``), for a message that names or asks for it.

    A library caller reads the Python argument (``resume=True``, ``dataset='imagefolder'``, ``train_size``);
    under :func:`run_command`, a command-line user reads the flag (``--resume``, ``--dataset imagefolder``,
    ``--train-size``).

    Args:
        name: the Python argument; its flag is ``--`` and the name with dashes for underscores.
        value: the value to pass, if any: ``True`` is the bare flag, ``False`` its ``--no-`` form.
        placeholder: ``value`` is a string that stands for a value (``"SIZE"``), written as it is.

    Returns:
        e.g. ``"download=True"`` or ``"--download"``.
    """
    flag = "--" + name.replace("_", "-")
    if value is _NAME_ONLY:
        return flag if _COMMAND_LINE.get() else name
    shown = value if placeholder else repr(value)
    if not _COMMAND_LINE.get():
        return f"{name}={shown}"
    if value is True or value is False:
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {value}"


def classes(text: str) -> int | tuple[str, ...]:
    """``--classes``: a count ``N >= 1`` or comma-separated class names."""
    text = text.strip()
    if text.isdigit():
        value = int(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
        return value
    names = tuple(c.strip() for c in text.split(",") if c.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected a count or comma-separated class names, got {text!r}")
    return names


def milestones(text: str) -> tuple[int, ...]:
    """``--lr-milestones``: comma-separated epochs."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated epochs, e.g. 90,180,240, got {text!r}") from None
    return values


def _int_at_least(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer ``>= 1``."""
    return _int_at_least(text, 1)


def nonneg_int(text: str) -> int:
    """An integer ``>= 0``."""
    return _int_at_least(text, 0)


def seeds(text: str) -> tuple[int, ...]:
    """One seed (an integer ``>= 0``) or several, comma-separated and different (``0,1,2``)."""
    values = tuple(_int_at_least(part.strip(), 0) for part in text.split(","))
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"seeds must differ, got {text!r}")
    return values


def nonneg_float(text: str) -> float:
    """A finite number ``>= 0``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number ``> 0``."""
    value = nonneg_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _distributed_failure(e: BaseException) -> bool:
    """Whether ``e`` says that the processes of a torchrun run could not work together."""
    from hba_augment._distributed import DistributedError  # torch is imported once a run has started

    dist = sys.modules.get("torch.distributed")
    dist_error = getattr(dist, "DistError", None) if dist is not None else None
    return isinstance(e, DistributedError) or (dist_error is not None and isinstance(e, dist_error))


def add_torch_arguments(group: argparse._ActionsContainer) -> None:
    """Add ``--device`` and ``--threads``, the two options :func:`setup_torch` reads, to a parser or group."""
    group.add_argument("--device", default="auto", help="torch device (default: auto = cuda if available, else cpu)")
    group.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")


def setup_torch(threads: int | None, device: str) -> str:
    """Apply ``--threads`` (if given) and resolve ``--device auto`` (CUDA if available, else the CPU)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return device


def _missing_folders(path: str) -> list[str]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    folder = os.path.abspath(path)
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _remove_empty(folders: list[str]) -> None:
    """Remove ``folders`` (deepest first) until one is not an empty folder (the run wrote into it)."""
    for folder in folders:
        if not os.path.isdir(folder) or os.listdir(folder):
            break
        os.rmdir(folder)


def run_command(prog: str, body: Callable[[], str], diverged: type[BaseException], out: str | None = None) -> int:
    """Run ``body`` and print what it returns; map the outcome to an exit status.

    0: done; 1: ``diverged`` was raised; 2: bad input (``ValueError``, ``FileNotFoundError``) or a missing
    optional dependency; 3: the processes of a distributed (torchrun) run could not join, or one was lost
    or timed out; 130: interrupted. Messages go to stderr, prefixed with ``prog``. ``body`` may return
    ``""`` to print nothing (ranks other than 0).

    Args:
        out: the run's output folder. If the run fails, the folders this call created for it are removed
            while they are still empty, so that a failed run leaves no empty folders behind.
    """
    created = _missing_folders(out) if out is not None else []
    status = 0
    token = _COMMAND_LINE.set(True)
    try:
        text = body()
    except diverged as e:
        print(f"{prog}: {e}", file=sys.stderr)
        status = 1
    except (ValueError, FileNotFoundError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        status = 2
    except ModuleNotFoundError as e:  # an optional dependency (e.g. scipy for SVHN)
        print(f"{prog}: error: {e}; install it, or all optional dependencies with: "
              "pip install 'hba-augment[search]'", file=sys.stderr)
        status = 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; continue with the same command and --resume", file=sys.stderr)
        status = 130
    except BaseException as e:
        if not _distributed_failure(e):
            _remove_empty(created)
            raise
        print(f"{prog}: error: the distributed run failed: {e}\nThe last checkpoint is intact; continue with the "
              "same command, the same number of processes and --resume", file=sys.stderr)
        status = 3
    finally:
        _COMMAND_LINE.reset(token)
    if status:
        _remove_empty(created)
        return status
    if text:
        print(text)
    return 0
