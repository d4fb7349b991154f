"""Hyper-layers, hyperize, the hyperparameter map and the model registry (hba_augment.search)."""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hba_augment.functional._table import MAGNITUDE_OPS, NUM_OPS, OP_NAMES, OPS
from hba_augment.models import available_models, create_model
from hba_augment.schedule import Schedule
from hba_augment.search._hyperize import STRATEGIES, HyperModel, hyperize
from hba_augment.search.hparams import (
    HPARAM_NAMES,
    NUM_HPARAMS,
    hparams_to_policy,
    init_hparams,
    policy_to_hparams,
)
from hba_augment.search.hyper import HyperBatchNorm2d, HyperConv2d, HyperLinear

pytestmark = pytest.mark.usefixtures("torch_single_thread")

N = 7  # number of hyperparameters in the layer tests


def _randomise(layer: nn.Module, seed: int = 0) -> nn.Module:
    """Give phi_V (zero at initialisation) random values so that lambda matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.endswith("_v") or name.endswith("_u"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return layer


CONV_CASES = [
    {"in_channels": 3, "out_channels": 5, "kernel_size": 3, "padding": 1},
    {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "stride": 2, "padding": 1, "groups": 2, "bias": False},
    {"in_channels": 4, "out_channels": 4, "kernel_size": (1, 3), "dilation": 2, "groups": 4},
    {"in_channels": 2, "out_channels": 3, "kernel_size": 3, "padding": 1, "padding_mode": "reflect"},
]


def _hyper_conv(case: dict) -> HyperConv2d:
    torch.manual_seed(0)
    return _randomise(HyperConv2d(num_hparams=N, **case))


def _materialised_conv(layer: HyperConv2d, x: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Reference: build W_i = phi_0 + diag(phi_V lambda_i) phi_U explicitly and convolve image by image."""
    outs = []
    for i in range(x.shape[0]):
        w = layer.weight + (layer.weight_v @ lam[i])[:, None, None, None] * layer.weight_u
        b = None if layer.bias is None else layer.bias + (layer.bias_v @ lam[i]) * layer.bias_u
        xi = x[i : i + 1]
        if layer.padding_mode != "zeros":
            xi = F.pad(xi, layer._reversed_padding_repeated_twice, mode=layer.padding_mode)
            outs.append(F.conv2d(xi, w, b, layer.stride, 0, layer.dilation, layer.groups))
        else:
            outs.append(F.conv2d(xi, w, b, layer.stride, layer.padding, layer.dilation, layer.groups))
    return torch.cat(outs)


# ------------------------------------------------------------------------------------------ hyper-layers
@pytest.mark.parametrize("case", CONV_CASES)
def test_hyper_conv_equals_materialised_weights(case):
    layer = _hyper_conv(case)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, case["in_channels"], 9, 9, generator=g)
    lam = torch.randn(5, N, generator=g)
    torch.testing.assert_close(layer(x, lam), _materialised_conv(layer, x, lam), rtol=1e-4, atol=1e-5)
    # Shared lambda: the same as every example having that lambda.
    torch.testing.assert_close(layer(x, lam[2]), _materialised_conv(layer, x, lam[2].expand(5, N)),
                               rtol=1e-4, atol=1e-5)


def test_hyper_linear_equals_materialised_weights():
    torch.manual_seed(0)
    layer = _randomise(HyperLinear(6, 4, N))
    g = torch.Generator().manual_seed(1)
    x, lam = torch.randn(5, 6, generator=g), torch.randn(5, N, generator=g)
    ref = torch.stack([
        F.linear(x[i], layer.weight + (layer.weight_v @ lam[i])[:, None] * layer.weight_u,
                 layer.bias + (layer.bias_v @ lam[i]) * layer.bias_u)
        for i in range(5)
    ])
    torch.testing.assert_close(layer(x, lam), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer(x, lam[0]), layer(x, lam[0].expand(5, N)), rtol=1e-5, atol=1e-6)
    # Middle dimensions broadcast like nn.Linear.
    x3 = torch.randn(5, 3, 6, generator=g)
    torch.testing.assert_close(layer(x3, lam)[:, 1], layer(x3[:, 1], lam), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
def test_hyper_bn_equals_per_example_affine(training):
    torch.manual_seed(0)
    layer = _randomise(HyperBatchNorm2d(3, N))
    with torch.no_grad():
        layer.running_mean.uniform_(-1, 1)
        layer.running_var.uniform_(0.5, 2)
    layer.train(training)
    g = torch.Generator().manual_seed(1)
    x, lam = torch.randn(4, 3, 5, 5, generator=g) * 2 + 1, torch.randn(4, N, generator=g)
    ref_bn = nn.BatchNorm2d(3, affine=False)
    ref_bn.load_state_dict({k: v for k, v in layer.state_dict().items() if k.startswith(("running", "num"))})
    ref_bn.train(training)
    xhat = ref_bn(x)
    gamma = layer.weight + (lam @ layer.weight_v.T) * layer.weight_u
    beta = layer.bias + (lam @ layer.bias_v.T) * layer.bias_u
    out = layer(x, lam)
    torch.testing.assert_close(out, xhat * gamma[:, :, None, None] + beta[:, :, None, None], rtol=1e-5, atol=1e-5)
    # Running statistics move exactly like nn.BatchNorm2d's.
    torch.testing.assert_close(layer.running_mean, ref_bn.running_mean)
    torch.testing.assert_close(layer.running_var, ref_bn.running_var)
    assert int(layer.num_batches_tracked) == int(ref_bn.num_batches_tracked)


def _layers():
    torch.manual_seed(0)
    return [
        ("conv", _randomise(HyperConv2d(3, 4, 3, N, padding=1)), (4, 3, 6, 6)),
        ("linear", _randomise(HyperLinear(5, 3, N)), (4, 5)),
        ("bn", _randomise(HyperBatchNorm2d(3, N)), (4, 3, 6, 6)),
    ]


@pytest.mark.parametrize("index", range(3))
def test_output_is_affine_in_lambda(index):
    _, layer, shape = _layers()[index]
    g = torch.Generator().manual_seed(2)
    x = torch.randn(shape, generator=g)
    l1, l2 = torch.randn(shape[0], N, generator=g), torch.randn(shape[0], N, generator=g)
    for a in (0.3, 2.5, -1.0):
        mixed = layer(x, a * l1 + (1 - a) * l2)
        torch.testing.assert_close(mixed, a * layer(x, l1) + (1 - a) * layer(x, l2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("index", range(3))
def test_examples_are_independent(index):
    # Changing lambda_j changes output j only (BN statistics come from x, not from lambda).
    _, layer, shape = _layers()[index]
    g = torch.Generator().manual_seed(3)
    x, lam = torch.randn(shape, generator=g), torch.randn(shape[0], N, generator=g)
    before = layer(x, lam)
    lam2 = lam.clone()
    lam2[1] += torch.randn(N, generator=g) * 3
    after = layer(x, lam2)
    changed = (after - before).flatten(1).abs().amax(dim=1) > 1e-4
    assert changed.tolist() == [False, True, False, False]


@pytest.mark.parametrize("index", range(3))
def test_gradcheck(index):
    _, layer, shape = _layers()[index]
    layer = layer.double()
    g = torch.Generator().manual_seed(4)
    x = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
    lam = torch.randn(shape[0], N, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: layer(a, b), (x, lam))


def test_from_module_equals_original_at_init():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(5)
    lam = torch.randn(4, N, generator=g) * 10
    for conv in (nn.Conv2d(3, 6, 3, stride=2, padding=1), nn.Conv2d(4, 4, 3, groups=2, bias=False),
                 nn.Conv2d(3, 2, 3, padding=2, padding_mode="circular")):
        x = torch.randn(4, conv.in_channels, 8, 8, generator=g)
        h = HyperConv2d.from_module(conv, N)
        # phi_V = 0 makes the lambda terms exactly zero; the stacked GEMM may round differently.
        torch.testing.assert_close(h(x, lam), conv(x), rtol=1e-6, atol=1e-6)
        assert torch.equal(h(x, lam[0]), conv(x))
    lin = nn.Linear(5, 3)
    x = torch.randn(4, 5, generator=g)
    torch.testing.assert_close(HyperLinear.from_module(lin, N)(x, lam), lin(x), rtol=1e-6, atol=1e-6)
    assert torch.equal(HyperLinear.from_module(lin, N)(x, lam[1]), lin(x))
    for training in (True, False):
        bn = nn.BatchNorm2d(3)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 2)
            bn.bias.uniform_(-1, 1)
            bn.running_mean.uniform_(-1, 1)
        bn.train(training)
        h = HyperBatchNorm2d.from_module(bn, N)
        assert h.training == training
        x = torch.randn(4, 3, 5, 5, generator=g)
        torch.testing.assert_close(h(x, lam), bn(x), rtol=0, atol=1e-6)
        assert torch.equal(h.running_mean, bn.running_mean)
    with pytest.raises(ValueError, match=r"nn\.Conv2d"):
        HyperConv2d.from_module(lin, N)
    with pytest.raises(ValueError, match=r"nn\.BatchNorm2d"):
        HyperBatchNorm2d.from_module(nn.BatchNorm1d(3), N)


def test_bad_hparams():
    layer = HyperConv2d(3, 4, 3, N)
    x = torch.randn(2, 3, 5, 5)
    for bad in (torch.zeros(N + 1), torch.zeros(3, N), torch.zeros(2, N, 1), torch.zeros(2, N, dtype=torch.long)):
        with pytest.raises(ValueError, match="hparams"):
            layer(x, bad)
    with pytest.raises(ValueError, match="needs hparams"):
        layer(x)
    with pytest.raises(ValueError, match="num_hparams"):
        HyperLinear(3, 4, 0)
    with pytest.raises(ValueError):
        HyperConv2d(3, 4, 3, N, groups=2)  # nn.Conv2d's own check: 3 channels in 2 groups


# ------------------------------------------------------------------------------------------ hyperize
def _counts(model: nn.Module) -> dict[str, int]:
    return {t.__name__: sum(isinstance(m, t) for m in model.modules()) for t in (nn.Conv2d, nn.BatchNorm2d, nn.Linear)}


@pytest.mark.parametrize("name", ["wrn-10-1", "wrn-16-1"])
def test_strategy_layer_counts(name):
    model = create_model(name, 10)
    c = _counts(model)
    # WRN-(6n+4)-1: stem + 2 convs per block + 2 projection shortcuts; 2 BN per block + the final BN.
    n = (int(name.split("-")[1]) - 4) // 6
    assert c == {"Conv2d": 1 + 6 * n + 2, "BatchNorm2d": 6 * n + 1, "Linear": 1}
    expected = {"conv+bn": (c["Conv2d"], c["BatchNorm2d"], 0), "conv": (c["Conv2d"], 0, 0),
                "bn": (0, c["BatchNorm2d"], 0), "first-conv": (1, 0, 0), "first-bn": (0, 1, 0),
                "all": (c["Conv2d"], c["BatchNorm2d"], 1), "none": (0, 0, 0)}
    assert set(expected) == set(STRATEGIES)
    for strategy, (convs, bns, linears) in expected.items():
        hm = hyperize(model, NUM_HPARAMS, strategy)
        kinds = [type(m) for m in hm.model.modules()]
        assert (kinds.count(HyperConv2d), kinds.count(HyperBatchNorm2d), kinds.count(HyperLinear)) == (convs, bns, linears)
        assert len(hm.hyper_layer_names) == convs + bns + linears
        # Every replaced layer disappears; every other layer stays.
        assert _counts(hm.model)["Conv2d"] == c["Conv2d"] - convs
    first = next(n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d))
    assert hyperize(model, NUM_HPARAMS, "first-bn").hyper_layer_names == [first] == ["block1.0.bn1"]
    assert hyperize(model, NUM_HPARAMS, "first-conv").hyper_layer_names == ["conv1"]
    assert _counts(model) == c  # not in place by default


class _Residual(nn.Module):
    """A custom forward with functional code, a shared layer used twice and a Sequential."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.shared = nn.Conv2d(4, 4, 3, padding=1)
        self.alias = self.shared
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y = self.stem(x)
        y = y + F.relu(self.alias(self.shared(y)))
        return self.head(y.mean(dim=(2, 3)))


def test_hyperize_custom_module():
    torch.manual_seed(0)
    model = _Residual().eval()
    x, lam = torch.randn(3, 3, 8, 8), torch.randn(3, NUM_HPARAMS)
    for strategy in ("conv+bn", "all", "first-bn"):
        hm = hyperize(model, NUM_HPARAMS, strategy).eval()
        torch.testing.assert_close(hm(x, lam), model(x), rtol=1e-6, atol=1e-6)
    hm = hyperize(model, NUM_HPARAMS, "conv")
    assert hm.model.shared is hm.model.alias and isinstance(hm.model.shared, HyperConv2d)
    assert hm.hyper_layer_names == ["stem.0", "shared"]
    inplace = hyperize(model, NUM_HPARAMS, "first-conv", inplace=True)
    assert isinstance(model.stem[0], HyperConv2d) and inplace.model is model
    # A bare layer can be hyperized too.
    assert isinstance(hyperize(nn.Conv2d(3, 3, 1), 4, "conv").model, HyperConv2d)


def test_hyperize_bad_input():
    model = create_model("wrn-10-1", 10)
    with pytest.raises(ValueError, match="Unknown strategy 'conv\\+linear'"):
        hyperize(model, NUM_HPARAMS, "conv+linear")
    with pytest.raises(ValueError, match="found no layer"):
        hyperize(nn.Sequential(nn.Linear(3, 3)), NUM_HPARAMS, "first-bn")
    with pytest.raises(ValueError, match="num_hparams"):
        hyperize(model, 0)
    hm = hyperize(model, NUM_HPARAMS)
    with pytest.raises(ValueError, match="hparams"):
        hm(torch.randn(2, 3, 32, 32), torch.zeros(3, NUM_HPARAMS))
    with pytest.raises(ValueError, match="hparams"):
        hm(torch.randn(2, 3, 32, 32), torch.zeros(NUM_HPARAMS - 1))


@pytest.mark.parametrize("strategy", ["first-bn", "conv", "none"])
def test_gradient_reaches_lambda_only_through_hyper_layers(strategy):
    torch.manual_seed(0)
    hm = hyperize(create_model("wrn-10-1", 10), NUM_HPARAMS, strategy)
    x, y = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])

    def lam_grad():
        lam = torch.randn(NUM_HPARAMS, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
        F.cross_entropy(hm(x, lam), y).backward()
        return lam.grad

    grad = lam_grad()
    if strategy == "none":
        assert grad is None  # lambda is not part of the graph at all
        return
    # At initialisation phi_V = 0, so the hyper-layers are the only path and it carries nothing.
    assert torch.equal(grad, torch.zeros(NUM_HPARAMS))
    for m in hm.model.modules():
        _randomise(m) if isinstance(m, (HyperConv2d, HyperBatchNorm2d)) else None
    grad = lam_grad()
    assert grad.abs().sum() > 0 and torch.isfinite(grad).all()


def test_hparams_are_thread_local():
    torch.manual_seed(0)
    hm = hyperize(create_model("wrn-10-1", 10), NUM_HPARAMS, "conv+bn").eval()
    for m in hm.model.modules():
        _randomise(m) if isinstance(m, (HyperConv2d, HyperBatchNorm2d)) else None
    x = torch.randn(2, 3, 8, 8)
    lams = [torch.full((NUM_HPARAMS,), v) for v in (-1.0, 0.5, 2.0)]
    with torch.no_grad():
        expected = [hm(x, lam) for lam in lams]
    errors: list[str] = []
    barrier = threading.Barrier(len(lams))

    def work(k: int) -> None:
        barrier.wait()
        with torch.no_grad():
            for _ in range(5):
                if not torch.equal(hm(x, lams[k]), expected[k]):
                    errors.append(f"thread {k} saw another thread's hparams")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(lams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_hypermodel_is_plain_module():
    hm = hyperize(create_model("wrn-10-1", 10), NUM_HPARAMS, "first-bn")
    assert isinstance(hm, HyperModel) and hm.num_hparams == NUM_HPARAMS
    sd = hm.state_dict()
    assert any(k.endswith("bn1.weight_v") for k in sd)
    hm2 = hyperize(create_model("wrn-10-1", 10), NUM_HPARAMS, "first-bn")
    hm2.load_state_dict(sd)
    assert len(hm.hyper_parameters()) == 4  # weight_u, bias_u, weight_v, bias_v of one BN
    assert "strategy='first-bn'" in repr(hm)


# ------------------------------------------------------------------------------------------ hparams
def test_hparam_layout():
    assert NUM_HPARAMS == 2 * NUM_OPS + 2 * len(MAGNITUDE_OPS) == 54
    assert len(HPARAM_NAMES) == NUM_HPARAMS and len(set(HPARAM_NAMES)) == NUM_HPARAMS
    assert HPARAM_NAMES[0] == f"prob[0].{OPS[0].name}" and HPARAM_NAMES[NUM_OPS] == f"prob[1].{OPS[0].name}"
    assert HPARAM_NAMES[30] == f"mag[0].{OPS[MAGNITUDE_OPS[0]].name}"
    # Entry 30 + j drives the magnitude of op MAGNITUDE_OPS[j] of copy 0 and nothing else.
    lam = init_hparams()
    base_p, base_m = hparams_to_policy(lam)
    lam[30 + 3] = 4.0
    p, m = hparams_to_policy(lam)
    assert torch.equal(p, base_p)
    diff = (m != base_m) & ~torch.isnan(m)
    assert diff.nonzero().tolist() == [[0, MAGNITUDE_OPS[3]]]


def test_init_hparams_is_five_percent_of_every_range():
    lam = init_hparams()
    assert lam.shape == (NUM_HPARAMS,) and lam.dtype == torch.float32
    assert torch.allclose(lam, torch.full_like(lam, math.log(0.05 / 0.95)))
    prob, mag = hparams_to_policy(lam.double())
    torch.testing.assert_close(prob, torch.full((2, NUM_OPS), 0.05, dtype=torch.float64))
    for k, spec in enumerate(OPS):
        if spec.has_magnitude:
            assert mag[:, k].tolist() == pytest.approx([0.95 * spec.low + 0.05 * spec.high] * 2)
        else:
            assert torch.isnan(mag[:, k]).all()


def test_identity_init_starts_the_enhancers_at_factor_one_and_leaves_the_rest(cifar_images):
    from hba_augment.functional import apply_op

    paper, identity = init_hparams(dtype=torch.float64), init_hparams("identity", dtype=torch.float64)
    assert identity.dtype == torch.float64
    p0, m0 = hparams_to_policy(paper)
    p1, m1 = hparams_to_policy(identity)
    assert torch.equal(p0, p1)
    enhancers = [OP_NAMES.index(n) for n in ("Contrast", "Color", "Brightness", "Sharpness")]
    for k in range(NUM_OPS):
        if k in enhancers:
            assert m1[:, k].tolist() == pytest.approx([1.0, 1.0])
            # The identity: the op leaves real images unchanged.
            assert torch.equal(apply_op(cifar_images, OP_NAMES[k], m1[0, k].float().expand(len(cifar_images))),
                               cifar_images)
        else:
            torch.testing.assert_close(m1[:, k], m0[:, k], equal_nan=True)
    with pytest.raises(ValueError, match=r"init must be one of 'paper', 'identity', .* got 'none'"):
        init_hparams("none")


def test_initial_policy_is_mild_on_real_images(cifar_images):
    """the contract, section 1: the initial magnitudes of Solarize and Posterize (strengths) barely change an image.

    With raw thresholds and bits (format version 1) the same initial values inverted 97% of the pixels and
    turned images black.
    """
    from hba_augment.functional import apply_op

    _, mag = hparams_to_policy(init_hparams())
    images = cifar_images[:64]
    posterized = apply_op(images, "Posterize", mag[0, OP_NAMES.index("Posterize")].expand(64))
    assert torch.equal(posterized, images)  # strength 0.4 keeps all 8 bits
    solarized = apply_op(images, "Solarize", mag[0, OP_NAMES.index("Solarize")].expand(64))
    changed = (solarized != images).float().mean().item()
    assert 0 < changed < 0.05  # only levels >= 244 are inverted


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_policy_stays_in_range_at_the_extremes(dtype):
    lam = torch.stack([torch.full((NUM_HPARAMS,), v, dtype=dtype) for v in (-1e4, -30.0, 0.0, 30.0, 1e4)])
    prob, mag = hparams_to_policy(lam)
    assert prob.shape == mag.shape == (5, 2, NUM_OPS)
    Schedule(prob, mag)  # validates every value against the exact (float64) ranges
    assert torch.isnan(mag[..., [k for k in range(NUM_OPS) if not OPS[k].has_magnitude]]).all()


def test_policy_map_is_differentiable_and_invertible():
    g = torch.Generator().manual_seed(0)
    lam = (torch.randn(3, 4, NUM_HPARAMS, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    prob, mag = hparams_to_policy(lam)
    assert prob.shape == (3, 4, 2, NUM_OPS)
    (prob.sum() + torch.nan_to_num(mag).sum()).backward()
    assert (lam.grad > 0).all()  # both maps are increasing in every entry
    back = policy_to_hparams(prob.detach(), mag.detach())
    torch.testing.assert_close(back, lam.detach(), rtol=1e-6, atol=1e-6)
    assert torch.isfinite(policy_to_hparams(torch.ones(2, NUM_OPS), torch.zeros(2, NUM_OPS) + 0.1)).all()


def test_hparam_map_bad_input():
    with pytest.raises(ValueError, match="54"):
        hparams_to_policy(torch.zeros(53))
    with pytest.raises(ValueError, match="floating"):
        hparams_to_policy(torch.zeros(NUM_HPARAMS, dtype=torch.long))
    with pytest.raises(ValueError, match="shape"):
        policy_to_hparams(torch.zeros(15), torch.zeros(15))
    with pytest.raises(ValueError, match="mag"):
        policy_to_hparams(torch.zeros(2, 15), torch.zeros(3, 2, 15))


# ------------------------------------------------------------------------------------------ models
@pytest.mark.parametrize(("name", "params"), [("wrn-40-2", 2.2e6), ("wrn-28-10", 36.5e6)])
def test_wrn_parameter_counts(name, params):
    model = create_model(name, 10)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count - params) / params < 0.05


def test_wrn_forward_and_registry():
    torch.manual_seed(0)
    model = create_model("WRN-10-2", 7)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)
    assert model(torch.randn(2, 3, 24, 24)).shape == (2, 7)  # any input size (global pooling)
    assert {"wrn-40-2", "wrn-28-10", "wrn-10-1"} <= set(available_models())
    with pytest.raises(ValueError, match="wrn-<depth>-<width>"):
        create_model("vgg-16", 10)
    with pytest.raises(ValueError, match="6n\\+4"):
        create_model("wrn-12-2", 10)
    with pytest.raises(ValueError, match="width"):
        create_model("wrn-10-0", 10)
    with pytest.raises(ValueError, match="num_classes"):
        create_model("wrn-10-1", 0)
