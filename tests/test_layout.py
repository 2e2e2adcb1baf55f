"""The package's stage folders and the one direction of their imports: a module imports only from its own stage
and the stages below it (``STAGES``, lowest first), and the commands' own modules at the top import any stage
but are imported by none below them."""

import ast
from pathlib import Path

import liger_perf

PACKAGE = Path(liger_perf.__file__).parent
#: propose -> run -> judge -> record, over what they stand on, lowest first.
STAGES = ["core", "kernel", "isolation", "gate", "measure", "record", "judge", "run", "propose", "models",
          "scaffold"]


def _stage(module: str) -> str:
    """``liger_perf.gate.process`` -> ``gate``; a module at the package's top -> ``top``; the package -> ``root``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "root"
    return parts[1] if parts[1] in STAGES else "top"


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "liger_perf" or name.startswith("liger_perf.")}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_stage_folder_exists_and_holds_modules():
    for stage in STAGES:
        assert list((PACKAGE / stage).glob("*.py")), stage


def test_imports_go_only_down_the_stages():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        mine = _stage(module)
        if mine in ("root", "top"):
            continue  # the commands' own modules (cli, loop, nightly, ...) sit above every stage
        for imported in _imports(path):
            theirs = _stage(imported)
            if theirs == "root" and imported == "liger_perf":
                continue  # the package's version
            if theirs == "top" or (theirs in STAGES and STAGES.index(theirs) > STAGES.index(mine)):
                upward.append(f"{module} imports {imported}")
    assert upward == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The rule above would pass vacuously if it read no import: it finds one planted in a copy of a module."""
    planted = tmp_path / "liger_perf" / "core" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from liger_perf.run.trial import Trial\n")
    assert _imports(planted) == {"liger_perf.run.trial"}
    assert STAGES.index(_stage("liger_perf.run.trial")) > STAGES.index(_stage("liger_perf.core.planted"))
