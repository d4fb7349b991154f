"""Training cost of candidate networks for the policy-quality benchmark (issue 10, section 2).

Times one SGD step (forward, backward, update) on a batch of 32x32 images for each network, in NCHW and
channels-last layouts, in float32 and (``--amp``) also under bfloat16 autocast, as ``train --amp`` runs
it, and reports it as seconds per epoch of the Reduced CIFAR-10 protocol (4,000 images). This is what
decides which networks a comparison of 10 policies x 3 seeds can afford on a machine; the minimum over
the timed steps is reported (the machine's load only ever adds time). On a CPU with bfloat16 matrix
units (Intel AMX, ``amx_bf16`` in ``/proc/cpuinfo``) oneDNN runs the autocast convolutions on them
(``ONEDNN_VERBOSE=1`` names its ``amx`` kernels; benchmarks/RESULTS.md, "Paper scale on the CPU").

Usage::

    python benchmarks/model_cost.py [--models wrn-10-2,wrn-16-1,wrn-16-2] [--threads 1] [--steps 4] [--amp]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

from hba_augment.models import create_model


def step_seconds(name: str, channels_last: bool, batch: int, steps: int, amp: bool = False) -> float:
    """The fastest of ``steps`` SGD steps (after one warm-up step) of ``name`` on a random batch.

    With ``amp`` the forward pass and the loss run under bfloat16 autocast on the CPU, as the trainer's
    ``--amp`` does.
    """
    torch.manual_seed(0)
    model = create_model(name, 10)
    x = torch.randn(batch, 3, 32, 32)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="wrn-10-2,wrn-16-1,wrn-16-2,wrn-22-2,wrn-16-4")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=4, help="timed steps per network and layout")
    p.add_argument("--epoch-images", type=int, default=4000, help="images per epoch in the report")
    p.add_argument("--amp", action="store_true", help="also time each network under bfloat16 autocast")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"| model | layout | precision | s per step (B={args.batch_size}) "
          f"| s per epoch ({args.epoch_images:,} images) |")
    print("|---|---|---|---|---|")
    for channels_last in (False, True):
        for name in args.models.split(","):
            for amp in (False, True) if args.amp else (False,):
                t = step_seconds(name, channels_last, args.batch_size, args.steps, amp)
                layout = "channels-last" if channels_last else "NCHW"
                precision = "bfloat16 autocast" if amp else "float32"
                epoch = t * args.epoch_images / args.batch_size
                print(f"| {name} | {layout} | {precision} | {t:.3f} | {epoch:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
