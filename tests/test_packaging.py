"""Packaging: every package ships, and the schedule folder resolves as a resource package."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import pytest

import hba_augment

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_every_package_is_listed():
    setuptools = _pyproject()["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    package_dir = setuptools.get("package-dir", {})
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "hba_augment").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert "hba_augment" in on_disk and "hba_augment.functional" in on_disk
    missing = sorted(on_disk - listed)
    assert not missing, f"packages missing from [tool.setuptools] packages in pyproject.toml: {missing}"
    # Every listed package exists, either under hba_augment/ or at the folder package-dir maps it to.
    for name in listed:
        folder = ROOT / package_dir[name] if name in package_dir else ROOT.joinpath(*name.split("."))
        assert (folder / "__init__.py").is_file(), f"{name} is listed but {folder}/__init__.py does not exist"


def test_pretrained_policies_package_resolves():
    assert _pyproject()["tool"]["setuptools"]["package-dir"]["hba_augment.pretrained_policies"] == "pretrained_policies"
    assert "*.json" in _pyproject()["tool"]["setuptools"]["package-data"]["hba_augment.pretrained_policies"]
    folder = resources.files("hba_augment.pretrained_policies")
    assert folder.is_dir()
    assert folder.joinpath("__init__.py").is_file()
    if Path(hba_augment.__file__).resolve().parent == (ROOT / "hba_augment").resolve():
        # Imported from this checkout (editable install): the data package is the top-level folder.
        assert Path(str(folder)).resolve() == (ROOT / "pretrained_policies").resolve()


def test_version_is_single_sourced():
    version = _pyproject()["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert version == "hba_augment._version.__version__"
    from hba_augment._version import __version__

    assert isinstance(__version__, str) and __version__.count(".") >= 1
