#!/usr/bin/env bash
# Issue 13 check on one H200: with compiled Triton (not the interpreter), every committed variant loads without
# the harness watch (variants.harness_snapshot) seeing a change at import, and a patching variant is refused.
# Usage (device tool, wheels carried as .whl): bash scripts/gpu_harness_watch.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 - <<'PY' 2>&1 | tee "$OUT/harness_watch.txt"
import glob
from liger_perf.device import select_device
device = select_device("cuda")
import torch, triton
from liger_perf.errors import UserError
from liger_perf.registry import get_spec
from liger_perf.variants import load_variant
print(device.describe(), "torch", torch.__version__, "triton", triton.__version__)
for kernel in ("relu_squared", "fused_add_rms_norm"):
    for path in [f"kernels/{kernel}/baseline.py", *sorted(glob.glob(f"notebooks/{kernel}/variants/*.py"))]:
        try:
            load_variant(path, get_spec(kernel))
            print("loaded", path)
        except UserError as e:
            print("REFUSED", path, e)
open("/tmp/patcher.py", "w").write("import torch\ntorch.cuda.Event.elapsed_time = lambda s, o: 0.001\n"
                                   + open("kernels/relu_squared/baseline.py").read())
try:
    load_variant("/tmp/patcher.py", get_spec("relu_squared"))
    print("NOT REFUSED: the patching variant")
except UserError as e:
    print("refused as it should be:", e)
PY
