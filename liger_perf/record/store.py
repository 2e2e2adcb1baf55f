"""The workspace's files: the one owner of every path liger-perf reads or writes, and of trial numbering.

One store is the history of one device class (``workspace.device_class``: ``nvidia-h200``, ``interpret``):

    notebooks/<device>/<kernel>/NNNN-<name>.ipynb             a trial: the history (committed)
    notebooks/<device>/<kernel>/.NNNN-<name>.partial.ipynb    a trial being written (renamed into place at its end)
    notebooks/<device>/<kernel>/variants/NNNN-<name>.py       the module a proposed trial ran
    notebooks/<device>/<kernel>/variants/NNNN-screen-.../     a screening's candidate modules
    notebooks/<device>/<kernel>/artifacts/NNNN-<name>/        large outputs (the .ncu-rep), not committed
    notebooks/<device>/<kernel>/.optimize.lock                one optimize loop per kernel and device
    notebooks/<device>/.nightly.lock                          one nightly job per workspace and device
    reports/<device>/<kernel>/, reports/<device>/nightly/     what people read

So a CPU interpreter run never writes into, numbers against or reads as its own a GPU's history. The notebooks
and reports folders are the workspace's (``liger_perf.core.workspace``). A trial's number is taken from the file
names, half-written ones included, so a number is never used twice.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from liger_perf.core import workspace
from liger_perf.core.errors import UserError
from liger_perf.core.workspace import NOTEBOOKS_ENV, REPORTS_ENV

TRIAL_FILE = re.compile(r"^(\d{4,})-([A-Za-z0-9_.-]+)\.ipynb$")
_NUMBERED = re.compile(r"^\.?(\d{4,})-")
PARTIAL_SUFFIX = ".partial.ipynb"


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
    def __init__(self, notebooks: Path | None = None, reports: Path | None = None, device: str | None = None):
        """The history in ``notebooks`` (reports in ``reports``), or, for a folder not given, the workspace's
        folder of the device class ``device``."""
        if device is None and notebooks is None:
            raise TypeError("Store: name the device class or the history's folder")
        ws = workspace.current()
        self.device = device
        # Absolute: a trial's paths are handed to other processes (the sandbox binds them, a notebook kernel runs
        # in its own folder), where a relative path would name another place.
        self.notebooks = Path(notebooks if notebooks is not None else ws.notebooks / device).absolute()
        if reports is not None:
            self.reports = Path(reports).absolute()
        else:  # a history given by its folder is named after its device class (notebooks/<device>)
            self.reports = (ws.reports / (device or self.notebooks.name)).absolute()
        checked = [(self.notebooks, NOTEBOOKS_ENV), (self.reports, REPORTS_ENV)]
        if device is not None:  # the workspace's folders above the device's, which may not exist yet
            checked = [(ws.notebooks, NOTEBOOKS_ENV), (ws.reports, REPORTS_ENV), *checked]
        for folder, variable in checked:
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
        """The kernel's reports folder (made by whoever writes it): a file in its place is one line, before a
        bench or a loop spends its time on numbers it could not write."""
        folder = self.reports / kernel
        if folder.is_symlink() and not folder.exists():
            raise UserError(f"{folder} is a link to nothing: remove it or point it at a folder; the kernel's reports "
                            "go there")
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder} is a file, not a folder: move it away; the kernel's reports go there")
        return folder

    def nightly_reports(self) -> Path:
        return self.reports / "nightly"

    def e2e_reports(self) -> Path:
        return self.reports / "e2e"


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
        self._made: list[Path] = []  # the folders taking the lock created, deepest first

    def __enter__(self):
        import fcntl

        self._made = [f for f in (self.path.parent, *self.path.parent.parents) if not f.exists()]
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
            for folder in self._made:  # a run refused for bad input leaves nothing behind (a non-empty one stays)
                with contextlib.suppress(OSError):
                    folder.rmdir()


@contextlib.contextmanager
def replaced(path: str | Path):
    """A fresh file beside ``path`` to write (yielded), then renamed onto ``path`` in one step: a reader sees the
    old file or the new one, never half of one, and whatever stood at ``path`` (a link to any file of the machine,
    a FIFO that would block the write, a hard link: a clone may carry each) is replaced, never written through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the file from other users of a shared checkout
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_file(path: str | Path, text: str) -> Path:
    """``text`` written to ``path`` as UTF-8 through ``replaced``: whole or not at all, never through a link."""
    with replaced(path) as fresh:
        fresh.write_text(text, encoding="utf-8")
    return Path(path)


# -- which history a reader reads -----------------------------------------------------------------------------

def recorded_devices(kernel: str) -> list[str]:
    """The device classes that hold trials of ``kernel`` in the workspace, the most recent first: by when the
    last trial of each ended, as its notebook records it (a clone's file times say nothing)."""
    root = workspace.current().notebooks
    found = []
    for folder in sorted(root.iterdir() if root.is_dir() else []):
        trials = Store(folder).trial_notebooks(kernel) if folder.is_dir() else []
        if trials:
            found.append((_ended(trials[-1]), folder.name))
    return [name for _, name in sorted(found, key=lambda pair: pair[0], reverse=True)]


#: The largest notebook read as a trial: a trial's notebook is well under 2 MB (the largest committed, 0.6 MB).
NOTEBOOK_LIMIT = 32 * 2**20


def read_notebook_text(path: Path) -> str:
    """At most ``NOTEBOOK_LIMIT + 1`` characters of a notebook file (more: not a trial notebook), opened without
    following a link (it could name any file of the machine) and without blocking on a FIFO or reading a device
    forever (``open_regular``): ``OSError`` for any of those, ``ValueError`` for text that is not UTF-8."""
    from liger_perf.isolation.contained import open_regular

    with os.fdopen(open_regular(path), encoding="utf-8") as f:
        return f.read(NOTEBOOK_LIMIT + 1)


def _ended(notebook: Path) -> str:
    """When a trial notebook's execution ended (Papermill's ISO time), '' when it cannot be read."""
    import json

    try:
        text = read_notebook_text(notebook)
        if len(text) > NOTEBOOK_LIMIT:
            return ""
        return str(json.loads(text)["metadata"]["papermill"]["end_time"] or "")
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return ""


def reading_device(kernel: str, asked: str = "auto", warn=None) -> str:
    """Whose history ``history``, ``diff`` and ``report`` read: ``asked`` is ``auto`` (this machine's GPU; else the
    recorded GPU history, the latest of several; else the interpreter's), ``cuda`` (the same, a GPU's only),
    ``interpret``, or a device class by name (``nvidia-h200``). Needs no GPU: recorded results are read anywhere."""
    recorded = recorded_devices(kernel)
    legacy = workspace.current().notebooks / kernel
    if warn is not None and legacy.is_dir() and any(trial_number(p) is not None for p in legacy.iterdir()):
        warn(f"{legacy} holds trials in the layout before device folders: move them into "
             f"{workspace.current().notebooks}/<device>/{kernel}/ (e.g. nvidia-h200), or they are not read")
    if asked == workspace.INTERPRET:
        return asked
    if asked not in ("auto", "cuda"):
        if asked not in recorded:
            raise UserError(f"--device {asked}: no history of {kernel} for that device here; recorded: "
                            f"{', '.join(recorded) or 'none'} (or auto, cuda, interpret)")
        return asked
    import torch

    gpus = [name for name in recorded if name != workspace.INTERPRET]
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        here = workspace.device_class(torch.cuda.get_device_name())
        if here not in recorded and gpus and warn is not None:
            warn(f"no history of {kernel} on this GPU ({here}) yet; recorded: {', '.join(gpus)} (--device picks one)")
        return here
    if gpus:
        if len(gpus) > 1 and warn is not None:
            warn(f"{kernel} has histories of {', '.join(gpus)}: reading {gpus[0]}'s, the latest (--device picks)")
        elif workspace.INTERPRET in recorded and warn is not None:  # this machine's own trials are the other one
            warn(f"no GPU here: reading the recorded {gpus[0]} history of {kernel}; this machine's own trials "
                 f"(the Triton interpreter's): --device {workspace.INTERPRET}")
        return gpus[0]
    if asked == "cuda":
        raise UserError(f"--device cuda: no GPU here and no GPU history of {kernel} in "
                        f"{workspace.current().notebooks}; use --device interpret")
    return workspace.INTERPRET
