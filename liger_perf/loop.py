"""The optimize loop: propose, run, judge, record; resumable from the notebooks alone.

Every step's state is a notebook under ``notebooks/<device>/<kernel>/`` (and the variant module it ran, under
``notebooks/<device>/<kernel>/variants/``). Killed at any point, the same command picks up where the history ends:
a trial that finished without a verdict is judged, a half-written one (hidden ``.partial`` file) is dropped and
its variant runs again under a new number, and nothing that completed runs twice.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from liger_perf.core.errors import UserError
from liger_perf.judge.guardrails import Guardrails
from liger_perf.record.history import (accepted_chain, baseline_trials, best_timing_rows, carry_over_name,
                                       load_trials, screening_pace, trial_pace, trial_variant_file, warn)
from liger_perf.judge import confined_buckets, drift_ratios, judge, made_by, recheck_owed
from liger_perf.propose import Context, Proposal, Proposer, Stop
from liger_perf.propose.rules import peer_leads
from liger_perf.record.notebook import record_verdict
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.run import Runner, check_tuning_suite, history_device, trial_request
from liger_perf.record.schema import HARNESS_ERROR, TrialRequest, TrialResult, Verdict
from liger_perf.record.store import Store, trial_number, write_file
from liger_perf.kernel.variants import dispatch_bucket, source_hash, split_by_buckets, target_buckets, with_knobs
from liger_perf.core.wording import count, speedup


def _made_again(best: TrialResult, changes: dict) -> str | None:
    """A move's knob changes made on ``best``'s source; None where they name knobs ``best`` lacks."""
    try:
        return with_knobs(best.variant.source, changes)
    except UserError:
        return None


def trials_within(seconds_left: float, pace: float | None, workers: int, count: int) -> int:
    """How many of ``count`` trials, run ``workers`` at a time at ``pace`` seconds each, end within
    ``seconds_left``: none once it is past, all of them when there is no pace to go by (none of the kind has
    finished here yet), else those whose turn ends before it."""
    if count <= 0 or not seconds_left > 0:  # NaN: no time to go by is none left
        return 0
    if pace is None or pace <= 0 or math.isinf(seconds_left):
        return count
    rounds = seconds_left // pace  # a float, maybe beyond any int's range (or inf) where time is all but unlimited
    return count if rounds * max(workers, 1) >= count else int(rounds) * max(workers, 1)


@dataclass
class LoopEvent:
    """What the loop tells whoever watches it (the CLI's progress display, a test)."""

    #: "trial-start" | "trial-end" | "judged-pending" | "carry-over" | "waits" | "screen-start" | "screen-end" | "stop"
    kind: str
    message: str
    trial: TrialResult | None = None
    index: int = 0
    budget: int = 0
    request: TrialRequest | None = None  # a started trial's: its number, name and artifacts (progress) folder


@dataclass
class LoopOutcome:
    stop_reason: str
    best: TrialResult | None  # None: stopped before the baseline trial
    trials_run: int
    events: list[LoopEvent] = field(default_factory=list)
    #: Set when the loop stopped because the harness failed (a trial never reached its variant): a fault of the
    #: job, not of any variant, so whoever runs the loop reports it as such.
    harness_error: str | None = None
    #: Set when the baseline's own trial did not complete: nothing can be tuned until it does.
    baseline_failed: str | None = None


@dataclass
class NextStep:
    """What ``OptimizeLoop.run`` would begin next, read from the history alone (``liger-perf plan``): nothing is
    run or written, so no GPU is needed, and a GPU's history can be planned on any machine."""

    best: TrialResult | None  # the best the steps would run against; None before the baseline's trial
    baseline_trial: bool = False  # the baseline (as ``kernels/<kernel>/baseline.py`` is today) has no trial yet
    #: Full trials against ``best``, in order: the loop's own (a carry-over, a re-run, a candidate kept by an
    #: earlier screening) first, then the proposer's where no screening is due. After a screening, those it keeps
    #: join them in the same round.
    trials: list[Proposal] = field(default_factory=list)
    #: The proposer's batch, screened in one notebook; those that may be faster then get full trials, best first.
    screening: list[Proposal] = field(default_factory=list)
    stop: str = ""  # why nothing would run (as ``optimize`` would say it)
    #: The loop's messages on the way: the verdicts of trials left unjudged, which it gives first; a carry-over
    #: refused; a re-run waiting outside ``--buckets``.
    notes: list[str] = field(default_factory=list)


#: Screenings in a row that kept nothing, after which the loop stops (a screening spends no trial budget).
FRUITLESS_SCREENINGS = 3


def floor_reached(best: TrialResult, target: str, fraction: float, trials: list[TrialResult] | None = None) -> bool:
    """Whether the best's ``target`` pass ran at ``fraction`` of the copy-bandwidth floor or more at every case
    (its rows over the suite, ``history.best_timing_rows``, where its own trial's timing was confined)."""
    rows = best_timing_rows(best, trials or [], target)
    return bool(rows) and all((r.bandwidth_fraction or 0) >= fraction for r in rows)


def _chain_target(chain: list[TrialResult]) -> float:
    """The product of a chain's target ratios over the suite (each accepted step against the one before it)."""
    total = 1.0
    for trial in chain:
        total *= 1 - trial.suite_gain if trial.judged and trial.judged.target_ratio else 1.0
    return total


def _rounds(trials: list[TrialResult]) -> list[list[TrialResult]]:
    """The accepted trials of each round: a round is a run of consecutive experiments measured against one best.
    Two trials against the same best with another best's trial between them (a hand-run ``trial --against``
    an older best) were never candidates of one round, and are never reconciled with each other."""
    rounds: list[list[TrialResult]] = []
    previous = None
    for trial in trials:
        if trial.kind != "experiment" or not trial.against or trial.status == HARNESS_ERROR:
            continue
        if trial.against_sha != previous:
            rounds.append([])
            previous = trial.against_sha
        if trial.verdict == "accepted":
            rounds[-1].append(trial)
    return [accepted for accepted in rounds if len(accepted) > 1]


class OptimizeLoop:
    def __init__(self, kernel: str, guardrails: Guardrails, proposer: Proposer, device: str = "auto",
                 budget: int = 10, root: Path | None = None, repetitions: int = 0, convergence: bool = True,
                 confirm: Callable[[str], bool] | None = None, on_event: Callable[[LoopEvent], None] | None = None,
                 deadline: float | None = None, runner: Runner | None = None, screen: int = 0, suite: str = "",
                 buckets: tuple[str, ...] = ()):
        if runner is None:
            from liger_perf.run.papermill import PapermillRunner

            runner = PapermillRunner()
        self.spec = get_spec(kernel)
        self.kernel, self.guardrails, self.proposer, self.budget = kernel, guardrails, proposer, budget
        self.device_arg, self.runner = device, runner
        self.mode = runner.mode(device)  # the device mode the trials will record
        check_tuning_suite(suite, self.mode)
        #: What every trial times, screens and profiles: "" (the device's suite) or "models-tune". Trials of either
        #: suite form one chain: each is judged against the best side by side, on the shapes it measured, and the
        #: chain's cumulative ratios hold only where every step timed the shape (``judge.drift_ratios``).
        self.suite = suite
        #: The dispatch buckets this invocation tunes (``--buckets``): proposals and kept screening candidates
        #: change only their entries, and a re-run of a move in another bucket waits for a run that tunes it (a
        #: carry-over, or a re-run of a move of a default or of code, is not held back). Empty: all.
        self.buckets = tuple(buckets)
        # The history of the device the trials run on (a Dask cluster's GPUs, not this machine's).
        self.store = Store(root) if root is not None else Store(device=history_device(runner, device))
        self.root = self.store.notebooks
        self.repetitions, self.convergence = repetitions, convergence
        self.confirm, self.on_event = confirm, on_event
        # time.time() by which the loop is done (--max-minutes, a nightly job's wall clock): no trial or screening
        # starts that the recent ones' pace says would end after it.
        self.deadline = deadline
        self.baseline_file = baseline_path(kernel)
        self.baseline_sha = source_hash(self.baseline_file.read_text())
        self.events: list[LoopEvent] = []
        #: The best gain of each round this invocation judged (a round: one trial per worker against one best).
        #: The small-gains stop rule looks at these only: an earlier night's tail must not stop tonight's work.
        self.round_gains: list[float] = []
        #: Candidates the proposer is asked for per round, screened in one notebook when more than the round
        #: has room for (0: no screening; every proposal gets a full trial).
        self.screen = screen
        self.screened = 0  # candidates screened by this invocation
        self.fruitless_screenings = 0  # screenings in a row that kept no candidate (a proposer that never tires)
        #: While a plan (``plan``) is made: the verdicts it gives the trials a killed run left unjudged, as ``run``
        #: would, kept here by trial number instead of written into the notebooks. None: not planning.
        self._planned_verdicts: dict[int, Verdict] | None = None

    # -- the loop ------------------------------------------------------------------------------------------

    def run(self) -> LoopOutcome:
        self._check_target()
        with self.store.lock("optimize", self.kernel):
            self._drop_half_written()
            self._judge_pending()
            trials_run = 0
            trials = self._trials()
            baseline, _ = accepted_chain(trials, self.baseline_sha)
            if baseline is None:
                pace = trial_pace(trials, self.suite, kind="baseline")
                if not self._ends_in_time(pace):
                    # As for any trial: one the deadline would cut off is not begun (a baseline trial takes the
                    # longest of all: 374 s at 30 repetitions of the model suite on the H200, trial 0067).
                    return self._stop(self._out_of_time("a baseline trial", pace).reason, None, trials_run)
                request = self._request(Proposal("baseline", "", "", ""), None, variant_file=self.baseline_file,
                                        peers=True)
                from liger_perf.measure.timing import peers_here

                peers, _ = peers_here(self.spec, self.mode == "interpret")  # only those timed on this device
                self._emit("trial-start", f"baseline trial (with peers: {', '.join(peers)})",
                           index=1, request=request)
                baseline = self._run_all([request])[0]
                self._emit("trial-end", f"baseline: {baseline.status}", baseline)
                trials_run += 1
                if baseline.status == HARNESS_ERROR:
                    return self._harness_failed(baseline, best=baseline, trials_run=trials_run)
                if baseline.status != "complete":
                    reason = (f"the baseline trial did not complete ({baseline.status}: "
                              f"{baseline.reason}); fix the baseline first")
                    return self._stop(reason, baseline, trials_run, baseline_failed=reason)
                if self.confirm is not None and not self._confirm_plan(baseline):
                    return self._stop("stopped after the baseline trial: the plan was not confirmed", baseline,
                                      trials_run)
            while True:
                trials = self._trials()
                baseline, chain = accepted_chain(trials, self.baseline_sha)
                best = chain[-1] if chain else baseline
                reason = self._stop_reason(trials, best, trials_run)
                if reason:
                    return self._stop(reason, best, trials_run)
                best_file = self._best_file(best)
                steps = self._round(trials, best, room=min(self.runner.workers, self.budget - trials_run),
                                    best_file=best_file, budget_left=self.budget - trials_run)
                if isinstance(steps, Stop):
                    return self._stop(steps.reason, best, trials_run)
                if isinstance(steps, TrialResult):  # the screening's harness failed
                    return self._harness_failed(steps, best=best, trials_run=trials_run)
                if not steps:  # every candidate of the batch was dropped in screening: propose again
                    continue
                requests = []
                for step in steps:
                    trials_run += 1
                    requests.append(self._request(step, best_file))
                    self._emit("trial-start", f"{step.name} (current best: {best.trial_id:04d} {best.name}): "
                               f"{step.hypothesis}", index=trials_run, request=requests[-1])
                # Every candidate of the round was measured against the same best; no verdict on a variant that
                # never ran (a harness error).
                results = [r if r.status == HARNESS_ERROR else self._judge_and_record(r, chain)
                           for r in self._run_all(requests)]
                judged = [r.suite_gain for r in results
                          if r.verdict in ("accepted", "rejected") and r.status == "complete"]
                if judged:
                    self.round_gains.append(max(judged))
                self._reconcile(results)
                failed = next((r for r in results if r.status == HARNESS_ERROR), None)
                if failed is not None:  # the variant will be proposed again once the harness works
                    return self._harness_failed(failed, best=best, trials_run=trials_run)

    def plan(self) -> NextStep:
        """What ``run`` would begin next, from the history as it stands: the trials a killed run left unjudged
        judged first (their verdicts kept in memory), then the same round (carry-over, re-runs, kept candidates,
        the proposer's batch), with nothing run, screened or written. The loop's messages on the way are the
        plan's notes. A plan knows no deadline: ``--max-minutes`` may leave out what it lists."""
        self._check_target()
        self._planned_verdicts = {}
        try:
            events_from = len(self.events)
            self._judge_pending()
            notes = [e.message if e.kind != "trial-end" or e.trial is None else
                     f"optimize first records trial {e.trial.trial_id:04d}'s verdict: {e.message}"
                     for e in self.events[events_from:] if e.kind != "judged-pending"]
            trials = self._trials()
            baseline, chain = accepted_chain(trials, self.baseline_sha)
            if baseline is None:
                return NextStep(None, baseline_trial=True, notes=notes)
            best = chain[-1] if chain else baseline
            step = NextStep(best, stop=self._stop_reason(trials, best, trials_run=0))
            if not step.stop:
                events_from = len(self.events)
                steps, proposed, free, stop = self._candidates(trials, best,
                                                               room=min(self.runner.workers, self.budget))
                notes += [e.message for e in self.events[events_from:]]
                screened = len(proposed) > free
                step.trials = [*steps, *([] if screened else proposed)]
                step.screening = proposed if screened else []
                step.stop = stop.reason if stop is not None and not step.trials and not step.screening else ""
            step.notes = notes
            return step
        finally:
            self._planned_verdicts = None

    def _check_target(self) -> None:
        if self.guardrails.target != "memory" and self.guardrails.target not in self.spec.passes:
            raise UserError(f"--target {self.guardrails.target}: {self.kernel} has the passes "
                            f"{', '.join(self.spec.passes)} (or memory)")

    # -- steps ---------------------------------------------------------------------------------------------

    def _trials(self) -> list[TrialResult]:
        trials = [t for t in load_trials(self.kernel, self.root) if t.device == self.mode]
        if self._planned_verdicts:  # a plan's verdicts, given in memory where a run writes them into the notebooks
            trials = [t.model_copy(update={"judged": self._planned_verdicts[t.trial_id]})
                      if t.trial_id in self._planned_verdicts else t for t in trials]
        return trials

    def _write_verdict(self, trial: TrialResult, verdict: Verdict) -> None:
        if self._planned_verdicts is not None:
            self._planned_verdicts[trial.trial_id] = verdict
        else:
            record_verdict(trial.notebook, verdict)

    def _drop_half_written(self) -> None:
        for partial in self.store.partial_notebooks(self.kernel):
            warn(f"dropping {partial.name}: a trial killed before it finished (its variant will run again)")
            partial.unlink()
        for aside in self.store.aside_files(self.kernel):  # a notebook write killed before its rename
            warn(f"dropping {aside.name}: a notebook write killed before it finished (the notebook is as before)")
            aside.unlink()

    def _judge_pending(self) -> None:
        """Judge the trials a killed loop left without a verdict, each against the chain up to the best it was
        measured against; then reconcile each round whose candidates were accepted side by side."""
        trials = self._trials()
        for trial in trials:
            if trial.verdict is None and trial.against and trial.kind == "experiment" \
                    and trial.status != HARNESS_ERROR:
                _, chain = accepted_chain([t for t in trials if t.trial_id < trial.trial_id], self.baseline_sha)
                while chain and chain[-1].variant_sha != trial.against_sha:  # a round-mate accepted before it
                    chain = chain[:-1]
                self._emit("judged-pending", f"trial {trial.trial_id:04d} finished before the loop was stopped: "
                           "judging it now", trial)
                self._judge_and_record(trial, chain)
                trials = self._trials()
        for accepted in _rounds(trials):
            self._reconcile(accepted)

    def _judge_and_record(self, result: TrialResult, chain: list[TrialResult]) -> TrialResult:
        history = [t for t in self._trials() if t.trial_id < result.trial_id]
        judgement = judge(result, self.guardrails, drift_ratios(chain, history), history)
        verdict = judgement.record(self.guardrails.target, self.proposer.name)
        self._write_verdict(result, verdict)
        result = result.model_copy(update={"judged": verdict})
        self._emit("trial-end", f"{judgement.verdict}: {'; '.join(judgement.reasons)}", result)
        return result

    def _round(self, trials: list[TrialResult], best: TrialResult, room: int, best_file: Path,
               budget_left: int) -> list[Proposal] | Stop | TrialResult:
        """The candidates to trial at once against ``best`` (``_candidates``). When the proposer gives more than
        the round has room for, the batch is screened and every candidate that may be faster gets a full trial,
        best first, within the budget (an empty list: the whole batch was dropped). A ``TrialResult``: the
        screening's harness failed."""
        steps, proposed, free, stop = self._candidates(trials, best, room)
        if len(proposed) > free:
            kept = self._screen(proposed, best, best_file)
            if isinstance(kept, TrialResult):
                return kept
            if not steps and not kept:
                return []
            proposed = kept[:max(0, budget_left - len(steps))]
        if not steps and not proposed and stop is not None:
            return stop
        if self.deadline is not None:
            # Every candidate a screening kept joins the round, one after another per worker: only those that
            # end before the deadline by the recent trials' pace (0025-0028 on the H200: rounds of three started
            # at the deadline, and the job's time limit killed all three). Those left out come first next time.
            best_source = best_file.read_text()
            paces = [pace for step in [*steps, *proposed]
                     if (pace := self.trial_pace(trials, step, best_source)) is not None]
            pace = max(paces) if paces else None
            fits = trials_within(self.deadline - time.time(), pace, self.runner.workers,
                                 len(steps) + len(proposed))
            if (steps or proposed) and not fits:
                return self._out_of_time("a trial", pace)
            steps, proposed = steps[:fits], proposed[:max(0, fits - len(steps))]
        return [*steps, *proposed]

    def _candidates(self, trials: list[TrialResult], best: TrialResult,
                    room: int) -> tuple[list[Proposal], list[Proposal], int, Stop | None]:
        """A round before its screening: ``(the loop's own re-runs, the proposer's candidates, the room left for
        them, why the proposer stopped)``. The loop's own come first (a carry-over, an inconclusive trial
        re-measured, a candidate superseded in its round re-trialled, one an earlier screening kept), up to
        ``room``; then the proposer is asked for a batch of ``screen`` (with screening) or for the room left."""
        steps = [*self._carry_over(trials, best), *self._reruns(trials, best),
                 *self._kept_by_screening(trials, best)]
        # A superseded kept candidate is both a re-run (on the round's winner) and a kept one: one trial of it.
        unique: dict[str, Proposal] = {}
        for step in steps:
            unique.setdefault(source_hash(step.source), step)
        steps = list(unique.values())[:room]
        free = room - len(steps)
        proposed: list[Proposal] = []
        stop: Stop | None = None
        # Screening times the candidates: a memory target is not screened (each proposal gets a full trial).
        batch = (max(free, self.screen) if self.guardrails.target != "memory" else free) if free > 0 else 0
        screening_pace = self.screening_pace(trials, candidates=batch)
        if batch > free and not self._ends_in_time(screening_pace):
            # A step the deadline would cut off is not begun: its notebook would be half-written and its device
            # time lost (0056 on the H200, a trial begun 280 s before a call's end, was killed in its NCU profile).
            batch, stop = 0, self._out_of_time("a screening", screening_pace)
        while len(proposed) < batch:
            step = self.proposer.propose(Context(self.spec, self.guardrails.target, trials, best,
                                                 best.variant.source,
                                                 pending=[source_hash(s.source) for s in [*steps, *proposed]],
                                                 pending_sources=[s.source for s in [*steps, *proposed]],
                                                 pending_notes=[f"{s.name}: {s.hypothesis}"[:300]
                                                                for s in [*steps, *proposed]],
                                                 baseline_source=self.baseline_file.read_text(),
                                                 suite=self.suite, buckets=self.buckets))
            if isinstance(step, Stop):
                stop = step
                break
            if not self._in_scope(step.changes, step.source, best):
                stop = Stop(f"the proposer's {step.name} changes more than buckets {', '.join(self.buckets)} "
                            f"({', '.join(step.changes) or 'code beyond the knobs'}); --buckets allows their "
                            "DISPATCH entries alone")
                break
            proposed.append(step)
        return steps, proposed, free, stop

    def screening_pace(self, trials: list[TrialResult], changes: list[dict] | None = None,
                       candidates: int | None = None) -> float | None:
        """How long a screening takes here (``history.screening_pace``), from its candidates (one per ``changes``,
        else ``candidates``, the batch about to be asked for) and the cases it times: those of the
        buckets its candidates' ``changes`` name, where each names some (``run.screening.Screen``, which falls back
        to the whole suite where none of those buckets has a case). Before the candidates are proposed
        (``changes`` None) under ``--buckets``, every candidate will be a move in those buckets (``_in_scope``),
        though perhaps in only one of them: their cases, or the whole suite's where any of them has none (the
        larger estimate, so that no screening begins that the deadline would cut off)."""
        from liger_perf.kernel.variants import screened_buckets

        cases = self._suite_cases()
        if changes is not None:
            scope = screened_buckets(changes, cases)
        else:
            present = {dispatch_bucket(case.shape, case.dtype) for case in cases}
            scope = set(self.buckets) if set(self.buckets) <= present else set()
        timed = split_by_buckets(cases, scope)[0]
        return screening_pace(trials, self.suite, cases=len(timed),
                              candidates=len(changes) if changes is not None else candidates)

    def request_pace(self, trials: list[TrialResult], request: TrialRequest) -> float | None:
        """How long ``request`` will take here, for its progress line: a screening by the timings it makes
        (``screening_pace``), a trial by its kind's recent ones (``run.progress.pace_kind``)."""
        from liger_perf.run.progress import pace_kind

        kind = pace_kind(request)
        if kind == "screening":
            return self.screening_pace(trials, [entry.changes or {} for entry in request.screen])
        return trial_pace(trials, self.suite, kind=kind,
                          timed=self._timed_cases(request.buckets) if kind == "experiment" else None)

    def _suite_cases(self) -> list:
        """The cases of the suite the trials time here."""
        import torch

        from liger_perf.kernel.device import Device

        return self.spec.cases(self.suite or Device(self.mode, torch.device("cpu")).suite, "bench")

    def _timed_cases(self, buckets: list[str] | set[str]) -> int:
        """The cases (each a pass at a shape and dtype) a trial confined to ``buckets`` times (``Trial``'s
        ``split_by_buckets``: the whole suite where none falls in them)."""
        return len(split_by_buckets(self._suite_cases(), buckets)[0]) * len(self.spec.passes)

    def _out_of_time(self, what: str, pace: float | None) -> Stop:
        left = max(0.0, self.deadline - time.time())
        return Stop(f"the wall-clock budget is spent: {what} takes about {pace:.0f} s here, {left:.0f} s are left"
                    if pace else "the wall-clock budget is spent")

    def _ends_in_time(self, pace: float | None) -> bool:
        """Whether a step of ``pace`` seconds begun now ends before the deadline (always without one, or without
        a pace to go by)."""
        return trials_within(self.deadline - time.time(), pace, 1, 1) == 1 if self.deadline is not None else True

    def _screen(self, batch: list[Proposal], best: TrialResult, best_file: Path) -> list[Proposal] | TrialResult:
        """Screen ``batch`` against ``best`` in one notebook (numbered in the history, kind ``screening``): the
        candidates that may be faster, best first; the screening's own result when its harness failed."""
        from liger_perf.record.schema import ScreenEntry

        paths = self.store.new_trial(self.kernel, f"screen-{len(batch)}-candidates")
        entries = []
        for i, step in enumerate(batch):
            file = self.store.screen_candidate(paths, i, step.name)
            write_file(file, step.source)
            entries.append(ScreenEntry(name=f"{i}-{step.name}"[:60], variant=str(file.resolve()),
                                       hypothesis=step.hypothesis, prediction=step.prediction,
                                       changes=step.changes or None, proposer_audit=step.audit))
        request = trial_request(self.kernel, best_file, None, store=self.store, paths=paths, kind="screening",
                                passes=list(self.spec.passes), device=self.device_arg, ncu=False, peers=False,
                                convergence=False, confidence=self.guardrails.confidence,
                                hypothesis=f"screening {len(batch)} candidates against trial {best.trial_id:04d}",
                                timeout_s=self.guardrails.trial_timeout_s, screen=entries, suite=self.suite,
                                guardrails=self.guardrails.model_dump(mode="json"))
        self._emit("screen-start", f"screening {len(batch)} candidates: " + ", ".join(s.name for s in batch),
                   request=request)
        result = self._run_all([request])[0]
        self.screened += len(batch)
        if result.status == HARNESS_ERROR:
            return result
        if result.status != "complete" or result.screening is None:  # a candidate took the screening down
            self._emit("screen-end", f"screening {result.trial_id:04d} did not complete ({result.status}: "
                       f"{result.reason[:300]}): every candidate gets a full trial, which records its own fate",
                       result)
            return list(batch)
        rows = {row.name: row for row in result.screening.rows}
        self.fruitless_screenings = 0 if any(row.kept for row in rows.values()) else self.fruitless_screenings + 1
        kept = []
        for entry, step in zip(entries, batch):
            row = rows.get(entry.name)
            if row is not None and row.kept:
                kept.append((row.ratio if row.ratio is not None else float("inf"), step))
        self._emit("screen-end", f"screening {result.trial_id:04d}: {result.reason}", result)
        return [step for _, step in sorted(kept, key=lambda pair: pair[0])]

    def timed_buckets(self, step: Proposal, best_source: str) -> list[str]:
        """The dispatch buckets a trial of ``step`` against the best (of ``best_source``) times alone: those of a move
        confined to them (``judge.confined_buckets``, asked without the history, as the trial's own provisional
        judgement asks it), unless the guardrails say to time every shape (``time_outside_buckets``). Empty: the
        whole suite. Elsewhere both would launch the same kernels with the same settings, whose ratio the judge
        counts as 1 whatever the run measures: on the H200's tuning split, timing those took about 120 of a
        one-bucket trial's 352 s (0085)."""
        if not best_source or self.guardrails.time_outside_buckets or not step.changes or not step.source:
            return []
        buckets = confined_buckets(self.kernel, step.source, best_source, step.changes, [])
        # Only where that leaves something out: buckets no shape of the suite falls in time the whole suite (whose
        # timing has none of theirs to judge either: the judge says so), as a screening does.
        return sorted(buckets) if split_by_buckets(self._suite_cases(), buckets)[1] else []

    def trial_pace(self, trials: list[TrialResult], step: Proposal, best_source: str) -> float | None:
        """How long a full trial of ``step`` against the best (of ``best_source``) takes here
        (``history.trial_pace``), by the cases its timing measures: its buckets' alone (``timed_buckets``), else
        the whole suite's."""
        return trial_pace(trials, self.suite, timed=self._timed_cases(self.timed_buckets(step, best_source)))

    def _request(self, step: Proposal, against: Path | None, variant_file: Path | None = None,
                 peers: bool = False) -> TrialRequest:
        """Take the trial's number and write its variant module (under that number), then ask for the trial."""
        paths = self.store.new_trial(self.kernel, step.name)
        if variant_file is None:
            variant_file = paths.variant
            write_file(variant_file, step.source)
        return trial_request(self.kernel, variant_file, against, store=self.store, paths=paths,
                             hypothesis=step.hypothesis, prediction=step.prediction, audit=step.audit,
                             passes=list(self.spec.passes), device=self.device_arg,
                             repetitions=self._repetitions(step), ncu=True, peers=peers,
                             convergence=self.convergence, confidence=self.guardrails.confidence,
                             changes=step.changes or None, timeout_s=self.guardrails.trial_timeout_s,
                             # The quick gate before the timing, the full gate only for a trial its own timing
                             # would have accepted (a baseline trial, never judged, runs the full gate).
                             gate="staged" if against is not None else "full", suite=self.suite,
                             guardrails=self.guardrails.model_dump(mode="json"),
                             buckets=self.timed_buckets(step, against.read_text() if against else ""))

    def _run_all(self, requests: list[TrialRequest]) -> list[TrialResult]:
        try:
            runs = self.runner.run_many(requests, self.store)
        except BaseException:
            for request in requests:
                self.store.release(self.store.trial_paths(self.kernel, request.trial_id, request.name))
            raise
        results = []
        for run in runs:
            trial_id = trial_number(run.notebook)
            results.append(run.result.model_copy(update={"notebook": str(run.notebook), "trial_id": trial_id,
                                                         "judged": None}))
        return results

    def _reconcile(self, results: list[TrialResult]) -> None:
        """Candidates of one round were each judged against the same best; when several were accepted, the one
        that gained most stays accepted, and each other one is recorded as superseded (rejected, its gain kept)
        and re-trialled against the new best in the next round."""
        accepted = [r for r in results if r.verdict == "accepted"]
        if len(accepted) < 2:
            return
        # Over the whole suite, whatever each was judged on: a gain in one dispatch bucket and a gain everywhere
        # are compared by what they do to the suite.
        winner = max(accepted, key=lambda r: r.suite_gain)
        for result in accepted:
            if result is winner:
                continue
            reason = (f"superseded: trial {winner.trial_id:04d} of the same round gained more over the suite "
                      f"({self._gain_text(winner.suite_gain)} against {self._gain_text(result.suite_gain)}); "
                      "re-trialled against it next")
            result.judged = result.judged.model_copy(update={
                "verdict": "rejected", "reasons": [reason, *result.verdict_reasons],
                "superseded_by": winner.trial_id})
            self._write_verdict(result, result.judged)
            self._emit("trial-end", f"rejected: {reason}", result)

    def _gain_text(self, gain: float) -> str:
        """A judged gain (1 - the target's ratio) as a person reads it: a speedup, or the share of peak memory."""
        if self.guardrails.target == "memory":
            return f"peak memory {1 - gain:.3f} of the best's"
        return speedup(1 - gain)

    def _best_file(self, best: TrialResult) -> Path:
        return trial_variant_file(self.kernel, best, self.root)

    def _carry_over(self, trials: list[TrialResult], best: TrialResult) -> list[Proposal]:
        """After the baseline changed (a fix), the previous baseline's best, carried over: its knob values on
        the new baseline, trialled against it before anything else (judged like any candidate, so the chain
        starts again from measurements of the new code). Only while the new chain is empty and no trial ran that
        source yet. A previous best whose code differs from its baseline beyond the knobs (a model's rewrite)
        cannot be carried over by the loop; it says so once."""
        from liger_perf.kernel.variants import (canonical_source, changes_between, knobs_in, qualified,
                                               recorded_dispatch, split_qualified)

        if best.variant_sha != self.baseline_sha or best.against:
            return []
        current = best.trial_id
        earlier = [t for t in baseline_trials(trials) if t.trial_id < current and t.variant_sha != self.baseline_sha]
        for old_baseline in reversed(earlier):
            _, chain = accepted_chain(trials, old_baseline.variant_sha)
            if not chain:
                continue
            tip = chain[-1]
            old_knobs, tip_knobs = old_baseline.variant.knobs or {}, tip.variant.knobs or {}
            old_table = recorded_dispatch(old_baseline.variant.source)
            tip_table = recorded_dispatch(tip.variant.source)
            moves = changes_between(old_knobs, old_table, tip_knobs, tip_table)

            def ran(knobs: dict, table: dict, name: str):
                knob, bucket = split_qualified(name)
                return knobs_in(knobs, table, bucket).get(knob)

            # Of those, the ones the new baseline has not made itself (a no-op entry would read as a move tried).
            new_knobs, new_table = best.variant.knobs or {}, recorded_dispatch(best.variant.source)
            changes = {k: v for k, v in moves.items() if ran(new_knobs, new_table, k) != v}
            try:
                # Table layouts aside (``canonical_source``): a tip whose code is its baseline's but for knobs.
                # The old baseline's entries are written back too: a plain move may have made one redundant.
                revert = {k: ran(old_knobs, old_table, k) for k in moves if split_qualified(k)[0] in old_knobs}
                revert.update({qualified(k, b): v for b, entry in old_table.items() for k, v in entry.items()})
                knob_only = canonical_source(with_knobs(tip.variant.source, revert)
                                             ) == canonical_source(old_baseline.variant.source)
                source = with_knobs(best.variant.source, changes)
            except UserError as e:
                knob_only, why = False, str(e)
            else:
                why = "its code differs from its baseline beyond the knobs"
            if not knob_only or not changes:
                if not any(e.kind == "carry-over" for e in self.events):
                    self._emit("carry-over", f"the previous best, trial {tip.trial_id:04d} {tip.name} (on the "
                               f"baseline of trial {old_baseline.trial_id:04d}), is not carried over to the changed "
                               f"baseline: {why if changes else 'it changed no knob'}")
                return []
            if any(t.variant_sha == source_hash(source) for t in trials):
                return []
            listed = ", ".join(f"{k}={v!r}" for k, v in changes.items())
            return [Proposal(name=carry_over_name(tip), source=source,
                             hypothesis=f"the baseline changed since trial {old_baseline.trial_id:04d}; the best on "
                                        f"the previous one, trial {tip.trial_id:04d} {tip.name}, carried over: "
                                        f"its knob values ({listed}) on the new baseline",
                             prediction=f"about the previous chain's gain: its {count(len(chain), 'accepted step')} "
                                        f"took the target to {speedup(_chain_target(chain))} over its baseline",
                             changes=changes, diagnosis="carry-over")]
        return []

    def _reruns(self, trials: list[TrialResult], best: TrialResult) -> list[Proposal]:
        """Trials the loop runs again by itself: an inconclusive one, measured once more with twice the
        repetitions (never accepted as it was); one rejected only on suspicions of the current best's measurements,
        once more (``recheck_owed``); and one superseded by a better candidate of its round, trialled against that
        one; each only while no later trial ran the same source. Those measured against today's baseline or its
        chain come first: after a baseline change, an inconclusive carry-over is re-measured before the older
        chain's owed re-runs (on 2026-12-04 the plan put 0052's, from two baselines back, ahead of 0077's), and
        once it is accepted those of its moves it made need no re-run."""
        experiments = [t for t in trials if t.status != HARNESS_ERROR and t.kind == "experiment" and t.against]
        _, chain = accepted_chain(trials, self.baseline_sha)
        todays = {self.baseline_sha, best.variant_sha} | {t.variant_sha for t in chain}
        reruns, older = [], []
        for i, t in enumerate(experiments):
            if any(later.variant_sha == t.variant_sha for later in experiments[i + 1:]):
                continue
            superseded_by = t.judged.superseded_by if t.judged else None
            # Once per source, whatever the names say (a name is cut at 60 characters).
            earlier_same = [e for e in experiments[:i] if e.variant_sha == t.variant_sha]
            if t.verdict == "inconclusive" and not t.name.endswith("-remeasure") \
                    and not any(e.verdict == "inconclusive" for e in earlier_same):
                name, why, diagnosis = f"{t.name[:50]}-remeasure", "which was inconclusive", "remeasure"
            elif recheck_owed(t, trials):
                # Suspicious only of the best's measurements: nothing was learnt of the variant.
                name, why, diagnosis = (f"{t.name[:52]}-recheck", "whose current best's measurements were "
                                        "suspicious", "recheck")
            elif superseded_by is not None:
                name, why, diagnosis = (f"{t.name}-retrial", f"superseded in its round by trial "
                                        f"{superseded_by:04d}", "retrial")
            else:
                continue
            # Its knob changes were made from the best it was first measured against; against another best they
            # are not this trial's changes (and would rule out the wrong move when it is rejected). A move made of
            # knob changes alone is made again on the new best instead: a move in another dispatch bucket than the
            # winner's combines with it, where the old source would undo the winner's entry.
            same_best = t.against_sha == best.variant_sha
            source, changes = t.variant.source, (t.changes or {}) if same_best else {}
            if not same_best and t.changes:
                moved = _made_again(best, t.changes)  # None: the old source, judged as a whole
                if moved == best.variant.source:
                    continue  # the winner made this move already
                if moved is not None:
                    source, changes = moved, dict(t.changes)
                    if any(later.variant_sha == source_hash(moved) for later in experiments[i + 1:]):
                        continue  # re-run on this best already
            # Only a re-run still owed waits (and says so): not one the best made since.
            if self._waits_outside_buckets(t, name[:60]) or self._waits_for_its_target(t, name[:60]):
                continue
            (reruns if t.against_sha in todays else older).append(
                Proposal(name=name[:60], source=source, hypothesis=f"re-run of trial {t.trial_id:04d}, {why}: "
                         f"{t.hypothesis}", prediction=t.prediction, changes=changes, diagnosis=diagnosis))
        return [*reruns, *older]

    def _kept_by_screening(self, trials: list[TrialResult], best: TrialResult) -> list[Proposal]:
        """Candidates an earlier screening kept that no trial has run yet (a loop stopped between a screening and
        its full trials, e.g. by ``--max-minutes``): they get their full trials now instead of being proposed and
        screened again, first those in a dispatch bucket where a peer is ahead of the best on the target
        (``rules.peer_leads``, the order the proposer takes buckets in), then the rest, best ratio first in each.
        A candidate screened against an earlier best of the chain is made again on the current best from its knob
        changes (as a re-run is); one without knob changes is left to the proposer. A candidate whose own trial
        ran (whatever its verdict; not a harness error, which never reached it) is done: a rejected one never
        comes back this way after a later acceptance. A screening on another target than this run's kept its
        candidates on another pass: they wait for a run on that target."""
        _, chain = accepted_chain(trials, self.baseline_sha)
        chain_shas = {t.variant_sha for t in chain} | {self.baseline_sha, best.variant_sha}
        trialled = {t.variant_sha for t in trials if t.kind == "experiment" and t.status != HARNESS_ERROR}
        leads = peer_leads(trials, self.baseline_file.read_text(), [self.guardrails.target])

        def behind_a_peer(changes: dict) -> bool:
            return any(lead.ahead for bucket in target_buckets(changes)
                       if (lead := leads.get((self.guardrails.target, bucket))) is not None)

        ranked: list[tuple[bool, float, int, Proposal]] = []
        taken: set[str] = set()
        for screening in trials:
            if screening.kind != "screening" or screening.screening is None or screening.status != "complete" \
                    or screening.against_sha not in chain_shas:
                continue
            # Kept on another target's pass: no evidence for this one (0088's backward screening kept
            # num_stages@2048x4=3, which a forward run would otherwise give a full trial).
            if screening.screening.target and screening.screening.target != self.guardrails.target:
                continue
            for row in screening.screening.rows:
                if not row.kept or not row.source or row.sha256 in trialled or source_hash(row.source) in trialled:
                    continue
                source, changes = row.source, dict(row.changes or {})
                hypothesis = row.hypothesis
                if screening.against_sha != best.variant_sha:
                    source = (_made_again(best, changes) if changes else None) or ""
                    hypothesis = (f"made again on trial {best.trial_id:04d} from its knob changes (screened against "
                                  f"an earlier best): {row.hypothesis}")
                if not self._in_scope(changes, source, best):
                    continue  # a default's move, another bucket's or code beyond the knobs: not this invocation's
                sha = source_hash(source) if source else ""
                if not sha or sha in trialled or sha in taken:
                    continue  # (the best itself is in ``trialled``: a move it made already)
                taken.add(sha)
                name = row.name.split("-", 1)[1] if row.name.split("-", 1)[0].isdigit() else row.name
                proposal = Proposal(name=name[:60], source=source, hypothesis=hypothesis,
                                    prediction=f"screening {screening.trial_id:04d}: {row.reason}"[:300],
                                    changes=changes, diagnosis="screened", audit=row.proposer_audit)
                ranked.append((not behind_a_peer(changes), row.ratio if row.ratio is not None else float("inf"),
                               screening.trial_id, proposal))
        return [proposal for *_, proposal in sorted(ranked, key=lambda entry: entry[:3])]

    def _waits_outside_buckets(self, trial: TrialResult, name: str) -> bool:
        """Whether a re-run of ``trial`` waits: under ``--buckets``, a move that names a bucket they leave out
        (0052's re-measure in 1024x2, say, while the run tunes 16384x4) waits, with one line that says so, for a
        run without ``--buckets`` or with every bucket it moves; the device time goes to the buckets asked for.
        Read from the trial's own changes, whatever best the re-run is made on. A default's move or code touches
        every bucket, the named ones too: it runs."""
        moved = target_buckets(trial.changes)
        outside = sorted(moved - set(self.buckets))
        if not self.buckets or not outside:  # an empty ``moved`` (a default's or code's move): in every scope
            return False
        self._say_waits(trial, f"{name} waits: it moves {', '.join(outside)}, which --buckets "
                               f"{', '.join(self.buckets)} leaves out (run without --buckets, or name every bucket "
                               f"it moves: {', '.join(sorted(moved))}, to take it)")
        return True

    def _waits_for_its_target(self, trial: TrialResult, name: str) -> bool:
        """Whether a re-run of ``trial`` waits for a run on the target it was judged on: a backward move re-measured
        in a forward run (0066's ``num_stages@1024x2=2``, owed on the backward, came first in a forward plan) is
        judged on a pass it may not change at all. One line says so."""
        judged_on = trial.judged.target if trial.judged else None
        if not judged_on or judged_on == self.guardrails.target:
            return False
        self._say_waits(trial, f"{name} waits: trial {trial.trial_id:04d} was judged on the {judged_on}, this run "
                               f"tunes the {self.guardrails.target} (run with --target {judged_on} to take it)")
        return True

    def _say_waits(self, trial: TrialResult, message: str) -> None:
        """One "waits" line per trial and run, as the carry-over's: the plan and each round ask again."""
        if not any(e.kind == "waits" and e.trial is not None and e.trial.trial_id == trial.trial_id
                   for e in self.events):
            self._emit("waits", message, trial)

    def _in_scope(self, changes: dict | None, source: str, best: TrialResult) -> bool:
        """Whether a candidate keeps to ``--buckets``: changes that each name one of them, and a source that is the
        best's with exactly those changes (a proposer's word on what it changed is checked, not taken)."""
        if not self.buckets:
            return True
        buckets = target_buckets(changes)
        return bool(buckets) and buckets <= set(self.buckets) and bool(source) \
            and made_by(source, best.variant.source, dict(changes or {}))

    def _repetitions(self, step: Proposal) -> int:
        if step.diagnosis != "remeasure":
            return self.repetitions
        from liger_perf.kernel.device import Device
        from liger_perf.measure.timing import TimingPlan

        import torch

        base = self.repetitions or TimingPlan.default(Device(self.mode, torch.device("cpu"))).repetitions
        return 2 * base

    def _stop_reason(self, trials: list[TrialResult], best: TrialResult, trials_run: int) -> str:
        if trials_run >= self.budget:
            return f"the budget of {count(self.budget, 'trial')} is spent"
        if self.deadline is not None and time.time() >= self.deadline:
            return "the wall-clock budget is spent"
        if self.fruitless_screenings >= FRUITLESS_SCREENINGS:
            return (f"{FRUITLESS_SCREENINGS} screenings in a row kept no candidate ({self.screened} screened in this "
                    "run): the proposer's ideas are all clearly slower or wrong")
        target = self.guardrails.target
        if target != "memory" and floor_reached(best, target, self.guardrails.floor_fraction_stop, trials):
            return (f"the best variant's {target} runs at {self.guardrails.floor_fraction_stop:.0%} or more of the "
                    "bandwidth floor at every shape: nothing left to win")
        # Two rounds in a row of this run whose best candidate gained little (with one worker: two trials).
        tail = self.round_gains[-2:]
        if len(tail) == 2 and all(gain < self.guardrails.min_gain for gain in tail):
            return (f"two judged rounds in a row gained less than {self.guardrails.min_gain:.0%} on {target} "
                    f"(their best: {self._gain_text(tail[0])}, {self._gain_text(tail[1])})")
        return ""

    def _confirm_plan(self, baseline: TrialResult) -> bool:
        from liger_perf.propose.rules import diagnose

        passes = ["forward", "backward"] if self.guardrails.target == "full" else [self.guardrails.target]
        lines = [f"Diagnosis of the baseline ({self.guardrails.target}):"]
        for p in passes if self.guardrails.target != "memory" else []:
            lines += [f"  - {d.name} (severity {d.severity:.2f}): {d.evidence}" for d in diagnose(baseline, p)]
        lines.append("Planned order of the proposer's remedies:")
        for p in passes if self.guardrails.target != "memory" else ["forward", "backward"]:
            for diag, remedies in self.spec.remedies.get(p, {}).items():
                lines += [f"  - {p} {diag}: {dict(r.changes)} ({r.why})" for r in remedies]
        return self.confirm("\n".join(lines))

    def _harness_failed(self, trial: TrialResult, best: TrialResult, trials_run: int) -> LoopOutcome:
        reason = f"trial {trial.trial_id:04d} could not run: {trial.reason}"
        return self._stop(reason, best, trials_run, harness_error=reason)

    def _stop(self, reason: str, best: TrialResult | None, trials_run: int, harness_error: str | None = None,
              baseline_failed: str | None = None) -> LoopOutcome:
        self._emit("stop", reason, best)
        return LoopOutcome(reason, best, trials_run, self.events, harness_error, baseline_failed)

    def _emit(self, kind: str, message: str, trial: TrialResult | None = None, index: int = 0,
              request: TrialRequest | None = None) -> None:
        event = LoopEvent(kind, message, trial, index, self.budget, request)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
