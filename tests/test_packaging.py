"""Packaging: every package ships, the schedule folder resolves as a resource package, the dependencies are
what the package uses, and the README's snippets run as a new user copies them."""

from __future__ import annotations

import ast
import re
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


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported_top_level_modules(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_kornia_is_only_a_benchmark_dependency():
    project = _pyproject()["project"]
    required = {_requirement_name(r) for r in project["dependencies"]}
    extras = {name: {_requirement_name(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    # The package never imports kornia, so users must not have to install it ...
    assert "kornia" not in _imported_top_level_modules(ROOT / "hba_augment")
    assert "kornia" not in required
    # ... the benchmarks that compare against it get it from the bench extra, and dev runs everything.
    assert "kornia" in _imported_top_level_modules(ROOT / "benchmarks")
    assert "kornia" in extras["bench"]
    dev_extras = {extra for r in project["optional-dependencies"]["dev"]
                  for group in re.findall(r"hba-augment\[([^\]]*)\]", r) for extra in group.split(",")}
    assert {"test", "bench"} <= dev_extras
    # The plotting library is optional too (the search works without it).
    assert "matplotlib" not in required and "matplotlib" in extras["search"]


def test_constraints_pin_every_dependency():
    project = _pyproject()["project"]
    requirements = [*project["dependencies"], *(r for reqs in project["optional-dependencies"].values() for r in reqs)]
    names = {_requirement_name(r) for r in requirements} - {"hba-augment"}
    pinned = {_requirement_name(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert names <= pinned, f"not pinned in constraints.txt: {sorted(names - pinned)}"


def _readme_python_block(containing: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    matches = [b for b in blocks if containing in b]
    assert len(matches) == 1, f"expected one README python block with {containing!r}, found {len(matches)}"
    return matches[0]


def test_readme_schedule_snippet_runs_alone(tmp_path: Path, monkeypatch, capsys):
    # Copied into a fresh interpreter, as a reader would: every name it uses must be imported by it.
    monkeypatch.chdir(tmp_path)
    code = _readme_python_block("Schedule.constant")
    exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})
    assert "Schedule 'uniform'" in capsys.readouterr().out
    assert (tmp_path / "uniform.json").is_file()
