"""What a process that imports a variant gets from its parent: an allow-listed environment and a scratch folder.

A variant is code under trial, and a proposer's variant is untrusted code: every process that imports one (the
trial's notebook kernel, and through it the NCU driver; ``check``; ``bench``) starts with only the variables
below, so no API key, token or credential of the caller reaches it, and runs in a scratch working folder of its
own. The operating-system sandbox around those processes is issue 13's next step; this is the part that needs
no tool.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

#: Variables a variant's process may inherit, by exact name: where programs and libraries are, locale and time
#: zone, which GPUs, and the knobs of Python, Triton, PyTorch and liger-perf that change behaviour, not access.
ALLOWED = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX",
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "TRITON_INTERPRET", "TRITON_CACHE_DIR", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH",
    "TORCHINDUCTOR_CACHE_DIR", "TORCH_CUDA_ARCH_LIST",
    "LIGER_PERF_KERNELS", "LIGER_PERF_WORKSPACE", "LIGER_PERF_GIT_COMMIT", "LIGER_PERF_GIT_DIRTY",
    "JUPYTER_PATH",  # the runtime folder: under HOME, writable
})
ALLOWED_PREFIXES = ("LC_",)  # locale categories
#: Never passed, whatever the lists above say: a name that looks like a credential is one.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION")


def _allowed(name: str) -> bool:
    upper = name.upper()
    if any(marker in upper for marker in SECRET_MARKERS):
        return False
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES)


def variant_environment(scratch: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that imports a variant: the allow-listed part of ``base`` (default: this
    process's), with ``HOME`` and ``TMPDIR`` in ``scratch``, Triton's kernel cache where it was (a per-trial
    cache would compile every kernel again), and the package importable."""
    base = dict(os.environ if base is None else base)
    env = {name: value for name, value in base.items() if _allowed(name)}
    scratch = Path(scratch).resolve()
    home = Path(base.get("HOME") or Path.home())
    env.update(HOME=str(scratch), TMPDIR=str(scratch), XDG_CACHE_HOME=str(scratch / ".cache"),
               TRITON_CACHE_DIR=base.get("TRITON_CACHE_DIR") or str(home / ".triton" / "cache"))
    from liger_perf.core.workspace import PACKAGE

    package_root = str(PACKAGE.parent)
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, [*env.get("PYTHONPATH", "").split(os.pathsep),
                                                                    package_root])))
    env.setdefault("PATH", os.defpath)
    # The child runs in a folder of its own: it must find the kernels of this workspace, not of its folder.
    from liger_perf.core.workspace import COMMIT_ENV, DIRTY_ENV, WORKSPACE_ENV, current, git_state

    env[WORKSPACE_ENV] = str(current().root)
    # The commit the code runs at, said here: the child may see no .git (the sandbox shows none).
    commit, dirty = git_state(current().root)
    if commit:
        env[COMMIT_ENV], env[DIRTY_ENV] = commit, "1" if dirty else "0"
    return env


@contextlib.contextmanager
def reduced_environment(scratch: Path) -> Iterator[dict[str, str]]:
    """This process's environment reduced to ``variant_environment`` while the block runs, for a library that
    starts the variant's process itself with the caller's environment (Papermill's notebook kernel); restored
    after, even on an error."""
    saved = dict(os.environ)
    env = variant_environment(scratch, saved)
    Path(scratch).mkdir(parents=True, exist_ok=True)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield env
    finally:
        os.environ.clear()
        os.environ.update(saved)


def open_regular(path: Path) -> int:
    """A descriptor of ``path`` opened for reading, never through a link (it could point at a secret) and never
    blocking; anything but a regular file (a FIFO would wait for a writer forever, /dev/zero never end, a folder
    is none) raises ``OSError`` saying what it is, its descriptor closed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError("a folder, not a file" if stat.S_ISDIR(mode) else "not a regular file (a FIFO or device)")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_untrusted(path: Path, limit: int = 1 << 20) -> str | None:
    """A file a variant's process could have replaced, read safely by its parent (``open_regular``): at most
    ``limit`` bytes from its end. None when there is no such file."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        os.lseek(fd, max(0, os.fstat(fd).st_size - limit), os.SEEK_SET)
        return os.read(fd, limit).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def write_fresh(path: Path, text: str) -> None:
    """Write ``path`` in a folder a variant's process may have written: whatever it left there (a link to
    somewhere else) is removed first, and the file is created anew."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
