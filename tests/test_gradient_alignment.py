"""benchmarks/gradient_alignment.py: per-op gradient scores along a trunk, variants paired by batch (issue 20)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from hba_augment import functional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gradient_alignment  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def test_every_op_is_a_variant_once_per_fraction_and_identity_comes_first():
    names = gradient_alignment.variants([0.3, 0.9])
    assert next(iter(names)) == gradient_alignment.IDENTITY and names[gradient_alignment.IDENTITY] == (None, None)
    assert len(names) == 1 + 3 + 12 * 2
    assert names["Equalize"] == ("Equalize", None) and names["Rotate@0.9"] == ("Rotate", 0.9)
    assert {op for op, _ in names.values() if op} == set(functional.OP_NAMES)


def test_a_variant_applies_its_op_at_its_fraction_with_each_image_s_sign(cifar_images):
    x = cifar_images[:4]
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0])
    g = torch.Generator()
    assert torch.equal(gradient_alignment.apply_variant(x, None, None, sign, g), x)
    assert torch.equal(gradient_alignment.apply_variant(x, "ShearX", 0.0, sign, g), x)  # 0 of the range: none
    out = gradient_alignment.apply_variant(x, "Rotate", 0.5, sign, g)
    assert torch.equal(out, functional.apply_op(x, "Rotate", sign * 15.0))
    out = gradient_alignment.apply_variant(x, "Brightness", 0.5, sign, g)  # unsigned: the sign is ignored
    assert torch.equal(out, functional.apply_op(x, "Brightness", 1.0))
    assert torch.equal(gradient_alignment.apply_variant(x, "Invert", None, sign, g), functional.invert(x))


def test_variants_are_paired_by_batch_and_the_probe_leaves_the_trunk_alone(cifar_dir: Path, tmp_path: Path):
    out = tmp_path / "probe"
    args = ["--out", str(out), "--dataset", "cifar10", "--data-dir", str(cifar_dir), "--model", "wrn-10-1",
            "--epochs", "2", "--at", "1,2", "--seeds", "0,1", "--fractions", "0,0.9", "--batches", "2",
            "--train-size", "60", "--val-size", "60", "--val-images", "30", "--batch-size", "20"]
    gradient_alignment.main(args)
    results = {(r["seed"], r["epoch"]): r for r in
               (json.loads(p.read_text()) for p in (out / gradient_alignment.RESULTS_FOLDER).glob("*.json"))}
    assert sorted(results) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    for r in results.values():
        ident = r["scores"][gradient_alignment.IDENTITY]
        assert len(ident["cos"]) == 2 and all(-1 <= c <= 1 for c in ident["cos"])
        # An op at 0 of its range is no op: with every other draw shared, its gradients are identity's.
        for name in ("ShearX@0", "TranslateY@0", "Rotate@0"):
            assert r["scores"][name] == ident
        assert r["scores"]["ShearX@0.9"]["cos"] != ident["cos"]
        # The references: the same images with wrong labels, and other (held-out) images.
        for name in gradient_alignment.CONTROLS:
            assert len(r["scores"][name]["cos"]) == 2 and r["scores"][name]["cos"] != ident["cos"]
        # dot scaled by |g_val|^2 and cos by both norms: the same inner product.
        for name in ("Solarize@0.9", "Equalize"):
            s = r["scores"][name]
            for c, d, n in zip(s["cos"], s["dot"], s["norm"], strict=True):
                assert d * r["val_grad_norm"] == pytest.approx(c * n, rel=1e-5)
            assert all(h != d for h, d in zip(s["dot_head"], s["dot"], strict=True))  # a part, not the whole
    # Two seeds: other trunks, other batches.
    assert results[(0, 1)]["scores"]["Equalize"]["cos"] != results[(1, 1)]["scores"]["Equalize"]["cos"]
    report = (out / gradient_alignment.REPORT_FILE).read_text()
    for text in ("| ShearX@0.9 |", "| *wrong-labels* |", "*wrong-labels*, the batch", "## `dot_head`",
                 "rho between seeds"):
        assert text in report
    # A rerun finds every result and trains nothing: the tables come out as they were.
    gradient_alignment.main([*args[:2], "--report-only"])
    assert (out / gradient_alignment.REPORT_FILE).read_text().split("- Trunk")[1] == report.split("- Trunk")[1]


def test_probing_twice_gives_the_same_scores_and_keeps_the_running_statistics(cifar_dir: Path):
    args = gradient_alignment.argparse.Namespace(
        preset="cifar10", dataset="cifar10", data_dir=str(cifar_dir), model="wrn-10-1", epochs=1, init="zero",
        lr=0.1, wd=5e-4, device="cpu", amp=False, train_size=40, val_size=40, batch_size=20, fractions=[0.9], batches=1,
        val_images=20)
    config = gradient_alignment._config(args, 0)
    train, val, _ = gradient_alignment.load_search_data(config)
    worker = gradient_alignment.Worker(config, train, val, [0])
    model = worker.members[0].model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    first = gradient_alignment.probe(worker, args, 0)
    assert gradient_alignment.probe(worker, args, 0) == first
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("bad, message", [(["--fractions", "1.5"], "--fractions"), (["--at", "0"], "--at"),
                                          (["--at", "200"], "--at"), (["--val-images", "2000"], "--val-size")])
def test_bad_options_are_refused_by_name(tmp_path: Path, bad, message, capsys):
    with pytest.raises(SystemExit):
        gradient_alignment.main(["--out", str(tmp_path), *bad])
    assert message in capsys.readouterr().err


def test_the_validation_parts_hold_every_class_when_the_split_is_listed_class_by_class():
    labels = torch.arange(10).repeat_interleave(20)  # an image folder's split: class by class
    images = torch.arange(200).view(200, 1, 1, 1)
    (g_x, g_y), (h_x, h_y) = gradient_alignment.validation_parts(images, labels, 100, seed=0)
    assert len(g_y) == 100 and len(h_y) == 100
    assert set(g_y.tolist()) == set(h_y.tolist()) == set(range(10))
    assert torch.equal(labels[g_x.flatten()], g_y)  # images and labels stay paired
    assert not set(g_x.flatten().tolist()) & set(h_x.flatten().tolist())  # disjoint
