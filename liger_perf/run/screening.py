"""Screening: a batch of candidates, each through the quick gate and a short side-by-side timing against the
current best, in one notebook; only the candidates that may be faster get a full trial.

A proposer that can think of several moves need not pay a full trial for each: the screening notebook (a trial
notebook of kind ``screening``, numbered in the kernel's history) times every candidate that passes the quick
gate interleaved with the current best, with few repetitions, on the target pass. A candidate whose screening
interval lies wholly above 1 (simultaneous over every candidate and shape) is clearly slower and is dropped,
with its ratios and the reason recorded; every other one gets a full trial, best first. Nothing is ever
accepted on a screening measurement: the full trial measures again, and its full gate decides.

The candidates of a batch run in one process (as a trial's candidate and best do): one that writes out of its
bounds at a shape its quick gate never met can disturb another's timing or spot check. Nothing is accepted on a
screening, so the harm is limited to which candidates get a full trial; a candidate dropped for a spot check that
failed counts as tried all the same.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from liger_perf.run.trial import Trial, _display, _step
from liger_perf.core.wording import count, speedup

#: Repetitions of a screening timing: enough to see a clearly slower candidate, far fewer than a trial's.
SCREEN_REPETITIONS = {"cuda": 20, "interpret": 3}


def screening_passes(target: str) -> list[str]:
    """The passes a screening times: the target's (``full`` for a memory target: screening is about time)."""
    return ["full"] if target == "memory" else [target]


class Screen(Trial):
    """The screening notebook's steps; the template's cells call them as they call a trial's."""

    def __init__(self, request):
        from liger_perf.record.schema import TrialRequest
        from liger_perf.kernel.variants import batch_hash, source_hash, variant_text

        request = TrialRequest.model_validate(request)
        if not request.screen:
            raise ValueError("a screening request lists its candidates in 'screen'")
        super().__init__(request)
        best = self.data["variant"]
        self.target = (request.guardrails or {}).get("target", "backward")
        self.passes = [p for p in screening_passes(self.target) if p in self.spec.passes] or self.passes[:1]
        shas = []
        self.entries: list[dict[str, Any]] = []
        for entry in request.screen:
            try:
                source = variant_text(entry.variant)  # as the runner reads it: the hashes must agree
            except OSError as e:
                source, why = "", f"unreadable: {type(e).__name__}"
            else:
                why = ""
            sha = source_hash(source)
            shas.append(sha)
            self.entries.append({"name": entry.name, "sha256": sha, "source": source, "changes": entry.changes,
                                 "hypothesis": entry.hypothesis, "proposer_audit": entry.proposer_audit,
                                 "quick_gate": "", "ratio": None, "ci_low": None,
                                 "ci_high": None, "kept": False, "reason": why, "path": entry.variant})
        # The notebook is about the batch: its "variant" names the batch, "against" the best it was timed with.
        self.data["variant"] = {"path": "", "sha256": batch_hash(shas), "knobs": None,
                                "source": ""}
        self.data["against"] = {"path": request.variant, "sha256": best["sha256"]}
        self.data["passes"] = self.passes
        self.data["screening"] = {"target": self.target, "repetitions": 0,
                                  "confidence": request.confidence, "rows": [], "timing": []}
        self.modules: dict[str, Any] = {}

    def load_variants(self) -> None:
        from liger_perf.core.errors import UserError
        from liger_perf.kernel.variants import load_variant

        if self.data["status"] != "running":
            return
        self.progress.report("importing the candidates")
        self.against = load_variant(self.request.variant, self.spec)  # the best: a failure is the harness's
        for entry in self.entries:
            if entry["reason"]:
                continue
            try:
                self.modules[entry["name"]] = load_variant(entry["path"], self.spec)
            except UserError as e:
                entry["reason"] = f"not a valid variant: {e}"[:500]

    def show_header(self) -> None:
        d = self.data
        _display(markdown=f"# Screening {d['trial_id']:04d} of `{d['kernel']}`: {len(self.entries)} candidates\n\n"
                          f"Each candidate through the quick gate, then timed on the {', '.join(self.passes)} pass "
                          f"interleaved with the current best (`{self.request.variant}`); a candidate whose "
                          "simultaneous interval lies wholly above 1 is dropped, every other one gets a full "
                          "trial. Nothing is accepted here.")

    def show_proposer(self) -> None:
        models = {e["name"]: (e["proposer_audit"] or {}).get("model") for e in self.entries}
        _display(markdown="**Proposers:** " + ", ".join(f"{name}: {f'model `{m}`' if m else 'rules or by hand'}"
                                                        for name, m in models.items())
                 + " (a model's prompt and replies are kept in this notebook's result, `screening.rows`)")

    def show_source(self) -> None:
        for entry in self.entries:
            _display(markdown=f"<details><summary><b>{entry['name']}</b>: {entry['hypothesis'] or '(no hypothesis)'}"
                              f" {entry['changes'] or ''}</summary>\n\n```python\n{entry['source']}\n```\n</details>")

    @_step("check", "quick gates")
    def check(self) -> None:
        from liger_perf.gate.correctness import check_variant

        for entry in self.entries:
            variant = self.modules.get(entry["name"])
            if variant is None:
                entry["quick_gate"] = "not run"
                continue
            self.progress.report("quick gate", detail=entry["name"])
            try:
                result = check_variant(self.spec, variant, self.device, convergence=False, fail_fast=True,
                                       stage="quick")
            except Exception as e:  # the candidate's own crash (the harness's code is the gate's, tested)
                entry["quick_gate"] = entry["reason"] = f"crashed: {type(e).__name__}: {e}"[:500]
                del self.modules[entry["name"]]
                continue
            if result.passed:
                entry["quick_gate"] = "pass"
                continue
            failure = result.failures().iloc[0]
            entry["quick_gate"] = f"{failure['case']} {failure['output']}: {failure['reason']}"[:500]
            entry["reason"] = f"failed the quick gate: {entry['quick_gate']}"
            del self.modules[entry["name"]]
        _display(markdown="## Quick gates\n\n" + "\n".join(f"- {e['name']}: {e['quick_gate']}"
                                                            for e in self.entries))

    @_step("time", "screening timing")
    def time(self) -> None:
        import numpy as np

        from liger_perf.measure.timing import TimingPlan, summarize, time_suite
        from liger_perf.kernel.variants import dispatch_bucket, target_buckets

        cases = self.spec.cases(self.suite, "bench")
        # Where every candidate is a move in named buckets, only those buckets' cases decide what is kept (below),
        # so only they are timed: elsewhere the candidates run the best's own kernels (so does the full trial's
        # timing, where the judge confirms the move confined, ``TrialRequest.buckets``; its gate checks every
        # shape). On the H200's tuning split a one-bucket screening of four spent about 180 of its 250 s timing the
        # other buckets' cases (0070, 0072).
        scope = self._buckets_screened(cases)
        if scope:
            cases = [case for case in cases if dispatch_bucket(case.shape, case.dtype) in scope]
        self._smoke(cases)
        if not self.modules:
            _display(markdown="## Screening timing\n\nNo candidate passed its quick gate and ran at every timed "
                              "shape: nothing to time.")
            return
        reps = self.request.repetitions or SCREEN_REPETITIONS[self.device.mode]
        plan = dataclasses.replace(TimingPlan.default(self.device, reps), confidence=self.request.confidence)
        contenders = {}
        for entry in self.entries:
            if entry["name"] in self.modules:
                try:  # its second import (the loaded copies timing deals over its slots)
                    contenders[entry["name"]] = self._loaded(self.modules[entry["name"]])
                except Exception as e:  # the candidate's own failure, as at its first import
                    entry["reason"] = f"its second import failed: {type(e).__name__}: {e}"[:500]
                    del self.modules[entry["name"]]
        if not contenders:
            return
        contenders["against"] = self._loaded(self.against)
        spot_checks: list[dict] = []
        samples = time_suite(self.spec, contenders, cases, self.passes, self.device, plan,
                             progress=lambda what: self.progress.report("screening", detail=what),
                             spot_checks=spot_checks, judged=tuple(contenders))
        summary = summarize(samples, "against", self.spec, 1.0, plan)
        rows = summary[summary["contender"] != "against"]
        self.data["screening"]["repetitions"] = plan.repetitions
        self.data["screening"]["timing"] = rows.drop(columns=["min_bytes", "bandwidth_fraction"]).to_dict("records")
        wrong = {c["contender"]: c["reason"] for c in spot_checks if not c["passed"]}
        for entry in self.entries:
            mine = rows[rows["contender"] == entry["name"]]
            # A one-bucket move is screened on its bucket's shapes, as the judge judges it: elsewhere it runs the
            # same code, and those ratios of 1 would hide a slowdown where it acts.
            buckets = target_buckets(entry["changes"])
            if buckets:
                mine = mine[[dispatch_bucket(s, d) in buckets for s, d in zip(mine["shape"], mine["dtype"])]]
            if entry["name"] not in self.modules or mine.empty:
                continue
            geo = [float(np.exp(np.log(mine[c].astype(float)).mean())) for c in ("ratio", "ci_low", "ci_high")]
            entry["ratio"], entry["ci_low"], entry["ci_high"] = (x if math.isfinite(x) else None for x in geo)
            over = f"bucket {', '.join(sorted(buckets))} of the suite" if buckets else "the suite"
            measured = f"{self.passes[0]} {speedup(*geo)} over the current best (geomean over {over})"
            if entry["name"] in wrong:
                entry["reason"] = f"a timed call computed a wrong result: {wrong[entry['name']]}"[:500]
            elif math.isfinite(geo[1]) and geo[1] > 1:
                entry["reason"] = f"clearly slower: {measured}, wholly below 1x"
            else:
                entry["kept"] = True
                entry["reason"] = f"may be faster: {measured}; a full trial decides"
        timed = (f"the shapes of bucket{'s' if len(scope) > 1 else ''} {', '.join(sorted(scope))} alone, which the "
                 "candidates' changes name" if scope else "the suite's shapes")
        _display(markdown=f"## Screening timing\n\n{count(plan.repetitions, 'repetition')} per contender, interleaved "
                          f"with the current best, at {timed}; speedups over it (geomean over the shapes each "
                          f"candidate's changes act at) with intervals simultaneous over every candidate and shape "
                          f"({plan.confidence:.0%}).")

    def _timed_buckets(self) -> list[str]:
        """The buckets the screening times (``_buckets_screened``), for its precompilation."""
        return sorted(self._buckets_screened(self.spec.cases(self.suite, "bench")))

    def _buckets_screened(self, cases) -> set[str]:
        """The dispatch buckets the screening times (``variants.screened_buckets``): those the changes of the
        candidates left after the quick gate name, where every one of them is such a move and some case of the
        suite falls in them; else none (the whole suite)."""
        from liger_perf.kernel.variants import screened_buckets

        return screened_buckets([entry.get("changes") for entry in self.entries if entry["name"] in self.modules],
                                cases)

    def _smoke(self, cases) -> None:
        """Each candidate's every timed call once, on its own, before they are timed together: a candidate that
        raises at a timed shape only (one its quick gate did not meet: out of shared memory at the widest rows)
        is dropped with the reason, instead of ending the whole screening."""
        from liger_perf.kernel.passes import case_inputs, prepare_pass

        self.progress.report("screening", detail="a run of each candidate at every timed shape")
        for case in cases:
            inputs, cotangents = case_inputs(self.spec, case, self.device)  # once per case, for every candidate
            for entry in self.entries:
                variant = self.modules.get(entry["name"])
                if variant is None:
                    continue
                forward = self.spec.variant_forward(variant.module)
                for pass_name in self.passes:
                    try:
                        prepare_pass(self.spec, forward, inputs, case.config, pass_name, cotangents).arm()()
                        self.device.synchronize()
                    except Exception as e:  # the candidate's own failure
                        entry["reason"] = (f"crashed at the timed case {pass_name} {case.label()}: "
                                           f"{type(e).__name__}: {e}")[:500]
                        break
                if entry["reason"]:
                    del self.modules[entry["name"]]

    def decide(self) -> None:
        return

    def finish_gate(self) -> None:
        return

    def accuracy(self) -> None:
        return  # a screening only chooses which candidates get a full trial, which measures it

    def profile(self) -> None:
        self.data["ncu"] = {"status": "unavailable", "reason": "a screening is not profiled"}

    def result(self) -> dict:
        kept = sorted((e for e in self.entries if e["kept"]), key=lambda e: e["ratio"] or math.inf)
        self.data["screening"]["rows"] = [{k: v for k, v in e.items() if k != "path"} for e in self.entries]
        if self.data["status"] == "running":
            self.data["reason"] = (f"{len(kept)} of {len(self.entries)} candidates kept for a full trial: "
                                   + ", ".join(e["name"] for e in kept) if kept else
                                   f"none of {len(self.entries)} candidates kept")
        import pandas as pd

        _display(markdown="## Screening outcome")
        _display(pd.DataFrame(self.data["screening"]["rows"])[["name", "quick_gate", "ratio", "ci_low", "ci_high",
                                                               "kept", "reason"]])
        return super().result()


def open_trial(request) -> Trial:
    """The template's harness cell: a ``Screen`` for a screening request, else a ``Trial``."""
    from liger_perf.record.schema import TrialRequest

    request = TrialRequest.model_validate(request)
    return Screen(request) if request.kind == "screening" else Trial(request)
