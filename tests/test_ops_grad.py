"""Gradients of the ops on float images (issue 21, section 3): to the image for every op, to the magnitude for
every op that has one, without changing a single output value.

Where an op is smooth in an argument, ``torch.autograd.gradcheck`` compares the analytic gradient with
finite differences (float64 kernels on small real crops). Where it is piecewise constant (NEAREST warps and
TranslateX/Y's rounding in the magnitude, Solarize's threshold, Posterize, Equalize, Cutout's patch size),
the kernels use straight-through estimators; those are checked to be finite, nonzero, and to point the way
a large finite difference of the real op goes.
"""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import InterpolationMode

from hba_augment.functional import OP_NAMES, OPS, apply_op
from hba_augment.functional._kernels import KernelContext

pytestmark = pytest.mark.usefixtures("torch_single_thread")

MODES = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR}
CASES = [
    pytest.param(spec, mode, id=f"{spec.name}-{mode}")
    for spec in OPS
    for mode in (("nearest", "bilinear") if spec.geometric else ("nearest",))
]
SPECS = {spec.name: spec for spec in OPS}


def _magnitude(spec, batch: int, dtype=torch.float32, fraction: float = 0.7) -> torch.Tensor | None:
    """One magnitude per image that changes the images without saturating them (signed ops: both signs)."""
    if not spec.has_magnitude:
        return None
    value = spec.low + fraction * (spec.high - spec.low)
    signs = torch.tensor([(-1.0) ** i if spec.signed else 1.0 for i in range(batch)], dtype=dtype)
    return signs * value


def _run(images, spec, magnitude, mode, seed=0):
    generator = torch.Generator().manual_seed(seed)  # Cutout's centres: the same on every call
    return apply_op(images, spec.name, magnitude, interpolation=MODES[mode], generator=generator)


def _weights(out: torch.Tensor) -> torch.Tensor:
    """A loss weight that is not constant, so that no gradient cancels out by symmetry."""
    return torch.linspace(0.1, 1.0, out.numel(), dtype=out.dtype).view_as(out)


@pytest.fixture(scope="module")
def float_images(cifar_images) -> torch.Tensor:
    return cifar_images[:4].double() / 255.0


@pytest.mark.parametrize(("spec", "mode"), CASES)
def test_gradient_reaches_the_image_and_the_magnitude(spec, mode, float_images):
    images = float_images.clone().requires_grad_(True)
    magnitude = _magnitude(spec, len(images))
    if magnitude is not None:
        magnitude.requires_grad_(True)
    out = _run(images, spec, magnitude, mode)
    (out * _weights(out)).sum().backward()
    assert images.grad is not None and torch.isfinite(images.grad).all(), spec.name
    assert images.grad.abs().sum() > 0, f"{spec.name}: no gradient reaches the image"
    if magnitude is not None:
        assert magnitude.grad is not None and torch.isfinite(magnitude.grad).all(), spec.name
        assert (magnitude.grad != 0).all(), f"{spec.name}: zero gradient for some image's magnitude: {magnitude.grad}"


@pytest.mark.parametrize(("spec", "mode"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_asking_for_gradients_changes_no_value(spec, mode, dtype, float_images):
    images = float_images.to(dtype)
    magnitude = _magnitude(spec, len(images))
    with torch.no_grad():
        expected = _run(images, spec, magnitude, mode)
    with_grad = _run(
        images.clone().requires_grad_(True), spec, None if magnitude is None else magnitude.requires_grad_(True), mode
    )
    assert torch.equal(with_grad.detach(), expected), f"{spec.name}: values change when gradients are requested"


@pytest.mark.parametrize("name", ["Solarize", "Posterize", "Cutout", "Brightness"])
def test_straight_through_estimate_points_the_way_the_op_goes(name, float_images):
    # The pointwise estimators (and Brightness, exact, as a control) against a central difference of the
    # real op over a tenth of the range. Solarize darkens bright pixels while its threshold is above the
    # middle grey and brightens dark ones below it, so the two strengths give both signs.
    spec = SPECS[name]
    images = float_images[:1]
    weights = _weights(images)
    step = 0.1 * (spec.high - spec.low)
    for fraction in (0.3, 0.7):
        centre = _magnitude(spec, 1, torch.float64, fraction)
        magnitude = centre.clone().requires_grad_(True)
        (_run(images, spec, magnitude, "nearest") * weights).sum().backward()
        with torch.no_grad():
            change = sum(
                sign * (_run(images, spec, centre + sign * step, "nearest") * weights).sum() for sign in (1.0, -1.0)
            )
        assert change != 0, f"{name}: pick a larger step"
        assert torch.sign(magnitude.grad) == torch.sign(change), (
            f"{name} at {centre.item():g}: gradient {magnitude.grad.item():g}, finite difference {change.item():g}"
        )


@pytest.mark.parametrize("spec", [spec for spec in OPS if spec.geometric], ids=lambda spec: spec.name)
def test_nearest_passes_the_magnitude_bilinears_gradient(spec, float_images):
    # NEAREST is piecewise constant in the magnitude: its estimate is, by choice, BILINEAR's gradient.
    grads = []
    for mode in ("nearest", "bilinear"):
        magnitude = _magnitude(spec, len(float_images)).requires_grad_(True)
        out = _run(float_images, spec, magnitude, mode)
        (out * _weights(out)).sum().backward()
        grads.append(magnitude.grad)
    torch.testing.assert_close(grads[0], grads[1])


# ---------------------------------------------------------------------------------------------------------
# gradcheck where the op is smooth. The float kernels on float64 levels of 8x8 real crops (the public ops
# hand kernels float32 magnitudes, too coarse for finite differences).
# ---------------------------------------------------------------------------------------------------------
CTX = KernelContext(quantize=False, fill=None, mode="nearest", generator=None)
SMOOTH_IN_IMAGE = [
    ("ShearX", "bilinear"), ("ShearY", "bilinear"), ("TranslateX", "bilinear"), ("TranslateY", "bilinear"),
    ("Rotate", "bilinear"), ("Rotate", "nearest"), ("ShearX", "nearest"), ("AutoContrast", "nearest"),
    ("Invert", "nearest"), ("Solarize", "nearest"), ("Brightness", "nearest"), ("Cutout", "nearest"),
]
SMOOTH_IN_MAGNITUDE = [
    ("ShearX", "bilinear"), ("ShearY", "bilinear"), ("Rotate", "bilinear"),
    ("Contrast", "nearest"), ("Color", "nearest"), ("Brightness", "nearest"), ("Sharpness", "nearest"),
]


def _kernel(name: str, mode: str):
    spec = SPECS[name]
    ctx = CTX._replace(mode=mode)

    def call(levels, magnitude):
        return spec.kernel(levels, magnitude, ctx._replace(generator=torch.Generator().manual_seed(0)))

    return spec, call


@pytest.fixture(scope="module")
def levels(cifar_images) -> torch.Tensor:
    # Off whole levels, so that no finite-difference step crosses a rounding boundary of Solarize.
    return cifar_images[:2, :, 10:18, 10:18].double() + 0.25


@pytest.mark.parametrize(("name", "mode"), SMOOTH_IN_IMAGE)
def test_gradcheck_image(name, mode, levels):
    spec, call = _kernel(name, mode)
    magnitude = _magnitude(spec, len(levels), torch.float64)
    inputs = levels.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: call(x, magnitude), (inputs,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize(("name", "mode"), SMOOTH_IN_MAGNITUDE)
def test_gradcheck_magnitude(name, mode, levels):
    spec, call = _kernel(name, mode)
    magnitude = _magnitude(spec, len(levels), torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda m: call(levels, m), (magnitude,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["Contrast", "Color", "Brightness", "Sharpness"])
def test_gradcheck_enhancers_in_image_and_factor_together(name, levels):
    # Brightness is smooth in both; the other three round PIL's intermediate (degenerate) image with a
    # straight-through estimator, so only the blend's own derivative is compared: degenerate held fixed.
    spec, call = _kernel(name, "nearest")
    magnitude = _magnitude(spec, len(levels), torch.float64).requires_grad_(True)
    inputs = levels.clone().requires_grad_(True)
    if name == "Brightness":
        assert torch.autograd.gradcheck(call, (inputs, magnitude), eps=1e-6, atol=1e-5)
    else:
        out = call(inputs, magnitude)
        (out * _weights(out)).sum().backward()
        assert torch.isfinite(inputs.grad).all() and torch.isfinite(magnitude.grad).all()


# ---------------------------------------------------------------------------------------------------------
# Through augment: per-image policies on float images pass gradients to the images and to the magnitudes
# of exactly the slots each image applied, on both batched paths (grouped: CPU; sync-free: accelerators).
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sync_free", [False, True], ids=["grouped", "sync-free"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_gradients_flow_through_augment(sync_free, mode, cifar_images, monkeypatch):
    import hba_augment.functional._augment as augment_module
    from hba_augment.functional import augment

    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", sync_free)
    b = 24
    images = (cifar_images[:b].double() / 255).requires_grad_(True)
    prob = torch.full((b, 2, len(OPS)), 0.5)
    mag = torch.tensor([[spec.low + 0.6 * (spec.high - spec.low) if spec.has_magnitude else 0.0 for spec in OPS]] * 2)
    mag = mag.expand(b, -1, -1).clone().requires_grad_(True)
    out, applied = augment(
        images, prob, mag, interpolation=MODES[mode], generator=torch.Generator().manual_seed(0), return_applied=True
    )
    (out * _weights(out)).sum().backward()
    assert torch.isfinite(images.grad).all() and (images.grad.flatten(1) != 0).any(dim=1).all()
    has_magnitude = torch.tensor([spec.has_magnitude for spec in OPS]).expand(b, 2, -1)
    expected = applied & has_magnitude
    assert expected.sum() >= 12  # the draws applied ops with magnitudes
    assert torch.isfinite(mag.grad).all()
    assert torch.equal(mag.grad != 0, expected), "gradients must reach exactly the magnitudes applied"


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_both_batched_paths_give_the_same_gradients(mode, cifar_images, monkeypatch):
    # The sync-free path computes the ops differently (the enhancers as one blend of the whole batch, each
    # op from the step's input, then a select): the gradients must still be the grouped path's, image by
    # image and magnitude by magnitude, for the same draws.
    import hba_augment.functional._augment as augment_module
    from hba_augment.functional import augment

    b = 24
    mag = torch.tensor([[spec.low + 0.6 * (spec.high - spec.low) if spec.has_magnitude else 0.0 for spec in OPS]] * 2)
    grads = []
    for sync_free in (False, True):
        monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", sync_free)
        images = (cifar_images[:b].double() / 255).requires_grad_(True)
        magnitudes = mag.expand(b, -1, -1).clone().requires_grad_(True)
        prob = torch.full((b, 2, len(OPS)), 0.5)
        prob[:, :, OP_NAMES.index("Cutout")] = 0.0  # the two paths draw Cutout's centres differently
        out = augment(images, prob, magnitudes, interpolation=MODES[mode], generator=torch.Generator().manual_seed(1))
        (out * _weights(out)).sum().backward()
        grads.append((images.grad, magnitudes.grad))
    (image_grouped, mag_grouped), (image_free, mag_free) = grads
    assert (mag_grouped != 0).sum() >= 12
    torch.testing.assert_close(image_free, image_grouped, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(mag_free, mag_grouped, rtol=1e-9, atol=1e-12)
