"""What the package imports is what it declares, and the README says why each declared package is there."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import liger_perf

PACKAGE = Path(liger_perf.__file__).parent
CHECKOUT = PACKAGE.parent

#: Imported, not declared by its own name: each comes with the declared package named here (built on it, or its
#: extra that pyproject.toml names).
COMES_WITH = {"click": "typer", "ipython": "ipykernel", "distributed": "dask"}  # dask[distributed]


def _name(requirement: str) -> str:
    """``"dask[distributed]>=2024.1"`` -> ``"dask"``; normalised as PEP 503 does (``ncu_report`` is ``ncu-report``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def declared() -> set[str]:
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    extras = [req for reqs in project.get("optional-dependencies", {}).values() for req in reqs]
    return {_name(req) for req in project["dependencies"] + extras}


def imported_modules(package: Path) -> set[str]:
    """The top-level names of every absolute import in ``package`` (module level or inside a function)."""
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def undeclared(package: Path, declared_names: set[str]) -> list[str]:
    """``module (distribution)`` for every third-party module ``package`` imports whose distribution is neither
    declared nor in ``COMES_WITH`` beside a declared one."""
    distributions = packages_distributions()
    missing = []
    for module in sorted(imported_modules(package)):
        if module in sys.stdlib_module_names or module in ("liger_perf", "kernels", "__future__"):
            continue
        names = {_name(d) for d in distributions.get(module, [module])}
        if names & declared_names or any(COMES_WITH.get(n) in declared_names for n in names):
            continue
        missing.append(f"{module} ({', '.join(sorted(names))})")
    return missing


def test_every_third_party_import_of_the_package_is_declared_in_pyproject():
    assert undeclared(PACKAGE, declared()) == []


def test_an_undeclared_import_is_found(tmp_path):
    (tmp_path / "a.py").write_text("import os\ndef f():\n    import numpy\n    from yaml import safe_load\n")
    assert undeclared(tmp_path, {"pyyaml"}) == ["numpy (numpy)"]
    assert undeclared(tmp_path, {"pyyaml", "numpy"}) == []


def test_the_readme_says_why_each_declared_package_is_there():
    readme = (CHECKOUT / "README.md").read_text()
    section = readme.split("## Dependencies and why", 1)[1].split("\n## ", 1)[0]
    # The first cell of each row: "torch", "nbformat, papermill, ipykernel", "dask[distributed]", "liger-kernel (extra ...)"
    listed = {_name(name.strip()) for row in re.findall(r"^\| ([^|]+) \|", section, re.M)
              for name in re.sub(r"\(.*?\)", "", row).split(",") if name.strip() and name.strip() != "package"}
    assert declared() - listed == set()
