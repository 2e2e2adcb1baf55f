"""Running a trial: the runners, where a trial runs (here), and the trial's own steps (``trial``, ``screening``,
``progress``, ``templates/trial.ipynb``). Each runner takes one ``TrialRequest`` and leaves one finished notebook
in the store.

- ``PapermillRunner`` (``run/papermill.py``): executes the trial notebook here, in a kernel process of its own.
- ``DaskRunner`` (``run/dask.py``): each trial a task on a Dask worker that owns one GPU; ``workers`` trials at
  once, on one host or several.
- ``ReplayRunner`` (``run/replay.py``): serves recorded trials instead of running them, so the loop, the judge and
  the proposers run through recorded GPU notebooks in seconds on any machine.
- ``PlanOnly`` (below): runs nothing; the loop's plan of its next step (``liger-perf plan``) reads a history with it.

The caller takes the trial's number from the store (``Store.new_trial``) and builds the request; the runner
writes the notebook at the store's paths for that number and returns it with its structured result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from liger_perf.core.errors import UserError
from liger_perf.kernel.registry import get_spec
from liger_perf.kernel.variants import check_bucket, missing_variant
from liger_perf.record.schema import TUNING_SUITES, TrialRequest, TrialResult
from liger_perf.record.store import Store, TrialPaths


@dataclass
class TrialRun:
    notebook: Path
    result: TrialResult


class Runner(Protocol):
    workers: int  # how many trials it runs at once

    def mode(self, device: str) -> str:
        """The device mode (``cuda`` or ``interpret``) the trials of ``device`` (auto, cuda, interpret) record."""
        ...

    def fingerprint(self, device: str) -> dict[str, Any]:
        """The stack and device the trials of ``device`` run on (``liger_perf.measure.fingerprint``), read where they
        run: a nightly job compares it with the stack its best was last re-validated on."""
        ...

    def run(self, request: TrialRequest, store: Store) -> TrialRun: ...

    def run_many(self, requests: list[TrialRequest], store: Store) -> list[TrialRun]:
        """The trials of ``requests`` (numbers already taken), at once where the runner can; in request order."""
        ...


def history_device(runner: Runner, device: str) -> str:
    """The device class whose history the trials ``runner`` runs for ``device`` join: read from the stack the
    runner reports (a Dask cluster's GPUs, a replay's recordings), not from this machine."""
    from liger_perf.core.workspace import INTERPRET, device_class

    if runner.mode(device) == "interpret":
        return INTERPRET
    return device_class(runner.fingerprint(device).get("gpu") or "cuda")


class PlanOnly:
    """The runner of a plan (``liger-perf plan``): it reports the device mode of the history it reads (``cuda``
    for a GPU's, on any machine) and runs nothing: the loop asks it for the mode and for no trial."""

    def __init__(self, mode: str, workers: int = 1):
        self._mode, self.workers = mode, workers  # workers: the trials a round of the run planned for holds

    def mode(self, device: str) -> str:
        return self._mode

    def fingerprint(self, device: str) -> dict[str, Any]:
        return {}

    def run(self, request: TrialRequest, store: Store) -> TrialRun:
        raise RuntimeError("a plan runs no trial")

    def run_many(self, requests: list[TrialRequest], store: Store) -> list[TrialRun]:
        raise RuntimeError("a plan runs no trial")


class OneAtATime:
    """``run_many`` for a runner that runs one trial at a time."""

    workers = 1

    def run_many(self, requests: list[TrialRequest], store: Store) -> list[TrialRun]:
        return [self.run(request, store) for request in requests]


def file_trial(nb, result: TrialResult, request: TrialRequest, store: Store) -> TrialRun:
    """Write a finished trial's notebook into the store under the request's number, its result naming the
    request's variant and best (a worker's scratch copies or a recording's files are not what the loop ran)."""
    from liger_perf.record import notebook as record

    update: dict[str, Any] = {} if request.kind == "screening" else {  # a screening's "variant" is its batch
        "variant": result.variant.model_copy(update={"path": request.variant})}
    if result.against:
        update["against"] = result.against.model_copy(update={"path": request.against})
    result = result.model_copy(update=update)
    record.set_result(nb, result)
    paths = store.trial_paths(request.kernel, request.trial_id, request.name)
    record.write_atomic(nb, paths.notebook)
    paths.partial.unlink(missing_ok=True)
    return TrialRun(paths.notebook, result)


def check_tuning_suite(suite: str, mode: str | None = None) -> None:
    """One line for a suite a trial may not time: the held-out split is the loop's exam, never its lesson; and
    (given the device ``mode`` the trials run in) a model suite under the interpreter."""
    if suite in TUNING_SUITES and mode == "interpret":
        raise UserError(f"--suite {suite} needs a GPU: its shapes (up to 64 Mi elements per tensor) would take hours "
                        "under the Triton interpreter; on the CPU, leave --suite out")
    if suite in ("", *TUNING_SUITES):
        return
    if suite.startswith("models"):
        raise UserError(f"--suite {suite}: the loop tunes on models-tune only; the held-out split is read by "
                        "`liger-perf bench --suite models` alone, so that it shows what the loop never saw")
    raise UserError(f"--suite {suite}: leave it out for the device's suite, or --suite models-tune")


def trial_request(kernel: str, variant: str | Path, against: str | Path | None = None, *, store: Store,
                  name: str | None = None, hypothesis: str = "", prediction: str = "",
                  passes: list[str] | None = None, device: str = "auto", repetitions: int = 0, ncu: bool = True,
                  peers: bool | None = None, convergence: bool = True, confidence: float = 0.95,
                  changes: dict | None = None, audit: dict | None = None, kind: str = "experiment",
                  timeout_s: float = 3600, paths: TrialPaths | None = None, gate: str = "full",
                  guardrails: dict | None = None, screen: list | None = None, suite: str = "",
                  buckets: list[str] | None = None) -> TrialRequest:
    """Check what was asked (one line per mistake), take the next trial number (unless ``paths`` holds one
    taken already), and build the request.

    ``peers`` defaults to True for a kernel's first trial (its baseline), when the peers are worth measuring.
    ``suite``: what the trial times ("" the device's suite, or "models-tune"); ``buckets``: only these dispatch
    buckets' shapes of it (``TrialRequest.buckets``: a move confined to them, against its best)."""
    from liger_perf.kernel.device import MODES

    spec = get_spec(kernel)
    if device not in MODES:  # before a trial number is taken: bad input, not a trial
        raise UserError(f"unknown device mode {device!r}: use one of {', '.join(MODES)}")
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise UserError(f"the trial timeout must be a positive, finite number of seconds, not {timeout_s!r}")
    check_tuning_suite(suite)
    variant = Path(variant)
    if not variant.is_file():
        raise UserError(missing_variant(variant))
    if against is not None and not Path(against).is_file():
        raise UserError(missing_variant(Path(against), "--against file"))
    if buckets and against is None:
        raise UserError("a timing confined to dispatch buckets needs a current best (--against): elsewhere the "
                        "candidate is taken to run the best's code")
    for bucket in buckets or []:
        try:
            check_bucket(str(bucket), "")  # the key a DISPATCH table is looked up by
        except UserError:
            raise UserError(f"{bucket!r} is no dispatch bucket: write <row block, a power of two>x<element bytes: "
                            "2, 4 or 8>, e.g. 4096x2") from None
    if peers is None:
        peers = not store.trial_notebooks(kernel)
    paths = paths or store.new_trial(kernel, name or variant.stem)
    return TrialRequest(
        kernel=kernel, variant=str(variant.resolve()), against=str(Path(against).resolve()) if against else "",
        trial_id=paths.trial_id, name=paths.name, passes=list(passes or spec.passes), device=device,
        repetitions=repetitions, confidence=confidence, ncu=ncu, peers=peers, convergence=convergence,
        timeout_s=timeout_s, artifacts=str(paths.artifacts), hypothesis=hypothesis, prediction=prediction,
        changes=changes, proposer_audit=audit, kind=kind, gate=gate, guardrails=guardrails, screen=screen or [],
        suite=suite, buckets=sorted(buckets or []))


def run_trial(kernel: str, variant: str | Path, against: str | Path | None = None, *, root: Path | None = None,
              runner: Runner | None = None, **settings) -> TrialRun:
    """One trial of ``variant`` (against ``against``) in the history folder ``root`` (default: the workspace's
    history of the device it runs on), on ``runner`` (default: Papermill, here). ``settings``: those of
    ``trial_request``."""
    if runner is None:
        from liger_perf.run.papermill import PapermillRunner

        runner = PapermillRunner()
    store = Store(root) if root is not None else Store(device=history_device(runner, settings.get("device", "auto")))
    request = trial_request(kernel, variant, against, store=store, **settings)
    try:
        return runner.run(request, store)
    except BaseException:
        store.release(store.trial_paths(kernel, request.trial_id, request.name))
        raise
