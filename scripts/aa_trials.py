"""A/A trials: a comment-only copy of the current best, trialled against the best as the loop trials a candidate
(staged gate, the guardrails, the sandbox), in a history of their own; what the intervals say about no change.

Each trial is judged as the loop judges; none may be accepted, and with intervals that cover the between-copy
effect, at most about one in twenty has any per-shape interval that excludes 1. Resumable: trials already in
``--root`` against the same best count, so a run cut short (a device call's time limit) goes on where it stopped;
trials there against an earlier best are left out of the count and of the summary (each row names its commit).

    python scripts/aa_trials.py fused_add_rms_norm --trials 20 --root reports/evidence/<date>-aa --deadline-s 540

(default root: ``reports/evidence/<today>-aa``; the run of 2026-12-01 is ``reports/evidence/2026-12-01-aa/``.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

from liger_perf.judge.guardrails import load_guardrails
from liger_perf.record.history import best_trial, load_trials, trial_variant_file
from liger_perf.judge import judge
from liger_perf.kernel.variants import source_hash
from liger_perf.record.notebook import record_verdict
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.record.store import Store
from liger_perf.core.workspace import current


def excluding(trial) -> list[str]:
    """The candidate's per-shape intervals that exclude 1."""
    return [f"{r.pass_name} {r.shape} {r.dtype}: {r.ratio:.4f} [{r.ci_low:.4f}, {r.ci_high:.4f}]"
            for r in trial.candidate_ratios() if r.ci_low is not None and (r.ci_low > 1 or r.ci_high < 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kernel")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--root", type=Path,
                        default=Path(f"reports/evidence/{datetime.date.today().isoformat()}-aa"))
    parser.add_argument("--deadline-s", type=float, default=0, help="start no trial after this many seconds")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repetitions", type=int, default=0)
    parser.add_argument("--ncu", action="store_true", help="profile too (the intervals do not need it)")
    args = parser.parse_args()
    args.root = args.root.absolute()
    started = time.time()
    rules = load_guardrails(current().guardrails)
    from liger_perf.kernel.device import select_device

    history = Store(device=select_device(args.device).device_class).notebooks
    baseline, best = best_trial(args.kernel, history)
    best_file = trial_variant_file(args.kernel, best, history) if best is not None else baseline_path(args.kernel)
    best = best or baseline
    notebooks = args.root / "notebooks"
    copy = args.root / "variants" / f"{args.kernel}-a-a-copy.py"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(best_file.read_text() + "\n# A/A copy: the current best's code, another file.\n")
    copy_sha = source_hash(copy.read_text())

    def against_this_best() -> list:
        """The root's A/A trials of today's copy (its source names the best it copies), failed ones included: a
        root that also holds trials of an earlier best's copy neither counts them towards ``--trials`` nor sums
        them into this summary."""
        return [t for t in load_trials(args.kernel, notebooks) if t.kind == "experiment"
                and t.variant_sha == copy_sha]

    while True:
        done = against_this_best()
        if len(done) >= args.trials or (args.deadline_s and time.time() - started > args.deadline_s):
            break
        run = run_trial(args.kernel, copy, against=best_file, root=notebooks, name=f"a-a-{len(done):02d}",
                        device=args.device, repetitions=args.repetitions, ncu=args.ncu, peers=False,
                        hypothesis="none: the current best against a comment-only copy of itself",
                        prediction="never accepted; every per-shape interval contains 1",
                        gate="staged", guardrails=rules.model_dump(mode="json"), confidence=rules.confidence,
                        timeout_s=rules.trial_timeout_s)
        if run.result.status == "harness-error":  # not a measurement: stop and say so
            raise SystemExit(f"{run.notebook.name}: the harness failed: {run.result.reason}")
        verdict = judge(run.result, rules)
        record_verdict(run.notebook, verdict.record(rules.target, "a-a"))
        print(f"{run.notebook.name}: {verdict.verdict}; {len(excluding(run.result))} intervals exclude 1; "
              f"{run.result.elapsed_s or 0:.0f} s", flush=True)
    trials = against_this_best()
    rows = [{"trial": t.trial_id, "notebook": Path(t.notebook).name, "status": t.status, "verdict": t.verdict,
             "commit": t.fingerprint.git_commit if t.fingerprint else None,
             "target_ratio": t.judged.target_ratio if t.judged else None,
             "intervals": len(t.candidate_ratios()), "excluding_1": excluding(t),
             "elapsed_s": t.elapsed_s, "step_seconds": t.step_seconds} for t in trials]
    summary = {"kernel": args.kernel, "against": {"trial": best.trial_id if best else None,
                                                  "file": current().relative(best_file)},
               "device": trials[0].fingerprint.gpu if trials and trials[0].fingerprint else None,
               "commits": sorted({r["commit"] for r in rows if r["commit"]}),
               "trials": len(rows), "accepted": sum(r["verdict"] == "accepted" for r in rows),
               "with_any_interval_excluding_1": sum(bool(r["excluding_1"]) for r in rows),
               "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in {r["verdict"] for r in rows}},
               "rows": rows}
    (args.root / f"{args.kernel}.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))


if __name__ == "__main__":
    main()
