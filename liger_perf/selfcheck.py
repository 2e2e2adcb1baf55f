"""``liger-perf selfcheck``: can this machine (its torch, Triton, driver and GPU) run trials that mean something?

Run on the machine it checks, after upgrading any of those; the nightly job runs it first. For every kernel of
the workspace, built-in and the user's own:

1. the gate of its baseline, and of its history's best on this device where there is one, each in a contained
   process of its own (as ``check`` runs it, fresh processes after a device fault included);
2. one short real trial of each baseline in a scratch history: the trial notebook end to end (sandbox,
   Papermill, precompilation, the quick gate, timing with a few repetitions, the accuracy step, a light NCU
   profile), no peers, never judged. The trials run one after another once every gate has run, and a
   baseline that failed its gate gets none;
3. after each such trial, a screening notebook of one candidate (a comment-only copy of the baseline) against
   the baseline, as the loop screens its candidates.

A row per step; any row that does not pass fails the whole check. The record, ``reports/<device>/selfcheck.json``,
names the commit it ran at (``"commit"``), the machine (``"host"``), a digest per kernel of the code it checked
(``"code"``: the package and the kernel's folder, ``code_digests``), the stack and every row: a change to what decides correctness or speed
lands only with a passing record on the GPU at a commit after it (README, contributing).
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from liger_perf.core.wording import count

PASS, FAIL, NOT_RUN, SKIPPED = "pass", "FAIL", "not run", "skipped"
# The baselines' trials run one at a time, after the gates. Two at once on the H200 reached their NCU steps 0.1 s
# apart and one ``ncu`` failed (exit 9, reports/evidence/2026-12-01-selfcheck/): each sandbox has a /tmp of its
# own, so nothing keeps two Nsight Compute runs in two sandboxes apart on one GPU.


def code_digests(kernels: list[str]) -> dict[str, str]:
    """Per kernel, SHA-256 over the package's files and the kernel's folder (paths and contents, caches left out):
    the code a selfcheck of that kernel checked. Two checkouts with the same digest run the same code, whatever
    their commits (a lent machine's copy has no ``.git``; a commit that only adds evidence changes nothing a
    selfcheck saw). The package is read once for all the kernels."""
    import hashlib

    from liger_perf.core.workspace import PACKAGE
    from liger_perf.kernel.registry import baseline_path

    def folder_digest(label: str, folder: Path) -> bytes:
        digest = hashlib.sha256()
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                           and not p.name.startswith(".")):
            digest.update(f"{label}/{path.relative_to(folder).as_posix()}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
        return digest.digest()

    package = folder_digest("liger_perf", PACKAGE)
    return {k: hashlib.sha256(package + folder_digest(f"kernels/{k}", baseline_path(k).parent)).hexdigest()
            for k in kernels}


@dataclass
class SelfcheckRow:
    kernel: str
    step: str  # "gate", "trial" or "screening"
    variant: str  # "baseline", or "best (trial NNNN name)"
    status: str  # PASS, FAIL, NOT_RUN (the machine kept it from running: too little GPU memory) or SKIPPED
    seconds: float
    detail: str
    peak_gpu_gib: float | None = None


def _gate_row(kernel: str, label: str, variant: Path | None, device: str) -> SelfcheckRow:
    from liger_perf.gate.process import run_contained_gate

    started = time.time()
    run = run_contained_gate(kernel, variant, device, convergence=True, capture=True)
    seconds = round(time.time() - started, 1)
    summary = run.summary
    peak = summary.get("peak_gpu_bytes")
    peak = round(peak / 2**30, 1) if isinstance(peak, (int, float)) and peak else None
    if run.unfinished or not summary:
        return SelfcheckRow(kernel, "gate", label, FAIL, seconds,
                            run.unfinished or f"the gate wrote no summary (exit code {run.code})", peak)
    counted = (f"{summary.get('comparisons')} comparisons in {summary.get('cases')} cases, convergence "
               f"{summary.get('convergence')}")
    if run.code == 0 and summary.get("passed"):
        return SelfcheckRow(kernel, "gate", label, PASS, seconds, counted, peak)
    first = (summary.get("failures") or [{}])[0]
    where = f"{first.get('case', '?')} {first.get('output', '')} vs {first.get('against', '')}: {first.get('reason', '')}"
    status = NOT_RUN if summary.get("machine_limited") else FAIL
    return SelfcheckRow(kernel, "gate", label, status, seconds,
                        f"{summary.get('failed')} of {summary.get('comparisons')} comparisons "
                        f"{'not run' if status == NOT_RUN else 'failed'}; first: {where}"[:400], peak)


def _trial_row(kernel: str, device: str, mode: str, history: Path, keep: Path | None) -> SelfcheckRow:
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.run import run_trial

    started = time.time()
    try:
        run = run_trial(kernel, baseline_path(kernel), root=history, name="selfcheck", device=device,
                        repetitions=3 if mode == "interpret" else 10, ncu=True, peers=False, convergence=False,
                        gate="quick", hypothesis="selfcheck: the trial notebook end to end on this machine",
                        timeout_s=600)
    except Exception as e:  # the runner itself failed: the machine cannot run trials
        return SelfcheckRow(kernel, "trial", "baseline", FAIL, round(time.time() - started, 1),
                            f"the trial could not run: {type(e).__name__}: {e}"[:400])
    seconds = round(time.time() - started, 1)
    if keep is not None:
        from liger_perf.record.store import replaced

        with replaced(keep / f"{kernel}-trial.ipynb") as fresh:
            shutil.copyfile(run.notebook, fresh)
    result = run.result
    timings = len(result.timing.rows) if result.timing is not None else 0
    ncu = result.ncu.status if result.ncu is not None else "missing"
    problems = []
    if result.status != "complete":
        problems.append(f"{result.status}: {result.reason}")
    if not timings:
        problems.append("no timings")
    if mode != "interpret" and ncu != "ok":
        problems.append(f"NCU {ncu}: {result.ncu.reason if result.ncu is not None else ''}")
    detail = (f"{timings} timings, NCU {ncu}, quick gate "
              f"{'pass' if result.correctness is not None and result.correctness.passed else 'FAIL'}")
    return SelfcheckRow(kernel, "trial", "baseline", FAIL if problems else PASS, seconds,
                        ("; ".join(problems) if problems else detail)[:400])


def _screening_row(kernel: str, device: str, history: Path) -> SelfcheckRow:
    """A screening notebook of one candidate, a comment-only copy of the baseline, against the baseline, as the
    loop runs one: its runner and harness must agree on what the screening is (trial 0092 on the H200 was filed
    as crashed, its timings lost, by a runner check that only a screening meets)."""
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.record.schema import ScreenEntry
    from liger_perf.run import run_trial

    candidate = history / "selfcheck-candidates" / f"{kernel}.py"
    candidate.parent.mkdir(parents=True, exist_ok=True)
    candidate.write_text(baseline_path(kernel).read_text() + "\n# selfcheck: a comment-only copy of the baseline\n")
    started = time.time()
    try:
        run = run_trial(kernel, baseline_path(kernel), root=history, name="selfcheck-screening", device=device,
                        kind="screening", screen=[ScreenEntry(name="0-copy", variant=str(candidate))], ncu=False,
                        peers=False, convergence=False, timeout_s=600,
                        hypothesis="selfcheck: a screening notebook end to end on this machine")
    except Exception as e:  # the runner itself failed
        return SelfcheckRow(kernel, "screening", "baseline", FAIL, round(time.time() - started, 1),
                            f"the screening could not run: {type(e).__name__}: {e}"[:400])
    seconds = round(time.time() - started, 1)
    result = run.result
    rows = result.screening.rows if result.screening is not None else []
    if result.status != "complete":
        problem = f"{result.status}: {result.reason}"
    elif len(rows) != 1 or rows[0].quick_gate != "pass" or rows[0].ratio is None:
        problem = f"the copy was not gated and timed: {rows[0].reason if rows else 'no row'}"
    else:
        problem = ""
    detail = problem or (f"the copy {rows[0].ratio:.3f}x the baseline's time [{rows[0].ci_low:.3f}, "
                         f"{rows[0].ci_high:.3f}], {'kept' if rows[0].kept else 'dropped'}")
    return SelfcheckRow(kernel, "screening", "baseline", FAIL if problem else PASS, seconds, detail[:400])


def run_selfcheck(device: str = "auto", kernels: list[str] | None = None, best: bool = True, trials: bool = True,
                  echo: Callable[[str], None] = print, keep: Path | None = None) -> dict[str, Any]:
    """The rows of every step, and the record that ``write_record`` writes. ``best``: also gate each history's
    best; ``trials``: also run each baseline's short trial; ``keep``: copy each trial's notebook there."""
    from liger_perf.kernel.device import select_device
    from liger_perf.measure.fingerprint import fingerprint
    from liger_perf.record.history import latest_best, trial_variant_file
    from liger_perf.kernel.registry import baseline_path, kernel_names, kernel_origin
    from liger_perf.record.store import Store
    from liger_perf.core.workspace import current

    dev = select_device(device)  # this process imports no variant: it only asks what the device is
    mode = dev.mode
    started = time.time()
    stack = fingerprint(dev, current().root)
    device_class = dev.device_class
    history = Store(device=device_class).notebooks
    names = kernels or kernel_names()
    gates: list[SelfcheckRow] = []
    # Every gate first, one at a time: the large case of one takes most of a GPU's memory, and on the H200 two
    # trials beside a gate left it 95 GiB of the 96 it asks for (reports/evidence/2026-12-01-final-gpu-runs/).
    # Then the trials of the baselines that passed: their timings here only show that timing works, they are never
    # judged.
    for kernel in names:
        echo(f"{kernel} ({kernel_origin(kernel)}): gate of the baseline")
        gates.append(_gate_row(kernel, "baseline", None, mode))
        echo(f"  {gates[-1].status}: {gates[-1].detail}")
        found = latest_best(kernel, history) if best else None
        if found is not None:
            label = f"best (trial {found.trial_id:04d} {found.name})"
            echo(f"{kernel}: gate of the {label}")
            gates.append(_gate_row(kernel, label, trial_variant_file(kernel, found, history), mode))
            echo(f"  {gates[-1].status}: {gates[-1].detail}")
        elif best:
            echo(f"{kernel}: no accepted best on this device yet")
    done: list[SelfcheckRow] = []
    if trials:
        with tempfile.TemporaryDirectory(prefix="liger-perf-selfcheck-") as scratch:
            for kernel in names:  # one at a time: see the note at the top of this module
                baseline_gate = next(r for r in gates if r.kernel == kernel and r.variant == "baseline")
                if baseline_gate.status == PASS:
                    echo(f"{kernel}: a short trial of the baseline in a scratch history")
                    done.append(_trial_row(kernel, device, mode, Path(scratch), keep))
                    echo(f"{kernel}: trial {done[-1].status}: {done[-1].detail}")
                    echo(f"{kernel}: a screening of a copy of the baseline in the scratch history")
                    done.append(_screening_row(kernel, device, Path(scratch)))
                    echo(f"{kernel}: screening {done[-1].status}: {done[-1].detail}")
                else:
                    for step in ("trial", "screening"):
                        done.append(SelfcheckRow(kernel, step, "baseline", SKIPPED, 0.0,
                                                 "not run: the baseline did not pass its gate"))
                    echo(f"{kernel}: trial and screening skipped: the baseline did not pass its gate")
    order = {k: i for i, k in enumerate(names)}
    rows = sorted(gates, key=lambda r: (order[r.kernel], r.variant != "baseline")) + done
    passed = bool(rows) and all(r.status == PASS for r in rows)
    return {
        "commit": stack.get("git_commit") or None, "uncommitted_changes": bool(stack.get("git_dirty")),
        "device": device_class, "passed": passed, "seconds": round(time.time() - started, 1),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)),
        "stack": {k: stack.get(k) for k in ("gpu", "driver", "cuda", "torch", "triton", "python", "liger_perf",
                                            "liger_kernel", "device_mode")},
        "kernels": {k: str(baseline_path(k).parent) for k in names},
        "host": platform.node(),
        "code": code_digests(names),
        "rows": [asdict(r) for r in rows],
    }


def write_record(record: dict[str, Any], reports: Path | None = None) -> Path:
    """``selfcheck.json`` in ``reports`` (default: the workspace's ``reports/<device>/``), whole or not at all."""
    import json
    import os

    from liger_perf.record.notebook import jsonable
    from liger_perf.record.store import Store, write_file
    from liger_perf.core.workspace import current

    root = current().root
    record = {**record, "kernels": {k: os.path.relpath(v, root) if Path(v).is_relative_to(root) else Path(v).name
                                    for k, v in record["kernels"].items()}}
    path = (Path(reports) if reports is not None else Store(device=record["device"]).reports) / "selfcheck.json"
    return write_file(path, json.dumps(jsonable(record), indent=1) + "\n")


def summary_line(record: dict[str, Any]) -> str:
    failed = [r for r in record["rows"] if r["status"] != PASS]
    if not failed:
        return f"selfcheck PASS: {count(len(record['rows']), 'step')} in {record['seconds']:.0f} s"
    first = failed[0]
    return (f"selfcheck FAIL: {len(failed)} of {count(len(record['rows']), 'step')} did not pass; first: {first['kernel']} "
            f"{first['step']} of the {first['variant']}: {first['status']}: {first['detail']}")


