"""Runs a trial: executes the trial notebook with Papermill into ``notebooks/<kernel>/<NNNN>-<name>.ipynb``.

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
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from liger_perf.errors import UserError
from liger_perf.registry import get_spec, project_root

VARIANT_TAG = "variant"  # the template's cell that imports the variant: the first to run code under trial
TRIAL_FILE = re.compile(r"^(\d{4,})-([A-Za-z0-9_.-]+)\.ipynb$")


NOTEBOOKS_ENV = "LIGER_PERF_NOTEBOOKS"


def notebooks_dir() -> Path:
    """Where trial notebooks go: ``notebooks/`` of the project, or ``$LIGER_PERF_NOTEBOOKS``."""
    return Path(os.environ.get(NOTEBOOKS_ENV, project_root() / "notebooks"))


def template_path() -> Path:
    return project_root() / "notebooks" / "templates" / "trial.ipynb"


def kernel_notebooks(kernel: str, root: Path | None = None) -> list[Path]:
    """The kernel's trial notebooks in trial order (hidden, half-written files excluded)."""
    folder = (root or notebooks_dir()) / kernel
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := TRIAL_FILE.match(p.name))]
    return [p for _, p in sorted(found)]


def next_trial_id(kernel: str, root: Path | None = None) -> int:
    folder = (root or notebooks_dir()) / kernel
    ids = [int(m.group(1)) for p in folder.glob("*") if (m := re.match(r"^\.?(\d{4,})-", p.name))] \
        if folder.is_dir() else []
    return max(ids, default=-1) + 1


def short_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:60]
    return name or "trial"


@dataclass
class TrialRun:
    notebook: Path
    result: dict[str, Any]


def run_trial(kernel: str, variant: str | Path, against: str | Path | None = None, name: str | None = None,
              hypothesis: str = "", prediction: str = "", passes: list[str] | None = None, device: str = "auto",
              repetitions: int = 0, ncu: bool = True, peers: bool | None = None, convergence: bool = True,
              confidence: float = 0.95, changes: dict | None = None, audit: dict | None = None,
              kind: str = "experiment", timeout_s: float = 3600,
              root: Path | None = None, progress_bar: bool = False) -> TrialRun:
    """Execute one trial notebook and return its path and structured result.

    ``peers`` defaults to True for a kernel's first trial (its baseline), when the peers are worth measuring."""
    import nbformat
    import papermill

    from liger_perf import record

    from liger_perf.device import MODES

    spec = get_spec(kernel)
    if device not in MODES:  # before a trial number is taken: bad input, not a trial
        raise UserError(f"unknown device mode {device!r}: use one of {', '.join(MODES)}")
    if not timeout_s > 0:
        raise UserError(f"the trial timeout must be a positive number of seconds, not {timeout_s!r}")
    variant = Path(variant)
    if not variant.is_file():
        raise UserError(f"variant file {variant} does not exist: give the path of a variant module (.py)")
    if against is not None and not Path(against).is_file():
        raise UserError(f"--against file {against} does not exist: give the current best's variant module")
    root = root or notebooks_dir()
    trial_id = next_trial_id(kernel, root)
    name = short_name(name or variant.stem)
    folder = root / kernel
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{trial_id:04d}-{name}.ipynb"
    partial = folder / f".{trial_id:04d}-{name}.partial.ipynb"
    artifacts = folder / "artifacts" / f"{trial_id:04d}-{name}"
    if peers is None:
        peers = not kernel_notebooks(kernel, root)
    parameters = {
        "kernel": kernel, "variant": str(variant.resolve()), "against": str(Path(against).resolve()) if against else "",
        "passes": list(passes or spec.passes), "device": device, "trial_id": trial_id, "name": name,
        "hypothesis": hypothesis, "prediction": prediction, "changes": changes, "repetitions": repetitions,
        "confidence": confidence, "ncu": ncu, "peers": peers, "convergence": convergence,
        "artifacts": str(artifacts), "proposer_audit": audit, "kind": kind,
    }
    started = time.time()
    failure = None
    try:
        papermill.execute_notebook(str(template_path()), str(partial), parameters=parameters, kernel_name="python3",
                                   cwd=str(project_root()), execution_timeout=whole_seconds(timeout_s),
                                   progress_bar=progress_bar, report_mode=False)
    except papermill.PapermillExecutionError as e:
        failure = f"the trial raised {e.ename}: {e.evalue}"[:1000]
    except Exception as e:  # the kernel died (a crashing variant), timed out, or could not start at all
        failure = f"the trial's process failed: {type(e).__name__}: {e}"[:1000]
    try:
        nb = nbformat.read(partial, as_version=4)
    except (OSError, ValueError) as e:  # Papermill failed before it wrote the notebook: keep the template's
        nb = nbformat.read(template_path(), as_version=4)
        failure = failure or f"Papermill wrote no notebook ({type(e).__name__})"
    result = record.read_result(nb)
    if result is None or failure is not None:
        status = "crashed" if variant_started(nb) else "harness-error"
        if status == "harness-error":
            failure = (f"the harness failed before the variant was imported: "
                       f"{failure or 'the notebook ended without a result'}")[:1000]
        result = {**(result or _bare_result(parameters, variant)), "status": status,
                  "reason": failure or "the notebook ended without a result", "elapsed_s": time.time() - started}
        record.set_result(nb, result)
    record.write_atomic(nb, target)
    partial.unlink(missing_ok=True)
    return TrialRun(target, record.read_result(nbformat.read(target, as_version=4)))


def whole_seconds(seconds: float) -> int:
    """A time limit as the notebook client takes it: whole seconds (it refuses 299.99), never rounded to 0."""
    return max(1, math.ceil(seconds))


def variant_started(nb) -> bool:
    """Whether the trial reached the code under trial: Papermill stamps a cell's start time when it starts it."""
    for cell in nb.cells:
        if VARIANT_TAG in cell.get("metadata", {}).get("tags", []):
            return bool(cell.get("metadata", {}).get("papermill", {}).get("start_time"))
    return True  # a notebook of an older template: no way to tell, so not blamed on the harness


def _bare_result(parameters: dict, variant: Path) -> dict:
    from liger_perf.record import FORMAT
    from liger_perf.variants import source_hash

    source = variant.read_text(errors="replace")
    return {"format": FORMAT, "kernel": parameters["kernel"], "trial_id": parameters["trial_id"],
            "name": parameters["name"], "hypothesis": parameters["hypothesis"],
            "prediction": parameters["prediction"], "changes": parameters["changes"],
            "variant": {"path": parameters["variant"], "sha256": source_hash(source), "source": source, "knobs": None},
            "against": {"path": parameters["against"], "sha256": None} if parameters["against"] else None,
            "proposer_audit": parameters["proposer_audit"], "kind": parameters["kind"],
            "passes": parameters["passes"], "device": parameters["device"]}
