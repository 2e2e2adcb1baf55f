"""The workspace's files: the one owner of every path liger-perf reads or writes, and of trial numbering.

    notebooks/<kernel>/NNNN-<name>.ipynb             a trial: the history (committed)
    notebooks/<kernel>/.NNNN-<name>.partial.ipynb    a trial being written (renamed into place when it ends)
    notebooks/<kernel>/variants/NNNN-<name>.py       the module a proposed trial ran
    notebooks/<kernel>/variants/NNNN-screen-.../     a screening's candidate modules
    notebooks/<kernel>/artifacts/NNNN-<name>/        large outputs (the .ncu-rep), not committed
    notebooks/<kernel>/.optimize.lock                one optimize loop per kernel
    notebooks/.nightly.lock                          one nightly job per workspace
    reports/<kernel>/, reports/nightly/              what people read

The notebooks folder is ``notebooks/`` of the project or ``$LIGER_PERF_NOTEBOOKS``; the reports folder
``reports/`` or ``$LIGER_PERF_REPORTS``. A trial's number is taken from the file names, half-written ones
included, so a number is never used twice.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from liger_perf.errors import UserError
from liger_perf.registry import project_root

NOTEBOOKS_ENV, REPORTS_ENV = "LIGER_PERF_NOTEBOOKS", "LIGER_PERF_REPORTS"
TRIAL_FILE = re.compile(r"^(\d{4,})-([A-Za-z0-9_.-]+)\.ipynb$")
_NUMBERED = re.compile(r"^\.?(\d{4,})-")
PARTIAL_SUFFIX = ".partial.ipynb"


def template_path() -> Path:
    """The trial notebook that Papermill executes."""
    return project_root() / "notebooks" / "templates" / "trial.ipynb"


def short_name(text: str) -> str:
    """A trial name that is safe in a file name."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:60]
    return name or "trial"


def trial_number(path: Path) -> int | None:
    """The trial number a notebook's file name gives it (None for a file that is not a trial notebook)."""
    match = TRIAL_FILE.match(path.name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class TrialPaths:
    """Where one trial's files go."""

    trial_id: int
    name: str
    notebook: Path  # the finished trial
    partial: Path  # where it is written while it runs
    artifacts: Path  # its large outputs
    variant: Path  # the module it runs, when the loop wrote one


class Store:
    def __init__(self, notebooks: Path | None = None, reports: Path | None = None):
        # Absolute: a trial's paths are handed to other processes (the sandbox binds them, a notebook kernel runs
        # in its own folder), where a relative path would name another place.
        self.notebooks = (Path(notebooks) if notebooks is not None else
                          Path(os.environ.get(NOTEBOOKS_ENV, project_root() / "notebooks"))).absolute()
        self.reports = (Path(reports) if reports is not None else
                        Path(os.environ.get(REPORTS_ENV, project_root() / "reports"))).absolute()
        for folder, variable in ((self.notebooks, NOTEBOOKS_ENV), (self.reports, REPORTS_ENV)):
            if folder.is_symlink() and not folder.exists():
                raise UserError(f"{folder} ({variable} or the default) is a link to nothing: point it at a folder")
            if folder.exists() and not folder.is_dir():
                raise UserError(f"{folder} ({variable} or the default) is a file, not a folder: point it at a folder")

    # -- the history ---------------------------------------------------------------------------------------

    def kernel_folder(self, kernel: str) -> Path:
        return self.notebooks / kernel

    def trial_notebooks(self, kernel: str) -> list[Path]:
        """The kernel's finished trial notebooks, in trial order (half-written ones excluded)."""
        folder = self.kernel_folder(kernel)
        if not folder.is_dir():
            return []
        found = [(number, p) for p in folder.iterdir() if (number := trial_number(p)) is not None]
        return [p for _, p in sorted(found)]

    def next_trial_id(self, kernel: str) -> int:
        """One more than any number taken in the kernel's folder, a half-written trial's included."""
        folder = self.kernel_folder(kernel)
        taken = [int(m.group(1)) for p in folder.iterdir() if (m := _NUMBERED.match(p.name))] \
            if folder.is_dir() else []
        return max(taken, default=-1) + 1

    def trial_paths(self, kernel: str, trial_id: int, name: str) -> TrialPaths:
        folder, name = self.kernel_folder(kernel), short_name(name)
        stem = f"{trial_id:04d}-{name}"
        return TrialPaths(trial_id, name, folder / f"{stem}.ipynb", folder / f".{stem}{PARTIAL_SUFFIX}",
                          folder / "artifacts" / stem, folder / "variants" / f"{stem}.py")

    def screen_candidate(self, screening: TrialPaths, index: int, name: str) -> Path:
        """Where a screening's ``index``-th candidate module goes: beside the variants, in the screening's own
        folder (``variants/NNNN-screen-.../<index>-<name>.py``)."""
        return screening.variant.with_suffix("") / f"{index}-{short_name(name)}.py"

    def new_trial(self, kernel: str, name: str) -> TrialPaths:
        """Take the kernel's next trial number: its partial file is created at once (exclusively), so a trial
        asked for next, here or by another process, gets another number before this one has started."""
        self.kernel_folder(kernel).mkdir(parents=True, exist_ok=True)
        while True:
            paths = self.trial_paths(kernel, self.next_trial_id(kernel), name)
            try:
                os.close(os.open(paths.partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
                return paths
            except FileExistsError:  # taken a moment ago by another process: the next one
                continue

    def release(self, paths: TrialPaths) -> None:
        """Give back a number taken for a trial that will not run (its partial file is empty)."""
        if paths.partial.is_file() and paths.partial.stat().st_size == 0:
            paths.partial.unlink(missing_ok=True)

    def partial_notebooks(self, kernel: str) -> list[Path]:
        """Trials killed before they finished (or still being written by another process)."""
        folder = self.kernel_folder(kernel)
        return sorted(folder.glob(f".*{PARTIAL_SUFFIX}")) if folder.is_dir() else []

    def aside_files(self, kernel: str) -> list[Path]:
        """Files a write killed half-way left beside the notebooks (``record.write_atomic``'s ``.*.tmp``)."""
        folder = self.kernel_folder(kernel)
        return sorted(folder.glob(".*.tmp")) if folder.is_dir() else []

    # -- locks and reports ---------------------------------------------------------------------------------

    def lock(self, kind: str, kernel: str | None = None, label: str | None = None) -> "Lock":
        """One run of ``kind`` (optimize per kernel, nightly per workspace) at a time. A kernel's history has one
        writer: a ``trial`` takes the kernel's optimize lock too (``label`` says which command holds it)."""
        return Lock(self.kernel_folder(kernel) if kernel else self.notebooks, kind, label)

    def kernel_reports(self, kernel: str) -> Path:
        return self.reports / kernel

    def nightly_reports(self) -> Path:
        return self.reports / "nightly"


class Lock:
    """One run of a kind (optimize, nightly) per folder at a time.

    An OS lock (``flock``) on ``.<kind>.lock``: taken atomically (of many runs started at once, exactly one gets
    it), released by the operating system when its process ends however it ends, so a killed run leaves no lock
    behind and a reused PID means nothing. The file holds the holder's PID, for the message."""

    def __init__(self, folder: Path, kind: str = "optimize", label: str | None = None):
        self.path = folder / f".{kind}.lock"
        self.kind = kind
        self.label = label or kind  # what the holder is, for the message another run gets
        self._fd: int | None = None
        self._made_folder = False

    def __enter__(self):
        import fcntl

        self._made_folder = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except IsADirectoryError:
                raise UserError(f"{self.path} is a folder, not a lock file: remove it") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid, _, label = os.read(fd, 200).decode(errors="replace").strip().partition(" ")
                os.close(fd)
                raise UserError(f"another {label or self.kind} run (pid {pid or '?'}) is working on "
                                f"{self.path.parent}; wait for it or stop it") from None
            try:  # the file may have been removed by the run that held it, after we opened it: take the new one
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.label}".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc):
        if self._fd is not None:
            self.path.unlink(missing_ok=True)  # before the lock is released: a waiting run re-opens the path
            os.close(self._fd)
            self._fd = None
            if self._made_folder:  # a run refused for bad input leaves nothing behind
                with contextlib.suppress(OSError):
                    self.path.parent.rmdir()
