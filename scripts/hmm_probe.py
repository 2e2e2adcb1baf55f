"""Can a compiled Triton kernel on this GPU read the process's host memory? (A device-side probe, run by
``scripts/device.sh hmm-probe``.)

Under the interpreter liger-perf confines a kernel to its launch's tensors (``liger_perf.kernel.interpreter``).
A compiled kernel on the GPU addresses GPU memory; where the driver offers heterogeneous memory management (HMM)
or the device has pageable-memory access, a pointer to ordinary host memory may be valid on the GPU too, which
would let a variant read and write the Python process from a kernel. Each attempt runs in a child process of its
own (a fault ends the CUDA context): it launches a kernel that loads one int64 from the address of a pageable CPU
tensor and prints what it read, or the error.

Usage: python3 scripts/hmm_probe.py OUT_DIR (writes OUT_DIR/hmm-probe.json)."""

import json
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, sys, torch, triton, triton.language as tl

@triton.jit
def _peek(P, OUT, offset):
    tl.store(OUT, tl.load(P + offset))

host = torch.full((16,), 0x1234567890ABCDEF, dtype=torch.int64)  # pageable host memory
anchor = torch.zeros(1, dtype=torch.int64, device="cuda")
out = torch.zeros(1, dtype=torch.int64, device="cuda")
offset = (host.data_ptr() - anchor.data_ptr()) // 8
try:
    _peek[(1,)](anchor, out, offset)
    torch.cuda.synchronize()
    value = int(out.item())
    print(json.dumps({"read": hex(value & (2**64 - 1)), "host_value_seen": value == 0x1234567890ABCDEF}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {str(e)[:300]}"}))
'''


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = {}
    smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True)
    result["addressing_mode"] = [line.strip() for line in smi.stdout.splitlines() if "Addressing Mode" in line]
    script = out / "hmm_child.py"  # a file: Triton reads a @jit function's source from it ("-c" has none)
    script.write_text(CHILD)
    child = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    result["returncode"] = child.returncode
    result["child_stdout"] = child.stdout[-2000:]
    result["child_stderr"] = child.stderr[-2000:]
    (out / "hmm-probe.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
