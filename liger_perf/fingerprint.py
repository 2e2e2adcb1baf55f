"""The environment a trial ran in: enough to tell whether two trials' numbers may be compared at all."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch
import triton

import liger_perf
from liger_perf.device import Device


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _driver_version() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""


def fingerprint(device: Device, project_root: Path) -> dict[str, Any]:
    stated = os.environ.get("LIGER_PERF_GIT_COMMIT", "")
    info: dict[str, Any] = {
        "device_mode": device.mode,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "liger_perf": liger_perf.__version__,
        # A copy of the checkout (as on a lent GPU machine) states its commit in the environment, and that wins:
        # such a copy may carry a .git of an older commit beside newer files.
        "git_commit": stated or _git(project_root, "rev-parse", "HEAD"),
        # Uncommitted changes make the commit alone an incomplete description of the code that ran.
        "git_dirty": False if stated else bool(_git(project_root, "status", "--porcelain", "--untracked-files=no")),
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
