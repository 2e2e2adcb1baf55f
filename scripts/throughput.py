"""Throughput benchmark: the same short optimize, from a copy of the kernel's committed history, timed; writes
trials per hour, candidates screened per hour and the median seconds of each trial step to a JSON file.

The loop runs as ``liger-perf optimize`` runs it (rules proposer, the sandbox, staged gates, screening), on a
scratch copy of ``notebooks/<kernel>/`` so that the project's history is not touched; the figures are read back
from the notebooks it wrote and from the loop's events (wall clock from a trial's start to its verdict).

    python scripts/throughput.py fused_add_rms_norm --budget 4 --screen 4 --workers 1 --out OUT.json

(default ``--out``: ``reports/evidence/<today>-throughput/throughput.json``; the run of 2026-12-01 is
``reports/evidence/2026-12-01-throughput/``.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

from liger_perf.judge.guardrails import load_guardrails
from liger_perf.record.history import load_trials
from liger_perf.loop import OptimizeLoop
from liger_perf.propose.rules import RulesProposer
from liger_perf.record.store import Store
from liger_perf.core.workspace import current


def _median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kernel")
    parser.add_argument("--target", default="backward")
    parser.add_argument("--budget", type=int, default=4, help="full trials")
    parser.add_argument("--screen", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="GPUs (a local Dask cluster when more than 1)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path(
        f"reports/evidence/{datetime.date.today().isoformat()}-throughput/throughput.json"))
    parser.add_argument("--keep", type=Path, help="copy the notebooks the run wrote here")
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="liger-perf-throughput-"))
    from liger_perf.kernel.device import select_device

    source = Store(device=select_device(args.device).device_class).kernel_folder(args.kernel)
    shutil.copytree(source, scratch / args.kernel, ignore=shutil.ignore_patterns("artifacts", ".*"))
    before = {t.trial_id for t in load_trials(args.kernel, scratch)}
    if args.workers > 1:
        from liger_perf.run.dask import DaskRunner

        runner = DaskRunner(workers=args.workers)
    else:
        from liger_perf.run.papermill import PapermillRunner

        runner = PapermillRunner()
    walls: dict[int, float] = {}

    class Timed:
        """The runner, each trial's wall clock taken around it (one GPU: one after another; several: the round's
        wall clock over its trials, as they overlap)."""

        workers = runner.workers

        def mode(self, device):
            return runner.mode(device)

        def fingerprint(self, device):
            return runner.fingerprint(device)

        def run(self, request, store):
            return self.run_many([request], store)[0]

        def run_many(self, requests, store):
            if runner.workers == 1:
                runs = []
                for request in requests:
                    t = time.time()
                    runs.append(runner.run(request, store))
                    walls[request.trial_id] = time.time() - t
                return runs
            t = time.time()
            runs = runner.run_many(requests, store)
            for request in requests:
                walls[request.trial_id] = (time.time() - t) / len(requests)
            return runs

    def watch(event):
        print(f"[{time.strftime('%H:%M:%S')}] {event.kind}: {event.message}"[:400], flush=True)

    rules = load_guardrails(current().guardrails, target=args.target)
    loop = OptimizeLoop(args.kernel, rules, RulesProposer(), device=args.device, budget=args.budget, root=scratch,
                        runner=Timed(), screen=args.screen, on_event=watch)

    def stop(signum, frame):  # a time limit (``timeout``): stop, and report what was done
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    t0 = time.time()
    try:
        stop_reason = loop.run().stop_reason
    except KeyboardInterrupt:
        stop_reason = "stopped by the benchmark's time limit"
    wall = time.time() - t0
    new = [t for t in load_trials(args.kernel, scratch) if t.trial_id not in before]
    full = [t for t in new if t.kind == "experiment"]
    screenings = [t for t in new if t.kind == "screening"]
    screened = sum(len(t.screening.rows) for t in screenings if t.screening)
    steps = sorted({s for t in full for s in t.step_seconds})
    fp = next((t.fingerprint for t in new if t.fingerprint), None)
    entry = {
        "kernel": args.kernel, "target": args.target, "gpus": args.workers, "budget": args.budget,
        "screen": args.screen, "device": fp.gpu if fp else None, "commit": fp.git_commit if fp else None,
        "wall_s": round(wall, 1), "stop_reason": stop_reason,
        "full_trials": len(full), "screenings": len(screenings), "candidates_screened": screened,
        "trials_per_hour": round(len(full) / wall * 3600, 1) if wall else None,
        "screened_per_hour": round(screened / wall * 3600, 1) if wall else None,
        "screened_per_hour_per_gpu": round(screened / wall * 3600 / args.workers, 1) if wall else None,
        # With several workers, trials overlap and this is per worker; trials_per_hour is what counts then.
        "median_trial_s": _median([walls.get(t.trial_id) for t in full]),
        "median_trial_in_notebook_s": _median([t.elapsed_s for t in full]),
        "median_screening_s": _median([walls.get(t.trial_id) for t in screenings]),
        "median_step_s": {s: _median([t.step_seconds.get(s) for t in full]) for s in steps},
        "trials": [{"trial": t.trial_id, "name": t.name, "kind": t.kind, "status": t.status, "verdict": t.verdict,
                    "wall_s": round(walls[t.trial_id], 1) if t.trial_id in walls else None,
                    "elapsed_s": round(t.elapsed_s, 1) if t.elapsed_s else None,
                    "gate": t.correctness.stage if t.correctness else None,
                    "ncu": t.ncu.scope if t.ncu and t.ncu.status == "ok" else (t.ncu.status if t.ncu else None),
                    "step_seconds": t.step_seconds,
                    "screened": [{"name": r.name, "kept": r.kept, "reason": r.reason} for r in t.screening.rows]
                    if t.screening else None} for t in new],
    }
    report = json.loads(args.out.read_text()) if args.out.is_file() else {}
    report[f"{args.kernel} {args.workers} GPU"] = entry
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        for t in new:
            shutil.copy2(t.notebook, args.keep / Path(t.notebook).name)
    print(json.dumps({k: v for k, v in entry.items() if k != "trials"}, indent=1))


if __name__ == "__main__":
    main()
