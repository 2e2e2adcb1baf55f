"""Benchmark: read a history of N trial notebooks (copies of a real one) with liger_perf.record.history.

    PYTHONPATH=. python3 scripts/bench_history.py [N] [NOTEBOOK]

Defaults: 1000 copies of notebooks/nvidia-h200/fused_add_rms_norm/0000-baseline.ipynb (a GPU trial with peers and NCU
metrics, the largest kind). Prints the time to load the trials and to build the long DataFrame, and writes it to
reports/evidence/<today>-bench-history/bench_history.json (the run of 2026-11-29:
reports/evidence/2026-11-29-bench-history/).
"""

import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from liger_perf.record.history import history_frame, load_trials

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
source = Path(sys.argv[2] if len(sys.argv) > 2 else "notebooks/nvidia-h200/fused_add_rms_norm/0000-baseline.ipynb")
with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp) / "fused_add_rms_norm"
    folder.mkdir()
    for i in range(n):
        shutil.copy(source, folder / f"{i:04d}-copy.ipynb")
    start = time.perf_counter()
    trials = load_trials("fused_add_rms_norm", Path(tmp))
    loaded = time.perf_counter()
    frame = history_frame("fused_add_rms_norm", trials=trials)
    done = time.perf_counter()
print(f"{n} notebooks of {source.stat().st_size / 1e3:.0f} kB: load_trials {loaded - start:.1f} s, "
      f"history_frame {done - loaded:.1f} s ({len(frame)} rows)")
# The figure quoted in the docs comes from this file, written by the run that measured it.
out = Path(f"reports/evidence/{datetime.date.today().isoformat()}-bench-history/bench_history.json")
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({
    "notebooks": n, "notebook": str(source), "notebook_bytes": source.stat().st_size,
    "load_trials_s": round(loaded - start, 2), "history_frame_s": round(done - loaded, 2), "rows": len(frame),
    "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
}, indent=1) + "\n")
