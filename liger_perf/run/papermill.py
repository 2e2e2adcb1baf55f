"""The local runner: executes the trial notebook with Papermill into ``notebooks/<device>/<kernel>/<NNNN>-<name>.ipynb``.

The variant's code runs only in the notebook's kernel process (never in the caller's), under a time limit.
Papermill saves the notebook after every cell; it saves to a hidden file beside the target, which is renamed
into place only when the trial has ended, so a killed trial leaves no notebook for the history to half-read.
A trial whose process crashed or timed out still gets a notebook, its structured result saying so, and so does
one the harness failed before the variant was imported (Papermill or the notebook kernel could not start, a
dependency is missing, the harness cell raised): its status is ``harness-error``, a fault of the job and never a
verdict on the variant. The template imports the variant in the cell tagged ``variant``: a failure before that
cell started is the harness's.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from liger_perf.run import OneAtATime, TrialRun, file_trial
from liger_perf.record.schema import HARNESS_ERROR, TrialRequest, TrialResult
from liger_perf.record.store import Store
from liger_perf.core.workspace import template_path

VARIANT_TAG = "variant"  # the template's cell that imports the variant: the first to run code under trial


class PapermillRunner(OneAtATime):
    """Runs each trial here, in a notebook kernel process of its own: inside the sandbox (``liger_perf.isolation.sandbox``)
    where it is available, else with the allow-listed environment only."""

    def __init__(self, progress_bar: bool = False, sandboxed: bool | None = None):
        from liger_perf.isolation import sandbox

        self.progress_bar = progress_bar
        self.sandboxed = sandbox.available() if sandboxed is None else sandboxed

    def mode(self, device: str) -> str:
        from liger_perf.kernel.device import select_device

        return select_device(device).mode  # sets nothing up but the mode: no variant runs in this process

    def fingerprint(self, device: str) -> dict:
        from liger_perf.kernel.device import select_device
        from liger_perf.measure.fingerprint import fingerprint
        from liger_perf.core.workspace import current

        return fingerprint(select_device(device), current().root)

    def _recorded_mode(self, device: str) -> str:
        try:
            return self.mode(device)
        except Exception:  # no GPU where one was asked for: the asked-for mode is the best we know
            return device

    def run(self, request: TrialRequest, store: Store) -> TrialRun:
        import nbformat

        from liger_perf.record import notebook as record
        from liger_perf.isolation.contained import reduced_environment

        paths = store.trial_paths(request.kernel, request.trial_id, request.name)
        paths.partial.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(request.artifacts) if request.artifacts else paths.artifacts
        started = time.time()
        if self.sandboxed:
            failure = _execute_in_sandbox(request, paths.partial, scratch)
        else:
            # The kernel process imports the variant: it starts with the allow-listed environment (no secret of
            # this process) in the trial's own folder.
            with reduced_environment(scratch):
                failure = execute(request, paths.partial, scratch, self.progress_bar)
        nb, unreadable, written = read_partial(paths.partial)
        if nb is None:  # Papermill failed before it wrote the notebook, or what is there is none: the template's
            nb = nbformat.read(template_path(), as_version=4)
            failure = failure or unreadable
        record.clear_verdict(nb)  # only the loop judges, after the trial: one found here was written inside
        try:
            result = record.read_result(nb)
        except ValueError as e:  # the trial's own code wrote a result that is not one
            result, failure = None, failure or f"the trial's result is malformed: {str(e)[:300]}"
        forged = result and not_this_trial(result, request)
        if forged:  # written by the code under trial (it may write the notebook): no field of it is kept
            result, failure = None, forged
        if result is None or failure is not None:
            # A forged result, or a notebook written over with what is none, is the doing of the code under trial
            # (Papermill writes notebooks), whatever its cells say of how far the trial got.
            status = "crashed" if forged or (written and unreadable) or variant_started(nb) else HARNESS_ERROR
            if status == HARNESS_ERROR:
                failure = (f"the harness failed before the variant was imported: "
                           f"{failure or 'the notebook ended without a result'}")[:1000]
            result = (result or bare_result(request, self._recorded_mode(request.device))).model_copy(update={
                "status": status, "reason": failure or "the notebook ended without a result",
                "elapsed_s": time.time() - started})
            record.set_result(nb, result)
        record.write_atomic(nb, paths.notebook)
        paths.partial.unlink(missing_ok=True)
        return TrialRun(paths.notebook, result)


def execute(request: TrialRequest, partial: Path, scratch: Path, progress_bar: bool = False) -> str | None:
    """Execute the trial notebook into ``partial`` with Papermill, in ``scratch``; why it failed, or None."""
    import papermill

    try:
        papermill.execute_notebook(str(template_path()), str(partial),
                                   parameters={"request": request.model_dump(mode="json")},
                                   kernel_name="python3", cwd=str(scratch),
                                   execution_timeout=whole_seconds(request.timeout_s),
                                   progress_bar=progress_bar, report_mode=False,
                                   # The kernel's own log: only its errors. Below that it warns, on every trial,
                                   # that its loopback TCP traffic is unencrypted.
                                   extra_arguments=["--IPKernelApp.log_level=ERROR"])
    except papermill.PapermillExecutionError as e:
        return f"the trial raised {e.ename}: {e.evalue}"[:1000]
    except Exception as e:  # the kernel died (a crashing variant), timed out, or could not start at all
        return f"the trial's process failed: {type(e).__name__}: {e}"[:1000]
    return None


FAILURE_FILE = ".papermill-failure.txt"  # in the scratch folder: what ``execute`` said, from inside the sandbox


def _execute_in_sandbox(request: TrialRequest, partial: Path, scratch: Path) -> str | None:
    """``execute`` in a child process inside the sandbox: Papermill's client and the notebook kernel both run
    there (they talk over the sandbox's own loopback); the child may write the partial notebook and the scratch
    folder only. Its failure comes back through ``FAILURE_FILE``."""
    import subprocess
    import sys

    from liger_perf.isolation import sandbox
    from liger_perf.isolation.contained import read_untrusted, write_fresh

    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / FAILURE_FILE).unlink(missing_ok=True)
    partial.touch()  # bound into the sandbox as the one file it may write outside its scratch folder
    env = sandbox.sandboxed_environment(scratch)
    write_fresh(scratch / "request.json", request.model_dump_json())
    argv = [sys.executable, "-m", "liger_perf.run.papermill", str(scratch / "request.json"), str(partial),
            str(scratch)]
    # Papermill enforces each cell's limit inside; this is the limit of the whole, should the inside hang.
    limit = whole_seconds(request.timeout_s) * 12 + 600
    variants = [Path(p) for p in (request.variant, request.against, *(e.variant for e in request.screen)) if p]
    try:
        done = sandbox.run(argv, scratch, env, writable=[partial], readable=variants, capture_output=True,
                           text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return f"the trial's sandboxed process ran past {limit} s and was stopped"
    failure = read_untrusted(scratch / FAILURE_FILE, limit=1000)  # written inside: never followed if a link
    if failure:
        return failure
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return f"the trial's sandboxed process failed: {tail[0]}"[:1000]
    return None


def _main(argv: list[str]) -> None:
    """Inside the sandbox: ``execute`` the request, and leave its failure (if any) in the scratch folder."""
    request_file, partial, scratch = (Path(a) for a in argv)
    request = TrialRequest.model_validate_json(request_file.read_text())
    failure = execute(request, partial, scratch)
    if failure:
        (scratch / FAILURE_FILE).write_text(failure)


def record_harness_error(request: TrialRequest, store: Store, reason: str, mode: str) -> TrialRun:
    """The notebook of a trial that never reached its variant (its runner failed around it): the template with a
    result saying why, so the history keeps it and the job reports it."""
    import nbformat

    nb = nbformat.read(template_path(), as_version=4)
    result = bare_result(request, mode).model_copy(update={"status": HARNESS_ERROR, "reason": reason[:1000]})
    return file_trial(nb, result, request, store)


def read_partial(path: Path):
    """(the notebook at ``path``, '', True), or (None, why there is none, whether anything was written there). The
    file is writable inside the sandbox, so whatever it holds (no JSON, JSON nested past the parser's depth, cells
    that break the notebook format) is a failure of the trial, never an exception of this process."""
    import nbformat

    from liger_perf.isolation.contained import read_untrusted
    from liger_perf.record.history import NOTEBOOK_LIMIT

    text = read_untrusted(path, limit=NOTEBOOK_LIMIT + 1)
    if not text:
        return None, "Papermill wrote no notebook", False
    if len(text) > NOTEBOOK_LIMIT:
        return None, f"the trial's notebook is larger than any trial's ({NOTEBOOK_LIMIT >> 20} MB)", True
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as e:  # noqa: BLE001 (any shape of bad JSON: see above)
        return None, f"the trial's notebook is not one ({type(e).__name__}: written over inside the sandbox)", True
    return nb, "", True


def not_this_trial(result: TrialResult, request: TrialRequest) -> str | None:
    """Why ``result`` cannot be the one this trial's harness wrote, or None: it names another kernel, number,
    variant or best than the request's, a source whose hash is not the one recorded beside it, or (a screening)
    a candidate it was not given. The notebook is writable inside the sandbox, where a process the variant leaves
    behind may outlive Papermill's last save: a review's rewrote the best it was measured against to the baseline
    and added an "accepted" verdict of its own. The loop builds later candidates from recorded sources."""
    from liger_perf.kernel.variants import batch_hash, source_hash, variant_hash as sha

    def unlike(record) -> bool:  # a recorded source that is not the one its hash names
        return bool(record.source) and source_hash(record.source) != record.sha256

    not_harness = "it was not written by the harness"
    if (result.kernel, result.trial_id) != (request.kernel, request.trial_id):
        return f"the notebook's result is of {result.kernel} trial {result.trial_id}, not of this one: {not_harness}"
    if request.kind == "screening":
        # A screening's "variant" is its batch (``Screen``: the hash of its candidates' hashes, in order) and its
        # "against" the best it timed them with, the request's variant. Its best once stood in for its variant
        # here: every screening on the GPU was then filed as crashed and its timings lost (trial 0092).
        batch = batch_hash(sha(entry.variant) for entry in request.screen)
        if result.variant.sha256 != batch or unlike(result.variant):
            return f"the screening's result names another batch of candidates than it was given: {not_harness}"
        if result.against is None or result.against.sha256 != sha(request.variant):
            return f"the screening's result names another best than the one it was timed with: {not_harness}"
    elif result.variant.sha256 != sha(request.variant) or unlike(result.variant):
        return f"the notebook's result names another variant than the one under trial: {not_harness}"
    given = {sha(entry.variant) for entry in request.screen}
    if any(row.sha256 not in given or unlike(row) for row in (result.screening.rows if result.screening else [])):
        return f"the screening's result names a candidate it was not given: {not_harness}"
    if request.against and result.against is not None and result.against.sha256 != sha(request.against):
        return f"the notebook's result names another best than the one the trial ran against: {not_harness}"
    if request.against and result.against is None and result.status == "complete":
        return "the notebook's result is complete but names no best, where the trial ran against one"
    return None


def whole_seconds(seconds: float) -> int:
    """A time limit as the notebook client takes it: whole seconds (it refuses 299.99), never rounded to 0."""
    return max(1, math.ceil(seconds))


def variant_started(nb) -> bool:
    """Whether the trial reached the code under trial: Papermill stamps a cell's start time when it starts it."""
    for cell in nb.cells:
        if VARIANT_TAG in cell.get("metadata", {}).get("tags", []):
            return bool(cell.get("metadata", {}).get("papermill", {}).get("start_time"))
    return True  # a notebook of an older template: no way to tell, so not blamed on the harness


def bare_result(request: TrialRequest, mode: str) -> TrialResult:
    """The result of a trial whose notebook never got to write one: what the request says about it (its status
    ``running`` until the caller says how it ended)."""
    from liger_perf.record.schema import VariantRecord
    from liger_perf.kernel.variants import source_hash, variant_hash, variant_text

    source = variant_text(request.variant)
    against = variant_hash(request.against) if request.against else None
    return TrialResult(
        kernel=request.kernel, trial_id=request.trial_id, name=request.name, status="running",
        hypothesis=request.hypothesis, prediction=request.prediction, changes=request.changes,
        variant=VariantRecord(path=request.variant, sha256=source_hash(source), source=source),
        against=VariantRecord(path=request.against, sha256=against) if request.against else None,
        proposer_audit=request.proposer_audit, kind=request.kind, passes=request.passes, device=mode,
        suite=request.suite)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
