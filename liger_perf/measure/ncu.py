"""NVIDIA Nsight Compute: profile a variant's passes in a separate process and read the report back.

``profile`` runs ``ncu`` on ``liger_perf.measure.ncu_driver`` (see there for how the profiled range is cut) with the
clocks left alone (``--clock-control none``: the timings were taken at the clocks the GPU really runs at), the
sections the proposer's diagnoses read, and the DRAM byte counters. ``read_report`` turns the ``.ncu-rep`` into
two tables with NVIDIA's ``ncu_report`` module, which reads reports on a machine without a GPU.

When profiling cannot happen (the interpreter, no ``ncu``, counters not permitted, a crash) the result says
``unavailable`` and why; a trial never fails for want of a profile.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from liger_perf.measure.ncu_driver import parse_range_name
from liger_perf.core.workspace import PACKAGE
from liger_perf.measure.metrics import NCU_DURATION, STALL_PREFIX, STALL_SUFFIX

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats")
EXTRA_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum",
                 # local-memory traffic: register spills show up here
                 "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
                 "lts__t_sector_hit_rate.pct")
#: What a trial keeps of each profiled kernel (the full report stays in the ``.ncu-rep`` artifact).
KEPT_METRICS = (
    NCU_DURATION,
    "dram__bytes_read.sum", "dram__bytes_write.sum", "dram__bytes.sum.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "launch__registers_per_thread", "launch__block_size", "launch__grid_size", "launch__waves_per_multiprocessor",
    "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
    "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks", "sm__maximum_warps_per_active_cycle_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active", "device__attribute_multiprocessor_count",
)
METRIC_COLUMNS = ["pass", "shape", "dtype", "kernel", "launch", "metric", "value", "unit"]
ADVICE_COLUMNS = ["pass", "shape", "dtype", "kernel", "launch", "rule", "section", "type", "title", "message",
                  "estimated_speedup_pct"]


@dataclass
class NcuResult:
    status: str  # "ok" or "unavailable"
    reason: str = ""
    report: Path | None = None
    metrics: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=METRIC_COLUMNS))
    advice: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ADVICE_COLUMNS))
    command: list[str] = field(default_factory=list)


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def ncu_command(ncu: str, kernel: str, variant: Path, passes: list[str], report: Path,
                kernel_filter: str = "regex:.*", driver_args: tuple[str, ...] = (),
                durations_only: bool = False, kept_only: bool = False) -> list[str]:
    """``durations_only``: each kernel's duration and nothing else (one replay pass: a few seconds).
    ``kept_only``: the metrics a trial keeps (``KEPT_METRICS``), without the sections' other metrics and rules
    (no advice): a few replay passes instead of dozens."""
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--nvtx", "--target-processes", "all",
           "--kernel-name-base", "function", "--kernel-name", kernel_filter, "--force-overwrite",
           "--export", str(report)]
    if durations_only:
        cmd += ["--metrics", NCU_DURATION]
    elif kept_only:
        cmd += ["--metrics", ",".join(KEPT_METRICS)]
    else:
        for section in SECTIONS:
            cmd += ["--section", section]
        cmd += ["--metrics", ",".join(EXTRA_METRICS)]
    return cmd + [sys.executable, "-m", "liger_perf.measure.ncu_driver", kernel, str(variant), "--passes", ",".join(passes),
                  *driver_args]


def profiled_shapes(cases: list, one_per_bucket: bool) -> list[tuple[int, ...]] | None:
    """The shapes a full profile covers: None (every case of the suite, as the driver takes by default), or with
    ``one_per_bucket`` the largest shape of each dispatch bucket (``variants.dispatch_bucket``: the row block and
    the element size), in every dtype the suite gives it. A bucket's widths run the same compiled kernels, so one
    profiled shape per bucket is what the proposer's diagnosis needs of a suite of many widths (the model suite's
    ~60 cases would cost NCU minutes a trial)."""
    if not one_per_bucket:
        return None
    from liger_perf.kernel.variants import dispatch_bucket

    largest: dict[str, tuple[int, ...]] = {}
    for case in cases:
        bucket = dispatch_bucket(case.shape, case.dtype)
        if bucket not in largest or math.prod(case.shape) > math.prod(largest[bucket]):
            largest[bucket] = tuple(case.shape)
    return sorted(set(largest.values()), key=lambda shape: (shape[-1], shape))


def profile(kernel: str, variant: Path, passes: list[str], interpreted: bool, report: Path,
            timeout_s: float = 900, kernel_filter: str = "regex:.*", driver_args: tuple[str, ...] = (),
            durations_only: bool = False, kept_only: bool = False) -> NcuResult:
    """Profile every pass of ``variant`` over the GPU suite (or the driver's ``--suite``, and its ``--shapes`` or
    ``--dtypes`` subset); the report is written to ``report``. ``durations_only``: kernel durations only."""
    if interpreted:
        return NcuResult("unavailable", "the Triton interpreter runs on the CPU; NCU profiles GPU kernels only")
    ncu = find_ncu()
    if ncu is None:
        return NcuResult("unavailable", "ncu (Nsight Compute) is not on PATH nor in /usr/local/cuda/bin")
    report = report.with_suffix(".ncu-rep") if report.suffix != ".ncu-rep" else report
    report.parent.mkdir(parents=True, exist_ok=True)
    cmd = ncu_command(ncu, kernel, Path(variant).resolve(), passes, report, kernel_filter, driver_args,
                      durations_only, kept_only)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE.parent),
                                                                      os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return NcuResult("unavailable", f"ncu did not finish within {timeout_s:.0f} s", command=cmd)
    output = done.stdout + done.stderr
    if "ERR_NVGPUCTRPERM" in output:
        return NcuResult("unavailable", "ERR_NVGPUCTRPERM: this user may not read the GPU performance counters "
                         "(run as root or allow profiling: NVreg_RestrictProfilingToAdminUsers=0)", command=cmd)
    if done.returncode != 0 or not report.is_file():
        tail = " | ".join(line.strip() for line in output.strip().splitlines()[-3:])
        return NcuResult("unavailable", f"ncu exited with {done.returncode}: {tail}"[:600], command=cmd)
    try:
        metrics, advice = read_report(report)
    except ImportError:
        return NcuResult("unavailable", "the ncu_report package is not installed (pip install ncu-report)",
                         report=report, command=cmd)
    if metrics.empty:
        return NcuResult("unavailable", "ncu profiled no kernel (check the kernel-name filter)", report=report,
                         command=cmd)
    return NcuResult("ok", "", report, metrics, advice, cmd)


def _case_of(action) -> tuple[str, str, str]:
    """(pass, shape, dtype) from the liger-perf NVTX process range the kernel was launched in."""
    state = action.nvtx_state()
    if state is not None:
        for domain_id in state.domains():
            domain = state.domain_by_id(domain_id)
            for name in domain.start_end_ranges():
                parsed = parse_range_name(name)
                if parsed:
                    return parsed
    return ("?", "?", "?")


def _number(metric) -> float | None:
    try:
        value = metric.as_double()
    except Exception:  # string-valued or unavailable metrics
        return None
    return value if math.isfinite(value) else None


def read_report(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metrics, advice) of every profiled kernel: ``METRIC_COLUMNS`` and ``ADVICE_COLUMNS``."""
    import ncu_report

    context = ncu_report.load_report(str(path))
    metric_rows, advice_rows = [], []
    launch = 0
    for r in range(context.num_ranges()):
        profiled_range = context.range_by_idx(r)
        for a in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(a)
            pass_name, shape, dtype = _case_of(action)
            base = {"pass": pass_name, "shape": shape, "dtype": dtype, "kernel": action.name(), "launch": launch}
            names = set(action.metric_names())
            wanted = [m for m in KEPT_METRICS if m in names]
            wanted += sorted(m for m in names if m.startswith(STALL_PREFIX) and m.endswith(STALL_SUFFIX))
            for name in wanted:
                metric = action.metric_by_name(name)
                value = _number(metric)
                if value is not None:
                    metric_rows.append({**base, "metric": name, "value": value, "unit": metric.unit()})
            for rule in action.rule_results_as_dicts():
                message = rule.get("rule_message") or {}
                text = (message.get("message") or "").strip()
                if not text:
                    continue
                speedup = (rule.get("speedup_estimation") or {}).get("speedup")
                advice_rows.append({**base, "rule": rule.get("rule_identifier", ""),
                                    "section": rule.get("section_identifier", ""),
                                    "type": _message_type(message.get("type")), "title": message.get("title", ""),
                                    "message": text, "estimated_speedup_pct": speedup})
            launch += 1
    return pd.DataFrame(metric_rows, columns=METRIC_COLUMNS), pd.DataFrame(advice_rows, columns=ADVICE_COLUMNS)


def _message_type(value) -> str:
    import ncu_report

    names = {ncu_report.MsgType_OPTIMIZATION: "optimization", ncu_report.MsgType_WARNING: "warning",
             ncu_report.MsgType_ERR: "error", ncu_report.MsgType_OK: "ok"}
    return names.get(value, str(value))


def summary_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per profiled kernel launch, the metrics a person looks at first as columns."""
    if metrics.empty:
        return pd.DataFrame()
    short = {
        NCU_DURATION: "time",
        "launch__registers_per_thread": "regs/thread",
        "sm__maximum_warps_per_active_cycle_pct": "theoretical occ %",
        "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occ %",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "DRAM % peak",
        "launch__grid_size": "grid",
        "launch__block_size": "block",
        "launch__waves_per_multiprocessor": "waves/SM",
        "lts__t_sector_hit_rate.pct": "L2 hit %",
        "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum": "local ld B",
    }
    kept = metrics[metrics["metric"].isin(short)]
    wide = kept.pivot_table(index=["pass", "shape", "dtype", "launch", "kernel"], columns="metric", values="value",
                            aggfunc="first").reset_index()
    wide = wide.rename(columns=short)
    ordered = ["pass", "shape", "dtype", "kernel"] + [c for c in short.values() if c in wide.columns]
    return wide.sort_values("launch")[ordered].reset_index(drop=True)
