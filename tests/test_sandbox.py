"""The OS sandbox around a trial's processes (bubblewrap): a variant that tries to escape at import finds no
network, no file to write outside its scratch folder, no other process and no secret, and its trial completes."""

import json
import os
import socket
import threading

import pytest

from liger_perf import sandbox
from liger_perf.registry import baseline_path
from liger_perf.runners import run_trial
from liger_perf.runners.papermill import PapermillRunner

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
_json.dump(_found, open("probe.json", "w"))
'''


@pytest.mark.slow
def test_a_variant_in_the_sandbox_reaches_nothing_outside_its_scratch_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-seen")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(60)
    accepted = []
    threading.Thread(target=lambda: accepted.append(_accept(listener)), daemon=True).start()
    targets = [str(tmp_path / "outside.txt"), str(ROOT / "kernels" / "escaped.txt"),
               str(tmp_path / "nb" / "relu_squared" / "0000-baseline.ipynb")]
    variant = tmp_path / "probe.py"
    probe = PROBE.replace("TARGETS", repr(targets)).replace("PORT", str(listener.getsockname()[1]))
    variant.write_text(probe.replace("PARENT", str(os.getpid())) + baseline_path("relu_squared").read_text())
    run = run_trial("relu_squared", variant, root=tmp_path / "nb", device="interpret", repetitions=2,
                    convergence=False, ncu=False, peers=False, runner=PapermillRunner(sandboxed=True))
    assert run.result.status == "complete", run.result.reason
    scratch = tmp_path / "nb" / "relu_squared" / "artifacts" / "0000-probe"
    found = json.loads((scratch / "probe.json").read_text())
    assert found["wrote"] == [] and not (tmp_path / "outside.txt").exists()
    assert not (ROOT / "kernels" / "escaped.txt").exists()
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
