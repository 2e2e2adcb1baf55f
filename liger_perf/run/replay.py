"""The replay runner: serves recorded trials instead of running them.

A request is answered by the recorded trial of the same kernel that ran the same variant source against the
same current best (both by sha256), of the same kind, and not served before (a re-measure gets the recorded
re-measure, not the first measurement again). Its notebook is copied into the store under the request's number
and name, with the request's hypothesis, prediction and changes, and without the recorded verdict (the loop
judges it again). So the loop, the judge and the proposers run through recorded GPU notebooks in seconds, on a
machine without a GPU, and what they decide can be compared with what was decided then. A request that nothing
recorded answers is an error that names the variant: a replay never makes a figure up.
"""

from __future__ import annotations

from pathlib import Path

from liger_perf.core.errors import UserError
from liger_perf.run import OneAtATime, TrialRun, file_trial
from liger_perf.record.schema import HARNESS_ERROR, TrialRequest, TrialResult, measures_suite
from liger_perf.record.store import Store


class ReplayRunner(OneAtATime):
    def __init__(self, recorded: Path, mode: str = "cuda", workers: int = 1):
        """``recorded``: a history folder (``notebooks/<device>/`` of a workspace); ``mode``: the device mode of the
        recordings to serve (``cuda`` for the GPU machine's); ``workers``: how many trials a round may hold, as
        if that many GPUs ran them."""
        self.recorded = Path(recorded)
        self._mode = mode
        self.workers = workers
        self.served: list[int] = []  # the recorded trial numbers served, in order

    def mode(self, device: str) -> str:
        return self._mode

    def fingerprint(self, device: str) -> dict:
        """The stack the recordings ran on: that of the last recorded trial of the mode (the one Papermill
        finished last, of each kernel's last)."""
        import json

        from liger_perf.record.history import load_trials

        last = []
        for folder in sorted(p for p in self.recorded.iterdir() if p.is_dir()):
            trials = [t for t in load_trials(folder.name, self.recorded) if t.device == self._mode and t.fingerprint]
            if trials:
                metadata = json.loads(Path(trials[-1].notebook).read_text()).get("metadata", {})
                last.append((str(metadata.get("papermill", {}).get("end_time") or ""), trials[-1]))
        if not last:
            raise UserError(f"replay: no {self._mode} trial under {self.recorded} recorded its stack")
        return max(last, key=lambda pair: pair[0])[1].fingerprint.model_dump()

    def run(self, request: TrialRequest, store: Store) -> TrialRun:
        import nbformat

        from liger_perf.record import notebook as record
        from liger_perf.record.history import load_trials
        from liger_perf.kernel.variants import read_source, source_hash

        variant_sha = source_hash(read_source(request.variant))
        against_sha = source_hash(read_source(request.against)) if request.against else None
        for trial in load_trials(request.kernel, self.recorded):
            if trial.trial_id in self.served or trial.device != self._mode or trial.status == HARNESS_ERROR \
                    or trial.kind != request.kind or trial.variant_sha != variant_sha \
                    or not measures_suite(trial.suite, request.suite) or not _same_best(trial, against_sha):
                continue
            nb = nbformat.read(trial.notebook, as_version=4)
            result = record.read_result(nb).model_copy(update={
                "trial_id": request.trial_id, "name": request.name, "hypothesis": request.hypothesis,
                "prediction": request.prediction, "changes": request.changes,
                "proposer_audit": request.proposer_audit, "replayed_from": Path(trial.notebook).name})
            record.clear_verdict(nb)
            self.served.append(trial.trial_id)
            return file_trial(nb, result, request, store)
        raise UserError(f"replay: no {self._mode} trial of {request.kernel} under {self.recorded} ran this variant "
                        f"({Path(request.variant).name}, sha256 {variant_sha[:12]}) against "
                        + (f"sha256 {against_sha[:12]}" if against_sha else "nothing"))


def _same_best(trial: TrialResult, against_sha: str | None) -> bool:
    """Whether a recorded trial ran against the same current best. A trial recorded crashed by an older runner
    kept no sha of its best (only the path): the variant alone identifies it then."""
    if not trial.against or not against_sha:
        return not trial.against and not against_sha
    return trial.against_sha in (against_sha, None) if trial.status == "crashed" else trial.against_sha == against_sha
