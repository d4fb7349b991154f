"""Tests for hba_augment.datasets: official-format loaders, ImageFolder trees and archives, the decode
cache, class-balanced splits and verified downloads (served from a local HTTP server)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import pickle
import tarfile
import threading
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from hba_augment import datasets as D
from hba_augment.datasets import ImageData, balanced_split, load_dataset, reduced_split
from hba_augment.datasets import _imagefolder as imagefolder_source

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    # Never touch the user's ~/.cache from tests.
    monkeypatch.setenv("HBA_CACHE_DIR", str(tmp_path / "cache"))


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------------------------------
# CIFAR (official python layout)
# --------------------------------------------------------------------------------------------------


def test_cifar10_real_lossless_copy(data_dir):
    root = data_dir / "cifar-10-batches-py"
    if not root.is_dir():
        pytest.skip(f"no {root}")
    manifest = json.loads((root / "manifest.json").read_text())["batches"]

    train = load_dataset("cifar10", data_dir, "train")
    assert train.images.shape == (8068, 3, 32, 32) and train.images.dtype == torch.uint8
    assert train.labels.shape == (8068,) and train.labels.dtype == torch.int64
    assert train.classes == CIFAR10_CLASSES
    expected = np.sum([manifest[f"data_batch_{i}"]["label_counts"] for i in range(1, 6)], axis=0)
    assert train.labels.bincount(minlength=10).tolist() == expected.tolist()

    test = load_dataset("cifar10", root, "test")  # the folder itself is accepted too
    assert test.images.shape == (1017, 3, 32, 32)
    assert test.labels.bincount(minlength=10).tolist() == manifest["test_batch"]["label_counts"]

    # Channel-planar rows: pixel (c, y, x) of row n is data[n, c * 1024 + y * 32 + x].
    with open(root / "test_batch", "rb") as f:
        raw = pickle.load(f, encoding="bytes")[b"data"]
    for n, c, y, x in [(0, 0, 0, 0), (5, 1, 7, 30), (1016, 2, 31, 31)]:
        assert int(test.images[n, c, y, x]) == int(raw[n, c * 1024 + y * 32 + x])


def _write_cifar(
    root: Path, name: str, rows: dict[str, int], *, str_keys: bool = False, seed: int = 0
) -> dict:
    """Write a small copy in the official layout; returns {file: (data, labels)}."""
    rng = _rng(seed)
    key = (lambda k: k) if str_keys else (lambda k: k.encode())
    if name == "cifar10":
        folder, meta_file = root / "cifar-10-batches-py", "batches.meta"
        meta = {key("label_names"): [c.encode() for c in CIFAR10_CLASSES], key("num_vis"): 3072}
        label_key, num = "labels", 10
    else:
        folder, meta_file = root / "cifar-100-python", "meta"
        meta = {
            key("fine_label_names"): [f"fine{i:02d}".encode() for i in range(100)],
            key("coarse_label_names"): [f"coarse{i:02d}".encode() for i in range(20)],
        }
        label_key, num = "fine_labels", 100
    folder.mkdir(parents=True)
    with open(folder / meta_file, "wb") as f:
        pickle.dump(meta, f, protocol=2)
    written = {}
    for fname, n in rows.items():
        arr = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = rng.integers(0, num, n).tolist()
        batch = {key("data"): arr, key(label_key): labels, key("batch_label"): fname.encode()}
        if name == "cifar100":
            batch[key("coarse_labels")] = [lab // 5 for lab in labels]
        with open(folder / fname, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        written[fname] = (arr, labels)
    return written


@pytest.mark.parametrize("str_keys", [False, True])
def test_cifar100_official_layout_uses_fine_labels(tmp_path, str_keys):
    written = _write_cifar(tmp_path, "cifar100", {"train": 7, "test": 3}, str_keys=str_keys)
    train = load_dataset("cifar100", tmp_path, "train")
    assert train.classes == [f"fine{i:02d}" for i in range(100)]
    assert train.labels.tolist() == written["train"][1]
    assert torch.equal(train.images, torch.from_numpy(written["train"][0].reshape(7, 3, 32, 32)))
    test = load_dataset("cifar100", tmp_path, "test")
    assert test.labels.tolist() == written["test"][1] and test.images.shape == (3, 3, 32, 32)


def test_cifar_classes_and_resize(tmp_path):
    batches = {f"data_batch_{i}": 4 for i in range(1, 6)} | {"test_batch": 30}
    written = _write_cifar(tmp_path, "cifar10", batches)
    full = load_dataset("cifar10", tmp_path, "test")
    sub = load_dataset("cifar10", tmp_path, "test", classes=["ship", "cat"], image_size=20)
    orig = np.array(written["test_batch"][1])
    keep = np.isin(orig, [8, 3])
    assert sub.classes == ["ship", "cat"]
    assert sub.labels.tolist() == [0 if lab == 8 else 1 for lab in orig[keep]]
    assert sub.images.shape == (int(keep.sum()), 3, 20, 20)
    # Same PIL filter as the ImageFolder path.
    first = full.images[np.flatnonzero(keep)[0]].permute(1, 2, 0).numpy()
    want = np.asarray(Image.fromarray(first).resize((20, 20), Image.Resampling.BILINEAR))
    assert np.array_equal(sub.images[0].permute(1, 2, 0).numpy(), want)
    assert load_dataset("cifar10", tmp_path, "train", classes=3).classes == CIFAR10_CLASSES[:3]


def test_cifar_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_dataset("cifar10", tmp_path)
    _write_cifar(tmp_path, "cifar10", {"data_batch_1": 2, "test_batch": 2})
    with pytest.raises(FileNotFoundError, match="data_batch_2"):
        load_dataset("cifar10", tmp_path, "train")
    with pytest.raises(ValueError, match="split"):
        load_dataset("cifar10", tmp_path, "val")
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("mnist", tmp_path)
    with pytest.raises(ValueError, match="unknown classes"):
        load_dataset("cifar10", tmp_path, "test", classes=["plane"])
    with pytest.raises(ValueError, match="out of range"):
        load_dataset("cifar10", tmp_path, "test", classes=11)
    with pytest.raises(ValueError, match="image_size"):
        load_dataset("cifar10", tmp_path, "test", image_size=0)


# --------------------------------------------------------------------------------------------------
# SVHN (.mat)
# --------------------------------------------------------------------------------------------------


def _write_svhn(folder: Path, split: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    import scipy.io

    rng = _rng(seed)
    x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)  # H x W x C x N, as the official files
    y = rng.integers(1, 11, (n, 1)).astype(np.uint8)
    y[0, 0] = 10
    folder.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(folder / f"{split}_32x32.mat", {"X": x, "y": y})
    return x, y


@pytest.mark.parametrize("split", ["train", "test", "extra"])
def test_svhn_mat(tmp_path, split):
    x, y = _write_svhn(tmp_path, split, 9)
    d = load_dataset("svhn", tmp_path, split)
    assert d.images.shape == (9, 3, 32, 32) and d.images.dtype == torch.uint8
    assert d.classes == [str(i) for i in range(10)]
    assert d.labels.tolist() == [0 if v == 10 else int(v) for v in y[:, 0]]
    assert d.labels[0] == 0
    for n, c, h, w in [(0, 0, 0, 0), (3, 2, 5, 17), (8, 1, 31, 0)]:
        assert d.images[n, c, h, w] == x[h, w, c, n]
    with pytest.raises(FileNotFoundError):
        load_dataset("svhn", tmp_path, "test" if split != "test" else "train")


# --------------------------------------------------------------------------------------------------
# ImageFolder trees and archives
# --------------------------------------------------------------------------------------------------


def _save(path: Path, arr: np.ndarray, fmt: str = "PNG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, format=fmt)


def _write_tree(root: Path, per_class: dict[str, dict[str, int]], size: int = 12, seed: int = 0) -> dict:
    """PNG tree root/<split>/<class>/<i>.png; returns {split: {class: [HWC arrays in file order]}}."""
    rng = _rng(seed)
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    for split, classes in per_class.items():
        for cls, n in classes.items():
            for i in range(n):
                arr = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                _save(root / split / cls / f"{i:03d}.png", arr)
                out.setdefault(split, {}).setdefault(cls, []).append(arr)
    return out


def _expected(arrays: dict[str, list[np.ndarray]], order: list[str]) -> tuple[torch.Tensor, list[int]]:
    imgs = [a for cls in order for a in arrays.get(cls, [])]
    labels = [i for i, cls in enumerate(order) for _ in arrays.get(cls, [])]
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2), labels


TREE = {"train": {"cat": 3, "ant": 2, "bee": 4}, "val": {"cat": 2, "ant": 1, "bee": 1}}


def test_imagefolder_directory(tmp_path):
    arrays = _write_tree(tmp_path / "tree", TREE)
    train = load_dataset("imagefolder", tmp_path / "tree", "train", cache=False)
    assert train.classes == ["ant", "bee", "cat"]  # sorted folder order
    images, labels = _expected(arrays["train"], train.classes)
    assert torch.equal(train.images, images) and train.labels.tolist() == labels
    # "test" falls back to val/ when there is no test/; a parent with one tree inside is accepted.
    test = load_dataset("imagefolder", tmp_path, "test", cache=False)
    images, labels = _expected(arrays["val"], test.classes)
    assert torch.equal(test.images, images) and test.labels.tolist() == labels


def test_imagefolder_grayscale_resize_and_classes(tmp_path):
    root = tmp_path / "tree"
    arrays = _write_tree(root, {"train": {"b": 2, "a": 2, "c": 1}, "test": {"a": 1}}, size=10)
    gray = _rng(1).integers(0, 256, (10, 10), dtype=np.uint8)
    _save(root / "train" / "c" / "gray.jpg", gray, "JPEG")
    d = load_dataset("imagefolder", root, "train", cache=False)
    row = d.images[-1]  # class c, files sorted: 000.png, gray.jpg
    decoded = np.asarray(Image.open(root / "train" / "c" / "gray.jpg"))
    assert row.shape == (3, 10, 10) and all(
        torch.equal(row[k], torch.from_numpy(decoded.copy())) for k in range(3)
    )

    small = load_dataset("imagefolder", root, "train", image_size=7, cache=False)
    assert small.images.shape == (6, 3, 7, 7)
    want = Image.fromarray(arrays["train"]["a"][0]).resize((7, 7), Image.Resampling.BILINEAR)
    assert np.array_equal(small.images[0].permute(1, 2, 0).numpy(), np.asarray(want))

    two = load_dataset("imagefolder", root, "train", classes=2, cache=False)
    assert two.classes == ["a", "b"] and two.labels.tolist() == [0, 0, 1, 1]
    picked = load_dataset("imagefolder", root, "train", classes=["c", "a"], cache=False)
    assert picked.classes == ["c", "a"] and picked.labels.tolist() == [0, 0, 1, 1]
    assert torch.equal(picked.images[2:], d.images[:2])
    with pytest.raises(ValueError, match="unknown classes"):
        load_dataset("imagefolder", root, "train", classes=["z"], cache=False)
    with pytest.raises(ValueError, match="distinct"):
        load_dataset("imagefolder", root, "train", classes=["a", "a"], cache=False)


def test_imagefolder_rules(tmp_path):
    root = tmp_path / "tree"
    _write_tree(root, {"train": {"x": 1, "y": 1}})
    _save(root / "train" / "y" / "big.png", np.zeros((14, 12, 3), np.uint8))
    with pytest.raises(ValueError, match="differ in size"):
        load_dataset("imagefolder", root, "train", cache=False)
    assert load_dataset("imagefolder", root, "train", image_size=5, cache=False).images.shape == (3, 3, 5, 5)
    with pytest.raises(FileNotFoundError, match="test or val"):
        load_dataset("imagefolder", root, "test", cache=False)
    (root / "wnids.txt").write_text("y\nx\n")  # wnids.txt fixes the class order
    assert load_dataset("imagefolder", root, "train", image_size=5, cache=False).classes == ["y", "x"]
    (root / "wnids.txt").write_text("y\n")
    with pytest.raises(ValueError, match=r"wnids\.txt"):
        load_dataset("imagefolder", root, "train", image_size=5, cache=False)
    with pytest.raises(FileNotFoundError, match="ImageFolder root"):
        load_dataset("imagefolder", tmp_path / "tree" / "train", "train", cache=False)
    with pytest.raises(ValueError, match="no official download"):
        load_dataset("imagefolder", root, download=True)


def _tar(src: Path, arcname: str, dest: Path) -> Path:
    with tarfile.open(dest, "w:gz") as tf:
        tf.add(src, arcname=arcname)
    return dest


def test_imagefolder_archive_matches_directory(tmp_path):
    arrays = _write_tree(tmp_path / "tree", TREE | {"test": {"bee": 2}})
    archive = _tar(tmp_path / "tree", "my-tree", tmp_path / "my-tree.tar.gz")
    for split in ("train", "test", "val"):
        from_dir = load_dataset("imagefolder", tmp_path / "tree", split, cache=False)
        from_tar = load_dataset("imagefolder", archive, split, cache=False)
        assert from_tar.classes == from_dir.classes == ["ant", "bee", "cat"]
        assert torch.equal(from_tar.images, from_dir.images)
        assert torch.equal(from_tar.labels, from_dir.labels)
    images, _ = _expected(arrays["test"], ["ant", "bee", "cat"])
    assert torch.equal(load_dataset("imagefolder", archive, "test", cache=False).images, images)


def test_imagefolder_threads_match_serial(tmp_path, monkeypatch):
    _write_tree(tmp_path / "tree", {"train": {"a": 9, "b": 8}})
    monkeypatch.setattr(imagefolder_source, "_DECODE_CHUNK", 2)
    serial = load_dataset("imagefolder", tmp_path / "tree", cache=False, workers=1)
    pooled = load_dataset("imagefolder", tmp_path / "tree", cache=False, workers=2)
    assert torch.equal(serial.images, pooled.images) and torch.equal(serial.labels, pooled.labels)


def _no_decode(*args, **kwargs):
    raise AssertionError("decoded although the cache should have answered")


def test_imagefolder_cache(tmp_path, monkeypatch):
    _write_tree(tmp_path / "tree", TREE)
    archive = _tar(tmp_path / "tree", "t", tmp_path / "t.tar.gz")
    cache = tmp_path / "mycache"
    first = load_dataset("imagefolder", archive, "train", image_size=6, classes=2, cache_dir=cache)
    assert len(list((cache / "arrays").glob("*.npz"))) == 1
    assert not [p for p in (cache / "arrays").iterdir() if p.name.startswith(".")]  # no temp files left

    with monkeypatch.context() as m:
        m.setattr(imagefolder_source, "_decode_image", _no_decode)
        again = load_dataset("imagefolder", archive, "train", image_size=6, classes=2, cache_dir=cache)
        assert torch.equal(again.images, first.images) and torch.equal(again.labels, first.labels)
        assert again.classes == first.classes == ["ant", "bee"]
        for other in ({"image_size": 7, "classes": 2}, {"image_size": 6, "classes": 3}):
            with pytest.raises(AssertionError, match="cache"):  # keyed by the request
                load_dataset("imagefolder", archive, "train", cache_dir=cache, **other)
        with pytest.raises(AssertionError, match="cache"):
            load_dataset(
                "imagefolder", archive, "train", image_size=6, classes=2, cache_dir=cache, cache=False
            )
        st_ = archive.stat()
        os.utime(archive, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))  # a changed archive misses
        with pytest.raises(AssertionError, match="cache"):
            load_dataset("imagefolder", archive, "train", image_size=6, classes=2, cache_dir=cache)

    # The default cache dir comes from HBA_CACHE_DIR (set by the autouse fixture).
    load_dataset("imagefolder", tmp_path / "tree", "val")
    (cached,) = (Path(os.environ["HBA_CACHE_DIR"]) / "arrays").glob("tree-val-*.npz")
    with monkeypatch.context() as m:
        m.setattr(imagefolder_source, "_decode_image", _no_decode)
        load_dataset("imagefolder", tmp_path / "tree", "val")
        _save(tmp_path / "tree" / "val" / "ant" / "new.png", np.zeros((12, 12, 3), np.uint8))
        with pytest.raises(AssertionError, match="cache"):  # a directory change misses
            load_dataset("imagefolder", tmp_path / "tree", "val")
    # A corrupt cache file is rebuilt, not trusted.
    cached.write_bytes(b"not an npz")
    assert load_dataset("imagefolder", tmp_path / "tree", "val").images.shape[0] == 5


def test_imagefolder_real_archives(data_dir, tmp_path):
    cifar = data_dir / "cifar-10-jpeg.tar.gz"
    tiny = data_dir / "tiny-imagenet-200-subset.tar.gz"
    if not (cifar.is_file() and tiny.is_file()):
        pytest.skip("shared JPEG archives not found")
    # Small selections only: the whole archives take far longer to decode than a unit test may.
    d = load_dataset("imagefolder", cifar, "test", classes=["ship", "airplane"], cache=False)
    assert d.classes == ["ship", "airplane"] and d.images.shape == (2000, 3, 32, 32)
    assert d.labels.bincount().tolist() == [1000, 1000]
    with tarfile.open(tiny) as tf:
        wnids = tf.extractfile("tiny-imagenet-200/wnids.txt").read().decode().split()
    t = load_dataset("imagefolder", tiny, "val", classes=2, image_size=32, cache=False)
    assert t.classes == wnids[:2] and t.images.shape == (100, 3, 32, 32)
    assert t.labels.bincount().tolist() == [50, 50]


# --------------------------------------------------------------------------------------------------
# balanced_split / reduced_split
# --------------------------------------------------------------------------------------------------


@st.composite
def _split_cases(draw):
    counts = draw(st.lists(st.integers(0, 25), min_size=1, max_size=7))
    n = sum(counts)
    sizes, left = [], n
    for _ in range(draw(st.integers(1, 3))):
        s = draw(st.integers(0, left))
        sizes.append(s)
        left -= s
    return counts, sizes, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=60, deadline=None)
@given(_split_cases())
def test_balanced_split_properties(case):
    counts, sizes, seed = case
    labels = torch.tensor([c for c, k in enumerate(counts) for _ in range(k)], dtype=torch.int64)
    labels = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))]
    parts = balanced_split(labels, sizes, seed=seed)
    assert [len(p) for p in parts] == sizes
    cat = torch.cat(parts)
    assert cat.unique().numel() == cat.numel()  # disjoint
    avail = torch.bincount(labels, minlength=len(counts))
    for p in parts:
        assert p.dtype == torch.int64 and torch.equal(p, p.sort().values)
        q = torch.bincount(labels[p], minlength=len(counts))
        open_ = (q < avail) & (avail > 0)
        # Classes not emptied by this set are within one of the largest share.
        if open_.any():
            assert int(q.max()) - int(q[open_].min()) <= 1
        avail = avail - q
    again = balanced_split(labels, sizes, seed=seed)
    assert all(torch.equal(a, b) for a, b in zip(parts, again, strict=True))


def test_balanced_split_seed_and_uneven_classes():
    labels = torch.tensor([0] * 3 + [1] * 50 + [2] * 50)
    a = balanced_split(labels, [30, 20], seed=0)
    b = balanced_split(labels, [30, 20], seed=1)
    assert not torch.equal(a[0], b[0])
    # Class 0 has only 3 images: it gives them all, the others share the rest.
    assert torch.bincount(labels[a[0]]).tolist() == [3, 14, 13] or torch.bincount(labels[a[0]]).tolist() == [
        3,
        13,
        14,
    ]
    assert torch.bincount(labels[a[1]], minlength=3).tolist() == [0, 10, 10]


def test_balanced_split_errors():
    labels = torch.arange(10) % 2
    with pytest.raises(ValueError, match="hold only 10"):
        balanced_split(labels, [6, 5], seed=0)
    with pytest.raises(ValueError, match="non-negative"):
        balanced_split(labels, [-1], seed=0)
    with pytest.raises(ValueError, match="1-D integer"):
        balanced_split(labels.float(), [1], seed=0)
    with pytest.raises(ValueError, match="1-D integer"):
        balanced_split(labels.view(2, 5), [1], seed=0)
    assert [len(p) for p in balanced_split(labels, [0, 10], seed=0)] == [0, 10]


def test_reduced_split_imagenet_protocol_shape():
    # 12 classes x 200 images, like the reduced-ImageNet recipe scaled down (50 train per class).
    labels = torch.arange(12).repeat_interleave(200)
    images = torch.arange(2400, dtype=torch.int64).view(-1, 1, 1, 1).expand(-1, 3, 2, 2) % 256
    data = ImageData(images.to(torch.uint8).contiguous(), labels, [f"c{i}" for i in range(12)])
    train, val = reduced_split(data, 600, 1000, seed=3)
    assert train.labels.bincount().tolist() == [50] * 12
    counts = val.labels.bincount().tolist()
    assert sum(counts) == 1000 and set(counts) == {83, 84}
    assert train.classes == val.classes == data.classes and train.num_classes == 12
    idx_t, idx_v = balanced_split(labels, (600, 1000), seed=3)
    assert torch.equal(train.images, data.images[idx_t]) and torch.equal(val.labels, labels[idx_v])
    assert not set(idx_t.tolist()) & set(idx_v.tolist())


# --------------------------------------------------------------------------------------------------
# Downloads (local HTTP server, no network)
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def http_server(tmp_path, monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    served = tmp_path / "served"
    served.mkdir()
    hits: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(served), **kwargs)

        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def _serve_cifar10(tmp_path: Path, served: Path) -> tuple[Path, dict]:
    src = tmp_path / "src"
    written = _write_cifar(src, "cifar10", {f"data_batch_{i}": 3 for i in range(1, 6)} | {"test_batch": 4})
    archive = _tar(src / "cifar-10-batches-py", "cifar-10-batches-py", served / "cifar-10-python.tar.gz")
    return archive, written


def test_download_cifar10_verified_and_loaded(tmp_path, monkeypatch, http_server):
    served, url, hits = http_server
    archive, written = _serve_cifar10(tmp_path, served)
    res = D.Resource(f"{url}/cifar-10-python.tar.gz", "cifar-10-python.tar.gz", _md5(archive))
    monkeypatch.setitem(D.RESOURCES, "cifar10", {"train": res, "test": res})
    root = tmp_path / "root"

    train = load_dataset("cifar10", root, "train", download=True)
    assert train.images.shape == (15, 3, 32, 32) and train.classes == CIFAR10_CLASSES
    assert train.labels.tolist() == [lab for i in range(1, 6) for lab in written[f"data_batch_{i}"][1]]
    assert sorted(p.name for p in root.iterdir()) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]
    assert hits == ["/cifar-10-python.tar.gz"]
    # Present: no second request; an archive already there is verified and extracted without one.
    assert load_dataset("cifar10", root, "test", download=True).images.shape == (4, 3, 32, 32)
    import shutil

    shutil.rmtree(root / "cifar-10-batches-py")
    assert D.download("cifar10", root, progress=False) == root / "cifar-10-batches-py"
    assert hits == ["/cifar-10-python.tar.gz"]


def test_download_bad_checksum_and_missing_file_leave_nothing(tmp_path, monkeypatch, http_server):
    served, url, hits = http_server
    _serve_cifar10(tmp_path, served)
    bad = D.Resource(f"{url}/cifar-10-python.tar.gz", "cifar-10-python.tar.gz", "0" * 32)
    monkeypatch.setitem(D.RESOURCES, "cifar10", {"train": bad, "test": bad})
    root = tmp_path / "root"
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_dataset("cifar10", root, download=True)
    assert list(root.iterdir()) == [] and len(hits) == 1

    gone = D.Resource(f"{url}/nope.mat", "test_32x32.mat", "0" * 32)
    monkeypatch.setitem(D.RESOURCES, "svhn", dict(D.RESOURCES["svhn"], test=gone))
    with pytest.raises(urllib.error.HTTPError):
        D.download("svhn", root, "test", progress=False)
    assert list(root.iterdir()) == []


def test_download_svhn(tmp_path, monkeypatch, http_server):
    served, url, hits = http_server
    _, y = _write_svhn(served, "test", 5)
    res = D.Resource(f"{url}/test_32x32.mat", "test_32x32.mat", _md5(served / "test_32x32.mat"))
    monkeypatch.setitem(D.RESOURCES, "svhn", dict(D.RESOURCES["svhn"], test=res))
    d = load_dataset("svhn", tmp_path / "root", "test", download=True)
    assert d.images.shape == (5, 3, 32, 32) and d.labels.tolist() == [
        0 if v == 10 else int(v) for v in y[:, 0]
    ]
    assert (tmp_path / "root" / "test_32x32.mat").read_bytes() == (served / "test_32x32.mat").read_bytes()
    assert hits == ["/test_32x32.mat"]


def test_official_resource_table():
    # Values as torchvision lists them (torchvision/datasets/cifar.py and svhn.py).
    torchvision_cifar = pytest.importorskip("torchvision.datasets.cifar")
    torchvision_svhn = pytest.importorskip("torchvision.datasets.svhn")
    for name, cls in (("cifar10", torchvision_cifar.CIFAR10), ("cifar100", torchvision_cifar.CIFAR100)):
        res = D.RESOURCES[name]["train"]
        assert (res.url, res.filename, res.md5) == (cls.url, cls.filename, cls.tgz_md5)
    for split, (url, filename, md5) in torchvision_svhn.SVHN.split_list.items():
        assert tuple(D.RESOURCES["svhn"][split]) == (url, filename, md5)


def test_bytes_io_roundtrip_of_decoder():
    # The decoder converts every mode to RGB.
    buf = io.BytesIO()
    Image.fromarray(np.full((4, 5), 77, np.uint8)).save(buf, format="PNG")
    out = imagefolder_source._decode_image(buf.getvalue(), None)
    assert out.shape == (4, 5, 3) and (out == 77).all()
