"""HBAPolicy on CUDA batches at issue 21's sizes: eager, and one CUDA-graph replay per call.

For each image size and batch size: the stress schedule of ``throughput.py`` (every slot at probability 0.5,
mid-range magnitude) applied to a uint8 and a float32 batch of lossless CIFAR-10 training images (bilinearly
upsampled for 224x224; the first 4,000 of ``data_batch_1``, tiled), each image drawing its own ops. Rows:

- ``eager``: ``HBAPolicy(batch, generator=...)``, the user's call;
- ``graph``: the same batched call captured once in a ``torch.cuda.CUDAGraph`` and replayed (the launch cost
  gone; torch's default CUDA generator, which graphs support);
- ``policy-graphs``: ``HBAPolicy(schedule, cuda_graphs=True)(batch, generator=...)``, the user's call that
  replays its own captured graph (inputs copied in, output copied out);
- ``kornia``: ``kornia.augmentation.auto.AutoAugment`` on the float batch, when kornia is importable;
- ``compiled`` (with ``--compile``): ``HBAPolicy(schedule, compile=True)(batch, generator=...)``, the draws
  eager and the pixel work through inductor (compiled by its first call of a shape or dtype, not timed),
  with the number of values that differ from the eager transform's from the same generator state;
- ``compiled-graphs`` (with ``--compile``): the same with ``cuda_graphs=True``, inductor's kernels and the
  eager draws replayed from one CUDA graph.

Per call: median wall time over ``--repeats`` timed calls (a ``torch.cuda.synchronize`` closes each), the
CPU time the host spent in it, and images per second; for the eager and graph rows also the bytes an image
moves by ``sync_free_bytes.py``'s model (recorded on the device) and the bandwidth that makes. Run on the
lent GPU (``benchmarks/campaigns/README.md``)::

    HBA_DATA_DIR=.device/data python3 benchmarks/cuda_throughput.py --out $OUT/cuda_throughput

writes ``OUT.json`` and ``OUT.md`` (device, torch, command, date, commit when git is there).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_free_bytes import BytesRecorder  # the bytes model, to read each row as a bandwidth
from throughput import benchmark_schedule, default_data_dir, load_images  # shared data and schedule

from hba_augment import HBAPolicy
from hba_augment.functional import augment

# Issue 21's grid: 32x32 at five batch sizes, 224x224 at two.
DEFAULT_GRID = "32:256,1024,4096,16384,65536;224:256,1024"


def _grid(text: str) -> list[tuple[int, list[int]]]:
    out = []
    for part in text.split(";"):
        size, _, batches = part.partition(":")
        out.append((int(size), [int(b) for b in batches.split(",")]))
    return out


def _time(fn: Callable[[], object], repeats: int, warmup: int = 3) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_ms": 1e3 * statistics.median(walls), "cpu_ms": 1e3 * statistics.median(cpus)}


def _graphed(images: torch.Tensor, prob: torch.Tensor, mag: torch.Tensor) -> Callable[[], object]:
    """One batched ``augment`` call captured in a CUDA graph (warm-up on a side stream, as torch asks; it
    also checks the policy once, which remembers its warp maps and tables, so the graph holds only the
    per-call work)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            augment(images, prob, mag)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        augment(images, prob, mag)
    return graph.replay


def _compiled(policy: HBAPolicy, eager: HBAPolicy, images: torch.Tensor) -> tuple[Callable[[], object], int]:
    """``policy`` (``compile=True``) on ``images`` from its own generator, compiled by this first call, and how
    many values differ from the ``eager`` transform's from the same generator state: the draws are the same
    (eager in both), so what may differ is inductor's arithmetic (a fused multiply-add, say, rounds once where
    eager PyTorch rounds twice)."""
    first, again = (torch.Generator(images.device).manual_seed(0) for _ in range(2))
    differing = int((policy(images, generator=first) != eager(images, generator=again)).sum())
    generator = torch.Generator(images.device).manual_seed(0)
    return (lambda: policy(images, generator=generator)), differing


def model_bytes(images: torch.Tensor, prob: torch.Tensor, mag: torch.Tensor) -> float:
    """Bytes one image moves through memory in the batched call, by ``sync_free_bytes.py``'s model (every op's
    reads and writes, recorded on this device): with a row's images per second, the bandwidth the call
    reaches."""
    augment(images, prob, mag, check_policy=False)
    with BytesRecorder() as recorder:
        augment(images, prob, mag, check_policy=False)
    return recorder.bytes / len(images)


def run(grid: list[tuple[int, list[int]]], repeats: int, data_dir: Path,
        compile: bool | dict[str, object] = False) -> list[dict[str, object]]:
    """The rows; ``compile``: whether to add the compiled rows, or ``torch.compile``'s arguments for them."""
    device = torch.device("cuda")
    schedule = benchmark_schedule()
    policy = HBAPolicy(schedule)
    graphs_policy = HBAPolicy(schedule, cuda_graphs=True)
    compiled_policy = HBAPolicy(schedule, compile=compile or True)
    compiled_graphs_policy = HBAPolicy(schedule, compile=compile or True, cuda_graphs=True)
    prob, mag = (torch.as_tensor(t, dtype=torch.float32, device=device) for t in schedule.at(0))
    try:
        from kornia.augmentation.auto import AutoAugment as KorniaAutoAugment
        kornia_aa = KorniaAutoAugment().to(device)
    except ImportError:
        kornia_aa = None
    rows = []
    for size, batches in grid:
        # 4,000: what the shared copy of data_batch_1 holds (the official one has 10,000); larger batches tile it.
        base = load_images(data_dir, min(4_000, max(batches)), size).to(device)
        per_image = {"uint8": model_bytes(base[:64], prob, mag), "float32": model_bytes(base[:64].float() / 255, prob, mag)}
        for b in batches:
            reps = -(-b // len(base))
            uint8 = base.repeat(reps, 1, 1, 1)[:b].contiguous()
            floats = uint8.float().div_(255)
            generator = torch.Generator(device).manual_seed(0)
            cases = {
                ("uint8", "eager"): lambda x=uint8, g=generator: policy(x, generator=g),
                ("float32", "eager"): lambda x=floats, g=generator: policy(x, generator=g),
                ("uint8", "graph"): _graphed(uint8, prob, mag),
                ("float32", "graph"): _graphed(floats, prob, mag),
                ("uint8", "policy-graphs"): lambda x=uint8, g=generator: graphs_policy(x, generator=g),
                ("float32", "policy-graphs"): lambda x=floats, g=generator: graphs_policy(x, generator=g),
            }
            if kornia_aa is not None:
                cases[("float32", "kornia")] = lambda x=floats: kornia_aa(x)
            differing, failed = {}, {}
            if compile:
                for dtype, x in (("uint8", uint8), ("float32", floats)):
                    try:
                        cases[(dtype, "compiled")], differing[dtype] = _compiled(compiled_policy, policy, x)
                        cases[(dtype, "compiled-graphs")], _ = _compiled(compiled_graphs_policy, policy, x)
                    except Exception as e:  # (one row's failure, inductor's say, must not cost the others)
                        failed[(dtype, "compiled")] = e
            for (dtype, mode), fn in cases.items():
                try:
                    # (the transform's graph is captured on its fourth call of a shape: warm up past it)
                    t = _time(fn, repeats, warmup=6 if mode.endswith("graphs") else 3)
                except Exception as e:  # (kornia's grid_sample raised a cuDNN error on torch 2.11, 2026-11-28)
                    failed[(dtype, mode)] = e
                    continue
                rows.append({"size": size, "batch": b, "dtype": dtype, "mode": mode, **t,
                             "images_per_s": b / (t["wall_ms"] / 1e3)})
                if mode in ("eager", "graph", "policy-graphs"):
                    rows[-1]["model_bytes_per_image"] = per_image[dtype]
                    rows[-1]["model_gb_per_s"] = per_image[dtype] * rows[-1]["images_per_s"] / 1e9
                if mode == "compiled":
                    rows[-1]["values_differing_from_eager"] = differing[dtype]
                print(f"{size}x{size} B={b:>6} {dtype:>7} {mode:>6}: {t['wall_ms']:8.2f} ms "
                      f"(cpu {t['cpu_ms']:6.2f} ms) {rows[-1]['images_per_s']:>12,.0f} img/s"
                      + (f", {differing[dtype]} values differ from eager" if mode == "compiled" else ""), flush=True)
            for (dtype, mode), e in failed.items():
                error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
                rows.append({"size": size, "batch": b, "dtype": dtype, "mode": mode, "error": error})
                print(f"{size}x{size} B={b:>6} {dtype:>7} {mode:>6}: failed, {error}", flush=True)
            del uint8, floats, cases
            torch.cuda.empty_cache()
    return rows


def _markdown(meta: dict[str, object], rows: list[dict[str, object]]) -> str:
    lines = [f"# HBAPolicy on CUDA batches ({meta['device']})", "",
             f"- Command: `{meta['command']}`", f"- Date: {meta['date']}; commit: {meta['commit']}",
             f"- torch {meta['torch']}; stress schedule: every slot p=0.5, mid-range magnitude", "",
             "| size | B | dtype | mode | ms per call | host CPU ms | images/s | model KB per image | model GB/s "
             "| values differing from eager |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['size']} | {r['batch']:,} | {r['dtype']} | {r['mode']} | failed: "
                         f"{r['error'].replace('|', '/')} | | | | | |")
            continue
        model = (f"{r['model_bytes_per_image'] / 1e3:,.0f} | {r['model_gb_per_s']:,.0f}" if "model_gb_per_s" in r
                 else " | ")
        lines.append(f"| {r['size']} | {r['batch']:,} | {r['dtype']} | {r['mode']} | {r['wall_ms']:.2f} | "
                     f"{r['cpu_ms']:.2f} | {r['images_per_s']:,.0f} | {model} | "
                     f"{r.get('values_differing_from_eager', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--grid", default=DEFAULT_GRID, help=f"SIZE:B,B;SIZE:B (default {DEFAULT_GRID!r})")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per row (default 20)")
    p.add_argument("--data-dir", type=Path, default=default_data_dir())
    p.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    p.add_argument("--compile", action="store_true", help="add torch.compile rows (one compilation per shape)")
    p.add_argument("--compile-options", type=json.loads, default=None,
                   help="torch.compile's arguments for those rows as JSON, e.g. "
                        "'{\"options\": {\"realize_reads_threshold\": 4}}' (default: the package's)")
    p.add_argument("--commit", default=None, help="the commit to record where git is absent (the lent GPU)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("no CUDA device: this benchmark measures the GPU path")
    rows = run(_grid(args.grid), args.repeats, args.data_dir, (args.compile_options or True) if args.compile else False)
    commit = args.commit
    try:
        commit = commit or subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (no git on this machine)"
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "command": " ".join(["python3", *sys.argv]), "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(_markdown(meta, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
