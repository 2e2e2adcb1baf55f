"""Hand-made trial results for the tests: a ``TrialResult`` from only the fields a test is about."""

from liger_perf.record.schema import TrialResult, Verdict


def make_trial(verdict: str | None = None, gain: float = 0.0, superseded_by: int | None = None,
               **fields) -> TrialResult:
    """``fields``: the result's JSON keys (``variant={"sha256": ...}`` and the like); ``verdict`` (with its
    ``gain`` and ``superseded_by``): the loop's verdict, as if read from the notebook's verdict cell."""
    fields = {"kernel": "fused_add_rms_norm", "status": "complete", "variant": {}, **fields}
    judged = Verdict(verdict=verdict, gain=gain, superseded_by=superseded_by) if verdict else None
    return TrialResult.model_validate(fields).model_copy(update={"judged": judged})


def confined_copy(trial: TrialResult, buckets: set[str]) -> TrialResult:
    """``trial`` as if its timing had been confined to ``buckets`` (``TrialRequest.buckets``): the other cases'
    timing and memory rows and NCU launches gone, and recorded as left out."""
    from liger_perf.kernel.variants import dispatch_bucket

    data = trial.model_dump(mode="json", by_alias=True)
    inside = lambda row: dispatch_bucket(row["shape"], row["dtype"]) in buckets  # noqa: E731
    left = sorted({(row["shape"], row["dtype"]) for row in data["timing"]["rows"] if not inside(row)})
    data["timing"].update(rows=[row for row in data["timing"]["rows"] if inside(row)], buckets=sorted(buckets),
                          left_out=[{"shape": shape, "dtype": dtype} for shape, dtype in left])
    data["memory"]["rows"] = [row for row in data["memory"]["rows"] if inside(row)]
    if data.get("ncu"):  # profiled as the trial profiles: its buckets' shapes, in every dtype of theirs
        dtypes = {row["dtype"] for row in data["timing"]["rows"]}
        profiled = lambda launch: any(inside({**launch, "dtype": dtype}) for dtype in dtypes) \
            and launch["dtype"] in dtypes  # noqa: E731
        data["ncu"]["launches"] = [launch for launch in data["ncu"]["launches"] if profiled(launch)]
        data["ncu"]["advice"] = [advice for advice in data["ncu"]["advice"] if profiled(advice)]
    return TrialResult.model_validate(data).model_copy(update={"judged": trial.judged})
