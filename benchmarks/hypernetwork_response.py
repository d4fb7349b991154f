"""How much the hypernetwork's validation loss responds to the policy it is conditioned on.

The paper's hyperparameter step descends ``d L_val(hypernetwork(x, lambda)) / d lambda``: everything it learns
comes from how the hyper-layers' output changes with ``lambda``. This probe loads a search checkpoint and
measures that response directly: the clean validation loss (as the search's validation step computes it:
batches of ``--batch-size``, batch-norm batch statistics) with the conditioning shifted by ``delta`` logits,
for the probabilities, the magnitudes, and both, while the weights stay as trained. A response much smaller
than the loss's own noise means the hypergradient has little to say; a loss that falls steadily as the
conditioning moves towards weaker augmentation means the step prefers weak augmentation by construction (a
network told "these images are barely augmented" fits clean images better), whatever augmentation would train.

Usage::

    python benchmarks/hypernetwork_response.py runs/search-ta --images 2048
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from hba_augment.search import loop
from hba_augment.search.hparams import NUM_PROB_HPARAMS

DELTAS = (-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0)


def response(search_dir: Path, images: int, batch_size: int, data_dir: str | None) -> dict:
    """The probe's table for the checkpoint in ``search_dir`` (see the module docstring)."""
    state = torch.load(search_dir / loop.CHECKPOINT_FILE, weights_only=False, map_location="cpu")
    fields = {k: v for k, v in state["config"].items() if k in {f.name for f in dataclasses.fields(loop.SearchConfig)}}
    if data_dir is not None:
        fields["data_dir"] = data_dir
    fields["device"] = "cpu"
    for key in ("lr_milestones", "count_probs"):
        if isinstance(fields.get(key), list):
            fields[key] = tuple(fields[key])
    config = loop.SearchConfig(**fields)
    train, val, _ = loop.load_search_data(config)
    search = loop._Search(config, train, val, log=lambda m: None)
    search.load_state_dict(state, search_dir / loop.CHECKPOINT_FILE)
    # A class-mixed subset (the split is sorted by class, and batch norm uses batch statistics).
    perm = torch.randperm(len(search.val_y), generator=torch.Generator().manual_seed(0))[:images]
    x, y = search._layout(search.normalise(search.val_x[perm])), search.val_y[perm]
    lam = search.hparams.detach()
    rows = {}
    with torch.no_grad(), loop._frozen_bn_statistics(search.hm):
        for part, sl in (("prob", slice(0, NUM_PROB_HPARAMS)), ("mag", slice(NUM_PROB_HPARAMS, None)),
                         ("both", slice(0, None))):
            losses = []
            for delta in DELTAS:
                shifted = lam.clone()
                shifted[sl] += delta
                total = sum(F.cross_entropy(search.hm(x[i:i + batch_size], shifted), y[i:i + batch_size],
                                            reduction="sum") for i in range(0, len(y), batch_size))
                losses.append(float(total) / len(y))
            rows[part] = losses
        # The loss's own spread over batches at delta 0, for scale.
        per_batch = [float(F.cross_entropy(search.hm(x[i:i + batch_size], lam), y[i:i + batch_size]))
                     for i in range(0, len(y), batch_size)]
    spread = float(torch.tensor(per_batch).std())
    return {"search": str(search_dir), "epoch": search.epoch, "init": config.init, "objective": config.objective,
            "images": len(y), "batch_size": batch_size, "deltas": list(DELTAS), "val_loss": rows,
            "batch_loss_std": spread}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("searches", nargs="+", help="search output folders holding a checkpoint.pt")
    p.add_argument("--images", type=int, default=2048, help="validation images (default: 2048)")
    p.add_argument("--batch-size", type=int, default=128, help="batch size of the probe (default: 128)")
    p.add_argument("--data-dir", help="where the data is now, if not where the search read it")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    results = [response(Path(s), args.images, args.batch_size, args.data_dir) for s in args.searches]
    head = " | ".join(f"{d:+g}" for d in DELTAS)
    print(f"| search (epoch) | shifted | {head} | batch std |")
    print("|---|---|" + "---|" * len(DELTAS) + "---|")
    for r in results:
        for part, losses in r["val_loss"].items():
            print(f"| {Path(r['search']).name} ({r['epoch']}) | {part} | " + " | ".join(f"{v:.4f}" for v in losses)
                  + f" | {r['batch_loss_std']:.3f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
