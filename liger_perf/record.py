"""The trial notebook's contract with programs: the request it runs, where its result and the verdict live.

A trial is asked for with one ``TrialRequest``, handed to the notebook as its one Papermill parameter
(``request``, a plain dict) and read back into the type there.

A trial notebook holds exactly one structured result: the output, with MIME type ``RESULT_MIME``, of the code
cell tagged ``result``. It is a JSON object with ``"format": FORMAT`` (see ``Trial.result`` for its keys). The
optimize loop adds its judgement afterwards as the output (``VERDICT_MIME``) of a cell tagged ``verdict``.
Nothing else in a notebook is read by a program. Notebooks are written atomically: aside, then renamed.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import nbformat
from pydantic import BaseModel, ConfigDict, Field

FORMAT = "liger-perf-trial/1"
RESULT_MIME = "application/vnd.liger-perf.trial+json"
VERDICT_MIME = "application/vnd.liger-perf.verdict+json"
RESULT_TAG, VERDICT_TAG = "result", "verdict"
VERDICTS = ("accepted", "rejected", "inconclusive")
#: A trial's status. ``harness-error``: the trial never reached its variant (the notebook kernel or a dependency
#: failed first); it says nothing about the variant, which may be tried again.
STATUSES = ("running", "complete", "invalid-variant", "failed-correctness", "crashed", "harness-error")
HARNESS_ERROR = "harness-error"


class TrialRequest(BaseModel):
    """Everything one trial needs: what to run, against what, how to measure it, and why it is tried."""

    model_config = ConfigDict(extra="forbid")

    kernel: str
    variant: str  # the module under trial (an absolute path)
    against: str = ""  # the current best's module, timed side by side; empty for a kernel's first trial
    trial_id: int = Field(0, ge=0)
    name: str = ""
    passes: list[str] = ["forward", "backward", "full"]
    device: Literal["auto", "cuda", "interpret"] = "auto"
    repetitions: int = Field(0, ge=0)  # 0: the device's default (100 on a GPU, 5 interpreted)
    confidence: float = Field(0.95, gt=0, lt=1)
    ncu: bool = True
    peers: bool = False  # also time eager, torch.compile and liger-kernel (a kernel's first trial)
    convergence: bool = True
    timeout_s: float = Field(3600, gt=0)  # each cell of the notebook; past it the trial is recorded as crashed
    artifacts: str = ""  # folder for large outputs (the .ncu-rep)
    hypothesis: str = ""
    prediction: str = ""
    changes: dict[str, Any] | None = None  # the knob changes from the variant this one was derived from
    proposer_audit: dict[str, Any] | None = None  # an LLM proposer's model, prompt, replies and checks
    kind: Literal["experiment", "revalidation"] = "experiment"  # revalidation: a nightly check, never judged


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


def _tagged_output(nb, tag: str, mime: str) -> dict | None:
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code" or tag not in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if mime in data:
                payload = data[mime]
                return json.loads(payload) if isinstance(payload, str) else payload
    return None


def read_result(nb) -> dict | None:
    return _tagged_output(nb, RESULT_TAG, RESULT_MIME)


def read_verdict(nb) -> dict | None:
    return _tagged_output(nb, VERDICT_TAG, VERDICT_MIME)


def set_result(nb, result: dict) -> None:
    """Put ``result`` into the ``result`` cell (used when the trial's own process died before it could)."""
    cell = next((c for c in nb.cells if RESULT_TAG in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        cell = nbformat.v4.new_code_cell("# the trial's structured result", metadata={"tags": [RESULT_TAG]})
        nb.cells.append(cell)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        RESULT_MIME: jsonable(result), "text/plain": f"trial status: {result.get('status')}"})]


def set_verdict(nb, verdict: str, reasons: list[str], details: dict | None = None) -> None:
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, not {verdict!r}")
    # The verdict and reasons given win over any that ``details`` carries (a verdict read back and re-recorded).
    payload = jsonable({**(details or {}), "verdict": verdict, "reasons": list(reasons)})
    text = f"**Verdict: {verdict}**" + "".join(f"\n- {r}" for r in reasons)
    cell = next((c for c in nb.cells if VERDICT_TAG in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        cell = nbformat.v4.new_code_cell("# the optimize loop's verdict, recorded after the trial",
                                         metadata={"tags": [VERDICT_TAG]})
        nb.cells.append(cell)
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        VERDICT_MIME: payload, "text/markdown": text, "text/plain": f"verdict: {verdict}"})]


def clear_verdict(nb) -> None:
    """Take the loop's verdict out of a notebook (a replayed trial is judged again)."""
    for cell in nb.cells:
        if VERDICT_TAG in cell.get("metadata", {}).get("tags", []):
            cell.outputs = []


def write_atomic(nb, path: str | Path) -> None:
    """Write ``nb`` to ``path`` so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide trials from other users of a shared checkout
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_verdict(path: str | Path, verdict: str, reasons: list[str], details: dict | None = None) -> None:
    """Add (or replace) the loop's verdict in a trial notebook, atomically."""
    nb = nbformat.read(path, as_version=4)
    set_verdict(nb, verdict, reasons, details)
    write_atomic(nb, path)
