"""One trial, step by step, as the trial notebook runs it: fingerprint, precompilation, gate, timings, memory,
the trial's own provisional judgement and full gate (a staged trial), NCU, result.

Each step shows a person its table and keeps what a program needs; ``result()`` emits the one structured
result (see ``liger_perf.record.notebook``). When the gate fails (or the variant does not even load) the later steps
say they were skipped and the result records why: a wrong variant is never timed. A staged trial
(``TrialRequest.gate``) runs the quick gate before the timing and the full gate only when its timing would be
accepted; for that one question it asks the judge (``decide``), the one place the run layer reads the judge.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from liger_perf.run.progress import ProgressLog
from liger_perf.record.notebook import RESULT_MIME, jsonable
from liger_perf.record.schema import FORMAT, TrialRequest, TrialResult
from liger_perf.core.wording import count


def _display(obj=None, markdown: str | None = None) -> None:
    try:
        from IPython.display import Markdown, display
    except ImportError:  # outside a notebook (a script, a test): print instead
        print(markdown if markdown is not None else obj)
        return
    display(Markdown(markdown) if markdown is not None else obj)


def _step(name: str, what: str):
    """A trial step: skipped (and saying why) once the trial has stopped; its duration kept in the result."""
    def decorate(method):
        @functools.wraps(method)
        def run(self) -> None:
            if self._skipped(what):
                return
            start = time.time()
            try:
                method(self)
            finally:
                self.data.setdefault("step_seconds", {})[name] = round(time.time() - start, 2)
        return run
    return decorate


class Trial:
    def __init__(self, request: TrialRequest | dict):
        from liger_perf.kernel.device import select_device

        request = TrialRequest.model_validate(request)
        self.device = select_device(request.device)  # before any variant is imported
        from liger_perf.core.errors import UserError
        from liger_perf.measure.fingerprint import fingerprint
        from liger_perf.kernel.registry import get_spec
        from liger_perf.core.workspace import current
        from liger_perf.kernel.variants import read_knobs, read_source, source_hash

        self.request = request
        self.started = time.time()
        self.spec = get_spec(request.kernel)
        if request.suite and self.device.interpreted:
            raise UserError(f"the {request.suite} suite needs a GPU (its shapes would take hours under the Triton "
                            "interpreter): leave the suite out on the CPU")
        #: The suite the trial times, screens and profiles (the gate sweeps its own shapes, whatever this is).
        self.suite = request.suite or self.device.suite
        self.passes = [p for p in request.passes if p in self.spec.passes]
        self.artifacts = Path(request.artifacts) if request.artifacts else None
        unreadable = ""
        try:
            source = read_source(request.variant)
        except UserError as e:  # the variant's own defect (not UTF-8): recorded as such, never a harness error
            source, unreadable = Path(request.variant).read_text(errors="replace"), str(e)
        try:
            knobs = read_knobs(source, request.variant)[0]
        except UserError:
            knobs = None
        self.data: dict[str, Any] = {
            "format": FORMAT, "kernel": request.kernel, "trial_id": request.trial_id,
            "name": request.name or Path(request.variant).stem, "hypothesis": request.hypothesis,
            "prediction": request.prediction, "changes": request.changes,
            "variant": {"path": request.variant, "sha256": source_hash(source), "knobs": knobs, "source": source},
            "against": None, "passes": self.passes, "device": self.device.mode, "suite": self.suite,
            "fingerprint": fingerprint(self.device, current().root), "status": "running", "reason": "",
            "proposer_audit": request.proposer_audit,
            # "experiment" (judged by the loop) or "revalidation" (a nightly check of the best; never judged)
            "kind": request.kind,
        }
        self.variant = self.against = None
        self.would_accept, self.decision = True, ""  # a staged trial's provisional judgement (``decide``)
        self.progress = ProgressLog(request.artifacts)  # what the loop's terminal shows while the trial runs
        if unreadable:
            self._stop("invalid-variant", unreadable)

    def load_variants(self) -> None:
        """Import the variant (and the current best): the first step that runs code under trial.

        The notebook runs it in a cell of its own, tagged ``variant``, so that the runner can tell a failure of
        the harness (the cells before it: the trial never reached the variant) from a failure of the variant."""
        from liger_perf.core.errors import UserError
        from liger_perf.kernel.variants import load_variant

        variant, against = self.request.variant, self.request.against
        if self.data["status"] != "running":
            return
        self.progress.report("importing the variant")
        try:
            self.variant = load_variant(variant, self.spec)
            if against:
                self.against = load_variant(against, self.spec)
                self.data["against"] = {"path": str(against), "sha256": self.against.sha256}
        except UserError as e:
            self._stop("invalid-variant", str(e))

    # -- the steps, in the order the notebook runs them ------------------------------------------------------

    def show_header(self) -> None:
        d, fp = self.data, self.data["fingerprint"]
        where = (f"{fp['gpu']} ({fp['sm_count']} SMs), driver {fp['driver']}, CUDA {fp['cuda']}"
                 if fp["gpu"] else "the Triton interpreter on the CPU: correctness is real, timings are CPU timings")
        lines = [f"# Trial {d['trial_id']:04d} of `{d['kernel']}`: {d['name']}", "",
                 f"- **Hypothesis:** {d['hypothesis'] or '(none: a measurement, not an experiment)'}",
                 f"- **Predicted effect:** {d['prediction'] or '(none)'}",
                 f"- **Variant:** `{d['variant']['path']}` sha256 `{d['variant']['sha256'][:16]}`",
                 "- **Against:** " + (f"`{d['against']['path']}` sha256 `{d['against']['sha256'][:16]}`"
                                       if d["against"] else "nothing (no ratios to a current best)"),
                 f"- **Device:** {where}",
                 f"- **Versions:** torch {fp['torch']}, triton {fp['triton']}, liger-perf {fp['liger_perf']}, "
                 f"python {fp['python']}, liger-kernel {fp['liger_kernel'] or 'not installed'}",
                 f"- **Project commit:** `{fp['git_commit'] or 'unknown'}`" + (" (with uncommitted changes)"
                                                                                if fp["git_dirty"] else "")]
        if self.data["status"] == "invalid-variant":
            lines.append(f"\n**The variant is invalid:** {self.data['reason']}")
        _display(markdown="\n".join(lines))

    def show_proposer(self) -> None:
        """For audit: which model proposed this variant, the full prompt and every reply, and their checks."""
        audit = self.data.get("proposer_audit")
        if not audit:
            _display(markdown="*Proposed without a language model (rules proposer or by hand).*")
            return
        lines = [f"## Proposer: {audit.get('proposer')} (model `{audit.get('model')}` at {audit.get('endpoint_host')})",
                 f"Tokens: {audit.get('prompt_tokens')} prompt, {audit.get('completion_tokens')} completion."]
        if audit.get("fallback"):
            lines.append(f"**{audit['fallback']}**")
        for exchange in audit.get("exchanges", []):
            lines.append(f"- reply {exchange['attempt']} ({exchange['seconds']} s): "
                         f"validation {exchange['validation']}")
        _display(markdown="\n\n".join(lines))
        _display(markdown=f"<details><summary>prompt ({len(audit.get('prompt', ''))} characters)</summary>\n\n"
                          f"```text\n{audit.get('prompt', '')}\n```\n</details>")
        for exchange in audit.get("exchanges", []):
            _display(markdown=f"<details><summary>reply {exchange['attempt']}</summary>\n\n```text\n"
                              f"{exchange['reply']}\n```\n</details>")

    def show_source(self) -> None:
        """The variant's full source: with it the notebook alone rebuilds the variant."""
        knobs = self.data["variant"]["knobs"]
        if knobs:
            _display(markdown="**Knobs:** " + ", ".join(f"`{k}={v!r}`" for k, v in knobs.items()))
        _display(markdown=f"```python\n{self.data['variant']['source']}\n```")

    @_step("precompile", "precompilation")
    def precompile(self) -> None:
        """Compile every kernel the gate and the timing will need, the candidate's and the current best's, in
        parallel processes: each trial starts from an empty Triton cache, and compiling one specialisation after
        another was half of a GPU trial's gate. Changes no result: it only fills the cache the steps would fill."""
        if self.data["kind"] == "screening":  # every candidate meets the quick gate; the best is only timed
            gated = [entry.variant for entry in self.request.screen]
            paths = [*gated, self.request.variant]
        else:
            gated = [self.request.variant]
            paths = [p for p in (self.request.variant, self.request.against) if p]
        # A staged trial or a screening needs the quick gate's cases and the timing's; the full gate's own are
        # compiled (in parallel again) only when it will run.
        staged = self.request.gate in ("staged", "quick")
        self._precompile(paths, gated, "screen" if self.data["kind"] == "screening" else
                         "quick" if staged else "all")

    def _precompile(self, paths: list[str], gated: list[str], part: str) -> None:
        from liger_perf.measure.precompile import precompile

        self.progress.report("precompiling", detail=f"{count(len(paths), 'variant')}, calls: {part}")
        # At most a few minutes: what is not compiled by then compiles in the gate, as it would have.
        outcome = precompile(self.spec, paths, self.device, gated=gated, convergence=self.request.convergence,
                             timeout_s=240, part=part, bench_suite=self.request.suite,
                             bench_buckets=self._timed_buckets())
        self.data.setdefault("precompile", {})[part] = outcome
        _display(markdown=f"*Precompilation ({part}): {outcome['status']}"
                          + (f" ({outcome['reason']})" if outcome.get("reason") else
                             f", {outcome.get('items', 0)} calls in {outcome.get('workers', 0)} processes, "
                             f"{outcome.get('failed', 0)} failed, {outcome.get('seconds', 0):.1f} s"
                             + (f"; first error: {outcome['first_error']}" if outcome.get("failed") else ""))
                          + "*")

    @_step("check", "correctness gate")
    def check(self) -> None:
        """The gate before any timing: the quick gate for a staged (or quick) trial, else the full gate."""
        if self.request.gate in ("staged", "quick"):
            self._gate("quick")
        else:
            self._gate("full")

    @_step("full_gate", "full correctness gate")
    def finish_gate(self) -> None:
        """A staged trial's full gate (and convergence run): only when its timing would be accepted. Nothing is
        ever accepted on the quick gate alone; a candidate whose timing would be rejected or re-measured is
        recorded with the quick gate, and why the full gate did not run."""
        if self.request.gate == "full":
            return
        if self.request.gate == "quick":
            self.data["correctness"]["full_gate"] = "not run: a quick trial (the machine's check, never judged)"
            return
        if not self.would_accept:
            self.data["correctness"]["full_gate"] = f"not run: {self.decision}"
            _display(markdown=f"## Full correctness gate: not run\n\n{self.decision}")
            return
        self._precompile([self.request.variant], [self.request.variant], "rest")
        self._gate("full")

    @_step("decide", "provisional judgement")
    def decide(self) -> None:
        """Whether this trial's timing would be accepted under the request's guardrails (the loop's judge,
        without the chain: erring towards running the full gate). A staged trial runs its full gate and full
        profile only then."""
        from liger_perf.judge.guardrails import Guardrails
        from liger_perf.judge import judge

        self.would_accept, self.decision = True, "no guardrails to judge with: the full gate runs"
        if self.request.gate != "staged" or self.request.guardrails is None or self.against is None:
            return
        # As if the full gate had passed: the question is whether it must run.
        correctness = {**self.data.get("correctness", {}), "stage": "full", "full_gate": "pending"}
        snapshot = TrialResult.model_validate(jsonable({**self.data, "status": "complete",
                                                        "correctness": correctness}))
        judgement = judge(snapshot, Guardrails.model_validate(self.request.guardrails))
        self.would_accept = judgement.verdict in ("accepted", "provisional")
        self.decision = (f"its timing would be {judgement.verdict}: {'; '.join(judgement.reasons)[:600]}")
        self.data["decision"] = {"verdict": judgement.verdict, "reasons": judgement.reasons[:10]}
        _display(markdown=f"## Provisional judgement: {judgement.verdict}\n\n" + "\n".join(
            f"- {r}" for r in judgement.reasons[:10]) + ("\n\nThe full gate and the full NCU profile run next."
                                                          if self.would_accept else
                                                          "\n\nNot accepted as measured: the full gate does not "
                                                          "run (a re-measure, if the loop asks for one, decides)."))

    def _gate(self, stage: str) -> None:
        from liger_perf.gate.correctness import check_variant, gate_cases, quick_gate_cases

        started = time.time()
        total = len(quick_gate_cases(self.spec, self.device) if stage == "quick" else
                    gate_cases(self.spec, self.variant, self.device))
        done = iter(range(1, total + 1))
        # One fresh draw per case besides its fixed one in the full gate: a mistake that shows only on some
        # inputs meets new ones in every trial, and the seed of a failing draw is recorded to reproduce it.
        result = check_variant(self.spec, self.variant, self.device,
                               convergence=self.request.convergence and stage == "full", fail_fast=True,
                               fresh=1 if stage == "full" else 0, stage=stage,
                               progress=lambda case: self.progress.report(
                                   "gate" if stage == "full" else "quick gate", next(done, total), total,
                                   case.label()))
        rows = result.rows
        columns = ["case", "layout", "seed", "output", "against", "reason"]
        worst = result.worst_tolerance_used
        quick_before = self.data.get("correctness", {}).get("quick_seconds")  # a staged trial's, kept
        self.data["correctness"] = {
            "passed": result.passed, "comparisons": len(rows), "cases": int(rows["case"].nunique()) if len(rows) else 0,
            "interpreted": result.interpreted, "draws": int(rows["seed"].nunique()) if len(rows) else 0,
            "worst_tolerance_used": worst if worst == worst else None,
            "failures": result.failures()[columns].head(20).to_dict("records"),
            "convergence": ("skipped" if stage == "quick" or result.convergence_skipped or result.convergence.empty
                            else "pass" if (result.convergence["verdict"] == "pass").all() else "FAIL"),
            "stage": stage, "full_gate": "" if stage == "full" else "not run yet",
            "quick_seconds": round(time.time() - started, 2) if stage == "quick" else quick_before,
        }
        summary = (rows.groupby(["dtype", "config", "against"], sort=False)
                   .agg(comparisons=("verdict", "size"), failed=("verdict", lambda v: int((v != "pass").sum())),
                        worst_norm_rel_err=("norm_rel_err", "max")).reset_index())
        what = ("every option in every dtype on the odd check shapes, outputs poisoned" if stage == "quick" else
                "forward and every gradient, same-dtype and float64 references, layouts, edge values"
                + ("" if result.interpreted else ", the large case, repeated and concurrent calls"))
        title = "Quick correctness gate" if stage == "quick" else "Correctness gate"
        _display(markdown=f"## {title}: {'PASS' if result.passed else 'FAIL'}\n\n{len(rows)} comparisons "
                          f"({what}) over {self.data['correctness']['draws']} draws; the closest a passing "
                          f"comparison came to its tolerance: {worst:.2f} of it; convergence: "
                          f"{self.data['correctness']['convergence']}"
                          + ("\n\nUnder the Triton interpreter: no race and no GPU bfloat16 rounding can show, so "
                             "this trial can at best be provisional." if result.interpreted else ""))
        _display(summary)
        if not result.passed:
            _display(result.failures()[columns].head(20))
            self._stop("failed-correctness", f"the {'quick ' if stage == 'quick' else ''}correctness gate failed: "
                       + "; ".join(f"{f['case']} {f['output']} vs {f['against']}: {f['reason']}"
                                   for f in self.data["correctness"]["failures"][:3])
                       if self.data["correctness"]["failures"] else "the convergence run diverged")

    def contenders(self) -> dict:
        """The candidate, the current best (``against``) and, in a kernel's first trial, the peers. On a GPU the
        candidate and the best are each imported twice: ``time_case`` deals the two loaded copies over their
        input slots, so that where one copy's kernels were loaded is repetition noise, not a difference."""
        found = {"candidate": self._loaded(self.variant)}
        if self.against is not None:
            found["against"] = self._loaded(self.against)
        self.data["peers_unavailable"] = {}
        if self.request.peers:
            from liger_perf.measure.timing import peer_contenders

            peers, self.data["peers_unavailable"] = peer_contenders(self.spec, self.device)
            if self.suite != self.device.suite and peers.pop("torch.compile", None) is not None:
                # It compiles every shape anew: minutes over a suite of many widths, in every trial that has
                # peers. `liger-perf bench --suite models` times it on both splits.
                self.data["peers_unavailable"]["torch.compile"] = (
                    f"left out on the {self.suite} suite (it compiles each of its shapes anew); "
                    "`liger-perf bench --suite models` times it")
            found.update(peers)
        return found

    def _loaded(self, variant) -> list:
        from liger_perf.kernel.variants import load_variant

        copies = [variant] if self.device.interpreted else [variant, load_variant(variant.path, self.spec)]
        return [self.spec.variant_forward(copy.module) for copy in copies]

    @_step("time", "timing")
    def time(self) -> None:
        from liger_perf.kernel.spec import dtype_name, shape_label
        from liger_perf.measure.timing import (TimingPlan, copy_bandwidth, peak_memory, summarize, time_suite,
                                       timing_table)

        plan = dataclasses.replace(TimingPlan.default(self.device, self.request.repetitions),
                                   confidence=self.request.confidence)
        contenders = self.contenders()
        self._timed = contenders  # the accuracy step measures the same loaded modules
        reference = "against" if "against" in contenders else "candidate"
        cases, left_out = self._timed_cases()
        bandwidth = copy_bandwidth(self.device)
        steps, done = len(cases) * len(self.passes), iter(range(1, len(cases) * len(self.passes) + 1))
        spot_checks: list[dict] = []
        drawn: dict = {}
        samples = time_suite(self.spec, contenders, cases, self.passes, self.device, plan,
                             progress=lambda what: self.progress.report("timing", next(done, steps), steps, what),
                             spot_checks=spot_checks, keep=drawn)
        summary = summarize(samples, reference, self.spec, bandwidth, plan)
        memory = peak_memory(self.spec, contenders, cases, self.device, drawn)
        del drawn
        self.data["timing"] = {"repetitions": plan.repetitions, "warmup": plan.warmup, "confidence": plan.confidence,
                               "intervals": "simultaneous (Bonferroni over the trial's ratios), paired bootstrap"
                               + (", widened by the timer's resolution" if plan.resolution_ms else ""),
                               "resolution_ms": plan.resolution_ms,
                               "copy_bandwidth_bytes_per_s": bandwidth, "reference_contender": reference,
                               "contenders": list(contenders), "rows": summary.to_dict("records"),
                               "spot_checks": spot_checks, "buckets": sorted(self.request.buckets) if left_out else [],
                               "left_out": [{"shape": shape_label(c.shape), "dtype": dtype_name(c.dtype)}
                                            for c in left_out]}
        self.data["memory"] = {"rows": memory.to_dict("records"),
                               "note": "" if not self.device.interpreted else
                               "peak memory is read from the CUDA allocator; none under the interpreter"}
        unit = "ms (CPU, interpreter)" if self.device.interpreted else "ms"
        several = len(self.request.buckets) > 1
        how = ("CPU wall clock under the Triton interpreter" if self.device.interpreted else
               "CUDA events, L2 flushed before each run")
        _display(markdown=f"## Timings\n\n{count(plan.repetitions, 'repetition')} per contender after {plan.warmup} warm-up, "
                          f"interleaved in random order ({how}); ratios are time / `{reference}` "
                          f"time with {plan.confidence:.0%} simultaneous intervals"
                          + (f", widened by the timer's resolution ({plan.resolution_ms * 1e3:g} µs over the "
                             "reference's median)" if plan.resolution_ms else "")
                          + f". Copy bandwidth in this run: "
                          f"{bandwidth / 1e9:.0f} GB/s (bytes read + written)."
                          + (f"\n\nTimed at the shapes of bucket{'s' if several else ''} "
                             f"{', '.join(sorted(self.request.buckets))} alone ({count(len(cases), 'case')}): the "
                             f"candidate is the current best with only {'their' if several else 'its'} `DISPATCH` "
                             f"entries changed, so at the suite's other {count(len(left_out), 'case')} both "
                             "launch the same kernels with the same settings (the judge checks the sources again "
                             "and counts their ratios as 1)." if left_out else ""))
        _display(timing_table(summary, unit))
        failed = [c for c in spot_checks if not c["passed"]]
        _display(markdown=f"Spot checks of timed calls (fresh inputs, against float64): {len(spot_checks)}, "
                          f"{len(failed)} failed" + "".join(f"\n- {c['contender']} {c['pass']} {c['shape']} "
                                                           f"{c['dtype']}: {c['reason']}" for c in failed))
        _display(markdown="## Peak memory (forward + backward, above the inputs)")
        if self.device.interpreted:
            _display(markdown=self.data["memory"]["note"])
        else:
            _display(memory.pivot_table(index=["shape", "dtype"], columns="contender", values="peak_bytes",
                                        sort=False))

    def _timed_buckets(self) -> list[str]:
        """The dispatch buckets whose cases alone the timing measures (``_timed_cases``); empty: every case."""
        return sorted(self.request.buckets) if self._timed_cases()[1] else []

    def _timed_cases(self) -> tuple[list, list]:
        """(the suite's cases the timing measures, those it leaves out): every case, or with
        ``TrialRequest.buckets`` those of the named dispatch buckets alone (every case where none falls in them:
        the judge then finds nothing of theirs to judge, and says so)."""
        from liger_perf.kernel.variants import split_by_buckets

        return split_by_buckets(self.spec.cases(self.suite, "bench"), self.request.buckets)

    @_step("accuracy", "accuracy against float64")
    def accuracy(self) -> None:
        """Each contender's error against the float64 reference on the same inputs (``liger_perf.measure.accuracy``):
        the judge holds the candidate's to the current best's. torch.compile is left out (it would compile
        again for every dtype and option set); eager and liger-kernel, where timed, are measured too."""
        from liger_perf.measure.accuracy import ACCURACY_SEED, accuracy_cases, measure
        from liger_perf.measure.timing import instances

        contenders = {name: instances(copies)[0]
                      for name, copies in getattr(self, "_timed", {}).items() if name != "torch.compile"}
        if not contenders:
            return
        cases = accuracy_cases(self.spec, self.device.suite)
        done = iter(range(1, len(cases) + 1))
        rows = measure(self.spec, contenders, self.device, cases,
                       progress=lambda what: self.progress.report("accuracy", next(done, len(cases)), len(cases),
                                                                  what))
        self.data["accuracy"] = {"seed": ACCURACY_SEED, "rows": rows}
        import pandas as pd

        frame = pd.DataFrame(rows)
        table = (frame.groupby(["dtype", "config", "output", "contender"], sort=False)["error"].max()
                 .unstack("contender").reset_index())
        _display(markdown="## Accuracy against float64\n\n‖result − float64 reference‖ / ‖reference‖ over each "
                          "tensor, every contender on the same inputs and incoming gradients; the largest over "
                          "the shapes. The judge compares the candidate's with the current best's (geometric "
                          "mean over the shapes, per dtype, options and output).")
        _display(table)

    @_step("profile", "NCU profile")
    def profile(self) -> None:
        from liger_perf.measure.ncu import profile, profiled_shapes, summary_table

        passes = [p for p in self.passes if p != "full"]  # full is forward plus backward: profiled as those
        # A staged trial that will not be accepted as measured gets the light profile: the kept metrics at the
        # widest shape only (what its notebook shows a reader); the full profile (every shape, NCU's advice, the
        # current best's durations to cross-check the timing) is for a trial that may be accepted.
        light = self.request.gate == "quick" or (self.request.gate == "staged" and not self.would_accept)
        if not self.request.ncu:
            result_status, reason, metrics, advice, report = "unavailable", "disabled for this trial", None, None, None
        else:
            report_path = (self.artifacts or Path(".")) / "profile.ncu-rep"
            # Where the timing was confined to the move's buckets, so is the profile: elsewhere the candidate runs
            # the best's code, whose profile its own trial holds (``history.best_as_profiled``).
            cases = self._timed_cases()[0]
            widest = max((c.shape for c in cases), key=math.prod)
            if not self.device.interpreted:  # no NCU under the interpreter: no such step to announce
                self.progress.report("NCU profile", detail=", ".join(passes) + (" (light)" if light else ""))
            shapes = [widest] if light else profiled_shapes(cases, self.suite != self.device.suite
                                                            or bool(self._timed_buckets()))
            res = profile(self.spec.name, self.variant.path, passes, self.device.interpreted, report_path,
                          driver_args=self._driver_args(shapes), kept_only=light)
            result_status, reason, metrics, advice = res.status, res.reason, res.metrics, res.advice
            report = str(res.report) if res.report else None
        if result_status != "ok":
            self.data["ncu"] = {"status": "unavailable", "reason": reason}
            _display(markdown=f"## NCU\n\nncu: unavailable ({reason})")
            return
        widest = _widest_cases(advice)
        kept_advice = advice.merge(widest, on=["pass", "shape", "dtype"]) if len(advice) else advice
        against, against_status = ([], "not profiled: a light profile (the trial is not accepted as measured)"
                                   ) if light else self._against_durations(passes)
        launches = _launch_records(metrics, "candidate") + against
        self.data["ncu"] = {"status": "ok", "reason": "", "report": report, "passes": passes,
                            "scope": "light" if light else "full",
                            "against_durations": against_status,
                            "units": dict(zip(metrics["metric"], metrics["unit"])),
                            "launches": launches,
                            "advice": kept_advice.drop(columns=["launch"]).to_dict("records")}
        _display(markdown=f"## NCU ({len(self.data['ncu']['launches'])} kernel launches profiled; report "
                          f"`{report}`)")
        _display(summary_table(metrics))
        _display(markdown="### NCU's advice at the widest shape of each pass and dtype")
        for row in kept_advice.to_dict("records"):
            speedup = row["estimated_speedup_pct"]
            speedup = f" (estimated speedup {speedup:.0f}%)" if speedup is not None and speedup == speedup else ""
            _display(markdown=f"- **{row['pass']} {row['shape']} {row['dtype']} `{row['kernel']}` / {row['rule']}**"
                              f"{speedup}: {row['message']}")

    def _driver_args(self, shapes: list[tuple[int, ...]] | None) -> tuple[str, ...]:
        """The NCU driver's arguments for this trial's suite and ``shapes`` (None: every shape of it), and for a
        timing confined to some buckets the dtypes of their cases (the driver profiles a shape in every dtype
        asked, and a bucket is one element size)."""
        from liger_perf.kernel.spec import dtype_name

        args = ("--suite", self.suite) if self.suite != self.device.suite else ()
        args += ("--shapes", ",".join("x".join(map(str, s)) for s in shapes)) if shapes else ()
        if self._timed_buckets():
            args += ("--dtypes", ",".join(sorted({dtype_name(c.dtype) for c in self._timed_cases()[0]})))
        return args

    def _against_durations(self, passes: list[str]) -> tuple[list[dict], str | None]:
        """The current best's kernel durations under NCU, and "ok" or why not (None: no current best). The
        judge holds each contender's CUDA-event times to its own kernels' durations, so a candidate that slowed
        the best's timing at run time shows."""
        from liger_perf.measure.ncu import profile, profiled_shapes

        if self.against is None:
            return [], None
        self.progress.report("NCU profile", detail="the current best's kernel durations")
        # Only where the timing measured it: the durations are there to be held to the timed CUDA-event times.
        shapes = profiled_shapes(self._timed_cases()[0], self.suite != self.device.suite
                                 or bool(self._timed_buckets()))
        res = profile(self.spec.name, self.against.path, passes, self.device.interpreted,
                      (self.artifacts or Path(".")) / "against-durations.ncu-rep", durations_only=True,
                      driver_args=self._driver_args(shapes))
        if res.status != "ok":
            return [], res.reason or "unavailable"
        return _launch_records(res.metrics, "against"), "ok"

    def result(self) -> dict:
        """Emit the structured result; the notebook's ``result`` cell calls this last. It is validated into a
        ``TrialResult`` first: a result that does not fit the type fails here, in the trial, not in a reader."""
        if self.data["status"] == "running":
            self.data["status"] = "complete"
        self.data["elapsed_s"] = time.time() - self.started
        payload = jsonable(TrialResult.model_validate(jsonable(self.data)).payload())
        try:
            from IPython.display import display

            display({RESULT_MIME: payload, "text/plain": f"trial status: {payload['status']}"}, raw=True)
        except ImportError:
            pass
        return payload

    # -- helpers ---------------------------------------------------------------------------------------------

    def _stop(self, status: str, reason: str) -> None:
        self.data["status"], self.data["reason"] = status, reason

    def _skipped(self, step: str) -> bool:
        if self.data["status"] in ("running",):
            return False
        _display(markdown=f"*{step}: skipped ({self.data['status']}: {self.data['reason']})*")
        return True


def _widest_cases(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return frame[["pass", "shape", "dtype"]]
    cases = frame[["pass", "shape", "dtype"]].drop_duplicates()
    cases = cases.assign(_size=cases["shape"].map(_numel))
    return cases.loc[cases.groupby(["pass", "dtype"])["_size"].idxmax(), ["pass", "shape", "dtype"]]


def _numel(shape: str) -> int:
    try:
        return math.prod(int(s) for s in shape.split("x"))
    except ValueError:
        return 0


def _launch_records(metrics: pd.DataFrame, contender: str) -> list[dict]:
    """One record per profiled launch: its contender, case, kernel name and ``{metric: value}``."""
    records = []
    for (launch, pass_name, shape, dtype, kernel), group in metrics.groupby(
            ["launch", "pass", "shape", "dtype", "kernel"], sort=True):
        records.append({"pass": pass_name, "shape": shape, "dtype": dtype, "kernel": kernel, "launch": int(launch),
                        "contender": contender, "metrics": dict(zip(group["metric"], group["value"]))})
    return records
