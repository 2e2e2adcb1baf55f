"""Trials: a real Papermill-executed notebook in interpreter mode, read back by the history reader."""

import json
import shutil

import nbformat
import pytest

from liger_perf.record import notebook as record
from liger_perf.record.history import history_frame, load_trials
from liger_perf.kernel.registry import baseline_path
from liger_perf.run import run_trial
from liger_perf.record.schema import Verdict
from liger_perf.record.store import Store

from broken_variants import BROKEN, broken_dependency, write_broken_variant
from made_trials import make_trial

FAST = dict(device="interpret", repetitions=2, convergence=False)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Two real trials of relu_squared in a fresh history: the baseline, then the baseline against itself."""
    root = tmp_path_factory.mktemp("notebooks")
    first = run_trial("relu_squared", baseline_path("relu_squared"), root=root, **FAST)
    second = run_trial("relu_squared", baseline_path("relu_squared"), against=baseline_path("relu_squared"),
                       name="a a!", hypothesis="none: the same code twice", prediction="every ratio contains 1",
                       root=root, **FAST)
    return root, first, second


def test_trial_notebook_holds_the_structured_result(history):
    root, first, second = history
    assert first.notebook.name == "0000-baseline.ipynb" and second.notebook.name == "0001-a-a.ipynb"
    result = first.result
    assert result.status == "complete" and result.format == record.FORMAT
    assert result.correctness.passed and result.correctness.comparisons > 0
    fingerprint = result.fingerprint
    assert fingerprint.device_mode == "interpret" and fingerprint.torch and fingerprint.triton
    # The notebook alone rebuilds the variant: its full source and its hash.
    source = baseline_path("relu_squared").read_text()
    assert result.variant.source == source and len(result.variant_sha) == 64
    assert result.ncu.status == "unavailable" and "interpreter" in result.ncu.reason
    # The first trial of a kernel also times the peers a user would pick instead.
    assert {"candidate", "eager"} <= {r.contender for r in result.timing_rows()}
    passes = {r.pass_name for r in result.timing_rows()}
    assert passes == {"forward", "backward", "full"}


def test_side_by_side_trial_reports_ratios_with_intervals(history):
    _, _, second = history
    rows = second.result.timing_rows("candidate")
    assert rows and all(r.relative_to == "against" for r in rows)
    assert all(r.ci_low <= r.ratio <= r.ci_high for r in rows)
    assert "eager" not in {r.contender for r in second.result.timing_rows()}  # peers: first trial only
    assert second.result.hypothesis == "none: the same code twice"


def test_history_reads_every_trial_back(history):
    root, first, second = history
    frame = history_frame("relu_squared", root)
    assert set(frame["trial_id"]) == {0, 1}
    assert {"median_ms", "ratio", "ci_low", "ci_high", "bandwidth_fraction", "peak_bytes"} <= set(frame["metric"])
    ratios = frame[(frame.trial_id == 1) & (frame.metric == "ratio") & (frame.contender == "candidate")]
    assert len(ratios) == 3 * 2 * 2  # passes x shapes x dtypes
    assert (frame["variant_sha256"] == first.result.variant_sha).all()
    assert set(frame[frame.trial_id == 1]["against_sha256"]) == {first.result.variant_sha}


def test_verdict_is_recorded_and_read_back(history, tmp_path):
    root, first, _ = history
    copy = tmp_path / "relu_squared"
    shutil.copytree(root / "relu_squared", copy)
    target = copy / first.notebook.name
    record.record_verdict(target, Verdict(verdict="rejected", reasons=["backward 2048x1024 float32: 6.0% slower"]))
    trial = next(t for t in load_trials("relu_squared", tmp_path) if t.trial_id == 0)
    assert trial.verdict == "rejected" and trial.verdict_reasons == ["backward 2048x1024 float32: 6.0% slower"]
    record.record_verdict(target, Verdict(verdict="accepted"))  # replaced, not appended
    nb = nbformat.read(target, as_version=4)
    assert sum("verdict" in c.metadata.get("tags", []) for c in nb.cells) == 1
    with pytest.raises(ValueError):
        Verdict(verdict="maybe")


def test_failing_variant_is_recorded_and_never_timed(tmp_path):
    broken = next(b for b in BROKEN if b.name == "backward_without_relu_mask")
    run = run_trial("relu_squared", write_broken_variant(broken, tmp_path / "v"), root=tmp_path, **FAST)
    assert run.result.status == "failed-correctness"
    assert not run.result.correctness.passed and run.result.correctness.failures
    assert "timing" not in run.result and "ncu" not in run.result
    frame = history_frame("relu_squared", tmp_path)
    assert len(frame) == 1 and frame["status"].iloc[0] == "failed-correctness"


def test_invalid_variant_is_recorded_as_such(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("KNOBS = {}\nKNOB_CHOICES = {}\n")  # no relu_squared function
    run = run_trial("relu_squared", bad, root=tmp_path, **FAST)
    assert run.result.status == "invalid-variant" and "relu_squared" in run.result.reason


def test_crashing_variant_leaves_a_readable_notebook(tmp_path):
    source = baseline_path("relu_squared").read_text().replace(
        '    return ReluSquaredFunction.apply(X)', '    import os\n    os._exit(3)')
    crasher = tmp_path / "crasher.py"
    crasher.write_text(source)
    run = run_trial("relu_squared", crasher, root=tmp_path, **FAST)
    assert run.result.status == "crashed" and run.result.reason
    assert [p.name for p in Store(tmp_path).trial_notebooks("relu_squared")] == ["0000-crasher.ipynb"]
    assert not list((tmp_path / "relu_squared").glob(".*"))  # no half-written file left behind
    assert load_trials("relu_squared", tmp_path)[0].status == "crashed"


@pytest.mark.slow
def test_hanging_variant_times_out_and_is_recorded(tmp_path):
    source = baseline_path("relu_squared").read_text().replace(
        '    return ReluSquaredFunction.apply(X)', '    import time\n    time.sleep(3600)')
    hanger = tmp_path / "hanger.py"
    hanger.write_text(source)
    # A time limit that is not a whole number of seconds (a nightly's time left) is valid for the runner.
    run = run_trial("relu_squared", hanger, root=tmp_path, timeout_s=9.75, **FAST)
    assert run.result.status == "crashed" and "Timeout" in run.result.reason


def test_a_variant_that_kills_its_process_at_import_crashed_and_the_harness_is_not_blamed(tmp_path):
    killer = tmp_path / "killer.py"
    killer.write_text("import os\nos._exit(3)\n" + baseline_path("relu_squared").read_text())
    run = run_trial("relu_squared", killer, root=tmp_path, **FAST)
    assert run.result.status == "crashed", run.result.reason


def test_a_runner_that_fails_before_the_notebook_starts_records_a_harness_error(tmp_path, monkeypatch):
    import papermill
    from traitlets import TraitError

    def refuse(*args, **kwargs):  # as the notebook client did with a fractional timeout
        raise TraitError("injected: the notebook client refused its settings")

    from liger_perf.run.papermill import PapermillRunner

    monkeypatch.setattr(papermill, "execute_notebook", refuse)  # in this process: the runner outside a sandbox
    run = run_trial("relu_squared", baseline_path("relu_squared"), root=tmp_path, **FAST,
                    runner=PapermillRunner(sandboxed=False))
    assert run.result.status == "harness-error" and "injected" in run.result.reason
    assert "before the variant was imported" in run.result.reason
    (trial,) = load_trials("relu_squared", tmp_path)  # the history stays readable
    assert trial.status == "harness-error" and not list((tmp_path / "relu_squared").glob(".*"))


def test_a_verdict_or_a_result_written_inside_the_trial_is_not_taken(tmp_path, monkeypatch):
    """A review's variant left a process behind that, after Papermill's last save, added an "accepted" verdict to
    the notebook and set its result's best to the baseline: `history` then showed the trial accepted and
    `optimize` ran its next trial against it. Here the same two edits land on the notebook as Papermill finishes."""
    import papermill

    from liger_perf.kernel.variants import with_knobs
    from liger_perf.record.schema import VariantRecord
    from liger_perf.run.papermill import PapermillRunner

    real = papermill.execute_notebook

    def then_tamper(template, output, **kwargs):
        real(template, output, **kwargs)
        nb = nbformat.read(output, as_version=4)
        result = record.read_result(nb)
        record.set_result(nb, result.model_copy(update={
            "against": VariantRecord(path=result.against.path, sha256="0" * 64)}))
        record.set_verdict(nb, Verdict(verdict="accepted", reasons=["planted"]))
        nbformat.write(nb, output)

    monkeypatch.setattr(papermill, "execute_notebook", then_tamper)  # in this process: the runner outside a sandbox
    best = tmp_path / "best.py"
    best.write_text(with_knobs(baseline_path("relu_squared").read_text(), {"BLOCK_SIZE": 2048}))
    run = run_trial("relu_squared", baseline_path("relu_squared"), against=best, root=tmp_path / "nb", **FAST,
                    runner=PapermillRunner(sandboxed=False))
    assert run.result.status == "crashed" and "another best" in run.result.reason, run.result.reason
    nb = nbformat.read(run.notebook, as_version=4)
    assert record.read_verdict(nb) is None
    assert record.read_result(nb).against.sha256 != "0" * 64  # the request's best, not the one written inside
    (trial,) = load_trials("relu_squared", tmp_path / "nb")
    assert trial.verdict is None and trial.status == "crashed"


@pytest.mark.parametrize("written", ["[" * 100000 + "]" * 100000, '{"nbformat": 4, "nbformat_minor": 5}',
                                     "TAGS_NULL"], ids=["nested-past-the-parser", "no-cells", "tags-null"])
def test_a_notebook_written_over_inside_the_trial_is_a_crash_of_the_trial_not_of_the_runner(tmp_path, monkeypatch,
                                                                                           written):
    """Each of these raised out of the runner (RecursionError, a schema error, a TypeError in clearing the
    verdict), so `optimize` stopped with no notebook filed and proposed the same candidate again on resume."""
    import papermill

    from liger_perf.run.papermill import PapermillRunner

    real = papermill.execute_notebook

    def then_write_over(template, output, **kwargs):
        real(template, output, **kwargs)
        if written == "TAGS_NULL":
            nb = json.loads(open(output).read())
            for cell in nb["cells"]:
                cell["metadata"]["tags"] = None
            open(output, "w").write(json.dumps(nb))
        else:
            open(output, "w").write(written)

    monkeypatch.setattr(papermill, "execute_notebook", then_write_over)
    run = run_trial("relu_squared", baseline_path("relu_squared"), root=tmp_path, **FAST,
                    runner=PapermillRunner(sandboxed=False))
    assert run.result.status == "crashed" and "written over inside the sandbox" in run.result.reason, run.result.reason
    (trial,) = load_trials("relu_squared", tmp_path)  # filed, and the history reads it
    assert trial.status == "crashed"


def test_a_source_recorded_otherwise_than_the_harness_would_is_not_this_trial(history, tmp_path):
    """The loop builds candidates from the best's recorded source: a result naming the right hash beside another
    source was taken."""
    from liger_perf.run import trial_request
    from liger_perf.run.papermill import not_this_trial

    _, _, second = history
    request = trial_request("relu_squared", baseline_path("relu_squared"), baseline_path("relu_squared"),
                            store=Store(tmp_path), device="interpret")
    result = second.result.model_copy(update={"trial_id": request.trial_id})
    assert not_this_trial(result, request) is None
    other = result.variant.model_copy(update={"source": result.variant.source + "\n# changed\n"})
    assert "another variant" in not_this_trial(result.model_copy(update={"variant": other}), request)


def test_a_screening_runs_through_the_runner_and_a_forged_one_is_not_taken(tmp_path):
    """A real screening notebook through the Papermill runner: the runner takes what its harness writes (the
    batch as its variant, the best as its against). Checked as a trial's, with the best for its variant, every
    screening on the H200 was filed as crashed and its timings lost (trial 0092, 2026-12-06). A result naming
    another batch or best, or a candidate the screening was not given (the loop runs a kept row's source as the
    next full trial), is not taken."""
    from liger_perf.kernel.variants import source_hash
    from liger_perf.record.schema import ScreenEntry, Screening, ScreeningRow
    from liger_perf.run import trial_request
    from liger_perf.run.papermill import PapermillRunner, not_this_trial

    candidate = tmp_path / "candidate.py"
    candidate.write_text(baseline_path("relu_squared").read_text() + "\n# a candidate\n")
    store = Store(tmp_path / "history")
    request = trial_request("relu_squared", baseline_path("relu_squared"), None, store=store, kind="screening",
                            screen=[ScreenEntry(name="0-comment", variant=str(candidate))], ncu=False, peers=False,
                            guardrails={"target": "forward"}, **FAST)
    run = PapermillRunner(sandboxed=False).run(request, store)
    honest = run.result
    assert honest.kind == "screening" and honest.status == "complete", honest.reason
    (row,) = honest.screening.rows
    assert row.name == "0-comment" and row.quick_gate == "pass" and row.ratio is not None
    assert not_this_trial(honest, request) is None
    best = honest.against.model_copy(update={"sha256": source_hash("another best")})
    assert "another best" in not_this_trial(honest.model_copy(update={"against": best}), request)
    batch = honest.variant.model_copy(update={"sha256": source_hash("another batch")})
    assert "another batch" in not_this_trial(honest.model_copy(update={"variant": batch}), request)
    planted = ScreeningRow(name="1-planted", sha256=source_hash("import os\n"), source="import os\n", kept=True)
    forged = honest.model_copy(update={"screening": Screening(target="forward", rows=[row, planted])})
    assert "a candidate it was not given" in not_this_trial(forged, request)


def test_a_missing_dependency_in_the_trial_process_is_a_harness_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", broken_dependency(tmp_path))
    run = run_trial("relu_squared", baseline_path("relu_squared"), root=tmp_path, **FAST)
    assert run.result.status == "harness-error" and "pandas is not installed" in run.result.reason


@pytest.mark.parametrize("device, timeout", [("tpu", 60), ("interpret", 0), ("interpret", -1)])
def test_bad_trial_settings_are_refused_before_a_trial_number_is_taken(tmp_path, device, timeout):
    from liger_perf.core.errors import UserError

    with pytest.raises(UserError):
        run_trial("relu_squared", baseline_path("relu_squared"), root=tmp_path, device=device, timeout_s=timeout)
    assert not (tmp_path / "relu_squared").exists()


@pytest.mark.parametrize("against, buckets, said", [
    (False, ["256x2"], "needs a current best"), (True, ["256"], "is no dispatch bucket"),
    (True, ["x2"], "is no dispatch bucket"), (True, ["3000x2"], "is no dispatch bucket"),
    (True, ["4096x3"], "is no dispatch bucket")])
def test_a_timing_confined_to_buckets_is_refused_without_a_best_or_with_a_bucket_misspelt(tmp_path, against,
                                                                                           buckets, said):
    from liger_perf.core.errors import UserError

    path = baseline_path("fused_add_rms_norm")
    with pytest.raises(UserError, match=said):
        run_trial("fused_add_rms_norm", path, against=path if against else None, root=tmp_path, buckets=buckets,
                  **FAST)
    assert not (tmp_path / "fused_add_rms_norm").exists()


def test_corrupt_half_written_and_foreign_notebooks_are_skipped_with_a_warning(history, tmp_path, capsys):
    root, first, _ = history
    folder = tmp_path / "relu_squared"
    shutil.copytree(root / "relu_squared", folder)
    (folder / "0002-corrupt.ipynb").write_text('{"cells": [')  # killed mid-write
    nb = nbformat.read(first.notebook, as_version=4)
    record.set_result(nb, first.result.model_copy(update={"format": "liger-perf-trial/0"}))
    nbformat.write(nb, folder / "0003-old-format.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), folder / "0004-no-result.ipynb")
    (folder / ".0005-running.partial.ipynb").write_text("{")  # a trial in progress: not even looked at
    # A result of the right format that does not fit the type (a status no liger-perf writes, a ratio as text).
    payload = first.result.payload()
    payload["status"], payload["timing"]["rows"][0]["ratio"] = "exploded", "fast"
    cell = next(c for c in nb.cells if "result" in c.metadata.get("tags", []))
    cell.outputs[0]["data"][record.RESULT_MIME] = payload
    nbformat.write(nb, folder / "0006-misfit.ipynb")
    trials = load_trials("relu_squared", tmp_path)
    assert [t.trial_id for t in trials] == [0, 1]
    warnings = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(warnings) == 4 and all(w.startswith("liger-perf: warning: skipping") for w in warnings)
    assert "does not fit a trial result (2 problems" in warnings[-1]
    assert Store(tmp_path).next_trial_id("relu_squared") == 7  # never reuses a number, even a half-written one's


def test_a_fifo_or_a_folder_named_like_a_notebook_is_skipped_with_one_warning(history, tmp_path, capsys):
    """A FIFO named like a trial notebook made `history` wait forever for a writer; a folder leaked a descriptor on
    every read, whose number in the warning made it new each time (`plan` said it five times)."""
    import os
    import threading

    from liger_perf.record.history import forget_warnings

    root, _, _ = history
    folder = tmp_path / "relu_squared"
    shutil.copytree(root / "relu_squared", folder)
    os.mkfifo(folder / "0002-fifo.ipynb")
    (folder / "0003-folder.ipynb").mkdir()
    forget_warnings()
    open_before, read = len(os.listdir("/proc/self/fd")), []
    reader = threading.Thread(target=lambda: read.extend(load_trials("relu_squared", tmp_path) for _ in range(3)),
                              daemon=True)
    reader.start()
    reader.join(timeout=120)
    assert not reader.is_alive(), "reading the history hangs on the FIFO"
    assert [[t.trial_id for t in trials] for trials in read] == [[0, 1]] * 3
    assert len(os.listdir("/proc/self/fd")) == open_before
    warnings = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(warnings) == 2, warnings
    assert "0002-fifo.ipynb: not a readable notebook (OSError: not a regular file" in warnings[0]
    assert "0003-folder.ipynb: not a readable notebook (OSError: a folder, not a file)" in warnings[1]


def test_atomic_write_keeps_the_old_notebook_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "0000-x.ipynb"
    nb = nbformat.v4.new_notebook()
    record.set_result(nb, make_trial())
    record.write_atomic(nb, path)
    before = path.read_text()

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(nbformat, "writes", fail)
    with pytest.raises(OSError):
        record.write_atomic(nb, path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["0000-x.ipynb"]


def test_a_notebook_is_written_without_indentation_and_reads_back_the_same(tmp_path):
    """A history's notebooks travel with every GPU call, whose copy of the tree may be 64 MiB at most: written
    without nbformat's indentation, the same JSON takes about three quarters of the bytes."""
    path = tmp_path / "0000-x.ipynb"
    nb = nbformat.v4.new_notebook()
    record.set_result(nb, make_trial())
    record.write_atomic(nb, path)
    record.record_verdict(path, Verdict(verdict="accepted"))
    text = path.read_text()
    assert "\n " not in text and len(text) < 0.9 * len(nbformat.writes(nbformat.reads(text, as_version=4)))
    back = nbformat.read(path, as_version=4)
    assert json.loads(text) == json.loads(nbformat.writes(back))
    assert record.read_verdict(back).verdict == "accepted" and record.read_result(back) is not None


def test_result_json_has_no_nan():
    assert json.dumps(record.jsonable({"a": float("nan"), "b": [float("inf"), 1.0]})) == '{"a": null, "b": [null, 1.0]}'


def test_a_stated_commit_wins_over_the_copy_s_own_git(monkeypatch, interpret_device):
    """A checkout copied to a GPU machine may carry the .git of an older commit: the commit the caller states is
    the one the notebooks must record."""
    from liger_perf.measure.fingerprint import fingerprint
    from liger_perf.core.workspace import current

    monkeypatch.setenv("LIGER_PERF_GIT_COMMIT", "c0ffee1")
    stated = fingerprint(interpret_device, current().root)
    assert stated["git_commit"] == "c0ffee1" and stated["git_dirty"] is False
    monkeypatch.delenv("LIGER_PERF_GIT_COMMIT")
    assert fingerprint(interpret_device, current().root)["git_commit"] != "c0ffee1"


def test_a_trial_reports_its_progress_step_by_step_for_the_terminal(history):
    import time

    from liger_perf.run.progress import describe, latest

    root, _, second = history
    folder = root / "relu_squared" / "artifacts" / second.notebook.stem
    lines = [json.loads(line) for line in (folder / "progress.jsonl").read_text().splitlines()]
    steps = [line["step"] for line in lines]
    # Under the interpreter there is no NCU: the trial records it unavailable and never shows it as a step.
    assert steps[0] == "importing the variant" and steps[-1] == "accuracy" and "NCU profile" not in steps
    assert second.result.ncu.status == "unavailable"
    gate, timing = ([line for line in lines if line["step"] == step] for step in ("gate", "timing"))
    assert [g["done"] for g in gate] == list(range(1, len(gate) + 1)) and gate[-1]["total"] == len(gate)
    assert timing and timing[-1]["done"] == timing[-1]["total"] == len(timing)
    line = describe("0001 a-a", latest(folder), time.time() - 30, 90)
    assert line.startswith(f"0001 a-a: {steps[-1]}") and "about 60 s left" in line


def test_a_trial_confined_to_a_bucket_times_its_shapes_alone_and_records_the_rest(interpret_device, monkeypatch):
    """``TrialRequest.buckets``: the timing and the peak memory measure the named buckets' shapes alone, the
    others are recorded as left out (the judge counts them as the best's code), the candidate's NCU profile and
    the best's durations (held to the timed times) cover those buckets alone, and so does the precompilation of
    the timing's calls."""
    from liger_perf.kernel.variants import dispatch_bucket
    from liger_perf.measure import ncu
    from liger_perf.measure.ncu import NcuResult
    from liger_perf.record.schema import TrialResult
    from liger_perf.run.trial import Trial

    path = str(baseline_path("fused_add_rms_norm"))
    trial = Trial({"kernel": "fused_add_rms_norm", "variant": path, "against": path, "device": "interpret",
                   "repetitions": 2, "convergence": False, "buckets": ["256x2"]})
    trial.load_variants()
    trial.time()
    cases = trial.spec.cases(trial.suite, "bench")
    assert {dispatch_bucket(c.shape, c.dtype) for c in cases} == {"64x4", "256x4", "64x2", "256x2"}
    timed = {(r.shape, r.dtype) for r in TrialResult.model_validate(
        {**trial.data, "status": "complete"}).timing_rows()}
    assert timed == {("9x200", "float16")}
    assert {(m["shape"], m["dtype"]) for m in trial.data["memory"]["rows"]} <= timed
    result = TrialResult.model_validate({**trial.data, "status": "complete"})
    assert result.timing.buckets == ["256x2"]
    assert {(c.shape, c.dtype) for c in result.timing.left_out} == {("16x64", "float32"), ("9x200", "float32"),
                                                                   ("16x64", "float16")}
    assert len(result.left_out_keys) == 3 * 4  # three passes and peak memory at each case left out
    profiled = []
    monkeypatch.setattr(ncu, "profile", lambda *args, **kwargs: profiled.append(kwargs) or NcuResult(
        "unavailable", "a stand-in"))
    trial._against_durations(["backward"])
    trial.profile()  # the candidate's profile too: the bucket's largest shape alone, in the bucket's dtypes
    assert [kwargs["driver_args"][-4:] for kwargs in profiled] == [("--shapes", "9x200", "--dtypes", "float16")] * 2
    from liger_perf.measure import precompile

    compiled = []
    monkeypatch.setattr(precompile, "precompile", lambda *args, **kwargs: compiled.append(kwargs) or {
        "status": "skipped", "reason": "a stand-in"})
    trial.precompile()
    assert compiled[0]["bench_buckets"] == ["256x2"]
    # Unconfined, or confined to buckets none of the suite's shapes falls in: every case timed, none left out.
    for buckets in ([], ["65536x2"]):
        whole = Trial({"kernel": "fused_add_rms_norm", "variant": path, "against": path, "device": "interpret",
                       "repetitions": 2, "convergence": False, "buckets": buckets})
        assert whole._timed_cases() == (cases, []) and whole._timed_buckets() == []


def test_the_status_line_takes_no_step_of_another_shape_and_no_markup_from_the_trial(tmp_path, monkeypatch):
    """progress.jsonl is written by the trial's process, the code under trial with it: a step that was no string
    killed the terminal's refresh thread, and `[/]` or `[link=...]` in a step was taken as Rich markup."""
    import threading
    import time

    from rich.console import Console

    from liger_perf import cli
    from liger_perf.run.progress import FILE_NAME, describe, latest

    (tmp_path / FILE_NAME).write_text('{"t": 1, "step": "gate", "done": 2, "total": 9}\n{"t": 2, "step": 5}\n'
                                      '{"t": 3, "step": "timing", "done": "many"}\n')
    assert latest(tmp_path)["step"] == "gate"  # the last line of the shape ProgressLog writes
    (tmp_path / FILE_NAME).write_text('{"t": 1, "step": "gate [/] \\u001b[2J", "detail": "[link=x]y[/link]"}\n')
    line = describe("0001 x", latest(tmp_path), 0, None)
    assert "\x1b" not in line and "gate [/] ?[2J ([link=x]y[/link])" in line
    console = Console(record=True, force_terminal=True, width=200)
    monkeypatch.setattr(cli, "console", console)
    failed = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failed.append(args.exc_value))
    with cli._live_status(lambda: line):
        time.sleep(1.6)
    assert not failed, failed
    assert "gate [/] ?[2J ([link=x]y[/link])" in console.export_text()


def test_the_history_table_shows_a_trial_s_words_as_text_not_markup(history):
    """A variant's RuntimeError("[/]") became its trial's reason, and `history` then stopped with a MarkupError."""
    from rich.console import Console

    from liger_perf.cli import history_table

    _, _, second = history
    (trial,) = [t for t in load_trials("relu_squared", history[0]) if t.trial_id == second.result.trial_id]
    odd = trial.model_copy(update={"name": "a[/]b", "hypothesis": "[/] [b]y[/b]"})
    console = Console(record=True, width=100, force_terminal=True)
    console.print(history_table("relu_squared", "interpret", [odd]))
    text = console.export_text()
    assert "a[/]b" in text and "[/] [b]y[/b]" in text, text
