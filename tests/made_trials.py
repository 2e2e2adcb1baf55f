"""Hand-made trial results for the tests: a ``TrialResult`` from only the fields a test is about."""

from liger_perf.record.schema import TrialResult, Verdict


def make_trial(verdict: str | None = None, gain: float = 0.0, superseded_by: int | None = None,
               **fields) -> TrialResult:
    """``fields``: the result's JSON keys (``variant={"sha256": ...}`` and the like); ``verdict`` (with its
    ``gain`` and ``superseded_by``): the loop's verdict, as if read from the notebook's verdict cell."""
    fields = {"kernel": "fused_add_rms_norm", "status": "complete", "variant": {}, **fields}
    judged = Verdict(verdict=verdict, gain=gain, superseded_by=superseded_by) if verdict else None
    return TrialResult.model_validate(fields).model_copy(update={"judged": judged})
