"""The rest of a gate in a fresh process, after a variant faulted the device.

A kernel that reads or writes an illegal address, or traps, leaves CUDA's error in the process: every later CUDA
call raises it again, so no other case could run there. ``check_variant`` records the faulting case as a FAIL row
and hands the rest of the gate (the cases after it, the determinism check, the convergence run) to
``python -m liger_perf.gate.resume``, which loads the same spec and variant and runs
``check_variant(start=...)``; a second fault hands on again. ``check`` and ``selfcheck`` pass ``resume`` to the
gate; a trial's gate stops at its first failure, so it needs none. The child inherits this process's environment and
sandbox (it runs the same variant), and writes its rows to a file in a temporary folder of its own.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

from liger_perf.gate.correctness import COLUMNS, GateResult, _failure
from liger_perf.kernel.spec import Case, dtype_name

#: The largest rows file read back: a gate's rows are a few hundred kilobytes.
ROWS_LIMIT = 64 << 20


def resume(spec, variant, device, *, convergence: bool, cases: list[Case] | None, seed: int, fresh: int,
           large: bool, stage: str, start: int) -> GateResult:
    """``check_variant(..., start=start)`` in a fresh process; a FAIL row saying why where it cannot run."""
    if variant.path is None or not Path(variant.path).is_file():
        return _unfinished("the rest of the gate was not run: the variant has no file a fresh process could load")
    request = {"kernel": spec.name, "variant": str(Path(variant.path).resolve()), "device": device.mode,
               "convergence": convergence, "seed": seed, "fresh": fresh, "large": large, "stage": stage,
               "start": start, "cases": None if cases is None else [
                   {"shape": list(c.shape), "dtype": dtype_name(c.dtype), "config": dict(c.config)} for c in cases]}
    with tempfile.TemporaryDirectory(prefix="liger-perf-gate-") as folder:
        request_file, rows_file = Path(folder) / "request.json", Path(folder) / "rows.json"
        request_file.write_text(json.dumps(request))
        done = subprocess.run([sys.executable, "-m", "liger_perf.gate.resume", str(request_file), str(rows_file)],
                              capture_output=True, text=True)
        if not rows_file.is_file() or rows_file.stat().st_size > ROWS_LIMIT:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
            return _unfinished(f"the rest of the gate did not finish in a fresh process: {tail[0]}"[:500])
        found = json.loads(rows_file.read_text())
    result = GateResult(pd.DataFrame(found["rows"], columns=COLUMNS), pd.DataFrame(found["convergence"]),
                        convergence_skipped=found["convergence_skipped"], interpreted=found["interpreted"])
    return result


def _unfinished(reason: str) -> GateResult:
    row = {"case": "the rest of the gate", "shape": "", "dtype": "", "config": "", "layout": "", "seed": math.nan,
           "output": "*", "against": "-", **_failure(reason)}
    return GateResult(pd.DataFrame([row], columns=COLUMNS), convergence_skipped=True)


def _main(request_file: str, rows_file: str) -> int:
    from liger_perf.gate.correctness import check_variant
    from liger_perf.kernel.device import select_device

    request = json.loads(Path(request_file).read_text())
    device = select_device(request["device"])  # before the variant is imported
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant

    spec = get_spec(request["kernel"])
    variant = load_variant(request["variant"], spec)
    cases = None if request["cases"] is None else [
        Case(tuple(c["shape"]), getattr(torch, c["dtype"]), c["config"]) for c in request["cases"]]
    result = check_variant(spec, variant, device, convergence=request["convergence"], cases=cases,
                           seed=request["seed"], fresh=request["fresh"], large=request["large"],
                           stage=request["stage"], start=request["start"], resumer=resume)
    Path(rows_file).write_text(json.dumps({
        "rows": result.rows.to_dict("records"), "convergence": result.convergence.to_dict("records"),
        "convergence_skipped": result.convergence_skipped, "interpreted": result.interpreted}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(*sys.argv[1:]))
