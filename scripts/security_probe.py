"""The security model on the GPU machine: a relu_squared variant that, inside the sandbox of a real trial, reads
every process's environment, walks a compiled JIT function's capture scope for ``open`` and lists ``/`` and
``/etc``, while the caller holds canary API keys; and the static check on the forgeries that passed it before.

    python3 scripts/security_probe.py OUT_DIR     -> OUT_DIR/security.json (and the trial's notebook)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

CANARIES = {"OPENAI_API_KEY": "sk-canary-2026-openai", "GITHUB_TOKEN": "ghp-canary-2026-github"}

LOOKER = '''

def _look():
    import json as _json, os as _os
    seen = {"environ": {}, "root": sorted(_os.listdir("/")), "etc": sorted(_os.listdir("/etc")), "files": {}}
    for pid in [p for p in _os.listdir("/proc") if p.isdigit()]:
        try:
            seen["environ"][pid] = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        except OSError as e:
            seen["environ"][pid] = type(e).__name__
    for path in PATHS:
        try:
            seen["files"][path] = open(path).read()[:200]
        except OSError as e:
            seen["files"][path] = type(e).__name__
    try:  # once compiled (on a GPU), a JIT function's capture scope holds the builtins
        scope = _forward_kernel.get_capture_scope()
        seen["capture_scope_open"] = "open" in scope.get("__builtins__", {}) if isinstance(
            scope.get("__builtins__"), dict) else "open" in dir(scope.get("__builtins__"))
    except Exception as e:
        seen["capture_scope_open"] = type(e).__name__
    _json.dump(seen, open("seen.json", "w"))


_relu_squared = relu_squared


def relu_squared(X):
    out = _relu_squared(X)
    _look()
    return out
'''

FORGERIES = {
    "ctx alias patches torch": ("    ctx = torch.Tensor\n    ctx.contiguous = None", "inside"),
    "capture scope's open": ("    _forward_kernel.get_capture_scope()['__builtins__']['open']('/proc/1/environ')",
                             "inside"),
    "module __getattr__": ("def __getattr__(name):\n    return None", "module"),
    "numpy dump": ("    X.numpy().dump('/tmp/x')", "inside"),
    "tl alias inline asm": ("import triton.language as tl2\n\n\n@triton.jit\ndef _k(x):\n    return "
                            "tl2.inline_asm_elementwise('', '', [x], dtype=tl2.int32, is_pure=True, pack=1)",
                            "module"),
}


def main(out: str) -> int:
    from liger_perf.propose.safety import check_generated_source
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.run import run_trial
    from liger_perf.run.papermill import PapermillRunner
    from liger_perf.isolation.sandbox import unavailable_reason

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(CANARIES)
    baseline = baseline_path("relu_squared").read_text()
    report: dict = {"sandbox": unavailable_reason() or "available", "static_check": {}}
    spec = get_spec("relu_squared")
    for name, (code, where) in FORGERIES.items():
        source = (baseline + "\n\n" + code + "\n" if where == "module" else
                  baseline.replace("    return ReluSquaredFunction.apply(X)",
                                   code + "\n    return ReluSquaredFunction.apply(X)", 1))
        report["static_check"][name] = check_generated_source(source, spec) or "PASSED (a hole)"
    with tempfile.TemporaryDirectory(prefix="liger-perf-probe-") as work:
        private = Path(work) / "elsewhere" / "shadow"
        private.parent.mkdir()
        private.write_text("root:$6$canary-hash:19000:0:99999:7:::\n")
        paths = ["/etc/shadow", str(private), str(Path.cwd() / "README.md"), str(Path.cwd() / ".git" / "config"),
                 "/root/.bashrc"]
        variant = Path(work) / "looker.py"
        variant.write_text(baseline + LOOKER.replace("PATHS", repr(paths)))
        run = run_trial("relu_squared", variant, root=Path(work) / "nb", device=os.environ.get("PROBE_DEVICE", "cuda"),
                        repetitions=2,
                        convergence=False, ncu=False, peers=False, runner=PapermillRunner(sandboxed=True))
        report["trial"] = {"status": run.result.status, "reason": run.result.reason}
        seen_file = Path(work) / "nb" / "relu_squared" / "artifacts" / f"{run.result.trial_id:04d}-looker" / "seen.json"
        seen = json.loads(seen_file.read_text()) if seen_file.is_file() else {}
        shutil.copyfile(run.notebook, out_dir / "probe-trial.ipynb")
    text = json.dumps(seen)
    report["seen"] = {"processes": len(seen.get("environ", {})), "root": seen.get("root"), "etc": seen.get("etc"),
                      "files": {p: (v if len(v) < 40 else v[:40] + "...") for p, v in seen.get("files", {}).items()},
                      "capture_scope_open": seen.get("capture_scope_open"),
                      "environ_variables": sorted({kv.split("=", 1)[0] for env in seen.get("environ", {}).values()
                                                   for kv in env.split("\x00") if "=" in kv})}
    report["canaries_found"] = [k for k, v in CANARIES.items() if v in text]
    report["passed"] = (bool(seen) and not report["canaries_found"]
                        and all(v != "PASSED (a hole)" for v in report["static_check"].values())
                        and all(v in ("FileNotFoundError", "PermissionError") for v in seen["files"].values()))
    (out_dir / "security.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("passed", "canaries_found", "trial")}, indent=1))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
