"""The trial notebook's contract with programs: where its request, its result and the verdict live.

A trial is asked for with one ``TrialRequest``, handed to the notebook as its one Papermill parameter
(``request``, a plain dict) and read back into the type there.

A trial notebook holds exactly one structured result: the output, with MIME type ``RESULT_MIME``, of the code
cell tagged ``result``. It is a ``TrialResult`` as JSON, with ``"format": FORMAT`` (``liger_perf.record.schema``). The
optimize loop adds its judgement afterwards (a ``Verdict``) as the output (``VERDICT_MIME``) of a cell tagged
``verdict``.
Nothing else in a notebook is read by a program. Notebooks are written atomically: aside, then renamed.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import nbformat

from liger_perf.record.schema import FORMAT, TrialResult, Verdict
from liger_perf.record.store import replaced

RESULT_MIME = "application/vnd.liger-perf.trial+json"
VERDICT_MIME = "application/vnd.liger-perf.verdict+json"
RESULT_TAG, VERDICT_TAG = "result", "verdict"


def jsonable(value: Any) -> Any:
    """JSON has no NaN or Inf: they become null, so every reader (not only Python's) can parse the result."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy and torch scalars
        return jsonable(value.item())
    return value


def _tagged_output(nb, tag: str, mime: str) -> Any:
    """The ``mime`` output of the code cell tagged ``tag`` (None if there is none); a cell or output that is not
    shaped like one (a hand-edited or foreign file) is passed over, never a crash."""
    for cell in nb["cells"]:
        metadata = cell.get("metadata") if isinstance(cell, dict) and cell.get("cell_type") == "code" else None
        tags = metadata.get("tags") if isinstance(metadata, dict) else None
        if not isinstance(tags, list) or tag not in tags:
            continue
        for output in cell.get("outputs") if isinstance(cell.get("outputs"), list) else []:
            data = output.get("data") if isinstance(output, dict) else None
            if isinstance(data, dict) and mime in data:
                payload = data[mime]
                return json.loads(payload) if isinstance(payload, str) else payload
    return None


def read_result(nb) -> TrialResult | None:
    """The notebook's result, or None if it holds none. Raises ``ValueError`` when the result is malformed or
    of another format (an older liger-perf)."""
    payload = _tagged_output(nb, RESULT_TAG, RESULT_MIME)
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise ValueError(f"the result is a JSON {type(payload).__name__}, not an object")
    if payload.get("format") != FORMAT:
        raise ValueError(f"result format {payload.get('format')!r} is not {FORMAT!r} (another liger-perf)")
    return TrialResult.model_validate(payload)


def read_verdict(nb) -> Verdict | None:
    """The loop's verdict, or None if there is none yet. Raises ``ValueError`` when it is malformed."""
    payload = _tagged_output(nb, VERDICT_TAG, VERDICT_MIME)
    return None if payload is None else Verdict.model_validate(payload)


def set_result(nb, result: TrialResult) -> None:
    """Put ``result`` into the ``result`` cell (used when the trial's own process died before it could)."""
    cell = next((c for c in nb.cells if RESULT_TAG in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        cell = nbformat.v4.new_code_cell("# the trial's structured result", metadata={"tags": [RESULT_TAG]})
        nb.cells.append(cell)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        RESULT_MIME: jsonable(result.payload()), "text/plain": f"trial status: {result.status}"})]


def set_verdict(nb, verdict: Verdict) -> None:
    payload = jsonable(verdict.model_dump(mode="json", by_alias=True, exclude_none=True))
    text = f"**Verdict: {verdict.verdict}**" + "".join(f"\n- {r}" for r in verdict.reasons)
    cell = next((c for c in nb.cells if VERDICT_TAG in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        cell = nbformat.v4.new_code_cell("# the optimize loop's verdict, recorded after the trial",
                                         metadata={"tags": [VERDICT_TAG]})
        nb.cells.append(cell)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        VERDICT_MIME: payload, "text/markdown": text, "text/plain": f"verdict: {verdict.verdict}"})]


def clear_verdict(nb) -> None:
    """Take the loop's verdict out of a notebook (a replayed trial is judged again)."""
    for cell in nb.cells:
        if VERDICT_TAG in cell.get("metadata", {}).get("tags", []):
            cell.outputs = []


def write_atomic(nb, path: str | Path) -> None:
    """Write ``nb`` to ``path`` so that a reader sees the old file or the new one, never half of one."""
    with replaced(path) as fresh, open(fresh, "w", encoding="utf-8") as f:
        # Without nbformat's indentation: the same JSON in three quarters of the bytes. A history's notebooks
        # travel with every GPU call, whose copy of the tree may be 64 MiB at most (58 trials were 27 MB).
        f.write(json.dumps(json.loads(nbformat.writes(nb)), ensure_ascii=False, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def record_verdict(path: str | Path, verdict: Verdict) -> None:
    """Add (or replace) the loop's verdict in a trial notebook, atomically."""
    nb = nbformat.read(path, as_version=4)
    set_verdict(nb, verdict)
    write_atomic(nb, path)
