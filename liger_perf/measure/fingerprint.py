"""The environment a trial ran in: enough to tell whether two trials' numbers may be compared at all."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

import torch
import triton

import liger_perf
from liger_perf.kernel.device import Device


def _driver_version() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""


def fingerprint(device: Device, project_root: Path) -> dict[str, Any]:
    from liger_perf.core.workspace import git_state

    commit, dirty = git_state(project_root)
    info: dict[str, Any] = {
        "device_mode": device.mode,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "liger_perf": liger_perf.__version__,
        "git_commit": commit,  # workspace.git_state: the environment's word first (a copy, a sandbox)
        # Uncommitted changes make the commit alone an incomplete description of the code that ran.
        "git_dirty": dirty,
    }
    if device.interpreted:
        info.update(gpu=None, sm_count=None, driver=None, cuda=None)
    else:
        props = torch.cuda.get_device_properties(device.torch_device)
        info.update(gpu=props.name, sm_count=props.multi_processor_count,
                    gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    compute_capability=f"{props.major}.{props.minor}",
                    driver=_driver_version(), cuda=torch.version.cuda)
    try:
        from importlib.metadata import version

        info["liger_kernel"] = version("liger-kernel")
    except Exception:  # optional peer, often absent
        info["liger_kernel"] = None
    return info
