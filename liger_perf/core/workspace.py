"""The workspace: the folder liger-perf reads and writes, and the files the package itself ships.

A workspace holds

    kernels/<name>/spec.py, baseline.py   the user's kernels (found before the built-in ones of the same name)
    notebooks/<device>/<kernel>/          the trials, one history per device class (``store.py``)
    reports/<device>/<kernel>/            what people read, per device class
    guardrails.yaml, nightly.yaml         the loop's acceptance rules and the nightly job (optional: defaults)

Which folder it is: ``--workspace DIR``, else ``$LIGER_PERF_WORKSPACE``, else the nearest folder from the current
one upward that holds a ``guardrails.yaml`` (as git finds its repository), else the current folder.
``liger-perf init`` makes one. Nothing is written outside it: the package (installed from a wheel, or this
checkout) is only read. ``$LIGER_PERF_NOTEBOOKS`` and ``$LIGER_PERF_REPORTS`` move the two output folders
elsewhere (a scratch copy of the history, say).

Everything here is below every other module: it imports nothing of the package.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

WORKSPACE_ENV = "LIGER_PERF_WORKSPACE"
NOTEBOOKS_ENV, REPORTS_ENV = "LIGER_PERF_NOTEBOOKS", "LIGER_PERF_REPORTS"
KERNELS_ENV = "LIGER_PERF_KERNELS"  # kernels folders added for one run (``registry``)
#: The file that makes a folder a workspace when it is looked for from a folder below it.
MARKER = "guardrails.yaml"
#: The device class of the Triton interpreter's trials (a GPU's is its name, e.g. ``nvidia-h200``).
INTERPRET = "interpret"


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def kernels(self) -> Path:
        return self.root / "kernels"

    @property
    def notebooks(self) -> Path:
        return absolute_path(os.environ.get(NOTEBOOKS_ENV) or self.root / "notebooks")

    @property
    def reports(self) -> Path:
        return absolute_path(os.environ.get(REPORTS_ENV) or self.root / "reports")

    @property
    def guardrails(self) -> Path | None:
        """The workspace's ``guardrails.yaml``; None where it has none (the defaults apply)."""
        path = self.root / "guardrails.yaml"
        return path if path.is_file() else None

    @property
    def nightly(self) -> Path:
        return self.root / "nightly.yaml"

    def relative(self, path: str | Path) -> str:
        """``path`` as written in a committed file: relative to the workspace when it lies inside it."""
        path = Path(path).absolute()
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)


def find_workspace(start: Path | None = None) -> Workspace:
    """The workspace of a process started in ``start`` (default: the current folder); see the module's doc."""
    stated = os.environ.get(WORKSPACE_ENV)
    if stated:
        return Workspace(absolute_path(stated))
    here = absolute_path(start or Path.cwd())
    for folder in (here, *here.parents):
        if (folder / MARKER).is_file():
            return Workspace(folder)
    return Workspace(here)


def current() -> Workspace:
    return find_workspace()


def absolute_path(path: str | Path) -> Path:
    """``path`` absolute and without ``..`` (a child process in a sandbox may not see the folder it passes
    through), links kept (a home on another disk works as written)."""
    return Path(os.path.abspath(Path(path).expanduser()))


def not_a_file(path: Path) -> str:
    """What stands at ``path`` where a file was expected: the end of a one-line error."""
    if path.is_dir():
        return "is a folder, not a file"
    return "is a device or a pipe, not a file" if path.exists() else "does not exist"


def use(root: Path, create: bool = False) -> Workspace:
    """Make ``root`` this process's workspace, and that of every process it starts (a notebook kernel, a
    contained check, a sandbox: they run in folders of their own, so every path they are handed is absolute).
    ``create``: ``root`` may not exist yet (``init``)."""
    from liger_perf.core.errors import UserError

    root = absolute_path(root)
    if root.exists() and not root.is_dir():
        raise UserError(f"--workspace {root}: a file, not a folder; give a folder (liger-perf init makes one)")
    if not root.exists() and not create:
        raise UserError(f"--workspace {root} does not exist: `liger-perf init {root}` makes a workspace there")
    os.environ[WORKSPACE_ENV] = str(root)
    for name in (NOTEBOOKS_ENV, REPORTS_ENV):
        if os.environ.get(name):
            os.environ[name] = str(absolute_path(os.environ[name]))
    if os.environ.get(KERNELS_ENV):
        os.environ[KERNELS_ENV] = os.pathsep.join(str(absolute_path(p)) for p in os.environ[KERNELS_ENV].split(
            os.pathsep) if p)
    return Workspace(root)


# -- what the package ships ---------------------------------------------------------------------------------

COMMIT_ENV, DIRTY_ENV = "LIGER_PERF_GIT_COMMIT", "LIGER_PERF_GIT_DIRTY"


def _git(root: Path, *args: str) -> str:
    import subprocess

    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def git_state(root: Path) -> tuple[str, bool]:
    """(commit, uncommitted changes) of the code that runs: as ``LIGER_PERF_GIT_COMMIT`` (and ``_DIRTY``) state it
    (a copy of a checkout, as on a lent GPU machine, may carry a .git of an older commit beside newer files; a
    sandboxed process sees no .git at all), else as git says of ``root``; ("", False) outside a repository."""
    stated = os.environ.get(COMMIT_ENV, "")
    if stated:
        return stated, os.environ.get(DIRTY_ENV) == "1"
    commit = _git(root, "rev-parse", "HEAD")
    return commit, bool(commit) and bool(_git(root, "status", "--porcelain", "--untracked-files=no"))


#: The package's folder (``liger_perf/``), in a wheel or a checkout; its parent holds it on the import path.
PACKAGE = Path(__file__).resolve().parent.parent


def package_file(*parts: str) -> Path:
    """A file the package ships (the trial template, the defaults ``init`` writes), from a wheel or a checkout."""
    return Path(str(resources.files("liger_perf").joinpath(*parts)))


def builtin_kernels() -> Path:
    """The kernels that ship with liger-perf: the folder ``kernels`` inside the installed package (``kernels/`` of
    this checkout, mapped into the wheel as ``liger_perf/kernels`` by ``pyproject.toml``), or, run from the
    checkout (installed editable, or ``PYTHONPATH=.``), that ``kernels/`` folder beside the package. It holds no
    ``__init__.py`` (see ``pyproject.toml``), so it is found as a folder, not imported as a package."""
    installed = PACKAGE / "kernels"
    return installed if installed.is_dir() else PACKAGE.parent / "kernels"


def template_path() -> Path:
    """The trial notebook that Papermill executes."""
    return package_file("run", "templates", "trial.ipynb")


# -- device classes ------------------------------------------------------------------------------------------

def device_class(gpu_name: str | None) -> str:
    """The name of a device's history: ``interpret`` without a GPU, else the GPU's name as a folder name
    (``NVIDIA H200`` -> ``nvidia-h200``). Results of two classes are never compared nor mixed."""
    if not gpu_name:
        return INTERPRET
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "gpu"


# -- making one -------------------------------------------------------------------------------------------------

#: What ``liger-perf init`` writes: (path in the workspace, the packaged file it copies; None for a folder).
_INIT = (("kernels", None), ("notebooks", None), ("reports", None),
         ("guardrails.yaml", ("defaults", "guardrails.yaml")), ("nightly.yaml", ("defaults", "nightly.yaml")),
         (".gitignore", ("defaults", "gitignore")))


def init_workspace(folder: Path) -> list[tuple[Path, bool]]:
    """Create what a workspace holds in ``folder``; a file already there is kept as it is (a second ``init`` is
    harmless). Returns each path with whether it was created."""
    from liger_perf.core.errors import UserError

    folder = Path(folder).absolute()
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file: give a folder for the workspace")
    for name, packaged in _INIT:  # every path first: a refusal leaves the folder as it was
        path = folder / name
        if path.is_symlink() and not path.exists():  # writing through it would make the file wherever it points
            raise UserError(f"{path} is a link to {os.readlink(path)}, which does not exist: remove the link, then "
                            "run init again")
        if packaged is not None and path.exists() and not path.is_file():
            raise UserError(f"{path} {not_a_file(path)}: the workspace reads a file there; move it away, then run "
                            "init again")
    done = []
    for name, packaged in _INIT:
        path = folder / name
        made = not path.exists()
        try:
            if packaged is None:
                path.mkdir(parents=True, exist_ok=True)
            elif made:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(package_file(*packaged).read_text(encoding="utf-8"), encoding="utf-8")
        except OSError as e:
            raise UserError(f"{path}: cannot be created ({e.strerror}); choose a folder you can write") from None
        done.append((path, made))
    return done
