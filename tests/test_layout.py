"""The package's stage folders and the one direction of their imports: a module imports only from its own stage
and the stages below it (``STAGES``, lowest first), and the commands' own modules at the top import any stage
but are imported by none below them."""

import ast
import shutil
from pathlib import Path

import liger_perf

PACKAGE = Path(liger_perf.__file__).parent
#: propose -> run -> judge -> record, over what they stand on, lowest first.
STAGES = ["core", "kernel", "isolation", "gate", "measure", "record", "judge", "run", "propose", "models",
          "scaffold"]


def _stage(module: str) -> str:
    """``liger_perf.gate.process`` -> ``gate``; a module at the package's top (``liger_perf.loop``) -> ``top``; the
    package itself and its dunders (``liger_perf.__version__``) -> ``root``."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1].startswith("__"):
        return "root"
    return parts[1] if parts[1] in STAGES else "top"


def _imports(path: Path) -> set[str]:
    """Every module of the package that ``path`` imports, by its full name (``from liger_perf import loop`` is
    ``liger_perf.loop``; a relative import is resolved against the module's own package)."""
    module = _module(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.update(f"{base}.{alias.name}" if base == "liger_perf" else base for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "liger_perf" or name.startswith("liger_perf.")}


def _root(path: Path) -> Path:
    """The folder that holds the package folder ``liger_perf`` above ``path``."""
    return next(p.parent for p in path.parents if p.name == "liger_perf")


def _module(path: Path) -> str:
    parts = path.relative_to(_root(path)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward_imports(package: Path) -> list[str]:
    """``module imports other`` for every import in ``package`` that reaches a higher stage or the top."""
    upward = []
    for path in sorted(package.rglob("*.py")):
        module = _module(path)
        mine = _stage(module)
        if mine in ("root", "top"):
            continue  # the commands' own modules (cli, loop, nightly, ...) sit above every stage
        for imported in sorted(_imports(path)):
            theirs = _stage(imported)
            if theirs == "top" or (theirs in STAGES and STAGES.index(theirs) > STAGES.index(mine)):
                upward.append(f"{module} imports {imported}")
    return upward


def test_every_stage_folder_exists_and_holds_modules():
    for stage in STAGES:
        assert list((PACKAGE / stage).glob("*.py")), stage


def test_imports_go_only_down_the_stages():
    assert upward_imports(PACKAGE) == []


def test_the_check_sees_every_kind_of_upward_import(tmp_path):
    """The rule above would pass vacuously if it read no import: on a copy of the package it finds each planted
    import that reaches up (absolute, from the package, relative), and none that goes down."""
    copy = tmp_path / "liger_perf"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "core" / "planted.py").write_text(
        "from liger_perf.run.trial import Trial\nfrom liger_perf import loop\nfrom ..judge import guardrails\n"
        "from liger_perf.core import wording\nimport liger_perf\n")
    assert upward_imports(copy) == ["liger_perf.core.planted imports liger_perf.judge",
                                    "liger_perf.core.planted imports liger_perf.loop",
                                    "liger_perf.core.planted imports liger_perf.run.trial"]
