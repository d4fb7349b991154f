"""Images per second of HBAPolicy and of the usual alternatives, on the same real images, in one run.

What is timed (RGB uint8 images, one row each, at every ``--sizes``):

- HBAPolicy on a batched ``(B, 3, H, W)`` tensor (CPU; CUDA too when available, plus ``--cuda-batch``);
- HBAPolicy image by image: PIL images (through PIL's own operations, ``functional/_pil.py``), and
  ``(3, H, W)`` tensors;
- torchvision v2 AutoAugment (CIFAR10 policy), RandAugment and TrivialAugmentWide image by image, on PIL
  and on tensors, and v1 AutoAugment on PIL;
- ``kornia.augmentation.auto.AutoAugment`` on the batch (float32 in [0, 1]: kornia takes no uint8);
- the per-image PIL implementation of PBA's template (``benchmarks/reference_pba.py``), what PBA does;
- HBAPolicy on the batch as float32 in [0, 1], and, alone, the check of float images' range (values in
  [0, 1], no NaN or inf) that it makes on the CPU (issue 11), on the batch and image by image.

HBAPolicy and the PBA reference use the same schedule: ``Schedule.constant`` with all 30 slots at p = 0.5
and every magnitude at the middle of its range, count_probs (0.2, 0.3, 0.5). The images are the first B
lossless CIFAR-10 training images (``cifar-10-batches-py/data_batch_1``), upsampled with bilinear
interpolation for sizes other than 32. Every candidate processes its images once untimed (warm-up),
then ``--repeats`` times, candidates interleaved so that load changes hit them alike; each row reports
the medians of the wall-clock and of the process CPU time per pass (CPU time is the steadier figure on a
loaded machine). The run writes a JSON file and a markdown table with the machine, command, date, git
commit and load average.

``--policy NAME_OR_PATH --epoch E`` times a shipped or saved schedule's entry for epoch E instead (the PBA
reference too). The run also reports how many ops the schedule applies per image on average.

Usage::

    python benchmarks/throughput.py [--sizes 32,224] [--batch-size 256] [--per-image N] [--repeats 7]
        [--threads 1] [--policy cifar10 --epoch 7] [--quick] [--out benchmarks/results/throughput]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import PIL
import torch
import torch.nn.functional as F
import torchvision
from PIL import Image
from torchvision.transforms import v2

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _provenance import git_commit  # noqa: E402
from reference_pba import PBATemplate  # noqa: E402

from hba_augment import HBAPolicy, Schedule  # noqa: E402
from hba_augment.functional import OPS  # noqa: E402
from hba_augment.functional._augment import draw_one  # noqa: E402
from hba_augment.functional._validation import check_float_range  # noqa: E402


def default_data_dir() -> Path:
    env = os.environ.get("HBA_DATA_DIR")
    return Path(env) if env else HERE.parents[1] / "shared" / "data"


def load_images(data_dir: Path, n: int, size: int) -> torch.Tensor:
    """The first ``n`` lossless CIFAR-10 training images as uint8 ``(n, 3, size, size)``."""
    path = data_dir / "cifar-10-batches-py" / "data_batch_1"
    with open(path, "rb") as f:
        data = pickle.load(f, encoding="bytes")[b"data"]
    images = torch.from_numpy(np.asarray(data[:n], dtype=np.uint8).reshape(-1, 3, 32, 32).copy())
    if len(images) < n:
        raise SystemExit(f"{path} holds {len(images)} images, fewer than the {n} asked for")
    if size != 32:
        images = F.interpolate(images.float(), size=(size, size), mode="bilinear", align_corners=False)
        images = images.round().clamp(0, 255).to(torch.uint8)
    return images


def benchmark_schedule() -> Schedule:
    prob = np.full((2, len(OPS)), 0.5)
    mag = np.array([[(s.low + s.high) / 2 if s.has_magnitude else np.nan for s in OPS]] * 2)
    return Schedule.constant(prob, mag, name="bench-p0.5-mid")


def machine_info(threads: int) -> dict:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import kornia

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch_threads": threads,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "kornia": kornia.__version__,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "allocator": {
            k: v for k, v in sorted(os.environ.items()) if k == "LD_PRELOAD" or k.startswith("MALLOC_")
        },
    }


def write_shape_rows(out: Path, command: str, device: torch.device, repeats: int, rows: list[dict],
                     title: str, header: str, columns: str, row_line: Callable[[dict], str], **extra) -> None:
    """Write a per-shape timing record: ``OUT.json`` (command, date, commit, device, machine, ``extra``,
    repeats, rows) and ``OUT.md`` (``title``; the run's line, then ``header``; a table with ``columns``
    (``"| a | b |"``) and ``row_line(row)`` for each row), and print the markdown. For the small kernel
    benchmarks that time candidates per (batch, side) shape (``index_dtype.py``, ``lookup_kernel.py``)."""
    record = {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "device": str(device),
        "machine": machine_info(torch.get_num_threads()),
        **extra,
        "repeats": repeats,
        "rows": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    machine = record["machine"]["cuda"] if device.type == "cuda" else record["machine"]["cpu"]
    lines = [
        f"# {title}",
        "",
        f"`{command}`, {record['date']}, commit {record['commit']}, {machine}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s); {header}",
        "",
        columns,
        "|" + "---|" * columns.count(" | ") + "---|",
        *(row_line(row) for row in rows),
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


class Candidate:
    """One row: ``run()`` augments ``count`` images once."""

    def __init__(
        self, name: str, inputs: str, device: str, count: int, run: Callable[[], object], sync: bool = False
    ):
        self.name, self.inputs, self.device, self.count, self._run, self.sync = (
            name,
            inputs,
            device,
            count,
            run,
            sync,
        )
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def time_once(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self._run()
        if self.sync:
            torch.cuda.synchronize()
        self.wall.append(time.perf_counter() - wall)
        self.cpu.append(time.process_time() - cpu)


def chosen_schedule(args: argparse.Namespace) -> Schedule:
    """The stress schedule, or with ``--policy`` the entry of a shipped or saved schedule at ``--epoch``."""
    if args.policy is None:
        return benchmark_schedule()
    full = HBAPolicy(args.policy).schedule
    prob, mag = full.at(full.index(args.epoch))
    return Schedule.constant(prob.numpy(), mag.numpy(), count_probs=full.count_probs, name=f"{full.name}@{args.epoch}")


def ops_per_image(schedule: Schedule, draws: int = 20_000) -> float:
    """The mean number of ops the template applies to an image under ``schedule`` (its first entry)."""
    prob, mag = schedule.at(0)
    generator = torch.Generator().manual_seed(0)
    return sum(len(draw_one(prob, mag, schedule.count_probs, generator=generator).entries) for _ in range(draws)) / draws


def candidates(images: torch.Tensor, per_image: int, args: argparse.Namespace) -> list[Candidate]:
    schedule = chosen_schedule(args)
    prob, mag = schedule.at(0)
    hba = HBAPolicy(schedule)
    reference = PBATemplate(prob.numpy(), mag.numpy(), schedule.count_probs, seed=0)
    b = len(images)
    singles = list(images[:per_image])
    pils = [Image.fromarray(x.permute(1, 2, 0).numpy()) for x in singles]
    policy = v2.AutoAugmentPolicy.CIFAR10
    tv = {
        "torchvision v2 AutoAugment": v2.AutoAugment(policy),
        "torchvision v2 RandAugment": v2.RandAugment(),
        "torchvision v2 TrivialAugmentWide": v2.TrivialAugmentWide(),
    }
    from kornia.augmentation.auto import AutoAugment as KorniaAutoAugment
    from torchvision.transforms import AutoAugment as V1AutoAugment

    v1 = V1AutoAugment(policy)
    kornia_aa = KorniaAutoAugment()
    floats = images.float() / 255
    rows = [
        Candidate("HBAPolicy, batched", f"tensor (B={b})", "cpu", b, lambda: hba(images)),
        Candidate("HBAPolicy, per image", "PIL", "cpu", per_image, lambda: [hba(p) for p in pils]),
        Candidate("HBAPolicy, per image", "tensor", "cpu", per_image, lambda: [hba(x) for x in singles]),
        Candidate(
            "PBA template, PIL reference", "PIL", "cpu", per_image, lambda: [reference(p) for p in pils]
        ),
        Candidate("torchvision v1 AutoAugment", "PIL", "cpu", per_image, lambda: [v1(p) for p in pils]),
    ]
    for name, transform in tv.items():
        rows.append(Candidate(name, "PIL", "cpu", per_image, lambda t=transform: [t(p) for p in pils]))
        rows.append(Candidate(name, "tensor", "cpu", per_image, lambda t=transform: [t(x) for x in singles]))
    rows.append(
        Candidate("kornia AutoAugment, batched", f"float tensor (B={b})", "cpu", b, lambda: kornia_aa(floats))
    )
    # The range check of float images (CPU only: on a GPU it would cost a host synchronisation per call).
    float_singles = [x.float() / 255 for x in singles]
    rows += [
        Candidate("HBAPolicy, batched", f"float tensor (B={b})", "cpu", b, lambda: hba(floats)),
        Candidate("float range check alone", f"float tensor (B={b})", "cpu", b, lambda: check_float_range(floats)),
        Candidate(
            "float range check alone", "float tensor", "cpu", per_image, lambda: [check_float_range(x) for x in float_singles]
        ),
    ]
    if torch.cuda.is_available() and not args.no_cuda:
        cuda = images.cuda()
        rows.append(
            Candidate("HBAPolicy, batched", f"tensor (B={b})", "cuda", b, lambda: hba(cuda), sync=True)
        )
        if args.cuda_batch and args.cuda_batch != b:
            reps = -(-args.cuda_batch // b)
            big = cuda.repeat(reps, 1, 1, 1)[: args.cuda_batch].contiguous()
            rows.append(
                Candidate(
                    "HBAPolicy, batched",
                    f"tensor (B={len(big)})",
                    "cuda",
                    len(big),
                    lambda: hba(big),
                    sync=True,
                )
            )
        kornia_cuda = floats.cuda()
        kornia_aa_cuda = KorniaAutoAugment().cuda()
        rows.append(
            Candidate(
                "kornia AutoAugment, batched",
                f"float tensor (B={b})",
                "cuda",
                b,
                lambda: kornia_aa_cuda(kornia_cuda),
                sync=True,
            )
        )
    return rows


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"- date: {result['date']}; git commit: {result['git_commit']}",
        f"- command: `{result['command']}`",
        f"- machine: {m['cpu']}, {m['cores']} cores, torch threads {m['torch_threads']}, CUDA: {m['cuda'] or 'none'}",
        f"- versions: python {m['python']}, torch {m['torch']}, torchvision {m['torchvision']}, kornia {m['kornia']}, "
        f"pillow {m['pillow']}, numpy {m['numpy']}",
        f"- allocator settings: {m['allocator'] or 'default (glibc malloc, no MALLOC_* variables)'}",
        f"- load average (1, 5, 15 min) at start {result['load_start']}, at end {result['load_end']}",
        f"- schedule: {result['schedule']} ({result['ops_per_image']:.2f} ops applied per image on average); "
        f"{result['repeats']} timed passes after one warm-up pass; medians per pass",
        "",
        "| size | candidate | input | device | images/pass | img/s (CPU time) | img/s (wall) | ms/pass CPU | ms/pass wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["results"]:
        lines.append(
            f"| {r['size']} | {r['name']} | {r['inputs']} | {r['device']} | {r['images']} | "
            f"{r['images_per_s_cpu']:,.0f} | {r['images_per_s_wall']:,.0f} | {1e3 * r['cpu_median_s']:.1f} | "
            f"{1e3 * r['wall_median_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="32,224", help="comma-separated square image sizes")
    parser.add_argument(
        "--batch-size", type=int, default=256, help="images per batched call (and images in total)"
    )
    parser.add_argument(
        "--per-image",
        type=int,
        default=None,
        help="images per pass for the per-image rows (default: batch size)",
    )
    parser.add_argument("--repeats", type=int, default=7, help="timed passes per candidate")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument(
        "--cuda-batch", type=int, default=4096, help="an extra CUDA row with this batch size (0: none)"
    )
    parser.add_argument("--no-cuda", action="store_true", help="skip the CUDA rows even if a GPU is there")
    parser.add_argument(
        "--policy",
        default=None,
        help="time this schedule (shipped name or JSON path) at --epoch instead of the stress schedule",
    )
    parser.add_argument("--epoch", type=int, default=0, help="epoch of --policy")
    parser.add_argument("--data-dir", type=Path, default=default_data_dir())
    parser.add_argument("--quick", action="store_true", help="smoke run: B=32, 8 per-image images, 2 repeats")
    parser.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.per_image, args.repeats, args.cuda_batch = 32, 8, 2, 0
    per_image = min(args.per_image or args.batch_size, args.batch_size)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_start = [round(v, 2) for v in os.getloadavg()]
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        images = load_images(args.data_dir, args.batch_size, size)
        rows = candidates(images, per_image, args)
        for row in rows:  # warm-up
            row.time_once()
            row.wall.clear()
            row.cpu.clear()
        for _ in range(args.repeats):
            for row in rows:
                row.time_once()
        for row in rows:
            wall, cpu = statistics.median(row.wall), statistics.median(row.cpu)
            results.append(
                {
                    "size": size,
                    "name": row.name,
                    "inputs": row.inputs,
                    "device": row.device,
                    "images": row.count,
                    "wall_median_s": wall,
                    "cpu_median_s": cpu,
                    "images_per_s_wall": row.count / wall,
                    "images_per_s_cpu": row.count / cpu,
                    "wall_s": row.wall,
                    "cpu_s": row.cpu,
                }
            )
            print(
                f"{size:4d} {row.name:36s} {row.inputs:24s} {row.device:5s} {row.count / cpu:12,.0f} img/s CPU {row.count / wall:12,.0f} img/s wall",
                flush=True,
            )
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git_commit": git_commit(),
        "machine": machine_info(args.threads),
        "load_start": load_start,
        "load_end": [round(v, 2) for v in os.getloadavg()],
        "repeats": args.repeats,
        "schedule": "all 30 slots p = 0.5, mid-range magnitudes" if args.policy is None else f"{args.policy}, epoch {args.epoch}",
        "ops_per_image": ops_per_image(chosen_schedule(args)),
        "batch_size": args.batch_size,
        "per_image": per_image,
        "results": results,
    }
    table = markdown(result)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(table)


if __name__ == "__main__":
    main()
