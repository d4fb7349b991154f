"""The policy-evaluation model zoo: parameter counts, forward/backward, Shake-Shake and ShakeDrop semantics."""

from __future__ import annotations

import pytest
import torch

from hba_augment.models import available_models, create_model
from hba_augment.models.pyramidnet import PyramidNet, shake_drop
from hba_augment.models.shake_shake import ShakeShakeBlock, shake_shake_mix

pytestmark = pytest.mark.usefixtures("torch_single_thread_per_test")

# Published parameter counts (AutoAugment / PBA / HBA tables; torchvision for ResNet-50).
PUBLISHED = {
    ("wrn-40-2", 10): 2.2e6,
    ("wrn-28-10", 10): 36.5e6,
    ("shake-shake-26-2x32d", 10): 2.9e6,
    ("shake-shake-26-2x96d", 10): 26.2e6,
    ("shake-shake-26-2x112d", 10): 35.8e6,
    ("pyramidnet-272-200", 10): 26.0e6,
    ("resnet-50", 1000): 25.6e6,
}

# Forward + backward at batch 2, 32x32. The big ones are represented by a small member of the same
# class (wrn-28-10 by wrn-16-2, the 2x96d/2x112d Shake-Shakes by 2x32d and a shallow one,
# pyramidnet-272-200 by pyramidnet-20-48); their parameter counts are checked above.
SMALL = ["wrn-40-2", "wrn-16-2", "shake-shake-26-2x32d", "shake-shake-8-2x16d", "pyramidnet-20-48", "resnet-50",
         "alexnet-stn"]


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("name", "classes"), list(PUBLISHED))
def test_parameter_count_matches_published(name, classes):
    with torch.device("meta"):  # counting needs no memory and no initialisation
        model = create_model(name, classes)
    count, published = n_params(model), PUBLISHED[(name, classes)]
    assert abs(count - published) / published < 0.05, f"{name}: {count:,} parameters vs published {published:,.0f}"


def test_registry_lists_the_paper_models():
    names = available_models()
    for name, _ in PUBLISHED:
        assert name in names
    assert "alexnet-stn" in names


@pytest.mark.parametrize("name", SMALL)
def test_forward_backward(name):
    torch.manual_seed(0)
    model = create_model(name, 10)
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    out = model(x)
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    out.square().sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert x.grad is not None and x.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        a, b = model(x), model(x)
    assert torch.equal(a, b), f"{name} is not deterministic in eval mode"


def test_alexnet_stn_structure():
    model = create_model("alexnet-stn", 10)
    assert [c.out_channels for c in model.convs] == [64, 192, 384, 256, 256]
    assert [c.stride[0] for c in model.convs] == [2, 1, 1, 1, 1]
    assert (model.fc1.in_features, model.fc2.in_features, model.fc3.out_features) == (1024, 4096, 10)
    with pytest.raises(ValueError, match="32x32"):
        model(torch.zeros(1, 3, 64, 64))


@pytest.mark.parametrize("name", ["shake-shake-25-2x32d", "pyramidnet-21-48", "resnet-42", "wrn-11-2", "vgg-16"])
def test_bad_model_names_raise(name):
    with pytest.raises(ValueError, match=r"depth|Unknown model"):
        create_model(name, 10)


def test_shake_shake_mix_forward_alpha_backward_beta():
    x1 = torch.randn(3, 2, 4, 4, requires_grad=True)
    x2 = torch.randn(3, 2, 4, 4, requires_grad=True)
    alpha = torch.tensor([0.1, 0.5, 0.9]).view(3, 1, 1, 1)
    beta = torch.tensor([0.7, 0.2, 0.4]).view(3, 1, 1, 1)
    y = shake_shake_mix(x1, x2, alpha, beta)
    torch.testing.assert_close(y, alpha * x1 + (1 - alpha) * x2)
    y.sum().backward()
    torch.testing.assert_close(x1.grad, beta.expand_as(x1))
    torch.testing.assert_close(x2.grad, (1 - beta).expand_as(x2))


def test_shake_shake_block_random_per_image_in_training_and_half_in_eval():
    torch.manual_seed(0)
    block = ShakeShakeBlock(4, 4, 1)
    x = torch.randn(8, 4, 6, 6)
    block.eval()
    with torch.no_grad():
        expected = 0.5 * (block.branch1(x) + block.branch2(x)) + x
        torch.testing.assert_close(block(x), expected)
        block.train()
        b1, b2 = block.branch1(x), block.branch2(x)  # batch statistics, the same in both calls
        y = block(x) - x
    # Each image is a convex combination of its branches with its own alpha.
    d = (b1 - b2).flatten(1)
    alpha = ((y.flatten(1) - b2.flatten(1)) * d).sum(1) / d.square().sum(1)
    torch.testing.assert_close(y, torch.lerp(b2, b1, alpha.view(-1, 1, 1, 1)), rtol=1e-4, atol=1e-4)
    assert ((alpha > 0) & (alpha < 1)).all() and alpha.std() > 0.05


def test_shake_drop_eval_scales_by_keep_probability():
    x = torch.randn(4, 3, 2, 2)
    torch.testing.assert_close(shake_drop(x, 0.7, training=False), 0.7 * x)


def test_shake_drop_training_forward_and_backward():
    torch.manual_seed(1)
    x = torch.ones(400, 1, 1, 1, requires_grad=True)
    y = shake_drop(x, 0.5, training=True)
    y.sum().backward()
    fwd, bwd = y.detach().flatten(), x.grad.flatten()
    kept = fwd == 1.0
    # Kept images pass unchanged both ways; dropped ones get alpha in [-1, 1] forward, beta in [0, 1] backward.
    assert torch.equal(bwd[kept], torch.ones_like(bwd[kept]))
    assert 120 < int(kept.sum()) < 280
    assert (fwd[~kept].abs() <= 1).all() and (fwd[~kept] < 0).any()
    assert ((bwd[~kept] >= 0) & (bwd[~kept] <= 1)).all()
    assert not torch.equal(fwd[~kept], bwd[~kept])


def test_pyramidnet_widths_and_linear_drop_schedule():
    model = PyramidNet(20, 48, 10)  # n = 2 blocks per stage
    blocks = [b for stage in (model.stage1, model.stage2, model.stage3) for b in stage]
    assert len(blocks) == 6
    keep = [b.keep_prob for b in blocks]
    expected = 1 - 0.5 * torch.arange(1, 7, dtype=torch.float64) / 6
    torch.testing.assert_close(torch.tensor(keep, dtype=torch.float64), expected, rtol=0, atol=1e-12)
    assert model.fc.in_features == 4 * (16 + 48)
    assert [b.stride for b in blocks] == [1, 1, 2, 1, 2, 1]
