"""The layering rules, and that only the op table lists op names.

The package has three layers (README, "Layout"):

* the core: ``functional/``, ``schedule.py``, ``policy.py``, ``pretrained.py`` and their helpers;
* the parts shared by the search and policy evaluation: ``datasets/``, ``models/``, the run driver
  (``_runner.py``, ``_distributed.py``, ``_cli_common.py``, ``_baselines.py``, ``_lanes.py``);
* ``search/`` (the hypernetwork search) and ``train/`` (policy evaluation).

The core never imports the other two; the shared parts never import ``search`` or ``train``; ``search``
never imports ``train``. ``cli.py`` (the command dispatcher) names both commands and is not part of the core.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hba_augment._lazy import lazy_exports
from hba_augment.functional import OP_NAMES

PACKAGE = Path(__file__).resolve().parents[1] / "hba_augment"
SEARCH = "hba_augment.search"
TRAIN = "hba_augment.train"
SHARED = ("hba_augment.datasets", "hba_augment.models", "hba_augment._runner", "hba_augment._distributed",
          "hba_augment._cli_common", "hba_augment._baselines", "hba_augment._lanes")
FRONT = ("hba_augment.cli", "hba_augment.__main__")


def _module_name(path: Path) -> str:
    parts = ("hba_augment", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _imports(path: Path) -> set[str]:
    """Every module an ``import`` statement of ``path`` names, top level or inside functions, relative
    imports resolved (``from . import x`` counts as ``package.x``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _modules_in(*packages: str) -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if _within(_module_name(p), packages)]


def _offenders(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for path in paths:
        bad = sorted(m for m in _imports(path) if _within(m, forbidden))
        if bad:
            out[str(path.relative_to(PACKAGE))] = bad
    return out


def test_importing_the_core_imports_neither_search_nor_train_nor_the_shared_parts():
    code = (
        "import sys, hba_augment, hba_augment.functional, hba_augment.policy, hba_augment.schedule, "
        "hba_augment.pretrained;"
        f"print(sorted(m for m in sys.modules if m.startswith({(SEARCH, TRAIN, *SHARED)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_core_modules_do_not_import_search_train_or_the_shared_parts():
    core = [p for p in PACKAGE.rglob("*.py") if not _within(_module_name(p), (SEARCH, TRAIN, *SHARED, *FRONT))]
    assert {_module_name(p) for p in core} >= {"hba_augment.policy", "hba_augment.schedule", "hba_augment.functional"}
    assert _offenders(core, (SEARCH, TRAIN, *SHARED)) == {}


def test_shared_parts_import_neither_search_nor_train():
    shared = _modules_in(*SHARED)
    assert {_module_name(p) for p in shared} >= {"hba_augment.datasets", "hba_augment.models", "hba_augment._runner"}
    assert _offenders(shared, (SEARCH, TRAIN)) == {}


def test_search_never_imports_train():
    search = _modules_in(SEARCH)
    assert {_module_name(p) for p in search} >= {"hba_augment.search.loop", "hba_augment.search.cli"}
    assert _offenders(search, (TRAIN,)) == {}


def test_train_never_imports_search():
    train = _modules_in(TRAIN)
    assert {_module_name(p) for p in train} >= {"hba_augment.train.trainer", "hba_augment.train.cli"}
    assert _offenders(train, (SEARCH,)) == {}


@pytest.mark.parametrize("source, forbidden", [
    ("from hba_augment.search import loop\n", SEARCH),
    ("def f():\n    import hba_augment.train.cli\n", TRAIN),
    ("from ..search.loop import run_search\n", SEARCH),
    ("from .. import train\n", TRAIN),
])
def test_the_import_scan_sees_every_form(monkeypatch, source, forbidden):
    # The rules above are only as good as _imports: each form of import of a forbidden module is found.
    fake = PACKAGE / "models" / "x.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *args, **kwargs: source)
    assert list(_offenders([fake], (forbidden,))) == ["models/x.py"]


FUNCTIONAL = "hba_augment.functional"


def _private_functional(module: str) -> bool:
    """Whether ``module`` names a private module of ``functional/`` or a private name imported from it."""
    return module.startswith(FUNCTIONAL + ".") and module[len(FUNCTIONAL) + 1 :].startswith("_")


def _functional_offenders(paths: list[Path]) -> dict[str, list[str]]:
    found = {str(p.relative_to(PACKAGE)): sorted(m for m in _imports(p) if _private_functional(m)) for p in paths}
    return {path: modules for path, modules in found.items() if modules}


def test_functional_is_entered_only_through_its_init():
    # functional/__init__.py exports what the rest of the package needs; its private modules may change
    # without notice to anyone outside functional/.
    outside = [p for p in PACKAGE.rglob("*.py") if not _within(_module_name(p), (FUNCTIONAL,))]
    assert {_module_name(p) for p in outside} >= {"hba_augment.policy", "hba_augment.schedule", "hba_augment._targets"}
    assert _functional_offenders(outside) == {}


@pytest.mark.parametrize("where, source, caught", [
    ("x.py", "from .functional._augment import draw_one\n", True),
    ("x.py", "from .functional import _kernels\n", True),
    ("search/x.py", "def f():\n    from ..functional._table import OPS\n", True),
    ("search/x.py", "import hba_augment.functional._pil\n", True),
    ("search/x.py", "from hba_augment.functional import OPS, augment\n", False),
    ("x.py", "from . import functional\n", False),
])
def test_the_private_functional_scan_sees_every_form(monkeypatch, where, source, caught):
    monkeypatch.setattr(Path, "read_text", lambda self, *args, **kwargs: source)
    assert list(_functional_offenders([PACKAGE / where])) == ([where] if caught else [])


@pytest.mark.parametrize(("name", "home"), [("NUM_COPIES", "_space.py"), ("DEFAULT_COUNT_PROBS", "_space.py"),
                                            ("NUM_OPS", "_space.py"), ("OPS", "functional/_table.py")])
def test_each_constant_has_one_home(name, home):
    # Defined once: the torch-free facts in _space.py (reading a schedule needs no torch), the kernels' table in
    # functional/; functional's __init__ exports them all, and everyone else imports them.
    homes = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                homes.append(str(path.relative_to(PACKAGE)))
    assert homes == [home]
    import hba_augment.functional as functional

    assert name in functional.__all__


def test_op_names_are_listed_only_in_the_table():
    # A list of op names is three or more name literals ("ShearX" or 'ShearX') within a few lines; the
    # per-op wrappers, which name one op each, are fine.
    pattern = re.compile("|".join(rf"[\"']{name}[\"']" for name in OP_NAMES))
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in ("_table.py", "_space.py"):  # the kernels' table; the torch-free names and ranges
            continue
        starts = [m.start() for m in pattern.finditer(path.read_text())]
        if any(b - a < 200 for a, b in zip(starts, starts[2:], strict=False)):
            offenders.append(str(path.relative_to(PACKAGE)))
    assert offenders == []


def _top_level_kinds() -> dict[str, str]:
    """Every top-level ``def`` / ``class`` name of the package's source -> ``function`` / ``class``."""
    kinds = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, ast.FunctionDef):
                kinds[node.name] = "function"
            elif isinstance(node, ast.ClassDef):
                kinds[node.name] = "class"
    return kinds


def test_no_exported_name_is_shadowed_by_a_submodule():
    # In a fresh interpreter, import every submodule first (importing one binds its name in its package,
    # which hid ``hba_augment.search.hyperize`` the function behind the module of the same name), then
    # look up every name of every ``__all__`` the way ``from package import name`` does.
    code = (
        "import importlib, json, pkgutil, sys, types, hba_augment\n"
        "names = [m.name for m in pkgutil.walk_packages(hba_augment.__path__, 'hba_augment.')]\n"
        "modules = [importlib.import_module(n) for n in ['hba_augment', *names]]\n"
        "def kind(v):\n"
        "    if isinstance(v, types.ModuleType): return 'module'\n"
        "    if isinstance(v, type): return 'class'\n"
        "    return 'function' if isinstance(v, types.FunctionType) else 'data'\n"
        "out = {}\n"
        "for m in modules:\n"
        "    for name in getattr(m, '__all__', ()):\n"
        "        exec(f'from {m.__name__} import {name} as value', globals())\n"
        "        out[f'{m.__name__}.{name}'] = kind(value)\n"
        "print(json.dumps(out))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    kinds = json.loads(out)
    assert "hba_augment.search.hyperize" in kinds and "hba_augment.HBAPolicy" in kinds
    defined = _top_level_kinds()
    wrong = {}
    for qualified, kind in kinds.items():
        name = qualified.rpartition(".")[2]
        expected = "module" if qualified in EXPORTED_MODULES else defined.get(name, "data")
        if kind != expected:
            wrong[qualified] = f"{kind}, expected {expected}"
    assert wrong == {}


#: The public names that are submodules themselves.
EXPORTED_MODULES = {"hba_augment.functional"}


def test_lazy_exports_refuse_a_name_defined_in_a_submodule_of_the_same_name():
    with pytest.raises(ValueError, match=r"\['hyperize'\] are also submodule names"):
        lazy_exports("hba_augment.search", {}, {"hyperize": "hyperize", "STRATEGIES": "hyperize"})
    with pytest.raises(ValueError, match=r"\['functional'\]"):
        lazy_exports("hba_augment", {}, {"functional": "functional"}, submodules=("functional",))


def test_the_torch_free_op_table_agrees_with_the_kernels_table():
    # hba_augment._space holds the names and ranges that schedules are validated against without torch;
    # functional's OPS pairs each op with its kernel. Until OPS is built from _space, both must agree.
    from hba_augment import _space, functional

    assert [(op.name, op.low, op.high, op.signed) for op in functional.OPS] == [tuple(op) for op in _space.OP_RANGES]
    assert _space.MAGNITUDE_OPS == functional.MAGNITUDE_OPS and _space.OP_NAMES == functional.OP_NAMES
    assert (_space.NUM_COPIES, _space.DEFAULT_COUNT_PROBS) == (functional.NUM_COPIES, functional.DEFAULT_COUNT_PROBS)


def test_count_probs_has_one_check():
    # Schedules, functional.augment and the search accept the same distributions of K and say the same.
    import hba_augment._space as space
    import hba_augment.functional as functional
    import hba_augment.schedule as schedule

    assert functional.check_count_probs is space.check_count_probs is schedule.check_count_probs
    defining = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                if re.search(r"^def _?check_count_probs\(", p.read_text(), re.M)]
    assert defining == ["_space.py"]


def test_pil_modes_have_one_check():
    # One message for a PIL image of another mode, wherever it enters (the transform, functional).
    hits = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "must have mode 'L' or 'RGB'" in p.read_text()]
    assert hits == ["functional/_pil.py"]


def test_every_benchmark_script_is_in_the_benchmarks_index():
    # benchmarks/README.md is how an engineer finds the script that answers a question; a script missing from
    # it, or a name left there after its script went, is found here rather than by the next reader.
    benchmarks = PACKAGE.parent / "benchmarks"
    scripts = {p.name for p in benchmarks.glob("*.py")}
    indexed = set(re.findall(r"`(\w+\.py)`", (benchmarks / "README.md").read_text(encoding="utf-8")))
    assert scripts - indexed == set(), "benchmark scripts missing from benchmarks/README.md"
    assert indexed - scripts == set(), "benchmarks/README.md names scripts that do not exist"
