"""The batched path accelerators take (issue 21, sections 1 and 4): no host synchronisation, and a launch
count that depends on neither the batch size nor the draws; same pixels as the grouped CPU path for the
same draws.

On the CPU, ``augment`` groups the images by op (a host read of the group sizes costs nothing there, and
each op then runs only on its images, which measured faster: RESULTS.md, "Sync-free batches"); these tests
switch the CPU onto the accelerators' path (``_FORCE_SYNC_FREE``) to check it where there is no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torchvision.transforms import InterpolationMode

import hba_augment.functional._augment as augment_module
import hba_augment.functional._validation as validation
from hba_augment import HBAPolicy, Schedule
from hba_augment.functional import NUM_OPS, OP_NAMES, OPS, augment

pytestmark = pytest.mark.usefixtures("torch_single_thread")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: aten ops that read a tensor's value on the host or whose output shape depends on values.
HOST_SYNC_OPS = {
    "_local_scalar_dense", "item", "nonzero", "nonzero_static", "masked_select", "masked_scatter",
    "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive", "bincount", "is_nonzero", "equal",
    "repeat_interleave", "_assert_async", "histc", "allclose",
}


class _Recorder(TorchDispatchMode):
    """Every aten op dispatched while active, and the host-synchronising ones among them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops.append(name)
        if name in HOST_SYNC_OPS:
            self.syncs.append(str(func))
        elif name == "lift_fresh":
            # A tensor made from host data (torch.tensor(list), indexing with a list): on an accelerator a
            # host-to-device copy, which waits for the host and which a CUDA graph cannot capture.
            self.syncs.append(f"{func}: host data copied in")
        elif name == "index" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())
        ):
            self.syncs.append(f"{func} with a boolean mask")
        return func(*args, **(kwargs or {}))


_HOST_READS = ("tolist", "item", "numpy", "__bool__", "__int__", "__float__", "__index__")


@pytest.fixture
def sync_free(monkeypatch):
    """The accelerators' path on the CPU; and every host read of a tensor's value fails (CPU tensors'
    ``tolist`` and ``numpy`` dispatch no aten op, so the recorder alone would not see them)."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)

    def record(monkey):
        for name in _HOST_READS:
            def refuse(self, *args, _name=name, **kwargs):
                raise AssertionError(f"host read of a tensor's value: Tensor.{_name}")
            monkey.setattr(torch.Tensor, name, refuse)

    return record


def _policy(p_geometric: float, p_other: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    prob = np.where([spec.geometric for spec in OPS], p_geometric, p_other) * np.ones((2, NUM_OPS))
    mag = np.array([[spec.low + rng.uniform() * (spec.high - spec.low) if spec.has_magnitude else np.nan
                     for spec in OPS] for _ in range(2)])
    return torch.tensor(prob, dtype=torch.float32), torch.tensor(mag, dtype=torch.float32)


def _record(images, prob, mag, seed, monkeypatch, sync_free, **kwargs) -> _Recorder:
    augment(images, prob, mag, generator=torch.Generator().manual_seed(seed), **kwargs)  # warm the caches
    with monkeypatch.context() as m:
        sync_free(m)
        with _Recorder() as recorder:
            augment(images, prob, mag, generator=torch.Generator().manual_seed(seed), **kwargs)
    return recorder


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"interpolation": InterpolationMode.BILINEAR, "fill": 0.5},
        {"return_matrices": True, "return_applied": True},
        {"frames": 2},
    ],
    ids=["nearest", "bilinear-fill", "matrices-applied", "video"],
)
def test_no_host_sync_and_a_fixed_op_count(dtype, kwargs, cifar_images, monkeypatch, sync_free):
    if dtype == torch.float32:
        # The CPU-only check of float images' range reads two values by design; it never runs on a GPU.
        monkeypatch.setattr(validation, "check_float_range", lambda images: None)
    if "fill" in kwargs and dtype == torch.uint8:
        kwargs = {**kwargs, "fill": 128}
    sequences = {}
    # Two batch sizes, two seeds, and schedules that draw mostly geometric ops, mostly colour ops, or none.
    for b in (4, 64):
        for seed, (p_geometric, p_other) in enumerate([(0.9, 0.1), (0.1, 0.9), (0.0, 0.0), (0.5, 0.5)]):
            images = cifar_images[:b] if dtype == torch.uint8 else cifar_images[:b].float() / 255
            prob, mag = _policy(p_geometric, p_other, seed)
            recorder = _record(images, prob, mag, seed, monkeypatch, sync_free, **kwargs)
            assert recorder.syncs == [], f"host-synchronising ops at B={b}, seed {seed}: {recorder.syncs}"
            sequences[(b, seed)] = recorder.ops
    first = next(iter(sequences.values()))
    counts = {key: len(ops) for key, ops in sequences.items()}
    assert all(ops == first for ops in sequences.values()), f"the ops depend on the batch or the draws: {counts}"


def test_per_image_policies_are_sync_free_too(cifar_images, monkeypatch, sync_free):
    b = 8
    prob, mag = _policy(0.5, 0.5, 0)
    prob, mag = prob.expand(b, -1, -1).contiguous(), mag.expand(b, -1, -1).contiguous()
    recorder = _record(cifar_images[:b], prob, mag, 0, monkeypatch, sync_free)
    assert recorder.syncs == []


@pytest.mark.parametrize("per_image", [False, True], ids=["shared", "per-image"])
def test_unchecked_policies_copy_nothing_in(per_image, cifar_images, monkeypatch, sync_free):
    """Unchecked policies are not remembered, so each call rebuilds the shared policy's warp maps and
    tables: they too must come from device-side indices (a CUDA graph captured this call on the H100 and
    failed on a list index before)."""
    b = 8
    prob, mag = _policy(0.5, 0.5, 1)
    if per_image:
        prob, mag = prob.expand(b, -1, -1).contiguous(), mag.expand(b, -1, -1).contiguous()
    recorder = _record(cifar_images[:b], prob, mag, 0, monkeypatch, sync_free, check_policy=False)
    assert recorder.syncs == []


def test_the_grouped_cpu_path_is_what_the_recorder_catches(cifar_images, monkeypatch):
    # The check above can fail: the CPU's grouped path reads the group sizes on the host, and its op count
    # follows the draws.
    prob, mag = _policy(0.5, 0.5, 0)
    counts = set()
    for seed in (0, 1):
        with _Recorder() as recorder:
            augment(cifar_images[:16], prob, mag, generator=torch.Generator().manual_seed(seed))
        assert any("bincount" in op for op in recorder.syncs)
        counts.add(len(recorder.ops))
    assert len(counts) == 2


def _grouped_and_sync_free(images, prob, mag, seed, monkeypatch, **kwargs):
    outs = []
    for flag in (False, True):
        monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", flag)
        outs.append(augment(images, prob, mag, generator=torch.Generator().manual_seed(seed), **kwargs))
    return outs


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
@pytest.mark.parametrize("interpolation", [InterpolationMode.NEAREST, InterpolationMode.BILINEAR])
@pytest.mark.parametrize("fill", [None, 0.25])
@pytest.mark.parametrize("per_image", [False, True])
def test_same_pixels_as_the_grouped_path(dtype, interpolation, fill, per_image, cifar_images, monkeypatch):
    # Both paths draw the template alike (Cutout's centres aside: the sync-free path draws one for every
    # image), so with Cutout off every image must come out the same, bit for bit.
    images = cifar_images[:48] if dtype == torch.uint8 else cifar_images[:48].to(dtype) / 255
    if fill is not None and dtype == torch.uint8:
        fill = 64
    prob, mag = _policy(0.5, 0.5, 1)
    prob[:, OP_NAMES.index("Cutout")] = 0.0
    if per_image:
        generator = torch.Generator().manual_seed(2)
        prob = torch.rand(len(images), 2, NUM_OPS, generator=generator)
        prob[..., OP_NAMES.index("Cutout")] = 0.0
        mag = mag.expand(len(images), -1, -1).contiguous()
    grouped, sync_free = _grouped_and_sync_free(
        images, prob, mag, 3, monkeypatch, interpolation=interpolation, fill=fill,
        count_probs=(0.0, 0.2, 0.3, 0.5), return_matrices=True, return_applied=True,
    )
    assert grouped[2].any(dim=(1, 2)).sum() >= 40  # most images applied something
    for a, b in zip(grouped, sync_free, strict=True):
        assert torch.equal(a, b)


#: The ops the sync-free uint8 path computes from statistics it shares (the int64 levels, the integer grey
#: levels) or in int16 (Sharpness's SMOOTH): the ones a random batch below draws.
_SHARED_STATISTICS_OPS = ("AutoContrast", "Equalize", "Contrast", "Color", "Sharpness", "Posterize")


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.tuples(st.integers(1, 6), st.sampled_from([1, 3]), st.integers(1, 12), st.integers(1, 12)),
    seed=st.integers(0, 2**31 - 1),
    flat=st.booleans(),
)
def test_same_uint8_pixels_as_the_grouped_path_for_any_batch(shape, seed, flat, monkeypatch):
    # Random levels (or nearly constant ones, where Equalize's and AutoContrast's special cases live), any
    # size down to 1x1 (no SMOOTH under 3x3), grey or RGB: the integer statistics of the sync-free stage
    # must give the grouped path's pixels.
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    if flat:
        images = (images // 128 + 100).to(torch.uint8)
    prob = torch.zeros(2, NUM_OPS)
    for name in _SHARED_STATISTICS_OPS:
        prob[:, OP_NAMES.index(name)] = 0.8
    mag = _policy(0.5, 0.5, seed % 7)[1]
    grouped, sync_free = _grouped_and_sync_free(images, prob, mag, seed, monkeypatch, count_probs=(0.0, 0.0, 1.0))
    assert torch.equal(grouped, sync_free)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_cutout_patches(dtype, cifar_images, monkeypatch, cutout_structure):
    # Only Cutout, at p = 1, with one op per image: every image gets exactly one patch of its magnitude.
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    images = cifar_images[:32]
    images = images if dtype == torch.uint8 else images.float() / 255
    prob = torch.zeros(2, NUM_OPS)
    prob[0, OP_NAMES.index("Cutout")] = 1.0
    mag = _policy(0.5, 0.5, 0)[1]
    mag[:, OP_NAMES.index("Cutout")] = 0.2
    fill = 7 if dtype == torch.uint8 else 7 / 255
    out = augment(images, prob, mag, (0.0, 1.0), fill=fill, generator=torch.Generator().manual_seed(0))
    cutout_structure(images, out, 0.2, fill)


def test_frames_share_their_draws(cifar_images, monkeypatch):
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    video = cifar_images[:1].expand(6, -1, -1, -1).contiguous()  # 3 videos of 2 identical frames
    prob, mag = _policy(0.5, 0.5, 4)
    out = augment(video, prob, mag, frames=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out[0::2], out[1::2])


def test_batch_of_one_image(cifar_images, monkeypatch):
    # The accelerators take one image through the same path (no host-side picking of its ops).
    prob, mag = _policy(0.5, 0.5, 5)
    prob[:, OP_NAMES.index("Cutout")] = 0.0
    grouped, sync_free = _grouped_and_sync_free(cifar_images[0], prob, mag, 6, monkeypatch)
    assert sync_free.shape == cifar_images[0].shape and torch.equal(grouped, sync_free)


# ---------------------------------------------------------------------------------------------------------
# CUDA: the real thing.
# ---------------------------------------------------------------------------------------------------------


def _cuda_policy():
    schedule = Schedule.constant(*(t.numpy() for t in _policy(0.5, 0.5, 7)))
    return HBAPolicy(schedule)


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("interpolation", [InterpolationMode.NEAREST, InterpolationMode.BILINEAR])
def test_cuda_batch_never_synchronises(dtype, interpolation, cifar_images):
    device = torch.device("cuda")
    images = cifar_images.to(device)
    images = images if dtype == torch.uint8 else images.float() / 255
    transform = HBAPolicy(_cuda_policy().schedule, interpolation=interpolation)
    generator = torch.Generator(device).manual_seed(0)
    transform(images, generator=generator)  # first call: the policy's check and the per-device constants
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            out = transform(images, generator=generator)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.shape == images.shape and out.dtype == images.dtype


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("check_policy", [True, False])
def test_cuda_graph_replay_equals_eager(dtype, check_policy, cifar_images):
    device = torch.device("cuda")
    images = cifar_images.to(device)
    images = images if dtype == torch.uint8 else images.float() / 255
    prob, mag = (t.to(device) for t in _policy(0.5, 0.5, 8))
    # Warm up on a side stream (caches, the policy's check), as torch.cuda.graphs asks.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            augment(images, prob, mag, check_policy=check_policy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        # torch's default CUDA generator: graph-safe. Unchecked, the policy's tables are built inside.
        captured = augment(images, prob, mag, check_policy=check_policy)
    for seed in (0, 1):
        torch.cuda.manual_seed(seed)
        graph.replay()
        torch.cuda.manual_seed(seed)
        eager = augment(images, prob, mag, check_policy=check_policy)
        assert torch.equal(captured, eager), f"seed {seed}: replay differs from eager"
    assert not torch.equal(captured, images)


def test_unchecked_fresh_per_image_policies_never_read_the_device(cifar_images, monkeypatch, sync_free):
    """The search's case: a new per-image policy every step, valid by construction. With the check it costs
    one host read per call; ``check_policy=False`` costs none (and takes an invalid policy without a word)."""
    images = cifar_images[:8]
    prob, mag = _policy(0.5, 0.5, 0)
    fresh = lambda: (prob.expand(8, -1, -1).clone(), mag.expand(8, -1, -1).clone())  # noqa: E731
    augment(images, *fresh(), generator=torch.Generator().manual_seed(0))  # warm the other caches
    with monkeypatch.context() as m:
        sync_free(m)
        with _Recorder() as recorder:
            augment(images, *fresh(), generator=torch.Generator().manual_seed(0), check_policy=False)
        assert recorder.syncs == []
        with pytest.raises(AssertionError, match="host read"), _Recorder():
            augment(images, *fresh(), generator=torch.Generator().manual_seed(0))
    bad_prob, bad_mag = fresh()
    bad_prob[3, 0, 0] = 1.5
    with pytest.raises(ValueError, match=r"prob of ShearX \(copy 0\) must lie in \[0, 1\], got 1.5"):
        augment(images, bad_prob, bad_mag)
    assert augment(images, bad_prob, bad_mag, check_policy=False).shape == images.shape


# Dynamo warns for every lru_cache it traces through: the kernels' constants are cached so that it sees none.
@pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")
# (float32, BILINEAR and per-image policies are traced by the compile=True tests below)
@pytest.mark.parametrize(("dtype", "kwargs"), [(torch.uint8, {"fill": 0.25, "count_probs": (0.1, 0.2, 0.3, 0.4)})])
def test_torch_compile_traces_the_batched_call_as_one_graph(dtype, kwargs, cifar_images, monkeypatch):
    """Issue 21, section 1: ``torch.compile(..., fullgraph=True)`` of the accelerators' call, unchecked policy,
    torch's default generator (dynamo takes no ``torch.Generator`` argument). fullgraph refuses any graph
    break (a host read, a data-dependent shape, an untraceable helper); ``aot_eager`` traces forward and
    functionalises without a compiler and replays the eager pixels under the same seed."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    images = cifar_images[:16] if dtype == torch.uint8 else cifar_images[:16].float() / 255
    prob, mag = _policy(0.5, 0.5, 3)

    def call(x, p, m):
        return augment(x, p, m, check_policy=False, **kwargs)

    # A checked eager call first: the policies it remembers must not stop the trace of the same tensors.
    augment(images, prob, mag, **kwargs)
    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    torch.manual_seed(7)
    out = compiled(images, prob, mag)
    torch.manual_seed(7)
    assert torch.equal(out, call(images, prob, mag))
    assert not torch.equal(out, images)


def _compiled_and_eager(images, prob, mag, seed, **kwargs):
    """The same call compiled and eager from generators in the same state; asserts both drew alike."""
    g_compiled, g_eager = (torch.Generator().manual_seed(seed) for _ in range(2))
    compiled = augment(images, prob, mag, generator=g_compiled, **kwargs)
    kwargs.pop("compile")
    eager = augment(images, prob, mag, generator=g_eager, **kwargs)
    assert torch.equal(g_compiled.get_state(), g_eager.get_state())  # the same draws, all of them eager
    return compiled, eager


@pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")
@pytest.mark.parametrize(("dtype", "kwargs", "per_image"), [
    (torch.uint8, {"fill": (10, 200, 30)}, False),
    (torch.float32, {"interpolation": InterpolationMode.BILINEAR, "count_probs": (0.1, 0.2, 0.3, 0.4)}, True),
])
def test_compile_gives_the_eager_pixels_from_any_generator(dtype, kwargs, per_image, cifar_images, monkeypatch):
    """Issue 21, section 1: ``augment(..., compile=...)`` draws eagerly (from a ``torch.Generator`` too, which
    dynamo cannot take) and compiles the pixel work alone, so the images get the eager call's pixels. Under
    ``aot_eager`` (no code generation: what is traced, not inductor's arithmetic); a second batch size
    reuses the trace or retraces without changing a pixel."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    images = cifar_images[:16] if dtype == torch.uint8 else cifar_images[:16].float() / 255
    prob, mag = _policy(0.5, 0.5, 4)
    if per_image:
        prob, mag = prob.expand(16, 2, NUM_OPS).clone(), mag.expand(16, 2, NUM_OPS).clone()
        prob[::2] = prob[::2].flip(-1)  # half the images with another policy
    compile_ = {"backend": "aot_eager", "dynamic": False}  # (a symbolic retrace for the second size is slower)
    for seed, n in ((1, 16), (2, 9)):
        compiled, eager = _compiled_and_eager(images[:n], prob[:n] if per_image else prob,
                                              mag[:n] if per_image else mag, seed, compile=compile_, **kwargs)
        assert torch.equal(compiled, eager), f"seed {seed}, {n} images"
        assert not torch.equal(compiled, images[:n])


def test_compile_passes_the_eager_gradients(cifar_images, monkeypatch):
    """Issue 21, section 3, compiled: gradients reach the images and the magnitudes through the compiled
    pixel work (AOT autograd traces the backward too), equal to the eager ones. float64, ``aot_eager``."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    prob, mag = (t.double() for t in _policy(0.5, 0.5, 2))
    grads = []
    for compile_ in (False, {"backend": "aot_eager"}):
        x = (cifar_images[:6, :, :10, :10].double() / 255).requires_grad_(True)
        m = mag.clone().requires_grad_(True)
        # One op per image: one step to trace forward and backward (each step adds some 15 s of tracing).
        y = augment(x, prob, m, (0.0, 1.0), generator=torch.Generator().manual_seed(3), check_policy=False,
                    compile=compile_)
        (y * torch.linspace(0, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
        grads.append((y.detach(), x.grad, torch.nan_to_num(m.grad)))
    (y_eager, x_eager, m_eager), (y_compiled, x_compiled, m_compiled) = grads
    assert torch.equal(y_compiled, y_eager)
    torch.testing.assert_close(x_compiled, x_eager, rtol=0, atol=0)
    torch.testing.assert_close(m_compiled, m_eager, rtol=0, atol=0)
    assert m_eager.abs().sum() > 0 and x_eager.abs().sum() > 0


@pytest.mark.slow
@pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")
def test_inductor_gives_the_eager_uint8_pixels(cifar_images, monkeypatch):
    """The same with inductor's generated code (about 20 s of compiling on a 2-core CPU), on low-contrast
    images (levels 60-187), so that AutoContrast's channel minima are never 0: inductor's vectorised CPU
    minimum of uint8 gave 1 for a minimum of 5 there (pytorch issue 191499), which this catches."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    images = cifar_images[:64] // 2 + 60
    prob, mag = _policy(0.5, 0.5, 9)
    for seed in (0, 1):
        compiled, eager = _compiled_and_eager(images, prob, mag, seed, compile=True)
        assert torch.equal(compiled, eager), f"seed {seed}: {int((compiled != eager).sum())} values differ"


def test_compile_is_a_bool_or_torch_compiles_arguments(cifar_images):
    prob, mag = _policy(0.5, 0.5, 0)
    with pytest.raises(TypeError, match=r"compile must be a bool or a mapping of torch\.compile's arguments, got 'yes'"):
        augment(cifar_images[:2], prob, mag, compile="yes")
    # The CPU's grouped path does not compile (the option is the accelerators'): the plain call's pixels.
    torch.manual_seed(0)
    grouped = augment(cifar_images[:8], prob, mag, compile={"backend": "no such backend"})
    torch.manual_seed(0)
    assert torch.equal(grouped, augment(cifar_images[:8], prob, mag))


def test_compiled_pixel_work_compiles_under_eager_numerics(cifar_images, monkeypatch):
    """Triton fuses ``a * b + c`` into one FMA and divides through an approximate reciprocal unless inductor
    is told otherwise; either moves a value across a uint8 truncation now and then. The pixel work is
    compiled with both turned off among inductor's options, whatever the caller gives, and with the
    package's setting of what inductor writes (``_FUSION``): a ``mode`` becomes its options
    (``torch.compile`` takes one or the other), options the caller gives win, and another backend gets the
    caller's arguments as they are."""
    from torch._inductor import config, list_mode_options

    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    monkeypatch.setattr(augment_module, "_COMPILED", {})
    seen = []

    def recorder(function, **options):
        seen.append(options)
        return function

    monkeypatch.setattr(torch, "compile", recorder)
    prob, mag = _policy(0.5, 0.5, 8)
    torch.manual_seed(0)
    compiled = augment(cifar_images[:8], prob, mag, compile={"mode": "max-autotune-no-cudagraphs"})
    torch.manual_seed(0)
    assert torch.equal(compiled, augment(cifar_images[:8], prob, mag))
    # Eager numerics, and what the pixel work writes to memory (augment_module._FUSION).
    defaults = {"emulate_precision_casts": True, "eager_numerics.division_rounding": True,
                "realize_reads_threshold": 3}
    assert seen == [{"fullgraph": True, "options": {**list_mode_options("max-autotune-no-cudagraphs"), **defaults}}]
    assert all(name in config.get_config_copy() for name in defaults)  # inductor's own names for them
    arguments = augment_module._compile_arguments
    assert arguments({"options": {"emulate_precision_casts": False, "realize_reads_threshold": 4}}) == {
        "options": {**defaults, "emulate_precision_casts": False, "realize_reads_threshold": 4}}
    assert arguments({"backend": "aot_eager", "dynamic": False}) == {"backend": "aot_eager", "dynamic": False}


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_cuda_compiled_pixels_equal_eager(dtype, cifar_images):
    """On a GPU, inductor's Triton code against the eager kernels, same generator state: uint8 pixels equal
    (as on the CPU); float32 ones up to rounding, which a discontinuous op can turn into a level at its
    boundary for a few pixels (docs/contract.md, section 2; on the CPU 6e-5 of the values at most)."""
    device = torch.device("cuda")
    images = cifar_images.to(device)
    images = images if dtype == torch.uint8 else images.float() / 255
    prob, mag = (t.to(device) for t in _policy(0.5, 0.5, 8))
    for seed in (0, 1):
        g_compiled, g_eager = (torch.Generator(device=device).manual_seed(seed) for _ in range(2))
        compiled = augment(images, prob, mag, generator=g_compiled, compile=True)
        eager = augment(images, prob, mag, generator=g_eager)
        if dtype == torch.uint8:
            assert torch.equal(compiled, eager), f"seed {seed}: {int((compiled != eager).sum())} values differ"
        else:
            apart = float(((compiled - eager).abs() > 1e-4).float().mean())
            assert apart < 1e-3, f"seed {seed}: {apart:.2e} of the values more than 1e-4 apart"


@pytest.mark.filterwarnings("error:Dynamo detected a call to a `functools.lru_cache`")
def test_constant_cache_keeps_its_tensors_and_steps_aside_while_compiling():
    """The kernels' constants: made once per key when eager (the same tensor back), made by the function
    itself while dynamo traces (no cache for dynamo to warn about)."""
    from hba_augment.functional._cache import constant_cache

    made = []

    @constant_cache(2)
    def ramp(n: int, scale: float = 1.0) -> torch.Tensor:
        made.append(n)
        return torch.arange(n) * scale

    assert ramp(3) is ramp(3) and made == [3]
    assert ramp(3, scale=2.0) is ramp(3, scale=2.0) and made == [3, 3]
    torch._dynamo.reset()
    out = torch.compile(lambda x: x + ramp(3), fullgraph=True, backend="eager")(torch.ones(3))
    assert torch.equal(out, torch.tensor([1.0, 2.0, 3.0])) and made == [3, 3, 3]


def test_constant_cache_keeps_one_set_per_scope():
    """Runs side by side each keep their own constants (``functional.cache_scope``, set by ``hba_augment._lanes``
    per lane): one made on a lane's CUDA stream must not be read on another's before it is made."""
    from hba_augment import _lanes
    from hba_augment.functional import cache_scope
    from hba_augment.functional._cache import constant_cache

    @constant_cache(4)
    def ramp(n: int) -> torch.Tensor:
        return torch.arange(n)

    shared = ramp(5)
    with cache_scope("a"):
        own = ramp(5)
        assert ramp(5) is own and own is not shared
    assert ramp(5) is shared
    lanes = _lanes.side_by_side([lambda: (ramp(5), ramp(5)), lambda: (ramp(5), ramp(5))], "cpu")
    (a0, a1), (b0, b1) = (o.value for o in lanes)
    assert a0 is a1 and b0 is b1 and a0 is not b0 and shared is not a0 and shared is not b0
    again = _lanes.side_by_side([lambda: ramp(5), lambda: ramp(5)], "cpu")  # a later call: each lane's own again
    assert again[0].value is a0 and again[1].value is b0
    ramp.cache_clear()
    assert ramp(5) is not shared


def test_the_compiled_pixel_work_views_no_bool_tensor_as_bytes(cifar_images, monkeypatch):
    """Inductor on an H100 (torch 2.11, 2026-11-28) failed to compile the uint8 pixel work: it cannot lower a
    bool tensor viewed as uint8 ("torch.bool is not supported by torch.iinfo"), which the CPU's inductor
    accepts. So the traced graph must hold no such view: a backend that only reads dynamo's graph checks it."""
    monkeypatch.setattr(augment_module, "_FORCE_SYNC_FREE", True)
    views = []

    def backend(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_method" and node.target == "view" and any(isinstance(a, torch.dtype) for a in node.args[1:]):
                views.append(node.args[0].meta["example_value"].dtype)
        return gm.forward

    prob, mag = _policy(0.5, 0.5, 1)
    torch._dynamo.reset()
    augment(cifar_images[:8], prob, mag, generator=torch.Generator().manual_seed(0), compile={"backend": backend})
    assert torch.bool not in views, views


def test_the_lookup_takes_the_flat_form_on_large_cpu_batches_only():
    # The flat form's pixels equal the gather's (test_ops_properties); this checks which one each size runs:
    # one image below _FLAT_LOOKUP_FROM through the int64 gather, a batch at it through the int32 index_select,
    # and a caller's own index always through the gather.
    from hba_augment.functional._kernels import _FLAT_LOOKUP_FROM, lookup

    def ops(batch: int, with_index: bool = False) -> list[str]:
        images = torch.randint(0, 256, (batch, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
        tables = torch.rand(batch, 3, 1, 256).mul(255)
        index = images.reshape(batch, 3, 1024).long() if with_index else None
        recorder = _Recorder()
        with recorder:
            lookup(images, tables, index)
        return recorder.ops

    large = _FLAT_LOOKUP_FROM // (3 * 32 * 32)
    assert "gather" in ops(1) and "index_select" not in ops(1)
    assert "index_select" in ops(large) and "gather" not in ops(large)
    assert "gather" in ops(large, with_index=True) and "index_select" not in ops(large, with_index=True)
