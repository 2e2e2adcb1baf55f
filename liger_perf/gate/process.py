"""The gate of one variant in a contained process of its own: how ``check`` and ``selfcheck`` run it.

The variant is imported only in the child (the allow-listed environment, the sandbox where there is one, a
scratch folder of its own). The child is ``liger-perf check`` itself, told by ``GATE_DONE`` that it is the child:
it writes a "passed" file once the whole gate has passed (a variant that exits in the middle leaves none) and a
summary of its verdict (``GATE_SUMMARY``, JSON), both in the scratch folder, which the parent reads back as
untrusted data.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from liger_perf.core.errors import EXIT_FAILED

GATE_DONE = "LIGER_PERF_GATE_DONE"  # set in check's own process: the file it writes once the gate has passed
GATE_SUMMARY = "LIGER_PERF_GATE_SUMMARY"  # where that process writes the summary of its verdict
SUMMARY_LIMIT = 1 << 20


@dataclass
class GateRun:
    code: int  # the child's exit code; EXIT_FAILED where it exited 0 without finishing the gate
    summary: dict[str, Any] = field(default_factory=dict)  # what the child wrote (empty: nothing readable)
    output: str = ""  # the child's output, where it was captured
    unfinished: str = ""  # why the gate did not finish, where it did not


def run_contained_gate(kernel: str, variant: Path | None, device: str, convergence: bool,
                       capture: bool = False) -> GateRun:
    """``liger-perf check`` of ``variant`` (default: the baseline) in a contained child; its output goes to this
    process's terminal unless ``capture``."""
    from liger_perf.isolation.contained import read_untrusted
    from liger_perf.kernel.registry import get_spec
    from liger_perf.isolation.sandbox import run_contained
    from liger_perf.kernel.variants import read_source

    get_spec(kernel)  # bad input is this process's one line, before a child starts
    if variant is not None:
        read_source(variant)
    with tempfile.TemporaryDirectory(prefix="liger-perf-check-") as scratch:
        done, summary = Path(scratch) / "gate-passed", Path(scratch) / "gate-summary.json"
        args = [sys.executable, "-m", "liger_perf", "check", kernel, "--device", device,
                "--convergence" if convergence else "--no-convergence"]
        if variant is not None:
            args += ["--variant", str(Path(variant).resolve())]
        popen = {"capture_output": True, "text": True} if capture else {}
        child = run_contained(args, Path(scratch), {GATE_DONE: str(done), GATE_SUMMARY: str(summary)},
                              readable=[Path(variant).resolve()] if variant is not None else [], **popen)
        run = GateRun(child.returncode, output=(child.stdout or "") + (child.stderr or "") if capture else "")
        text = read_untrusted(summary, limit=SUMMARY_LIMIT)
        try:
            run.summary = json.loads(text) if text else {}
        except ValueError:
            run.summary = {}
        if run.code == 0 and not done.is_file():
            run.code = EXIT_FAILED
            run.unfinished = ("the gate did not finish: the variant's process ended with exit code 0 before the "
                              "gate completed (a variant that exits?)")
        elif run.code not in (0, EXIT_FAILED) and not run.summary and capture:  # else the child said why itself
            tail = run.output.strip().splitlines()[-1:]
            run.unfinished = f"the gate's process ended with exit code {run.code}" + (f": {tail[0]}" if tail else "")
        return run


def write_summary(result, seconds: float, peak_bytes: int | None) -> None:
    """In the child: the summary of its gate (``GateResult``) where ``GATE_SUMMARY`` says."""
    import os

    path = os.environ.get(GATE_SUMMARY)
    if not path:
        return
    failures = result.failures()
    summary = {
        "passed": result.passed, "comparisons": len(result.rows), "failed": int(len(failures)),
        "not_run": int((failures["verdict"] == "not run").sum()) if len(failures) else 0,
        "machine_limited": result.machine_limited,
        "convergence": ("skipped" if result.convergence_skipped or result.convergence.empty else
                        "pass" if (result.convergence["verdict"] == "pass").all() else "FAIL"),
        "failures": failures[["case", "layout", "output", "against", "verdict", "reason"]].head(5).to_dict("records"),
        "cases": int(result.rows["case"].nunique()) if len(result.rows) else 0,
        "seconds": round(seconds, 1), "peak_gpu_bytes": peak_bytes,
    }
    # numpy's numbers as Python's; NaN and infinities as JSON's extensions, which json.loads reads back
    Path(path).write_text(json.dumps(summary, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
