"""The operating-system sandbox for the processes that run a variant: bubblewrap (``bwrap``).

Inside: the whole file system read-only, except the trial's scratch folder, the files it is allowed to write
(its notebook) and nothing else; no network (a network namespace of its own: loopback only, which the notebook
kernel and its client share inside); a PID namespace of its own (it sees and signals no other process); the GPU
device nodes; the allow-listed environment (``liger_perf.contained``); a file-size limit. Triton's kernel cache is
the scratch folder's own, so a variant cannot plant a compiled kernel that a later trial would load.

Where ``bwrap`` is missing or cannot create namespaces, ``available()`` says why; ``optimize`` then refuses to run
generated code (``--proposer llm|auto``) unless told ``--unsandboxed``.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

FILE_SIZE_LIMIT = 8 * 2**30  # bytes: an NCU report of the full suite is a few hundred MB


@functools.cache
def unavailable_reason() -> str:
    """'' when the sandbox can run here; otherwise why not, in one line."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    try:
        inside = wrap(["grep", "^CapEff:", "/proc/self/status"], Path("/"), [], {"PATH": "/usr/bin:/bin"})
        probe = subprocess.run(inside, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap could not be started: {e}"
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.strip().splitlines()[-1:] or ['?']}"[:300]
    if probe.stdout.split()[-1:] != ["0000000000000000"]:  # a sandbox with capabilities is no sandbox
        return f"bwrap leaves the sandbox capabilities here ({probe.stdout.strip()})"
    return ""


def available() -> bool:
    return unavailable_reason() == ""


def require_sandbox(proposer: str, unsandboxed: bool) -> None:
    """Generated code runs only inside the sandbox, unless the user said otherwise (``--unsandboxed``)."""
    from liger_perf.errors import UserError

    if proposer in ("llm", "auto") and not unsandboxed and not available():
        raise UserError(f"--proposer {proposer} runs code a model wrote, and there is no sandbox here "
                        f"({unavailable_reason()}); install bubblewrap, or pass --unsandboxed to run it with your "
                        "own permissions")


def wrap(argv: list[str], scratch: Path, writable: list[Path], env: dict[str, str]) -> list[str]:
    """``argv`` run inside the sandbox, in ``scratch`` with ``env``; ``writable``: files or folders (they must
    exist) it may write besides ``scratch``."""
    # --cap-drop ALL: run as root, bwrap would keep every capability, and CAP_SYS_ADMIN remounts / writable.
    # /dev/shm and /run get empty tmpfs: the host's shared memory and its daemons' sockets stay out of reach.
    command = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev",
               "--tmpfs", "/dev/shm", "--tmpfs", "/run", "--proc", "/proc", "--unshare-net", "--unshare-pid",
               "--unshare-ipc", "--unshare-uts", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    for path in [Path(scratch), *writable]:
        command += ["--bind", str(path), str(path)]
    command += ["--chdir", str(scratch), "--clearenv"]
    for name, value in sorted(env.items()):
        command += ["--setenv", name, value]
    return [*command, "--", *argv]


def sandboxed_environment(scratch: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment (plus ``extra_env``) of a process inside the sandbox: Triton's cache is its
    scratch folder's own, so no kernel can be planted for a later run."""
    from liger_perf.contained import variant_environment

    return {**variant_environment(scratch), **(extra_env or {}),
            "TRITON_CACHE_DIR": str(Path(scratch) / "triton-cache")}


def contained_command(argv: list[str], scratch: Path, extra_env: dict[str, str] | None = None):
    """``(command, env, preexec_fn)`` to run ``argv`` as a process that imports a variant, in ``scratch``: inside
    the sandbox where it is available, else with the allow-listed environment only."""
    from liger_perf.contained import variant_environment

    if not available():
        return argv, {**variant_environment(scratch), **(extra_env or {})}, None
    env = sandboxed_environment(scratch, extra_env)
    return wrap(argv, scratch, [], env), env, limit_resources


def limit_resources() -> None:
    """``preexec_fn`` of the sandboxed process: the file-size limit (inherited by everything it starts)."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
