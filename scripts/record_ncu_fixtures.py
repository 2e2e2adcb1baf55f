"""Record the small .ncu-rep fixtures that tests/test_ncu.py reads (run on a GPU machine with ncu).

    PYTHONPATH=. python3 scripts/record_ncu_fixtures.py OUT_DIR

Each fixture is one baseline profiled at one shape and dtype, so that it stays small enough to commit.
"""

import sys
from pathlib import Path

from liger_perf.kernel.device import select_device
from liger_perf.measure.ncu import profile, summary_table
from liger_perf.kernel.registry import baseline_path

FIXTURES = [
    ("fused_add_rms_norm", "forward,backward", "2048x32768", "bfloat16"),
    ("relu_squared", "forward,backward", "4096x4096", "float32"),
]

out = Path(sys.argv[1])
select_device("cuda")
for kernel, passes, shape, dtype in FIXTURES:
    report = out / f"{kernel}-{shape}-{dtype}.ncu-rep"
    result = profile(kernel, baseline_path(kernel), passes.split(","), False, report,
                     driver_args=("--shapes", shape, "--dtypes", dtype))
    print(kernel, result.status, result.reason, report, report.stat().st_size if report.exists() else None)
    if result.status == "ok":
        print(summary_table(result.metrics).to_string())
