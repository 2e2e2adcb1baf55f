"""The trial types: every committed notebook reads into them with every figure unchanged."""

import json

import nbformat
import pytest

from liger_perf.record import notebook as record
from liger_perf.record.schema import TrialResult, Verdict

from broken_variants import ROOT

COMMITTED = sorted((ROOT / "notebooks").glob("*/*/[0-9][0-9][0-9][0-9]-*.ipynb"))


def _raw(nb, tag, mime):
    """The tagged cell's output of ``mime`` as JSON, wherever it stands among the cell's outputs (a screening's
    result cell displays its table before it)."""
    cell = next((c for c in nb.cells if tag in c.metadata.get("tags", [])), None)
    found = [o["data"][mime] for o in (cell.outputs if cell is not None else []) if mime in o.get("data", {})]
    assert len(found) <= 1, f"{len(found)} {mime} outputs in the {tag} cell"
    return found[0] if found else None


def _assert_kept(raw, typed, where=""):
    """Every key and value of ``raw`` is in ``typed`` (which may add the defaults of fields ``raw`` lacks)."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            assert key in typed, f"{where}.{key} lost"
            _assert_kept(value, typed[key], f"{where}.{key}")
    elif isinstance(raw, list):
        assert len(raw) == len(typed), f"{where}: {len(raw)} items became {len(typed)}"
        for i, (a, b) in enumerate(zip(raw, typed)):
            _assert_kept(a, b, f"{where}[{i}]")
    else:
        assert raw == typed, f"{where}: {raw!r} became {typed!r}"


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.name[:4]}")
def test_every_committed_notebook_reads_into_the_types_with_every_figure_kept(path):
    nb = nbformat.read(path, as_version=4)
    result = record.read_result(nb)
    assert isinstance(result, TrialResult)
    _assert_kept(_raw(nb, record.RESULT_TAG, record.RESULT_MIME), json.loads(json.dumps(result.payload())))
    verdict = _raw(nb, record.VERDICT_TAG, record.VERDICT_MIME)
    if verdict is not None:
        typed = record.read_verdict(nb)
        assert isinstance(typed, Verdict)
        _assert_kept(verdict, typed.model_dump(mode="json", by_alias=True))


def test_the_committed_history_is_there_to_check():
    assert len(COMMITTED) >= 20 and {p.parent.name for p in COMMITTED} == {"fused_add_rms_norm", "relu_squared"}
