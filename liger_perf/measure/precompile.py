"""Compile, in parallel processes, every Triton kernel a trial will need, before its gate and its timing run.

Why: each trial runs in a fresh Triton cache (the sandbox sets ``TRITON_CACHE_DIR`` to the trial's scratch
folder), so the candidate and the current best ("against") both compile from scratch in every trial, one
specialisation (dtype, casting mode, constexpr block sizes derived from the shape, stride divisibility, a size
of 1) after another, the first time each is called. On an H200 that was about 30 s of the fused_add_rms_norm
gate (56 s cold, 26 s warm) and a large part of its timing step, while 15 of the machine's 16 CPU cores idled.

What: ``precompile`` builds the trial's work list (``work_list``): per variant, every case of the gate but the
large one, in the gate's own layouts (padded inputs, incoming gradients sliced, transposed or expanded, N-D
shapes), the quick gate's cases, the determinism check's shape and one step of each convergence run, and the
timing suite's cases. It deals the list to ``workers`` child processes (``python -m liger_perf.measure.precompile``),
each of which runs its share of calls once. A call with ``pass_name="backward"`` runs the forward first (as
``liger_perf.kernel.passes.prepare_pass`` does), so it compiles both passes' kernels; the "full" pass runs the same
kernels, so no case is run for "forward" or "full" apart. The share of a child is whole groups of calls that
share a dtype, an option set and a row width (the likeliest specialisations): two processes compiling the same
kernel at once is safe (Triton writes its cache atomically) but wasted, so calls likely to compile the same
kernel go to the same child, one after the other, and the second finds the first's kernel in the cache.

It never changes a result: it only warms the on-disk cache that the gate and the timing would fill themselves
(Triton's cache key is the kernel's source, its specialisation and the compiler's options, never the process).
A call that raises is counted and skipped: a broken variant is the gate's business, and the gate reports it.
Under the Triton interpreter nothing is compiled, so nothing is done.

    python -m liger_perf.measure.precompile KERNEL --variants a.py,b.py --share I/N   # one child (what precompile starts)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from liger_perf.core.workspace import PACKAGE
from liger_perf.kernel.spec import Case, KernelSpec, dtype_name

#: Environment each child gets on top of the parent's: torch starts a thread per core in each process (the
#: sandbox's pids cgroup allows 512 tasks), and one compiling thread per process is what parallel processes want.
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
MAX_WORKERS = 8
ERROR_CHARS = 300
#: The line a child prints last: ``{"precompile": {...}}``.
REPORT_KEY = "precompile"
INTERPRETED_REASON = "the Triton interpreter compiles nothing"
PARTS = ("all", "quick", "rest", "screen", "gate")  # which of a trial's calls: see ``work_list``


@dataclass(frozen=True, eq=False)
class WorkItem:
    """One call to run once: a variant (its index in the list given), a pass, a case, and the layout of the
    inputs and incoming gradients (the gate's probes; the timing's calls are contiguous)."""

    variant: int
    pass_name: str  # "forward", "backward" (runs the forward too) or "convergence" (one training step)
    case: Case
    inputs: str = "contiguous"  # or "padded" (a longer row stride), as the gate's probes lay them out
    cotangents: str = "contiguous"  # one of liger_perf.gate.correctness.COTANGENT_LAYOUTS
    origin: str = "bench"  # what needs it: "gate", "quick", "determinism", "convergence", "bench", "accuracy"

    def key(self) -> tuple:
        """What makes two items the same call (``origin`` does not)."""
        return (self.variant, self.pass_name, tuple(self.case.shape), dtype_name(self.case.dtype),
                config_key(self.case.config), self.inputs, self.cotangents)

    def group(self) -> tuple:
        """The calls likely to share specialisations, kept in one child: dtype, options and row width."""
        return (dtype_name(self.case.dtype), config_key(self.case.config),
                self.case.shape[-1] if self.case.shape else 0)

    def label(self) -> str:
        layout = "" if (self.inputs, self.cotangents) == ("contiguous", "contiguous") else \
            f" ({self.inputs} inputs, {self.cotangents} gradients)"
        return f"variant {self.variant} {self.pass_name} {self.case.label()}{layout}"


def config_key(config) -> tuple:
    return tuple(sorted((str(k), repr(v)) for k, v in dict(config).items()))


def variant_source(path: str | Path) -> str:
    """A variant's text as every process reads it (undecodable bytes replaced: each process builds the same list)."""
    return Path(path).read_text(encoding="utf-8", errors="replace")


def _suite_device(suite: str):
    """A ``Device`` that only answers ``suite`` and ``interpreted``, for building the lists without a GPU."""
    from liger_perf.kernel.device import Device

    if suite not in ("gpu", "interpret"):
        raise ValueError(f"unknown suite {suite!r}: 'gpu' or 'interpret'")
    return Device("interpret", torch.device("cpu")) if suite == "interpret" else Device("cuda", torch.device("cuda"))


def work_list(spec: KernelSpec, variants: Sequence[tuple[str | Path, str]], suite: str,
              timed_only: Iterable[int] = (), convergence: bool = True, part: str = "all",
              bench_suite: str = "", bench_buckets: Sequence[str] = ()) -> list[WorkItem]:
    """Every call that compiles what a trial's gate and timing will compile, each once, in a fixed order.

    ``variants``: (path, source) of each variant, in order (an item names its variant by index); ``suite``:
    ``device.suite`` ("gpu" or "interpret"); ``timed_only``: indices of variants the trial times but does not
    gate (the current best): the timing's and the accuracy step's cases only. ``part`` (``PARTS``): "all";
    "quick", the quick gate's, the timing's and the accuracy step's cases (a staged trial: the full gate may never
    run); "screen", the quick gate's and the timing's (a screening measures no accuracy); "rest", the full gate's
    own cases, precompiled when it will run (the others are compiled by then); "gate", the full gate's cases alone
    (``check``, which times nothing). ``bench_suite``: the suite the trial times, where not ``suite`` (a trial
    on "models-tune"); the gate's and the accuracy step's cases are ``suite``'s whatever it is.
    ``bench_buckets``: the dispatch buckets whose cases alone the trial times (a move confined to them,
    ``TrialRequest.buckets``, or a screening of such moves); every case where none falls in them. Pure: the
    same arguments give the same list in every process. A variant whose knobs cannot be read (the gate will say why) gets the timing's cases only."""
    from liger_perf.gate import correctness
    from liger_perf.measure.accuracy import accuracy_cases
    from liger_perf.gate.convergence import runs
    from liger_perf.core.errors import UserError
    from liger_perf.kernel.variants import Variant, split_by_buckets

    device = _suite_device(suite)
    timed_only = set(timed_only)
    pass_name = "backward" if spec.differentiable else "forward"  # the gate takes every gradient
    items: list[WorkItem] = []
    for index, (path, source) in enumerate(variants):
        def add(case: Case, origin: str, inputs="contiguous", cotangents="contiguous", pass_=pass_name):
            items.append(WorkItem(index, pass_, Case(tuple(case.shape), case.dtype, dict(case.config)), inputs,
                                  cotangents, origin))

        if index not in timed_only:
            try:
                gated = (correctness.gate_cases(spec, Variant(Path(path), source, None), device)
                         if part in ("all", "rest", "gate") else [])
            except UserError:  # unreadable knobs: the gate fails the variant itself
                gated = []
            gated += correctness.quick_gate_cases(spec, device) if part not in ("rest", "gate") else []
            for g in gated:
                if g.kind == "large":  # seconds to fill 2**31 elements, for a bench case's specialisation
                    continue
                add(Case(g.shape(spec), g.case.dtype, g.case.config), "gate" if g.kind != "quick" else "quick",
                    g.probe.inputs, g.probe.cotangents)
            if part in ("all", "rest", "gate") and not device.interpreted:  # determinism_rows: widest-grid shape
                widest = max((tuple(s) for s in spec.check_shapes[suite]), key=lambda s: s[0])
                for config in spec.check_configs:
                    for dtype in spec.dtypes[suite]:
                        add(Case(widest, dtype, dict(config)), "determinism")
            if convergence and part in ("all", "rest", "gate"):
                for config, dtype in runs(spec, device):
                    add(Case((), dtype, config), "convergence", pass_="convergence")
        timed = split_by_buckets(spec.cases(bench_suite or suite, "bench"), bench_buckets)[0]
        for case in timed if part not in ("rest", "gate") else []:
            add(case, "bench")
        for case in accuracy_cases(spec, suite) if part in ("all", "quick") else []:  # a full trial's, not a screening's
            add(case, "accuracy")
    unique = {}
    for item in items:
        unique.setdefault(item.key(), item)
    # One case's items (each variant's) next to each other: a child draws the case's inputs once for them.
    return sorted(unique.values(), key=lambda i: (i.group(), tuple(i.case.shape), i.inputs, i.cotangents,
                                                  i.variant, i.pass_name))


def shares(items: Sequence[WorkItem], n: int) -> list[list[WorkItem]]:
    """``items`` dealt to ``n`` children: whole groups (``WorkItem.group``), largest first, each to the child
    with the fewest items so far (the lowest index on a tie); each share in the list's order. Deterministic."""
    if n < 1:
        raise ValueError(f"{n} shares: at least 1")
    groups: dict[tuple, list[WorkItem]] = {}
    for item in items:
        groups.setdefault(item.group(), []).append(item)
    dealt: list[list[WorkItem]] = [[] for _ in range(n)]
    for group in sorted(groups.values(), key=len, reverse=True):  # stable: equal sizes keep the list's order
        min(dealt, key=len).extend(group)  # min returns the first of equals: the lowest index
    order = {id(item): k for k, item in enumerate(items)}
    return [sorted(share, key=lambda i: order[id(i)]) for share in dealt]


# -- the child ------------------------------------------------------------------------------------------------

def run_item(spec: KernelSpec, forward, item: WorkItem, device, drawn: dict | None = None) -> None:
    """Run one call once, as the gate (its layouts) or the timing (``prepare_pass``) would, and wait for it.
    ``drawn``: the inputs of the last case, kept for the next item of the same case (another variant's): when the
    specs drew on the CPU, one thread per child, drawing cost more than compiling at the widest shapes (unseeded
    draws are made on the device now: ``KernelSpec.make_inputs``)."""
    import numpy

    from liger_perf.kernel.passes import as_tuple, case_inputs, prepare_pass

    with numpy.errstate(all="ignore"):  # the interpreter computes with NumPy
        if item.pass_name == "convergence":
            from liger_perf.gate.convergence import _train

            _train(spec, forward, dict(item.case.config), device, item.case.dtype, steps=1, lr=0.1, seed=0)
        else:
            key = (tuple(item.case.shape), dtype_name(item.case.dtype), config_key(item.case.config))
            if drawn is not None and key in drawn:
                inputs, cotangents = drawn[key]
            else:
                inputs, cotangents = case_inputs(spec, item.case, device)  # every call clones what it is given
                if drawn is not None:
                    drawn.clear()
                    drawn[key] = (inputs, cotangents)
            if (item.inputs, item.cotangents) == ("contiguous", "contiguous"):
                prepare_pass(spec, forward, inputs, item.case.config, item.pass_name, cotangents).arm()()
            else:
                from liger_perf.gate.correctness import _laid_out, _leaves

                leaves = _leaves(inputs, spec.differentiable, item.inputs)
                outputs = as_tuple(forward(leaves, item.case.config))
                if item.pass_name == "backward":
                    torch.autograd.grad(outputs, [leaves[n] for n in spec.differentiable],
                                        [_laid_out(c, item.cotangents) for c in cotangents])
        device.synchronize()


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "..."


def _parse_share(text: str) -> tuple[int, int]:
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--share {text!r}: give I/N, e.g. 0/8") from None
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"--share {text!r}: I must be in 0..N-1")
    return i, n


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m liger_perf.measure.precompile",
                                     description="Run one share of a trial's precompilation (what precompile() "
                                                 "starts in each child process).")
    parser.add_argument("kernel")
    parser.add_argument("--variants", default="", help="variant files, comma-separated, in order")
    parser.add_argument("--variant", action="append", default=[], help="a variant file (repeatable; after "
                        "--variants' ones): for paths with commas")
    parser.add_argument("--share", type=_parse_share, default=(0, 1), metavar="I/N",
                        help="run share I of N (0-based)")
    parser.add_argument("--timed-only", action="append", type=int, default=[], metavar="INDEX",
                        help="a variant (by index) the trial times but does not gate: its timing's cases only")
    parser.add_argument("--no-convergence", action="store_true", help="leave out the convergence runs' step")
    parser.add_argument("--part", choices=PARTS, default="all", help="which calls (see work_list)")
    parser.add_argument("--bench-suite", default="", choices=("", "models-tune"),
                        help="the suite the trial times, where not the device's")
    parser.add_argument("--bench-bucket", action="append", default=[], metavar="BUCKET",
                        help="a dispatch bucket whose cases alone the trial times (repeatable)")
    # For tests on a machine without a GPU: run the share under the interpreter, and only its first items.
    parser.add_argument("--device", default="cuda", choices=("cuda", "interpret"), help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """One child: its share of the work list, each call once; one JSON line at the end; exit 0 unless it could
    not start (no device, unknown kernel)."""
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    index, count = args.share
    report: dict[str, Any] = {"share": f"{index}/{count}", "items": 0, "failed": 0, "first_error": ""}
    try:
        from liger_perf.kernel.device import select_device

        device = select_device(args.device)  # before any variant is imported
        from liger_perf.kernel.registry import get_spec

        spec = get_spec(args.kernel)
        paths = [Path(p) for p in args.variants.split(",") if p] + [Path(p) for p in args.variant]
        items = work_list(spec, [(p, variant_source(p)) for p in paths], device.suite, args.timed_only,
                          convergence=not args.no_convergence, part=args.part, bench_suite=args.bench_suite,
                          bench_buckets=args.bench_bucket)
        mine = shares(items, count)[index][: args.limit]
    except Exception as e:  # noqa: BLE001 - reported, not raised: the parent reads the line
        report.update(error=_short(f"{type(e).__name__}: {e}"), seconds=round(time.perf_counter() - started, 2))
        print(json.dumps({REPORT_KEY: report}), flush=True)
        return 1
    report["planned"] = len(mine)
    forwards: dict[int, Any] = {}
    drawn: dict = {}  # the last case's inputs (items of one case, for each variant, follow one another)
    for item in mine:
        report["items"] += 1
        try:
            if item.variant not in forwards:
                forwards[item.variant] = _load(spec, paths[item.variant])
            forward = forwards[item.variant]
            if isinstance(forward, BaseException):
                raise forward
            run_item(spec, forward, item, device, drawn)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a bad call is counted; the gate will report it
            report["failed"] += 1
            if not report["first_error"]:
                report["first_error"] = _short(f"{item.label()}: {type(e).__name__}: {e}")
    report["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps({REPORT_KEY: report}), flush=True)
    return 0


def _load(spec: KernelSpec, path: Path):
    """The variant's forward, or the exception that loading it raised (each of its calls then fails with it)."""
    from liger_perf.kernel.variants import load_variant

    try:
        return spec.variant_forward(load_variant(path, spec).module)
    except (Exception, SystemExit) as e:  # noqa: BLE001
        return e


# -- the parent -----------------------------------------------------------------------------------------------

def default_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def child_environment() -> dict[str, str]:
    """The parent's environment (``TRITON_CACHE_DIR`` and ``PYTHONPATH`` with it), one thread per child, and
    this package's folder last on ``PYTHONPATH`` so that ``-m liger_perf.measure.precompile`` finds this package."""
    env = {**os.environ, **CHILD_ENV}
    root = str(PACKAGE.parent)
    listed = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in listed:
        env["PYTHONPATH"] = os.pathsep.join([*listed, root])
    return env


def precompile(spec: KernelSpec, variant_paths: Sequence[str | Path], device, workers: int | None = None,
               timeout_s: float = 600, gated: Sequence[str | Path] | None = None,
               convergence: bool = True, part: str = "all", bench_suite: str = "",
               bench_buckets: Sequence[str] = ()) -> dict[str, Any]:
    """Compile what the trial's gate and timing will need, in ``workers`` processes (default: one per core, at
    most 8), waiting at most ``timeout_s`` (children still running then are killed).

    ``variant_paths``: the variants the trial runs (the candidate, the current best...); ``gated``: those the
    gate will check (default: all); the others get the timing's cases only. ``convergence``: whether the gate's
    convergence runs will run. ``part``, ``bench_suite``, ``bench_buckets``: which of the calls (see
    ``work_list``). Returns
    ``{"status": "ok" | "partial" | "skipped", "workers", "items", "failed",
    "seconds", "first_error", "timed_out"}`` (and ``"reason"`` when skipped). Raises only for its own arguments
    (a missing file, no worker); a call or a child that fails is counted in the result, never raised."""
    paths = [Path(p) for p in variant_paths]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"precompile: no variant file at {', '.join(missing)}")
    if workers is not None and workers < 1:
        raise ValueError(f"precompile: workers={workers}: at least 1")
    if not timeout_s > 0:
        raise ValueError(f"precompile: timeout_s={timeout_s}: must be positive")
    if device.interpreted:
        return {"status": "skipped", "reason": INTERPRETED_REASON, "seconds": 0.0, "workers": 0, "items": 0,
                "failed": 0, "first_error": "", "timed_out": False}
    gated_set = None if gated is None else {Path(p).resolve() for p in gated}
    timed_only = [i for i, p in enumerate(paths) if gated_set is not None and p.resolve() not in gated_set]
    return launch(spec, paths, "cuda", workers or default_workers(), timeout_s, timed_only=timed_only,
                  convergence=convergence, part=part, bench_suite=bench_suite, bench_buckets=bench_buckets)


def launch(spec: KernelSpec, paths: Sequence[Path], child_device: str, workers: int, timeout_s: float,
           timed_only: Sequence[int] = (), convergence: bool = True, limit: int | None = None,
           part: str = "all", bench_suite: str = "", bench_buckets: Sequence[str] = ()) -> dict[str, Any]:
    """Start one child per non-empty share, wait for them (killing those past ``timeout_s``) and add up their
    reports. ``child_device``: "cuda", or "interpret" for tests (``limit``: calls per child at most)."""
    started = time.perf_counter()
    suite = "interpret" if child_device == "interpret" else "gpu"
    items = work_list(spec, [(p, variant_source(p)) for p in paths], suite, timed_only, convergence, part,
                      bench_suite, bench_buckets)
    dealt = shares(items, workers)
    env = child_environment()
    base = [sys.executable, "-m", "liger_perf.measure.precompile", spec.name, *(f"--variant={p}" for p in paths),
            *(f"--timed-only={i}" for i in timed_only), f"--device={child_device}",
            *([] if convergence else ["--no-convergence"]), f"--part={part}", f"--bench-suite={bench_suite}",
            *(f"--bench-bucket={bucket}" for bucket in bench_buckets),
            *([] if limit is None else [f"--limit={limit}"])]
    children = []  # (share index, planned items, Popen or None, output file, why it did not start)
    for index, share in enumerate(dealt):
        if not share:
            continue
        planned = len(share[:limit])
        output = tempfile.TemporaryFile()
        try:
            process = subprocess.Popen([*base, f"--share={index}/{workers}"], stdin=subprocess.DEVNULL,
                                       stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as e:  # no process to be had (the pids limit): these calls compile in the gate instead
            output.close()
            children.append((index, planned, None, None, f"could not start: {e}"))
            continue
        children.append((index, planned, process, output, ""))
    deadline = started + timeout_s
    killed = set()
    for index, _, process, _, _ in children:
        if process is None:
            continue
        try:
            process.wait(timeout=max(0.0, deadline - time.perf_counter()))
        except subprocess.TimeoutExpired:
            killed.add(index)
            _kill(process)
    total = failed = 0
    errors = []
    for index, planned, process, output, why in children:
        total += planned
        report = None
        if process is not None:
            output.seek(0)
            text = output.read().decode(errors="replace")
            output.close()
            report = _report(text)
            if index in killed:
                why, report = f"killed after {timeout_s:g} s", None
            elif report is None or "error" in report:
                tail = _short(" ".join(text.strip().splitlines()[-3:]))
                why = (report or {}).get("error") or f"exited {process.returncode} without a report: {tail}"
                report = None
        if report is None:
            failed += planned
            errors.append(f"share {index}/{workers}: {why}")
            continue
        failed += report.get("failed", 0) + max(0, planned - report.get("items", 0))
        if report.get("first_error"):
            errors.append(report["first_error"])
    return {"status": "ok" if failed == 0 and not killed else "partial", "workers": len(children),
            "items": total, "failed": failed, "seconds": round(time.perf_counter() - started, 2),
            "first_error": _short(errors[0]) if errors else "", "timed_out": bool(killed)}


def _report(text: str) -> dict[str, Any] | None:
    """The child's report: its last line that is ``{"precompile": {...}}``."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and REPORT_KEY in line:
            try:
                found = json.loads(line)
            except ValueError:
                continue
            if isinstance(found, dict) and isinstance(found.get(REPORT_KEY), dict):
                return found[REPORT_KEY]
    return None


def _kill(process: subprocess.Popen) -> None:
    """End a child and whatever it started (its own session's process group)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            process.kill()
        except ProcessLookupError:
            pass
    process.wait()


if __name__ == "__main__":
    sys.exit(main())
