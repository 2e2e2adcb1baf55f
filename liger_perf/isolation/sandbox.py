"""The operating-system sandbox for the processes that run a variant: bubblewrap (``bwrap``).

Inside, the file system holds only what a trial needs, read-only (``wrap``):
- the system's programs and libraries (``/usr`` and its links ``/bin``, ``/lib``...), and of ``/etc`` only the
  files the dynamic loader, the time zone and name lookups read (``ETC_FILES``), with a ``passwd`` and ``group``
  of the sandbox's own naming nobody but the user who runs it;
- the Python installation and its import path, the package itself (its folder, not the checkout around it),
  the kernels' specs and baselines, the variants under trial, CUDA and NCU (``needed_paths``);
- ``/sys`` (the GPU's topology), a ``/proc`` of the sandbox's own (its ``/proc/sys``, the kernel's settings,
  read-only), and a ``/dev`` of the GPU nodes and the usual pseudo-devices;
- writable: the trial's scratch folder and the files it is allowed to write (its notebook), and empty ``/tmp``,
  ``/var/tmp``, ``/run`` and ``/dev/shm`` of its own (what is written there vanishes with it).
Nothing else of the machine is there: not the rest of ``/etc``, not the user's home, not other repositories, not
the workspace's notebooks, reports or git history.

Besides:
- no network (a network namespace of its own: loopback only, which the notebook kernel and its client share);
- a PID namespace of its own (it sees and signals no other process, and dies with its first process);
- no capability; the allow-listed environment (``liger_perf.isolation.contained``), which ``bwrap`` itself is started
  with too, so no process inside (``/proc/1`` is ``bwrap``) holds more of the caller's environment;
- limits on file size, memory (``RLIMIT_DATA``: heap and private writable mappings, not the address space CUDA
  reserves) and processes (a pids cgroup where this machine lets liger-perf make one, else ``RLIMIT_NPROC``,
  which the kernel does not apply to root): ``limits()`` says which hold here.

Triton's kernel cache is the scratch folder's own, so a variant cannot plant a compiled kernel that a later
trial would load. Where ``bwrap`` is missing or cannot create namespaces, ``available()`` says why; ``optimize``
then refuses to run generated code (``--proposer llm|auto``) unless told ``--unsandboxed``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

FILE_SIZE_LIMIT = 8 * 2**30  # bytes: an NCU report of the full suite is a few hundred MB
PROCESS_LIMIT = 512  # a notebook kernel, its client, NCU, the compiler's workers: a few dozen at most
#: Where users' files, secrets and the sockets of their daemons live: never bound whole into the sandbox.
HIDDEN = ("/home", "/root", "/tmp", "/var/tmp", "/run", "/dev/shm")
#: The system's programs and libraries (the compiler Triton builds its launchers with, ``ldconfig`` it asks where
#: libcuda is, the driver's libraries): bound read-only, or recreated as the links they are on merged-/usr systems.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Of ``/etc``, what the dynamic loader, the C library's name and time lookups and Debian's alternatives read.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf", "hosts",
             "host.conf", "alternatives")
#: Empty and writable inside, of the sandbox's own.
SCRATCH_PLACES = ("/tmp", "/var/tmp", "/run", "/dev/shm")
_cgroup_names = itertools.count()


def memory_limit() -> int:
    """Bytes of heap and private writable memory a sandboxed process may hold: half the machine's memory, at
    least 8 GiB (a gate at the GPU suite's widest shape holds float64 references of a few GiB)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        physical = 16 * 2**30
    return max(8 * 2**30, physical // 2)


@functools.cache
def unavailable_reason() -> str:
    """'' when the sandbox can run here; otherwise why not, in one line."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    try:
        # This Python, as a trial starts it: what it needs is bound back where the user's files are hidden.
        code = "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])"
        with tempfile.TemporaryDirectory(prefix="liger-perf-probe-") as scratch:
            inside = wrap([sys.executable, "-c", code], Path(scratch), [], {"PATH": os.defpath})
            probe = subprocess.run(inside, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap could not be started: {e}"
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.strip().splitlines()[-1:] or ['?']}"[:300]
    if probe.stdout.split()[-1:] != ["0000000000000000"]:  # a sandbox with capabilities is no sandbox
        return f"bwrap leaves the sandbox capabilities here ({probe.stdout.strip()})"
    return ""


def available() -> bool:
    return unavailable_reason() == ""


def sandbox_required(proposer: str, unsandboxed: bool) -> bool:
    """Whether the trials of this proposer may run only inside the sandbox: code a model wrote, unless the user
    said otherwise (``--unsandboxed``)."""
    return proposer in ("llm", "auto") and not unsandboxed


def require_sandbox(proposer: str, unsandboxed: bool) -> None:
    """Generated code runs only inside the sandbox, unless the user said otherwise (``--unsandboxed``)."""
    from liger_perf.core.errors import UserError

    if sandbox_required(proposer, unsandboxed) and not available():
        raise UserError(f"--proposer {proposer} runs code a model wrote, and there is no sandbox here "
                        f"({unavailable_reason()}); install bubblewrap, or pass --unsandboxed to run it with your "
                        "own permissions")


def _hidden_roots() -> list[str]:
    home = os.environ.get("HOME")
    roots = [*HIDDEN, *([home] if home and home != "/" else [])]
    return sorted({os.path.realpath(r) for r in roots if os.path.isdir(r)})


def _within(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def needed_paths(extra: Iterable[Path | str] = ()) -> list[tuple[str, str]]:
    """What a process that runs a variant reads, as (real path, path as named) pairs: the Python installation
    and its import path, the package, the kernels, the CUDA toolkit, NCU, the folders the allow-listed
    environment names (libraries, ptxas, Jupyter), and ``extra`` (the variants). Never the working folder of the
    caller nor a whole emptied place (``python -m`` from ``$HOME`` puts it on ``sys.path``)."""
    from liger_perf.kernel.registry import kernel_folders

    here = os.path.realpath(os.getcwd())
    from liger_perf.core.workspace import PACKAGE as package
    # The checkout the package runs from (a source tree on the import path) is the workspace too: only the
    # package's folder of it, never its notebooks, reports or git history. A folder the environment names is
    # bound only where it is absolute and neither the caller's working folder, the checkout, nor a folder that holds
    # either (LD_LIBRARY_PATH=. bound the whole checkout, .git included; a PYTHONPATH of the home, everything).
    guarded = [here, os.path.realpath(str(package.parent))]

    def named_by_environment(entries):
        return [e for e in entries if e and os.path.isabs(e)
                and not any(_within(g, [os.path.realpath(e)]) for g in guarded)]

    def listed(name):
        return named_by_environment(os.environ.get(name, "").split(os.pathsep))

    imports = named_by_environment([*sys.path[1:], *os.environ.get("PYTHONPATH", "").split(os.pathsep)])
    ncu = shutil.which("ncu")
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, *imports, *listed("LD_LIBRARY_PATH"),
             *listed("JUPYTER_PATH"), *listed("CUDA_HOME"), *listed("CONDA_PREFIX"), *listed("TRITON_PTXAS_PATH"),
             *listed("TRITON_LIBCUDA_PATH"),
             os.path.dirname(sys.executable), str(package), *(str(folder) for folder, _ in kernel_folders()),
             *([os.path.dirname(ncu), os.path.dirname(os.path.dirname(os.path.realpath(ncu)))] if ncu else []),
             # NCU's launcher in CUDA's bin/ runs the Nsight Compute installed beside CUDA or under /opt/nvidia
             *(str(p) for base in ([os.path.dirname(os.path.dirname(os.path.realpath(ncu))), "/opt/nvidia"]
                                   if ncu else []) for p in Path(base).glob("nsight-compute*")),
             *map(str, extra)]
    refused = {os.path.realpath(p) for p in ["/", *_hidden_roots()]}
    pairs = set()
    for path in filter(None, paths):
        named, real = os.path.abspath(path), os.path.realpath(path)
        if not os.path.exists(real) or real in refused or named in refused:
            continue
        pairs.add((real, real))
        pairs.add((real, named))  # a path through a link (a home on another disk) works as written
    return sorted(pairs, key=lambda pair: (pair[1].count("/"), pair[1]))


#: What of the sandbox's /proc is bound read-only over it: what a root process could change the machine through.
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger")


def wrap(argv: list[str], scratch: Path, writable: list[Path], env: dict[str, str],
         readable: Iterable[Path | str] = ()) -> list[str]:
    """``argv`` run inside the sandbox, in ``scratch`` with ``env``; ``writable``: files or folders (they must
    exist) it may write besides ``scratch``; ``readable``: what it reads besides ``needed_paths()``. The root is
    empty but for what is bound into it (the module's docstring)."""
    # --cap-drop ALL: run as root, bwrap would keep every capability, and CAP_SYS_ADMIN remounts / writable.
    command = [shutil.which("bwrap") or "bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc",
               "--unshare-uts", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    system = []
    for place in SYSTEM:
        if os.path.islink(place):
            command += ["--symlink", os.readlink(place), place]
        elif os.path.isdir(place):
            command += ["--ro-bind", place, place]
            system.append(place)
    command += ["--dir", "/etc"]
    for name in ETC_FILES:
        path = os.path.join("/etc", name)
        if os.path.exists(path):
            command += ["--ro-bind", os.path.realpath(path) if os.path.isfile(path) else path, path]
    for name, text in _identity_files().items():
        command += ["--ro-bind", text, os.path.join("/etc", name)]
    command += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
    # The kernel's settings, read-only. bwrap makes /proc/sys read-only only where access() says it is writable,
    # which for that folder it never does, while as root (no capability needed: the files are root's) a process
    # inside could write every file in it: kernel.core_pattern names a program the kernel then runs as the
    # machine's root, outside every namespace, when a process crashes (a review, 2026-12-06). Bound over the
    # sandbox's /proc, the machine's own settings are readable there, as /sys is.
    command += [arg for place in PROC_READ_ONLY if os.path.exists(place) for arg in ("--ro-bind", place, place)]
    for node in sorted(Path("/dev").glob("nvidia*")):  # the GPUs, their control and UVM nodes, nvidia-caps/
        command += ["--dev-bind", str(node), str(node)]
    for place in SCRATCH_PLACES:
        command += ["--tmpfs", place]
    for real, named in needed_paths(readable):  # a parent before its children
        if not _within(named, system):
            command += ["--ro-bind", real, named]
    for path in [Path(scratch), *writable]:
        command += ["--bind", str(path), str(path)]
    command += ["--chdir", str(scratch), "--clearenv"]
    for name, value in sorted(env.items()):
        command += ["--setenv", name, value]
    return [*command, "--", *argv]


@functools.cache
def _identity_files() -> dict[str, str]:
    """A ``passwd`` and a ``group`` naming only the user who runs the sandbox (what ``getpwuid`` asks), written
    once per process in a folder of its own, removed when the process ends."""
    import pwd

    import atexit

    folder = Path(tempfile.mkdtemp(prefix="liger-perf-identity-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    uid, gid = os.getuid(), os.getgid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "liger-perf"
    files = {"passwd": f"{name}:x:{uid}:{gid}::/nonexistent:/usr/sbin/nologin\n",
             "group": f"{name}:x:{gid}:\n"}
    for file, text in files.items():
        (folder / file).write_text(text)
    return {file: str(folder / file) for file in files}


def sandboxed_environment(scratch: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment (plus ``extra_env``) of a process inside the sandbox: Triton's cache is its
    scratch folder's own, so no kernel can be planted for a later run."""
    from liger_perf.isolation.contained import variant_environment

    return {**variant_environment(scratch), **(extra_env or {}),
            "TRITON_CACHE_DIR": str(Path(scratch) / "triton-cache")}


# -- limits ---------------------------------------------------------------------------------------------------

def _pids_controllers() -> Iterator[Path]:
    """Folders where a child pids cgroup of this process's own could be made: cgroup v1's pids hierarchy, then
    the v2 hierarchy (where the parent must have delegated the pids controller)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "pids" in controllers.split(","):
            yield Path("/sys/fs/cgroup/pids") / path.lstrip("/")
    for line in lines:
        if line.startswith("0::"):
            for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                own = mount / line[3:].lstrip("/")
                with contextlib.suppress(OSError):
                    if "pids" in (own / "cgroup.subtree_control").read_text().split():
                        yield own


@contextlib.contextmanager
def process_group(limit: int = PROCESS_LIMIT) -> Iterator[Path | None]:
    """A pids cgroup of at most ``limit`` processes for one sandboxed process tree to join (``limiter``); None
    where this machine lets liger-perf make none. Removed when the block ends."""
    made = None
    for parent in _pids_controllers():
        group = parent / f"liger-perf-{os.getpid()}-{next(_cgroup_names)}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            (group / "pids.max").write_text(str(limit))
            made = group
            break
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
    try:
        yield made
    finally:
        if made is not None:
            for _ in range(50):  # the namespace's processes are being killed: the group empties in a moment
                try:
                    made.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _threads_of(uid: int) -> int:
    """The user's tasks (``RLIMIT_NPROC`` counts threads, and torch starts one per core)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
    return count


def limiter(group: Path | None):
    """``preexec_fn`` of a sandboxed process: the file-size and memory limits, and the process limit (joining
    ``group``; else ``RLIMIT_NPROC`` on top of the user's processes now), inherited by all it starts."""
    processes = (None if group is not None or os.getuid() == 0 else
                 _threads_of(os.getuid()) + PROCESS_LIMIT + 8 * (os.cpu_count() or 1))
    memory = memory_limit()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        elif processes is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))

    return limit


def limits() -> dict[str, str]:
    """The limits a sandboxed process gets on this machine, in words (for the README's claims and the tests)."""
    with process_group() as group:
        processes = (f"at most {PROCESS_LIMIT} (pids cgroup)" if group is not None else
                     f"at most {PROCESS_LIMIT} more than the user has (RLIMIT_NPROC)" if os.getuid() != 0 else
                     "none: no pids cgroup can be made here, and RLIMIT_NPROC does not apply to root")
    return {"file_size": f"{FILE_SIZE_LIMIT} bytes", "memory": f"{memory_limit()} bytes (RLIMIT_DATA)",
            "processes": processes}


def run(argv: list[str], scratch: Path, env: dict[str, str], writable: list[Path] = (),
        readable: Iterable[Path | str] = (), **popen) -> subprocess.CompletedProcess:
    """``subprocess.run`` of ``argv`` inside the sandbox with its limits (``popen``: run's own arguments).
    ``bwrap`` itself starts with ``env`` only: inside, it is process 1, and its environment is readable there."""
    with process_group() as group:
        return subprocess.run(wrap(argv, scratch, list(writable), env, readable), preexec_fn=limiter(group),
                              env=env, **popen)


def run_contained(argv: list[str], scratch: Path, extra_env: dict[str, str] | None = None,
                  readable: Iterable[Path | str] = (), **popen) -> subprocess.CompletedProcess:
    """Run ``argv``, a process that imports a variant, in ``scratch``: inside the sandbox where it is available,
    else with the allow-listed environment only."""
    from liger_perf.isolation.contained import variant_environment

    if not available():
        return subprocess.run(argv, env={**variant_environment(scratch), **(extra_env or {})}, cwd=scratch,
                              **popen)
    return run(argv, scratch, sandboxed_environment(scratch, extra_env), readable=readable, cwd=scratch, **popen)
