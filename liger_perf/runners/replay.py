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

from liger_perf.errors import UserError
from liger_perf.record import HARNESS_ERROR, TrialRequest
from liger_perf.runners import OneAtATime, TrialRun, file_trial
from liger_perf.store import Store


class ReplayRunner(OneAtATime):
    def __init__(self, recorded: Path, mode: str = "cuda", workers: int = 1):
        """``recorded``: a notebooks folder (``notebooks/`` of a checkout); ``mode``: the device mode of the
        recordings to serve (``cuda`` for the GPU machine's); ``workers``: how many trials a round may hold, as
        if that many GPUs ran them."""
        self.recorded = Path(recorded)
        self._mode = mode
        self.workers = workers
        self.served: list[int] = []  # the recorded trial numbers served, in order

    def mode(self, device: str) -> str:
        return self._mode

    def run(self, request: TrialRequest, store: Store) -> TrialRun:
        import nbformat

        from liger_perf import record
        from liger_perf.history import load_trials
        from liger_perf.variants import read_source, source_hash

        variant_sha = source_hash(read_source(request.variant))
        against_sha = source_hash(read_source(request.against)) if request.against else None
        for trial in load_trials(request.kernel, self.recorded):
            if trial["trial_id"] in self.served or trial.get("device") != self._mode \
                    or trial.get("status") == HARNESS_ERROR \
                    or trial.get("kind", "experiment") != request.kind \
                    or (trial.get("variant") or {}).get("sha256") != variant_sha \
                    or not _same_best(trial, against_sha):
                continue
            nb = nbformat.read(trial["notebook"], as_version=4)
            result = {**record.read_result(nb), "trial_id": request.trial_id, "name": request.name,
                      "hypothesis": request.hypothesis, "prediction": request.prediction,
                      "changes": request.changes, "proposer_audit": request.proposer_audit,
                      "replayed_from": Path(trial["notebook"]).name}
            record.clear_verdict(nb)
            self.served.append(trial["trial_id"])
            return file_trial(nb, result, request, store)
        raise UserError(f"replay: no {self._mode} trial of {request.kernel} under {self.recorded} ran this variant "
                        f"({Path(request.variant).name}, sha256 {variant_sha[:12]}) against "
                        + (f"sha256 {against_sha[:12]}" if against_sha else "nothing"))


def _same_best(trial: dict, against_sha: str | None) -> bool:
    """Whether a recorded trial ran against the same current best. A trial recorded crashed by an older runner
    kept no sha of its best (only the path): the variant alone identifies it then."""
    recorded = trial.get("against")
    if not recorded or not against_sha:
        return not recorded and not against_sha
    return recorded.get("sha256") in (against_sha, None) if trial.get("status") == "crashed" \
        else recorded.get("sha256") == against_sha
