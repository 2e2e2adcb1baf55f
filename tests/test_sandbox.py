"""The OS sandbox around a trial's processes (bubblewrap): a variant that tries to escape at import finds no
network, no file to write outside its scratch folder, no other process and no secret, and its trial completes."""

import json
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from liger_perf.isolation import sandbox
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.run.papermill import PapermillRunner

from broken_variants import ROOT

pytestmark = pytest.mark.skipif(not sandbox.available(), reason=f"no sandbox here: {sandbox.unavailable_reason()}")

PROBE = '''
import json as _json, os as _os, socket as _socket
_found = {"cwd": _os.getcwd(), "triton_cache": _os.environ.get("TRITON_CACHE_DIR"), "pids": [], "wrote": [],
          "connected": False, "secret": _os.environ.get("OPENAI_API_KEY")}
for _path in TARGETS:
    try:
        open(_path, "w").write("escaped")
        _found["wrote"].append(_path)
    except OSError:
        pass
try:
    _s = _socket.create_connection(("127.0.0.1", PORT), timeout=3)
    _s.sendall(b"escaped")
    _found["connected"] = True
except OSError:
    pass
try:
    _os.kill(PARENT, 0)
    _found["parent_visible"] = True
except OSError:
    _found["parent_visible"] = False
_found["pids"] = sorted(int(p) for p in _os.listdir("/proc") if p.isdigit())
_found["tmp"] = _os.listdir("/tmp")
try:
    _found["secret_file"] = open(SECRET_FILE).read()
except OSError:
    _found["secret_file"] = None
_json.dump(_found, open("probe.json", "w"))
'''


def _listener_and_a_secret(monkeypatch, timeout: float) -> socket.socket:
    """A secret in this process's environment, and a loopback listener a sandboxed variant must not reach."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-seen")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(timeout)
    return listener


@pytest.mark.slow
def test_a_variant_in_the_sandbox_reaches_nothing_outside_its_scratch_folder(tmp_path, monkeypatch):
    listener = _listener_and_a_secret(monkeypatch, timeout=60)
    accepted = []
    threading.Thread(target=lambda: accepted.append(_accept(listener)), daemon=True).start()
    targets = [str(tmp_path / "outside.txt"), str(ROOT / "kernels" / "escaped.txt"),
               str(tmp_path / "nb" / "relu_squared" / "0000-baseline.ipynb")]
    (tmp_path / "secret.txt").write_text("a file of the user's")
    variant = tmp_path / "probe.py"
    probe = (PROBE.replace("SECRET_FILE", repr(str(tmp_path / "secret.txt"))).replace("TARGETS", repr(targets))
             .replace("PORT", str(listener.getsockname()[1])))
    variant.write_text(probe.replace("PARENT", str(os.getpid())) + baseline_path("relu_squared").read_text())
    run = run_trial("relu_squared", variant, root=tmp_path / "nb", device="interpret", repetitions=2,
                    convergence=False, ncu=False, peers=False, runner=PapermillRunner(sandboxed=True))
    assert run.result.status == "complete", run.result.reason
    scratch = tmp_path / "nb" / "relu_squared" / "artifacts" / "0000-probe"
    found = json.loads((scratch / "probe.json").read_text())
    # Under /tmp, the sandbox's own empty /tmp takes a write, and it vanishes with the sandbox; the repository
    # (bound back read-only where it is under /tmp) takes none.
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "nb" / "relu_squared" /
                                                           "0000-baseline.ipynb").exists()
    assert not (ROOT / "kernels" / "escaped.txt").exists() and targets[1] not in found["wrote"]
    # In /tmp: the scratch folder's top, and what is bound back (the repository, when it lies there): no more.
    bound = {Path(named).parts[2] for _, named in sandbox.needed_paths([variant]) if named.startswith("/tmp/")}
    assert set(found["tmp"]) <= {scratch.resolve().parts[2], *bound} and found["secret_file"] is None
    assert found["connected"] is False and accepted in ([], [None])
    assert found["parent_visible"] is False and max(found["pids"]) < 100  # a PID namespace of its own
    assert found["secret"] is None and found["cwd"] == str(scratch.resolve())
    assert found["triton_cache"].startswith(str(scratch.resolve()))  # no kernel planted for later trials


def _accept(listener):
    try:
        return listener.accept()
    except OSError:
        return None


@pytest.mark.slow
def test_a_crashing_variant_in_the_sandbox_is_recorded_as_crashed(tmp_path):
    variant = tmp_path / "crasher.py"
    variant.write_text(baseline_path("relu_squared").read_text().replace(
        "def relu_squared(X):", "def relu_squared(X):\n    import os\n    os._exit(3)"))
    run = run_trial("relu_squared", variant, root=tmp_path / "nb", device="interpret", repetitions=2,
                    convergence=False, ncu=False, peers=False, runner=PapermillRunner(sandboxed=True))
    assert run.result.status == "crashed" and run.result.reason


LIMITS_PROBE = """
import os, subprocess
print("dev", sorted(os.listdir("/dev")))
started = []
try:
    for _ in range(PROCESSES + 50):
        started.append(subprocess.Popen(["sleep", "60"]))
except OSError:
    pass
print("started", len(started))
try:
    hoard = bytearray(MEMORY + 2**30)
    print("allocated")
except MemoryError:
    print("refused")
"""


def test_the_sandbox_limits_processes_and_memory_and_shows_no_disk(tmp_path):
    probe = LIMITS_PROBE.replace("PROCESSES", str(sandbox.PROCESS_LIMIT)).replace(
        "MEMORY", str(sandbox.memory_limit()))
    done = sandbox.run([sys.executable, "-c", probe], tmp_path, sandbox.sandboxed_environment(tmp_path),
                       capture_output=True, text=True, timeout=120)
    lines = dict((line + " ").split(" ", 1) for line in done.stdout.splitlines())
    assert done.returncode == 0 and "started" in lines, done.stderr
    devices = set(json.loads(lines["dev"].replace("'", '"')))
    assert {"null", "zero", "urandom"} <= devices and not devices & {"sda", "vda", "nvme0n1", "mem", "kmsg"}
    assert devices - {"null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin",
                      "stdout", "stderr", "core"} <= {d for d in devices if d.startswith("nvidia")}
    assert "allocated" not in done.stdout and "refused" in done.stdout
    if "none" not in sandbox.limits()["processes"]:
        assert int(lines["started"]) < sandbox.PROCESS_LIMIT


# Every hostile module, with the static check switched off: each imported and called inside one sandboxed
# process, its harmless payloads armed first ('true' becomes a command that leaks the environment to a file
# outside, leaves a process behind and connects to the test; the files it names lie outside the scratch folder).
RUN_ALL = """
import importlib.util, json, pathlib, signal, sys, traceback
import torch
signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError()))
ran = {}
for path in sorted(pathlib.Path("modules").glob("*.py")):
    signal.alarm(30)
    try:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.relu_squared(torch.randn(4, 8))
        ran[path.stem] = "ran"
    except BaseException as e:
        ran[path.stem] = type(e).__name__
    finally:
        signal.alarm(0)
json.dump(ran, open("ran.json", "w"))
"""


@pytest.mark.slow
def test_every_hostile_module_without_the_static_check_has_no_effect_outside_the_sandbox(tmp_path, monkeypatch):
    import subprocess

    from hostile_modules import HOSTILE, hostile_source

    listener = _listener_and_a_secret(monkeypatch, timeout=1)
    outside, scratch = tmp_path / "outside", tmp_path / "scratch"
    outside.mkdir()
    (scratch / "modules").mkdir(parents=True)
    # the left-behind process: a sleep whose length no other run of this test on the machine (a second CI) gives it
    marker = f"317.{os.getpid()}"
    escape = (f"env > {outside}/env-$$; (sleep {marker} &); echo escaped > {ROOT}/kernels/escaped-$$; "
              f"{sys.executable} -c 'import socket; socket.create_connection((\"127.0.0.1\", "
              f"{listener.getsockname()[1]}), 3)'")
    for i, name in enumerate(sorted(HOSTILE)):
        source = (hostile_source(name).replace("'true'", repr(escape))
                  .replace("['true']", repr(["sh", "-c", escape])).replace("'/tmp/", repr(str(outside) + "/")[:-1])
                  .replace("print('x')", f"open({str(outside / 'p')!r}, 'w')"))
        (scratch / "modules" / f"m{i:03d}.py").write_text(source)
    env = sandbox.sandboxed_environment(scratch, {"TRITON_INTERPRET": "1"})
    done = sandbox.run([sys.executable, "-c", RUN_ALL], scratch, env, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    ran = json.loads((scratch / "ran.json").read_text())
    assert done.returncode == 0 and len(ran) == len(HOSTILE), done.stderr[-2000:]
    assert sum(outcome == "ran" for outcome in ran.values()) >= len(HOSTILE) // 2, json.dumps(ran)  # most ran
    assert list(outside.iterdir()) == [] and not list((ROOT / "kernels").glob("escaped-*"))  # no file
    with pytest.raises(OSError):
        listener.accept()  # no connection
    leftover = subprocess.run(["pgrep", "-f", f"^sleep {marker}$"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""  # no process
    written = " ".join(p.read_text(errors="replace") for p in scratch.rglob("*") if p.is_file()
                       and p.stat().st_size < 2**20)
    assert "sk-never-seen" not in written + done.stdout + done.stderr  # no secret


def test_a_variant_named_through_a_link_is_readable_and_the_caller_s_folder_stays_hidden(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (real / "v.py").write_text("print('read')\n")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "private.txt").write_text("the caller's")
    monkeypatch.chdir(tmp_path)  # as `python -m liger_perf` started in a home folder puts it on the import path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([".", os.environ.get("PYTHONPATH", "")]))
    pairs = sandbox.needed_paths([tmp_path / "link" / "v.py"])
    assert (str(real / "v.py"), str(tmp_path / "link" / "v.py")) in pairs
    assert all(named != str(tmp_path) for _, named in pairs)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = f"exec(open({str(tmp_path / 'link' / 'v.py')!r}).read()); open({str(tmp_path / 'private.txt')!r})"
    done = sandbox.run([sys.executable, "-c", code], scratch, sandbox.sandboxed_environment(scratch),
                       readable=[tmp_path / "link" / "v.py"], capture_output=True, text=True, timeout=120)
    assert done.stdout == "read\n" and "FileNotFoundError" in done.stderr, done.stderr[-500:]



def test_folders_the_environment_names_never_bind_the_checkout_or_the_caller_s_folder(tmp_path, monkeypatch):
    """A review found `LD_LIBRARY_PATH=.`, run from the checkout, bound the whole checkout (its notebooks,
    reports and .git) read-only into the sandbox: only the import path was kept from it. Now no folder the
    environment names is bound where it is relative, the caller's working folder, the checkout, or a folder that
    holds either; an absolute library folder elsewhere still is."""
    from liger_perf.core.workspace import PACKAGE

    checkout = PACKAGE.parent.resolve()
    libraries = tmp_path / "lib"
    libraries.mkdir()
    caller = tmp_path / "caller"
    caller.mkdir()
    monkeypatch.chdir(caller)
    monkeypatch.setenv("LD_LIBRARY_PATH", os.pathsep.join([".", str(libraries), str(checkout)]))
    monkeypatch.setenv("JUPYTER_PATH", str(checkout.parent))
    monkeypatch.setenv("CONDA_PREFIX", str(tmp_path))  # holds the caller's folder
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["relative/dir", os.environ.get("PYTHONPATH", "")]))
    bound = {real for real, _ in sandbox.needed_paths()} | {named for _, named in sandbox.needed_paths()}
    assert str(libraries.resolve()) in bound
    for hidden in (checkout, checkout.parent, caller.resolve(), tmp_path.resolve(), caller / "relative" / "dir"):
        assert str(hidden) not in bound, hidden
    assert str(PACKAGE.resolve()) in bound  # the package's own folder of the checkout, as before

LOOKER = '''
import json as _json, os as _os
_seen = {"environ": {}, "root": sorted(_os.listdir("/")), "etc": sorted(_os.listdir("/etc")), "files": {}}
for _pid in [p for p in _os.listdir("/proc") if p.isdigit()]:
    try:
        _seen["environ"][_pid] = open(f"/proc/{_pid}/environ", "rb").read().decode(errors="replace")
    except OSError as _e:
        _seen["environ"][_pid] = type(_e).__name__
for _path in PATHS:
    try:
        _seen["files"][_path] = open(_path).read()
    except OSError as _e:
        _seen["files"][_path] = type(_e).__name__
try:  # a JIT function's capture scope (once compiled, on a GPU, it holds the builtins)
    _seen["capture_scope"] = sorted(_forward_kernel.get_capture_scope())[:5]
except Exception as _e:
    _seen["capture_scope"] = type(_e).__name__
_json.dump(_seen, open("seen.json", "w"))
'''


@pytest.mark.slow
def test_inside_the_sandbox_no_process_holds_the_caller_s_environment_and_only_what_the_trial_needs_is_there(
        tmp_path, monkeypatch):
    """Canaries in the caller's environment, a file of the user's outside the workspace, an /etc/shadow-like file
    and the workspace's own notebooks: a variant that reads every process's environment, lists / and opens them
    finds none of it (``/proc/1`` is bwrap, started with the allow-listed environment only)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-openai")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-canary-github")
    private = tmp_path / "elsewhere" / "shadow"
    private.parent.mkdir()
    private.write_text("root:$6$canary-hash:19000:0:99999:7:::\n")
    history = tmp_path / "nb" / "relu_squared"
    history.mkdir(parents=True)
    (history / "0000-secret.ipynb").write_text('{"canary": "a notebook of the workspace"}')
    paths = ["/etc/shadow", "/etc/passwd", str(private), str(history / "0000-secret.ipynb"),
             str(ROOT / "README.md"), str(ROOT / ".git" / "config")]
    variant = tmp_path / "looker.py"
    variant.write_text(baseline_path("relu_squared").read_text() + LOOKER.replace("PATHS", repr(paths)))
    run = run_trial("relu_squared", variant, root=tmp_path / "nb", device="interpret", repetitions=2,
                    convergence=False, ncu=False, peers=False, runner=PapermillRunner(sandboxed=True))
    assert run.result.status == "complete", run.result.reason
    artifacts = tmp_path / "nb" / "relu_squared" / "artifacts" / f"{run.result.trial_id:04d}-looker"
    seen = json.loads((artifacts / "seen.json").read_text())
    every = json.dumps(seen)
    assert "canary" not in every and "sk-" not in every
    assert len(seen["environ"]) >= 2  # bwrap (process 1) and the processes of the trial: all read, none holds more
    assert set(seen["etc"]) <= set(sandbox.ETC_FILES) | {"passwd", "group"}
    assert not {"home", "root", "opt", "srv", "mnt"} & set(seen["root"]) or "root" in {
        Path(p).parts[1] for _, p in sandbox.needed_paths()}  # /root only where the Python installation is
    for path in paths:
        if path != "/etc/passwd":
            assert seen["files"][path] in ("FileNotFoundError", "PermissionError"), (path, seen["files"][path][:80])
    assert len(seen["files"]["/etc/passwd"].splitlines()) == 1  # the sandbox's own: the user who runs it, alone


# Opening a file for writing changes nothing: the probe never writes (a write to core_pattern would reconfigure the
# machine). Without the read-only /proc/sys, root opens every one of them (a review, 2026-12-06: core_pattern then
# ran a program of the variant's as the machine's root, outside the sandbox).
PROC_SYS_PROBE = """
import errno, os
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/panic", "/proc/sys/vm/drop_caches"):
    try:
        os.close(os.open(path, os.O_WRONLY))
        print(path, "opened")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
print("readable", open("/proc/sys/kernel/ostype").read().strip())
"""


def test_the_kernel_s_settings_are_read_only_inside_the_sandbox(tmp_path):
    done = sandbox.run([sys.executable, "-c", PROC_SYS_PROBE], tmp_path, sandbox.sandboxed_environment(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = dict(line.rsplit(" ", 1) for line in done.stdout.splitlines())
    assert lines.pop("readable") == "Linux"
    assert len(lines) == 3 and all(outcome in ("EROFS", "EACCES") for outcome in lines.values()), lines
    if os.getuid() == 0:  # as root the files' own permissions allow it: only the read-only mount refuses
        assert set(lines.values()) == {"EROFS"}, lines
