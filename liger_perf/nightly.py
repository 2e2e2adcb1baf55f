"""``liger-perf nightly``: unattended tuning across kernels, safe to schedule, and a morning summary.

Per kernel, in the configured order: re-validate the current best against the baseline on today's software
stack (when the stack changed since the last re-validation, or there never was one): a side-by-side trial whose
gate checks the best again. The best failing the gate, or its advantage over the baseline shrinking by more than
``max_regression`` against the last recorded figure, is a regression, reported with both runs' environment
fingerprints. Then the optimize loop goes on from the notebooks within what is left of the kernel's trial budget
for the night and of the wall clock.

A trial that never reached its variant (the harness failed: a runner error, a missing dependency, a notebook
kernel that could not start) and any other failure of the job itself are **errors of the job**, reported with
their cause; they are never a regression of a kernel, and one kernel's error does not stop the others. The
summary lands in ``reports/<device>/nightly/<date>-<time>.md`` and ``.json`` (rewritten after each kernel, so a killed
run leaves what it did); it names notebooks relative to the workspace. Exit codes: ``EXIT_FAILED`` (1) when a
regression was found, else ``EXIT_JOB_ERROR`` (3) when the job had errors, else 0.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from liger_perf.core.config import YamlModel, load_yaml_model
from liger_perf.core.errors import EXIT_FAILED, EXIT_JOB_ERROR, UserError
from liger_perf.judge import drift_ratios
from liger_perf.judge.guardrails import load_guardrails
from liger_perf.record.history import (accepted_chain, geomean, load_trials, measured_ratios, on_target,
                                target_ratio, trial_variant_file)
from liger_perf.loop import OptimizeLoop
from liger_perf.propose import get_proposer
from liger_perf.record.notebook import jsonable
from liger_perf.kernel.registry import baseline_path, kernel_names, unknown_kernel
from liger_perf.run import Runner, history_device, run_trial
from liger_perf.record.schema import HARNESS_ERROR, Fingerprint, TrialResult, measures_suite
from liger_perf.record.store import Store, write_file
from liger_perf.core.workspace import current
from liger_perf.kernel.variants import source_hash
from liger_perf.core.wording import count, speedup

_ABSOLUTE = re.compile(r"(?<![\w.~:/])/(?:[^\s/\"':,()\[\]]+/)+[^\s/\"':,()\[\]]*")
STACK_KEYS = ("gpu", "driver", "cuda", "torch", "triton", "liger_perf", "python")
#: How long a passing selfcheck stands for the machine it ran on (the same code, the same stack): one night.
SELFCHECK_REUSE_S = 12 * 3600


class KernelJob(YamlModel):
    name: str
    target: Literal["forward", "backward", "full", "memory"] = "backward"
    # Trials of the optimize loop per night (the summary's date): a second run the same night (a retried or a
    # manual start) spends only what the earlier ones left.
    budget: int = Field(5, ge=0, le=1000)
    #: What the loop's trials time: "" the device's suite, or "models-tune", the tuning split of real models' shapes
    #: (``optimize --suite``). A GPU only: under the interpreter the night tunes on the device's suite, and says so.
    suite: Literal["", "models-tune"] = ""

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in kernel_names():
            raise ValueError(unknown_kernel(name, kernel_names()))
        return name


DEFAULT_GUARDRAILS = "guardrails.yaml"


class NightlyConfig(YamlModel):
    kernels: list[KernelJob] = Field(min_length=1)
    # The whole job: no tuning trial or screening starts that the recent ones' pace says would end after it.
    wall_clock_s: float = Field(6 * 3600, gt=0)
    device: Literal["auto", "cuda", "interpret"] = "auto"
    proposer: Literal["rules", "llm", "auto"] = "rules"
    model: str | None = None
    guardrails: str = DEFAULT_GUARDRAILS
    repetitions: int = Field(0, ge=0)  # 0: the trial's default for the device
    convergence: bool = True
    #: Candidates per round screened in one notebook before full trials (0: none); the interpreter never screens.
    screen: int = Field(4, ge=0)
    unsandboxed: bool = False  # proposer llm|auto where no sandbox is available: run its code anyway
    #: ``liger-perf selfcheck`` first (the gate of each baseline, a short trial of each): a machine that fails it
    #: runs no trial tonight, and the night is an error of the job, never a regression of a kernel.
    selfcheck: bool = True

    @field_validator("kernels")
    @classmethod
    def _each_kernel_once(cls, kernels: list[KernelJob]) -> list[KernelJob]:
        # A night's trial budget is counted per kernel and target: a second entry would get a second budget.
        jobs = [(job.name, job.target) for job in kernels]
        twice = next((job for job in jobs if jobs.count(job) > 1), None)
        if twice:
            raise ValueError(f"{twice[0]} with target {twice[1]} is listed twice: list each kernel and target once "
                             "(a night's trial budget is theirs)")
        return kernels


def load_config(path: str | Path) -> NightlyConfig:
    return load_yaml_model(path, NightlyConfig)


def stack_of(fingerprint: Fingerprint | dict | None) -> dict:
    """The parts of a fingerprint whose change calls for a re-validation (a recorded one, or today's)."""
    fields = fingerprint.model_dump() if isinstance(fingerprint, Fingerprint) else (fingerprint or {})
    return {k: fields.get(k) for k in STACK_KEYS}


def _judged_gain(trial: TrialResult, target: str) -> str:
    """What the judge found of an accepted trial against the best it was timed beside, worded as the judge words
    it: a speedup (``1.38x (faster) [1.37x, 1.40x] over the previous best``), or for a memory target the
    peak-memory ratio (``peak memory 0.725 of the previous best's``); empty where it was not judged on a ratio."""
    judged = trial.judged
    if judged is None or judged.target_ratio is None:
        return ""
    if target == "memory":
        return f"peak memory {judged.target_ratio:.3f} of the previous best's"
    low, high = judged.target_bounds
    return f"{speedup(judged.target_ratio, low, high)} over the previous best"


def _advantage(result: TrialResult, target: str, keys: set | None = None) -> float:
    """Baseline time (or memory) over the best's, from a best-against-baseline trial: > 1 means the best wins.
    ``keys``: only those (pass, shape, dtype) cases."""
    ratio = target_ratio(result, target, keys)
    return 1 / ratio if math.isfinite(ratio) and ratio > 0 else math.nan


class Nightly:
    def __init__(self, config: NightlyConfig, root: Path | None = None, reports: Path | None = None,
                 echo=print, runner: Runner | None = None, selfcheck=None):
        self.config = config
        from liger_perf.run.papermill import PapermillRunner

        if runner is None:
            runner = PapermillRunner()
        self.runner = runner
        # The selfcheck runs here: it checks the machine the trials run on only where they run here too.
        if selfcheck is None and isinstance(runner, PapermillRunner):
            from liger_perf.selfcheck import run_selfcheck

            selfcheck = run_selfcheck
        self.selfcheck = selfcheck
        self.selfcheck_record: dict | None = None
        # The history (and the summaries) of the device the trials run on.
        self.store = (Store(root, reports) if root is not None else
                      Store(None, reports, device=history_device(runner, config.device)))
        self.root = self.store.notebooks
        self.echo = echo
        self.started = time.time()
        self.now = dt.datetime.now()
        self.stack: dict = stack_of(None)  # today's software stack, read once when the job starts

    def time_left(self) -> float:
        return self.config.wall_clock_s - (time.time() - self.started)

    def run(self) -> tuple[int, Path]:
        """(exit code, summary path)."""
        from liger_perf.isolation.sandbox import require_sandbox

        require_sandbox(self.config.proposer, self.config.unsandboxed)
        for job in self.config.kernels:  # a missing or broken guardrails file is bad input: one line, before the
            self._rules(job)             # selfcheck and any trial, not an error of the job per kernel at the end
        self.root.mkdir(parents=True, exist_ok=True)
        with self.store.lock("nightly"):
            self.results: list[dict] = []
            results = self.results
            self.job_errors = job_errors = self._read_stack()
            unfit = self._selfcheck() if not job_errors else None
            if unfit:
                job_errors.append({"what": unfit})
            spent = self._spent_tonight()
            for job in self.config.kernels:
                started = time.time()
                entry: dict[str, Any] = {"kernel": job.name, "target": job.target, "accepted": [],
                                         "regressions": [], "errors": [], "trials_run": 0, "tuning_trials": 0,
                                         "notebooks": [], "trials": [], "seconds": 0.0}
                results.append(entry)
                try:
                    if unfit:
                        entry["skipped"] = "the machine failed its selfcheck (see the errors of the job)"
                    elif self.time_left() <= 0:
                        entry["skipped"] = "the job's wall-clock budget was spent before this kernel"
                    else:
                        self._kernel(job, entry, budget_left=max(0, job.budget - spent.get((job.name, job.target), 0)))
                except Exception as e:  # one kernel's failure must not stop the others
                    entry["errors"].append({"what": self._relative(f"{type(e).__name__}: {e}"),
                                            "traceback": self._relative(traceback.format_exc(limit=5))})
                    self.echo(f"{job.name}: error of the job: {type(e).__name__}: {e}")
                entry["seconds"] = round(time.time() - started, 1)
                self._write_summary(finished=False)
            path = self._write_summary(finished=True)
        if any(e["regressions"] for e in results):
            return EXIT_FAILED, path
        return (EXIT_JOB_ERROR if job_errors or any(e["errors"] for e in results) else 0), path

    def _read_stack(self) -> list[dict]:
        """Today's stack, read by the runner where the trials run (a trial that could not run records none): the
        errors it raised."""
        try:
            self.stack = stack_of(self.runner.fingerprint(self.config.device))
        except Exception as e:  # no GPU where one was asked for, a broken driver: the job goes on and says so
            self.echo(f"error of the job: the software stack could not be read: {type(e).__name__}: {e}")
            return [{"what": self._relative(f"the software stack could not be read: {type(e).__name__}: {e}")}]
        return []

    def _selfcheck(self) -> str | None:
        """``liger-perf selfcheck`` of the night's kernels' baselines (their bests are re-validated by trials of
        their own) before anything else: why the machine is unfit for tonight's trials, or None. Its record is
        ``reports/<device>/selfcheck.json``."""
        if not self.config.selfcheck or self.selfcheck is None:
            return None
        from liger_perf.selfcheck import summary_line, write_record

        names = [job.name for job in self.config.kernels]
        earlier = self._passed_selfcheck(names)
        if earlier is not None:
            self.selfcheck_record = earlier
            self.echo(earlier["summary"])
            return None
        self.echo("selfcheck: the gate and a short trial of each kernel's baseline, before tonight's trials")
        try:
            record = self.selfcheck(self.config.device, names, best=False, echo=self.echo)
            path = write_record(record, self.store.reports)
        except Exception as e:  # the check itself could not run: the machine is no fitter for trials
            return self._relative(f"the selfcheck could not run: {type(e).__name__}: {e}")
        self.selfcheck_record = {"passed": record["passed"], "record": self._relative(path),
                                 "summary": self._relative(summary_line(record))}
        self.echo(summary_line(record))
        return None if record["passed"] else (f"{self._relative(summary_line(record))} (record: "
                                              f"{self._relative(path)}); no trial ran tonight")

    def _passed_selfcheck(self, names: list[str]) -> dict | None:
        """The record of a selfcheck that already passed on this machine (its host name), on today's stack, for
        the code that runs now (each kernel's ``code_digests``), within ``SELFCHECK_REUSE_S``, with a passing gate and
        trial of each of tonight's kernels: a second run the same night, or the developer's own selfcheck just
        before. Nothing it checked has changed, so it is not run again. None where any of that differs, is
        missing or cannot be read (a record committed from another machine never stands for this one)."""
        import platform

        from liger_perf.selfcheck import code_digests

        path = self.store.reports / "selfcheck.json"
        try:
            record = json.loads(path.read_text())
            steps = {(r["kernel"], r["step"]) for r in record["rows"] if r["variant"] == "baseline"
                     and r["status"] == "pass"}
            age = (dt.datetime.now() - dt.datetime.fromisoformat(record["started"])).total_seconds()
            fits = (record["passed"] is True and record.get("host") == platform.node() and 0 <= age
                    <= SELFCHECK_REUSE_S
                    and all(self.stack.get(k) is not None and record["stack"].get(k) == self.stack.get(k)
                            for k in STACK_KEYS)
                    and all(record["code"].get(name) == digest for name, digest in code_digests(names).items())
                    and all((name, step) in steps for name in names for step in ("gate", "trial", "screening")))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not fits:
            return None
        return {"passed": True, "record": self._relative(path),
                "summary": (f"selfcheck: passed on this machine for this code on this stack at "
                            f"{record['started']} (commit {record.get('commit')}); not run again")}

    def _spent_tonight(self) -> dict[tuple[str, str], int]:
        """Tuning trials per kernel and target that earlier runs of the job recorded tonight (the same date). A
        run's summary is rewritten after each of its trials, so a killed run's trials count too."""
        spent: dict[tuple[str, str], int] = {}
        for path in sorted(self._summaries().glob(f"{self.now:%Y-%m-%d}-*.json")):
            try:
                summary = json.loads(path.read_text())
                for e in summary["kernels"]:
                    job = (e["kernel"], e.get("target", KernelJob.model_fields["target"].default))
                    spent[job] = spent.get(job, 0) + int(e.get("tuning_trials", 0))
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                self.echo(f"warning: skipping {path.name}: not a nightly summary this job can read")
        return spent

    # -- one kernel ----------------------------------------------------------------------------------------

    def _rules(self, job: KernelJob):
        """The acceptance rules of ``job``: the configured guardrails file with the job's target."""
        guardrails = Path(self.config.guardrails)
        guardrails = guardrails if guardrails.is_absolute() else current().root / guardrails
        # A workspace without the file (the default name) has the default rules; a named file must exist.
        return load_guardrails(guardrails if guardrails.is_file() or self.config.guardrails != DEFAULT_GUARDRAILS
                               else None,
                               target=job.target)

    def _kernel(self, job: KernelJob, entry: dict, budget_left: int) -> None:
        rules = self._rules(job)
        mode = self.runner.mode(self.config.device)
        baseline_sha = source_hash(baseline_path(job.name).read_text())
        trials = [t for t in load_trials(job.name, self.root) if t.device == mode]
        baseline, chain = accepted_chain(trials, baseline_sha)
        known = {t.trial_id for t in load_trials(job.name, self.root)}
        if chain:
            self._revalidate(job, entry, trials, chain, rules)
            self._record_new_trials(job, entry, known)
        if job.budget and not budget_left:
            entry["stop_reason"] = (f"tonight's budget of {count(job.budget, 'trial')} was spent by an earlier "
                                    f"run of the job ({self._relative(self._summaries())}/{self.now:%Y-%m-%d}-*)")
        elif budget_left and self.time_left() > 0:
            loop = OptimizeLoop(job.name, rules, get_proposer(self.config.proposer, model=self.config.model),
                                device=self.config.device, budget=budget_left, root=self.root,
                                repetitions=self.config.repetitions, convergence=self.config.convergence,
                                deadline=self.started + self.config.wall_clock_s, runner=self.runner,
                                on_event=lambda event: self._record_new_trials(job, entry, known),
                                screen=self.config.screen if mode != "interpret" else 0, suite=self._suite(job))
            if job.suite and mode == "interpret":
                entry["suite"] = f"the device's: {job.suite} needs a GPU"
            outcome = loop.run()
            entry["stop_reason"] = self._relative(outcome.stop_reason)
            for error in (outcome.harness_error, outcome.baseline_failed):
                if error:
                    entry["errors"].append({"what": self._relative(error)})
            self.echo(f"{job.name}: {entry['stop_reason']}")
        self._record_new_trials(job, entry, known)

    def _record_new_trials(self, job: KernelJob, entry: dict, known: set[int]) -> None:
        """Put the trials this run added into the kernel's entry, and the summary on disk: a killed run leaves
        a summary of every trial it finished (and tonight's budget counts them)."""
        new = [t for t in load_trials(job.name, self.root) if t.trial_id not in known]
        entry["trials_run"] = len(new)
        entry["tuning_trials"] = sum(t.kind == "experiment" and t.status != HARNESS_ERROR
                                     for t in new)  # a trial that never ran its variant spends no budget
        entry["notebooks"] = [self._notebook(t) for t in new]
        entry["trials"] = [{"trial": t.trial_id, "name": t.name, "kind": t.kind, "status": t.status,
                            "verdict": t.verdict} for t in new]
        entry["accepted"] = [{"trial": t.trial_id, "name": t.name, "gain": t.gain,
                              "judged": _judged_gain(t, job.target), "notebook": self._notebook(t)}
                             for t in new if t.verdict == "accepted"]
        self._write_summary(finished=False)

    def _suite(self, job: KernelJob) -> str:
        """What tonight's trials of ``job`` time: its suite on a GPU, the device's under the interpreter."""
        return job.suite if self.runner.mode(self.config.device) != "interpret" else ""

    def _revalidate(self, job: KernelJob, entry: dict, trials: list[TrialResult], chain: list[TrialResult],
                    rules) -> None:
        best = chain[-1]
        # Timed on what tonight's loop tunes on (the device's suite under the interpreter), and compared with the
        # re-validations of that suite only: another suite's shapes would say nothing of these.
        suite = self._suite(job)
        revalidations = [t for t in trials if t.kind == "revalidation" and t.status != HARNESS_ERROR
                         and t.variant_sha == best.variant_sha and measures_suite(t.suite, suite)]
        # A re-validation that completed stands until the stack changes (a slowdown it found was reported then).
        # One that failed is run again each night: the regression is reported until it is resolved, and a failure
        # of the gate's own making, since fixed, is undone (on the H200 a bound too tight at 8 elements failed 0031).
        last = next((t for t in reversed(revalidations) if t.status == "complete"), None)
        if (revalidations and revalidations[-1].status == "complete"
                and stack_of(revalidations[-1].fingerprint) == self.stack):
            entry["revalidation"] = (f"skipped: the software stack is unchanged since trial "
                                     f"{revalidations[-1].trial_id:04d}, which completed")
            return
        best_file = trial_variant_file(job.name, best, self.root)  # rebuilt from the notebook when gone or changed
        self.echo(f"{job.name}: re-validating trial {best.trial_id:04d} {best.name} against the baseline")
        with self.store.lock("optimize", job.name, label="nightly"):  # one writer of the kernel's history
            run = run_trial(job.name, best_file, baseline_path(job.name), name=f"revalidate-{best.name}"[:60],
                            hypothesis="nightly re-validation of the current best against the baseline on "
                                       "today's stack",
                            device=self.config.device, repetitions=self.config.repetitions,
                            convergence=self.config.convergence, confidence=rules.confidence, root=self.root,
                            timeout_s=rules.trial_timeout_s, kind="revalidation", peers=False, runner=self.runner,
                            suite=suite)
        result = run.result
        notebook = self._relative(run.notebook)
        if result.status == HARNESS_ERROR:  # the best never ran: nothing is known about it tonight
            entry["errors"].append({"what": f"the re-validation of trial {best.trial_id:04d} could not run: "
                                            f"{self._relative(result.reason)}", "notebook": notebook})
            entry["revalidation"] = "not done: the harness failed (see the errors)"
            return
        previous = last or best
        compared = None  # the cases both figures take: every case of tonight's trial, or those the chain timed too
        if last is not None:
            before = _advantage(last, job.target)
        else:  # the accepted chain's own side-by-side ratios, multiplied, where tonight's trial timed the case too
            times, memory = measured_ratios(result)
            ratios = {k: v for k, v in drift_ratios(chain, trials).items() if k in times or k in memory}
            compared = {k for k in ratios if on_target(k, job.target)}
            values = [ratios[k] for k in compared]
            before = 1 / geomean(values) if values else math.nan
        evidence = {"best_trial": best.trial_id, "revalidation_notebook": notebook,
                    "previous_notebook": self._notebook(previous),
                    "fingerprint_before": stack_of(previous.fingerprint),
                    "fingerprint_now": stack_of(result.fingerprint) if result.fingerprint else self.stack}
        if result.status != "complete":
            entry["regressions"].append({**evidence, "what": f"the best no longer passes: {result.status}: "
                                                             f"{self._relative(result.reason)}"})
            return
        now = _advantage(result, job.target, compared)

        def shown(advantage: float) -> str:  # a speedup over the baseline as people read one; memory as it is
            return f"{advantage:.3f}x" if job.target == "memory" else speedup(1 / advantage if advantage else None)

        entry["revalidation"] = f"best vs baseline on {job.target}: {shown(now)} now, {shown(before)} before"
        if math.isfinite(before) and math.isfinite(now) and now < before * (1 - rules.max_regression):
            entry["regressions"].append({**evidence, "advantage_before": before, "advantage_now": now,
                                         "what": f"the best's {job.target} advantage over the baseline shrank from "
                                                 f"{shown(before)} to {shown(now)} (more than "
                                                 f"{rules.max_regression:.0%})"})

    # -- the summary ---------------------------------------------------------------------------------------

    def _relative(self, text: str | Path | None) -> str | None:
        """A path, or a message holding paths (a reason, a traceback), relative to the workspace (the folder that
        holds the notebooks folder): a summary is committed and read on other machines, where this machine's
        absolute paths mean nothing."""
        if text is None:
            return None
        workspace = current().root
        if not self.root.absolute().is_relative_to(workspace):  # a history kept elsewhere: the folder holding it
            workspace = self.root.absolute().parent
        if isinstance(text, Path):
            return os.path.relpath(text.absolute(), workspace)
        bases = {workspace, self.root.resolve().parent, current().root}
        for base in sorted(bases, key=lambda b: len(str(b)), reverse=True):  # the deepest first
            text = text.replace(f"{base}/", "").replace(str(base), ".")
        # Whatever else is absolute (site-packages in a traceback, a temporary folder): its last two parts.
        return _ABSOLUTE.sub(lambda m: "…/" + "/".join(m.group(0).rsplit("/", 2)[-2:]), text)

    def _notebook(self, trial: TrialResult) -> str | None:
        return self._relative(Path(trial.notebook)) if trial.notebook else None

    def _summaries(self) -> Path:
        return self.store.nightly_reports()

    def _write_summary(self, finished: bool) -> Path:
        results, job_errors = self.results, self.job_errors
        out = self._summaries()
        out.mkdir(parents=True, exist_ok=True)
        stamp = f"{self.now:%Y-%m-%d-%H%M%S}"
        path = out / f"{stamp}.md"
        errors = len(job_errors) + sum(len(e["errors"]) for e in results)
        summary = {"date": f"{self.now:%Y-%m-%d}", "started": self.now.isoformat(timespec="seconds"),
                   "finished": finished, "seconds": round(time.time() - self.started, 1), "stack": self.stack,
                   "regressions": sum(len(e["regressions"]) for e in results), "errors": errors,
                   "job_errors": job_errors, "selfcheck": self.selfcheck_record,
                   "kernels": results}
        write_file(out / f"{stamp}.json", json.dumps(jsonable(summary), indent=1) + "\n")
        stack = ", ".join(f"{k} {v}" for k, v in self.stack.items() if v) or "unknown"
        lines = [f"# Nightly run {self.now:%Y-%m-%d %H:%M:%S}" + ("" if finished else " (still running, or killed)"),
                 "", f"{count(len(results), 'kernel')}, {count(sum(e['trials_run'] for e in results), 'trial')}, "
                 f"{summary['seconds']:.0f} s; **{count(summary['regressions'], 'regression')}**, "
                 f"**{count(errors, 'error')} of the job**.", "", f"Stack: {stack}.", ""]
        if summary["selfcheck"]:
            lines += [f"Selfcheck: {summary['selfcheck']['summary']} (`{summary['selfcheck']['record']}`).", ""]
        lines += [f"- **error of the job**: {e['what']}" for e in job_errors] + ([""] if job_errors else [])
        for e in results:
            lines += [f"## {e['kernel']} ({e['target']})", "",
                      f"- trials run: {e['trials_run']}, time: {e['seconds']:.0f} s"]
            if e.get("skipped"):
                lines.append(f"- skipped: {e['skipped']}")
            for err in e["errors"]:
                lines.append(f"- **error of the job** (not a regression): {err['what']}"
                             + (f" (`{err['notebook']}`)" if err.get("notebook") else ""))
            if e.get("revalidation"):
                lines.append(f"- re-validation: {e['revalidation']}")
            for r in e["regressions"]:
                lines.append(f"- **regression**: {r['what']} (now: `{r['revalidation_notebook']}`, before: "
                             f"`{r.get('previous_notebook')}`)")
                lines.append("  | | before | now |\n  | --- | --- | --- |")
                lines += [f"  | {k} | {r['fingerprint_before'].get(k)} | {r['fingerprint_now'].get(k)} |"
                          for k in STACK_KEYS]
            for a in e["accepted"]:
                lines.append(f"- accepted: trial {a['trial']:04d} `{a['name']}`"
                             + (f", {e['target']}: {a['judged']}" if a.get("judged") else "")
                             + f" (`{a['notebook']}`)")
            lines += [f"- trial {t['trial']:04d} `{t['name']}` ({t['kind']}): {t['status']}"
                      + (f", {t['verdict']}" if t.get("verdict") else "") for t in e.get("trials", [])]
            if e.get("stop_reason"):
                lines.append(f"- tuning: {e['stop_reason']}")
            lines += [f"- notebooks: {', '.join(f'`{n}`' for n in e['notebooks']) or 'none'}", ""]
        write_file(path, "\n".join(lines))
        return path


_CRON = """\
# crontab -e: every night at 02:00; the log goes into the workspace's reports/ (made if missing)
0 2 * * * cd {cd} && mkdir -p reports && {python} {args} >> {log} 2>&1
"""
_SYSTEMD = """\
# ~/.config/systemd/user/liger-perf-nightly.service
[Unit]
Description=liger-perf nightly tuning

[Service]
Type=oneshot
WorkingDirectory={root}
ExecStart={python} {args}

# ~/.config/systemd/user/liger-perf-nightly.timer
[Unit]
Description=liger-perf nightly tuning

[Timer]
OnCalendar=*-*-* 02:00:00
Persistent=true

[Install]
WantedBy=timers.target

# then: systemctl --user daemon-reload && systemctl --user enable --now liger-perf-nightly.timer
"""
_GITHUB = """\
# .github/workflows/nightly.yml: on a self-hosted runner with a GPU (labels: self-hosted, gpu)
name: liger-perf nightly
on:
  schedule:
    - cron: '0 2 * * *'
  workflow_dispatch:
concurrency: liger-perf-nightly
jobs:
  nightly:
    runs-on: [self-hosted, gpu]
    timeout-minutes: 480
    steps:
      - uses: actions/checkout@v4
      - run: {install}
      - run: {run}
      - name: commit the notebooks and the summary, also when a regression failed the job
        if: always()
        run: |
          git add notebooks reports
          git -c user.name=liger-perf -c user.email=liger-perf@localhost commit -m "nightly $(date +%F)" || true
          git push
"""


def schedule(kind: str, config: Path | None) -> str:
    """A ready-to-use schedule for this workspace: ``cron``, ``systemd`` or ``github``."""
    templates = {"cron": _CRON, "systemd": _SYSTEMD, "github": _GITHUB}
    if kind not in templates:
        raise UserError(f"--print-schedule {kind!r}: use cron, systemd or github")
    import shlex

    root = current().root
    # Each path one word, as the line's reader splits words: a shell's (cron, GitHub's run:) or systemd's
    # (ExecStart=: double quotes with C escapes, $ and % its own). cron reads % as a newline unless escaped.
    percent = {"cron": "\\%", "systemd": "%%"}.get(kind, "%")

    def word(text) -> str:
        text = str(text)
        if kind != "systemd":
            return shlex.quote(text).replace("%", percent)
        if not re.fullmatch(r"[\w@+=:,./-]+", text):
            text = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return text.replace("$", "$$").replace("%", "%%")

    config_arg = ""
    if config:
        load_config(config)  # a typo is one line now, not a failed job at 2 a.m.
        config = Path(config).resolve()
        if kind == "github" and config.is_relative_to(root):  # a CI checkout lives elsewhere: stay relative
            config = config.relative_to(root)
        config_arg = f" --config {word(config)}"
    # This checkout installs itself; another workspace (a repository of the user's kernels) installs the
    # liger-perf its runner has, named by the version that wrote this.
    from liger_perf import __version__

    install = ("python3 -m pip install -e ." if (root / "pyproject.toml").is_file()
               and 'name = "liger-perf"' in (root / "pyproject.toml").read_text(errors="replace")
               else f"python3 -m pip install 'liger-perf=={__version__}'  # or the wheel's path on the runner")
    args = f"-m liger_perf nightly{config_arg}"
    return templates[kind].format(root=str(root).replace("%", percent), cd=word(root),
                                  log=word(root / "reports" / "nightly-cron.log"), python=word(sys.executable),
                                  args=args, install=install,
                                  run=json.dumps(f"python3 {args}"))  # a YAML scalar, whatever the path holds
