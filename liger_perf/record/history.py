"""The history of a kernel: every trial notebook, read back into a pandas DataFrame.

The notebooks are the only state the optimizer has. ``load_trials`` returns each trial's structured result
(with the loop's verdict, if any); ``history_frame`` flattens them into one long table, one row per trial,
pass, shape, dtype, contender and metric, with the trial's parameters and verdict as columns. A notebook that
is corrupt, half-written or of another format is skipped with a one-line warning on stderr.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from liger_perf.record.notebook import read_result, read_verdict
from liger_perf.kernel.registry import baseline_path
from liger_perf.record.schema import Key, TrialResult, measures_suite
from liger_perf.record.store import NOTEBOOK_LIMIT, Store, read_notebook_text, trial_number, write_file
from liger_perf.kernel.variants import source_hash
from liger_perf.core.wording import count

TRIAL_COLUMNS = ["trial_id", "name", "kind", "status", "verdict", "hypothesis", "prediction", "variant_sha256",
                 "against_sha256", "device", "suite", "notebook"]
COLUMNS = TRIAL_COLUMNS + ["pass", "shape", "dtype", "contender", "kernel_name", "metric", "value"]
TIMING_METRICS = ("median_ms", "ratio", "ci_low", "ci_high", "bandwidth_fraction")


_warned: set[str] = set()


def warn(message: str) -> None:
    """A warning on stderr, once per process: a command reads the history many times (a nightly run, each
    kernel and round), and a notebook it skips is worth one line."""
    if message in _warned:
        return
    _warned.add(message)
    print(f"liger-perf: warning: {message}", file=sys.stderr)


def forget_warnings() -> None:
    """A new command starts: its warnings are said again."""
    _warned.clear()


#: What a notebook file that is not a trial notebook raises while it is read: never more than a warning.
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError)


def read_trial(path: Path, kernel: str | None = None) -> TrialResult | None:
    """A notebook's result with its verdict and path; None (with a one-line warning) if it is not a readable
    trial notebook (of ``kernel``, when given): corrupt, half-written, of another format or another kernel."""
    import nbformat
    from pydantic import ValidationError

    if path.is_symlink():  # never followed: it could name any file of the machine, and its text be shown
        warn(f"skipping {path}: a symbolic link, not a trial notebook (links in a history are not followed)")
        return None
    try:
        size = path.stat().st_size
    except OSError as e:
        warn(f"skipping {path}: not a readable notebook ({type(e).__name__})")
        return None
    if size > NOTEBOOK_LIMIT:
        warn(f"skipping {path}: {size / 2**20:.0f} MB, larger than any trial notebook ({NOTEBOOK_LIMIT >> 20} MB "
             "at most): move it out of the history")
        return None
    try:
        # nbformat's own parser, without the conversion of every output into NotebookNodes: that conversion is
        # most of the cost of a full read, and only the two tagged outputs are looked at.
        nb = nbformat.reader.parse_json(read_notebook_text(path))
        if not isinstance(nb, dict):
            raise TypeError(f"a JSON {type(nb).__name__}, not a notebook object")
        major = nbformat.reader.get_version(nb)[0]
    except (*_UNREADABLE, nbformat.reader.NotJSONError) as e:
        warn(f"skipping {path}: not a readable notebook ({type(e).__name__}: {_first_line(e)})")
        return None
    if major != 4 or not isinstance(nb.get("cells"), list):
        warn(f"skipping {path}: " + (f"notebook format {major!r}, not 4" if major != 4 else "it has no cell list"))
        return None
    try:
        result = read_result(nb)
    except ValidationError as e:
        where = ".".join(str(p) for p in e.errors()[0]["loc"]) if e.errors() else "?"
        warn(f"skipping {path}: its result does not fit a trial result ({count(e.error_count(), 'problem')}, first at "
             f"{where!r})")
        return None
    except _UNREADABLE as e:
        warn(f"skipping {path}: its result output is malformed ({type(e).__name__}: {_first_line(e)})")
        return None
    if result is None:
        warn(f"skipping {path}: it holds no trial result (half-written, or not a trial notebook)")
        return None
    if kernel is not None and result.kernel != kernel:
        warn(f"skipping {path}: a trial of {result.kernel!r}, not of {kernel!r} (a notebook in the wrong folder)")
        return None
    try:
        verdict = read_verdict(nb)
    except _UNREADABLE as e:
        warn(f"{path}: its verdict is malformed ({type(e).__name__}); read as a trial without a verdict")
        verdict = None
    # The file name's number is the trial's place in the history (what the result recorded is kept beside it).
    numbered = trial_number(path)
    recorded = result.trial_id
    return result.model_copy(update={"trial_id": numbered if numbered is not None else recorded,
                                     "recorded_trial_id": recorded, "judged": verdict, "notebook": str(path)})


def _first_line(error: BaseException) -> str:
    lines = str(error).splitlines()
    return lines[0][:120] if lines else ""


def load_trials(kernel: str, root: Path) -> list[TrialResult]:
    """Every readable trial of ``kernel`` in the history folder ``root`` (``notebooks/<device>``), in order."""
    trials = [t for p in Store(root).trial_notebooks(kernel) if (t := read_trial(p, kernel)) is not None]
    _warn_shared_numbers(trials)
    return trials


def _warn_shared_numbers(trials: list[TrialResult]) -> None:
    """One line per number that two notebooks carry: histories merged from two runs that never saw each other's
    trials (on the H200, a call begun before the last one's results were unpacked). The loop orders trials and
    judges each against those numbered before it, so such a pair has no order; both are still read."""
    names: dict[int, list[str]] = {}
    for trial in trials:
        names.setdefault(trial.trial_id, []).append(Path(trial.notebook).name)
    for number, files in names.items():
        if len(files) > 1:
            warn(f"{count(len(files), 'notebook')} carry the number {number:04d} ({', '.join(files)}): two runs "
                 "wrote this history without seeing each other; give the one that ran later the next free number "
                 "(its notebook's and its variants' names) so the loop can order them")


def _trial_columns(trial: TrialResult) -> dict[str, Any]:
    return {"trial_id": trial.trial_id, "name": trial.name, "kind": trial.kind, "status": trial.status,
            "verdict": trial.verdict, "hypothesis": trial.hypothesis, "prediction": trial.prediction,
            "variant_sha256": trial.variant_sha, "against_sha256": trial.against_sha, "device": trial.device,
            "suite": trial.suite, "notebook": trial.notebook}


MEASUREMENT_COLUMNS = ["pass", "shape", "dtype", "contender", "kernel_name", "metric", "value"]


def _append_rows(trial: TrialResult, index: int, cols: dict[str, list]) -> None:
    """Append one trial's measurements to column lists, tagged with the trial's ``index``."""

    def add(pass_name, shape, dtype, contender, kernel_name, metrics: dict):
        n = len(metrics)
        for key, value in (("trial", index), ("pass", pass_name), ("shape", shape), ("dtype", dtype),
                           ("contender", contender), ("kernel_name", kernel_name)):
            cols[key].extend([value] * n)
        cols["metric"].extend(metrics.keys())
        cols["value"].extend(metrics.values())

    start = len(cols["metric"])
    for r in trial.timing_rows():
        add(r.pass_name, r.shape, r.dtype, r.contender, None, {m: getattr(r, m) for m in TIMING_METRICS})
    for r in trial.memory_rows():
        add("memory", r.shape, r.dtype, r.contender, None, {"peak_bytes": r.peak_bytes})
    for launch in trial.launches():
        add(launch.pass_name, launch.shape, launch.dtype, "candidate", launch.kernel,
            {f"ncu:{m}": v for m, v in launch.metrics.items()})
    if len(cols["metric"]) == start:  # a trial that measured nothing (failed the gate, crashed) appears once
        add(None, None, None, None, None, {None: None})


def history_frame(kernel: str, root: Path | None = None, trials: list[TrialResult] | None = None) -> pd.DataFrame:
    """One row per trial, pass, shape, dtype, contender and metric (``COLUMNS``); of ``trials``, else of the
    history folder ``root``."""
    trials = load_trials(kernel, root) if trials is None else trials
    cols: dict[str, list] = {c: [] for c in ["trial", *MEASUREMENT_COLUMNS]}
    for index, trial in enumerate(trials):
        _append_rows(trial, index, cols)
    measurements = pd.DataFrame(cols)
    # The trials' own columns are joined in by position: far cheaper than repeating them row by row.
    per_trial = pd.DataFrame([_trial_columns(t) for t in trials], columns=TRIAL_COLUMNS)
    frame = per_trial.iloc[measurements["trial"].to_numpy()].reset_index(drop=True)
    for column in MEASUREMENT_COLUMNS:
        frame[column] = measurements[column].to_numpy()
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    return frame[COLUMNS]


# -- queries of the history: the accepted chain, its ratios, the module a trial ran ----------------------------

def geomean(values: list[float]) -> float:
    """The geometric mean; 0 where a value is 0 (an interval's low end can reach it: a timer's resolution over a
    very short median), NaN where one is NaN or negative, or there are none."""
    if not values or any(not v >= 0 for v in values):
        return math.nan
    if any(v == 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def measured_ratios(result: TrialResult) -> tuple[dict[Key, tuple[float, float, float]], dict[Key, float]]:
    """``(times, memory)``: candidate / current best per (pass, shape, dtype) with the interval, and per
    ("memory", shape, dtype). A ratio without its interval (fewer than two repetitions) has NaN bounds: the
    judge finds it neither better nor worse, so inconclusive, never accepted on a bound that was not measured."""
    times = {r.key: (r.ratio, _or(r.ci_low, math.nan), _or(r.ci_high, math.nan)) for r in result.candidate_ratios()}
    peaks: dict[tuple[str, str], dict[str, float]] = {}
    for r in result.memory_rows():
        if r.peak_bytes is not None:
            peaks.setdefault((r.shape, r.dtype), {})[r.contender] = r.peak_bytes
    memory = {("memory", shape, dtype): p["candidate"] / p["against"]
              for (shape, dtype), p in peaks.items() if p.get("against") and "candidate" in p}
    return times, memory


#: A quarter of each dtype's unit roundoff: errors below it are equal (``liger_perf.measure.accuracy``).
ERROR_FLOOR = {"float64": 2.0 ** -55, "float32": 2.0 ** -26, "float16": 2.0 ** -13, "bfloat16": 2.0 ** -10}
AccuracyKey = tuple[str, str, str]  # (dtype, config, output)


def accuracy_ratios(result: TrialResult) -> dict[AccuracyKey, tuple[float, float, float]]:
    """Per (dtype, options, output or gradient): ``(candidate's error, current best's, their ratio)``, each
    the geometric mean, over the shapes where both were measured, of the error against float64 (at least the
    dtype's ``ERROR_FLOOR``). Above 1: the candidate is less accurate; inf where the candidate's result was not
    finite where the reference and the best's were. Empty without both contenders' rows."""
    paired: dict[AccuracyKey, dict[str, dict[str, object]]] = {}
    for r in result.accuracy_rows():
        if r.contender in ("candidate", "against"):
            paired.setdefault((r.dtype, r.config, r.output), {}).setdefault(r.shape, {})[r.contender] = r
    found = {}
    for key, shapes in paired.items():
        floor = ERROR_FLOOR.get(key[0], 0.0) or 1e-300  # an exact 0 is as good as any: never log(0)
        mine, best, broken = [], [], False
        for rows in shapes.values():
            cand, against = rows.get("candidate"), rows.get("against")
            if cand is None or against is None or against.error is None:
                continue  # the best raised, or nothing to be relative to: no comparison at this shape
            if cand.nonfinite:
                broken = True
            elif cand.error is not None:
                mine.append(max(cand.error, floor))
                best.append(max(against.error, floor))
        if broken:
            found[key] = (math.inf, geomean(best) if best else math.nan, math.inf)
        elif mine:
            found[key] = (geomean(mine), geomean(best), geomean(mine) / geomean(best))
    return found


def accuracy_reductions(result: TrialResult) -> set[AccuracyKey]:
    """The keys of ``accuracy_ratios`` whose output is a sum over rows (its error moves with the order of a sum)."""
    return {(r.dtype, r.config, r.output) for r in result.accuracy_rows() if r.reduction}


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def on_target(key: Key, target: str) -> bool:
    """Whether a measured case counts for ``target``: peak memory (``("memory", shape, dtype)``) for "memory",
    else that pass's time."""
    return key[0] == ("memory" if target == "memory" else target)


def target_ratio(result: TrialResult, target: str, keys: set[Key] | None = None) -> float:
    """The geometric mean of a trial's side-by-side ratios (candidate / the best it ran against) on ``target``,
    over every case it measured (or those of ``keys``), a case its confined timing left out counting 1 (the
    candidate ran the best's code there: ``TrialResult.left_out_keys``); NaN where there is none."""
    times, memory = measured_ratios(result)
    ratios = {**{key: 1.0 for key in result.left_out_keys}, **{k: v[0] for k, v in times.items()}, **memory}
    values = [ratio for key, ratio in ratios.items() if on_target(key, target) and (keys is None or key in keys)]
    return geomean(values) if values else math.nan


def chain_ratios(accepted: list[TrialResult]) -> dict[Key, float]:
    """The current best against the baseline: the product, per metric, of the ratios of every accepted trial,
    for the metrics every one of them measured or left out as running the best's code (a confined timing: 1
    there). A shape some step did not time otherwise (a step on another suite) has no product: the steps that
    did time it would not say what the best does there against the baseline."""
    total: dict[Key, float] | None = None
    for result in accepted:
        times, memory = measured_ratios(result)
        step = {**{key: 1.0 for key in result.left_out_keys}, **{key: ratio for key, (ratio, _, _) in times.items()},
                **memory}
        total = step if total is None else {key: ratio * step[key] for key, ratio in total.items() if key in step}
    return total or {}


def _is_baseline(trial: TrialResult, baseline_sha: str) -> bool:
    return trial.variant_sha == baseline_sha and not trial.against and trial.status == "complete"


def accepted_chain(trials: list[TrialResult], baseline_sha: str) -> tuple[TrialResult | None, list[TrialResult]]:
    """(the baseline trial, the accepted trials in order): the current best is the last of them.

    An accepted trial joins the chain only if it was measured against the chain's tip at that point: two
    candidates of one round accepted against the same best (a loop killed before it reconciled them) never both
    count, so the chain's ratios multiply only measurements that follow one another."""
    baseline = next((t for t in trials if _is_baseline(t, baseline_sha)), None)
    chain, tip = [], baseline_sha
    for t in trials:
        if t.verdict == "accepted" and t.against_sha == tip:
            chain.append(t)
            tip = t.variant_sha
    return baseline, chain


def best_timing_rows(best: TrialResult, trials: list[TrialResult], pass_name: str | None = None) -> list:
    """The current best's candidate timing rows over the suite: its own trial's and, at each case that trial's
    confined timing left out (``TrialResult.left_out_keys``: there it ran the code of the best it was measured
    against), the row of the newest earlier complete trial of that best's source that timed the case (any suite,
    any kind); a case none timed but that source's own confined trial left out is looked for the same way one
    best further back (``_back_along_the_chain``). A case no such trial timed has no row."""
    rows = list(best.timing_rows("candidate", pass_name))

    def take(trial: TrialResult, pending: set) -> set:
        found = [row for row in trial.timing_rows("candidate", pass_name) if row.key in pending]
        rows.extend(found)
        return {row.key for row in found}

    _back_along_the_chain(best, trials, {key for key in best.left_out_keys
                                         if pass_name is None or key[0] == pass_name}, take)
    return rows


def best_as_profiled(best: TrialResult, trials: list[TrialResult]) -> TrialResult:
    """The current best's trial with its candidate's NCU launches over the suite: where its confined trial
    profiled its buckets' shapes alone, each case it left out from the newest earlier full profile of the source
    it ran against that holds the case, back along the chain (as ``best_timing_rows``). What the proposers
    diagnose; the trial itself is not changed."""
    if best.ncu is None or best.ncu.status != "ok" or not best.left_out_keys:
        return best  # a best without a profile of its own says so: nothing earlier stands in for it
    launches: list = []  # the earlier ones first: a reader of the last few launches meets the best's own
    own = {(launch.pass_name, launch.shape, launch.dtype) for launch in best.launches()}

    def take(trial: TrialResult, pending: set) -> set:
        if trial.ncu is None or trial.ncu.scope != "full":  # a light profile holds the widest shape's kept metrics
            return set()
        found = [launch for launch in trial.launches() if (launch.pass_name, launch.shape, launch.dtype) in pending]
        launches.extend(found)
        return {(launch.pass_name, launch.shape, launch.dtype) for launch in found}

    # A case its own profile holds (the NCU driver profiles a shape in every dtype asked) is never taken twice:
    # twice the launches of one case would read as a second kernel beside the first.
    _back_along_the_chain(best, trials, {key for key in best.left_out_keys if key[0] != "memory"} - own, take)
    return best.model_copy(update={"ncu": best.ncu.model_copy(update={"launches": [*launches,
                                                                                    *best.ncu.launches]})})


def _back_along_the_chain(best: TrialResult, trials: list[TrialResult], pending: set,
                          take: Callable[[TrialResult, set], set]) -> None:
    """Offer ``take`` the ``pending`` cases (keys a confined timing left out, where the best ran the code of the
    best before it) in each earlier complete trial of that earlier best's source, newest first; ``take`` returns
    the keys it found there. Cases still pending that the source's own confined trial left out too go one best
    further back."""
    current = best
    while pending and current.against_sha:
        ran = [t for t in trials if t.trial_id < current.trial_id and t.variant_sha == current.against_sha
               and t.status == "complete" and t.timing is not None]
        for trial in reversed(ran):  # the newest measurement of each case first
            pending -= take(trial, pending)
        link = next((t for t in reversed(ran) if pending & t.left_out_keys), None)
        if link is None:
            break
        pending &= link.left_out_keys
        current = link


def trial_variant_file(kernel: str, trial: TrialResult, root: Path | None = None) -> Path:
    """The module a trial ran: the baseline, or its variant file (rebuilt from the notebook's copy of the source
    when the file is gone or differs, e.g. in another checkout)."""
    baseline = baseline_path(kernel)
    if trial.variant_sha == source_hash(baseline.read_text()):
        return baseline
    path = Path(trial.variant.path)  # as the notebook names it: read only as a regular file, never through a link
    try:
        if source_hash(read_notebook_text(path)) == trial.variant_sha:
            return path
    except (OSError, ValueError):
        pass
    rebuilt = Store(root).trial_paths(kernel, trial.trial_id, trial.name).variant
    write_file(rebuilt, trial.variant.source)
    return rebuilt


def best_trial(kernel: str, root: Path, mode: str | None = None,
               ) -> tuple[TrialResult | None, TrialResult | None]:
    """(baseline trial, best accepted trial or None) of a kernel's history in ``root``, for ``diff``, ``bench``."""
    baseline_sha = source_hash(baseline_path(kernel).read_text())
    trials = [t for t in load_trials(kernel, root) if mode is None or t.device == mode]
    baseline, chain = accepted_chain(trials, baseline_sha)
    return baseline, (chain[-1] if chain else None)


def baseline_trials(trials: list[TrialResult]) -> list[TrialResult]:
    """The loop's baseline trials of a history, oldest first: complete experiments run against nothing (each
    baseline a history's chains start from, today's and the earlier ones)."""
    return [t for t in trials if not t.against and t.status == "complete" and t.kind == "experiment"]


#: How the loop names the trial that carries an earlier baseline's best over to a changed one:
#: ``carry-over-0085`` (a re-measure of it: ``carry-over-0085-remeasure``).
CARRY_OVER_PREFIX = "carry-over-"


def carry_over_name(tip: TrialResult) -> str:
    return f"{CARRY_OVER_PREFIX}{tip.trial_id:04d}"


def carried_tip(trial: TrialResult, trials: list[TrialResult]) -> tuple[TrialResult, list[TrialResult]] | None:
    """(the earlier baseline's trial, its accepted chain up to the best that ``trial`` carried over), read from the
    carry-over's name, or None: ``trial`` is no carry-over, or that best is not an accepted trial before it."""
    number = trial.name.removeprefix(CARRY_OVER_PREFIX)[:4] if trial.name.startswith(CARRY_OVER_PREFIX) else ""
    tip = int(number) if number.isdigit() else None
    if tip is None or tip >= trial.trial_id:  # a name pointing forward would lead back to this trial
        return None
    for baseline in baseline_trials(trials):
        if baseline.trial_id >= tip:
            break
        found, chain = accepted_chain(trials, baseline.variant_sha)
        ids = [t.trial_id for t in chain]
        if found is not None and tip in ids:
            return found, chain[:ids.index(tip) + 1]
    return None


def carried_best(trials: list[TrialResult], baseline_sha: str) -> tuple[TrialResult, TrialResult] | None:
    """(the earlier baseline's trial, its chain's tip) that ``bench`` and ``patch`` keep while today's baseline
    (``baseline_sha``) has no accepted trial and no trial against it was rejected on its measurements yet
    (``_measured_rejection``); else None.

    A baseline change leaves the tuned knobs behind: the new code without them is no faster kernel until the loop
    has measured it, which it does first by carrying the old best's knobs over. Once a trial against the new
    baseline is rejected on its measurements (the carry-over among them) or accepted, its chain is what was
    measured, and the old best is no longer kept. Several changes in a row with nothing judged in between reach
    back to the last best that was."""
    # A tuned variant trialled by hand against nothing is no baseline (as the judge has it).
    tuned = {t.variant_sha for t in trials if t.verdict == "accepted"}
    order = list(dict.fromkeys([*(t.variant_sha for t in baseline_trials(trials) if t.variant_sha not in tuned),
                                baseline_sha]))
    if baseline_sha in order[:-1]:  # an earlier baseline again (a change undone): its own history decides
        order = order[:order.index(baseline_sha) + 1]
    for sha in reversed(order):
        baseline, chain = accepted_chain(trials, sha)
        if chain:
            return (baseline, chain[-1]) if sha != baseline_sha else None
        if any(_measured_rejection(t, sha) for t in trials):
            return None  # measured: that baseline stands as it is
    return None


def _measured_rejection(trial: TrialResult, baseline_sha: str) -> bool:
    """A trial against ``baseline_sha`` rejected on what its timing measured: not one that crashed, failed the
    gate, changed nothing, or whose measurements the judge did not trust (a re-check owed)."""
    judged = trial.judged
    return (trial.against_sha == baseline_sha and trial.variant_sha != baseline_sha and judged is not None
            and judged.verdict == "rejected" and trial.status == "complete" and trial.kind == "experiment"
            and not judged.recheck and not judged.suspicious and bool(trial.candidate_ratios()))


def kept_best(kernel: str, root: Path) -> tuple[TrialResult | None, TrialResult | None]:
    """(the earlier baseline's trial or None, the best ``bench`` and ``patch`` use or None): the tip of today's
    baseline's accepted chain (with None), else the earlier baseline's best that ``carried_best`` keeps (with
    that baseline's trial, for a diff from the code it was tuned on), else (None, None): the baseline."""
    trials = load_trials(kernel, root)
    baseline_sha = source_hash(baseline_path(kernel).read_text())
    _, chain = accepted_chain(trials, baseline_sha)
    if chain:
        return None, chain[-1]
    return carried_best(trials, baseline_sha) or (None, None)


def latest_best(kernel: str, root: Path) -> TrialResult | None:
    """The best ``bench`` and ``patch`` use (``kept_best``), or None: the baseline."""
    return kept_best(kernel, root)[1]


#: The steps a candidate's trial runs in full only where its timing would be accepted: the full gate, and the full
#: NCU profile where a rejected trial profiles lightly (``run.trial``'s ``finish_gate`` and ``profile``).
ACCEPTANCE_STEPS = ("full_gate", "profile")


def trial_pace(trials: list[TrialResult], suite: str = "", kind: str = "experiment",
               timed: int | None = None) -> float | None:
    """How long a trial of ``suite`` may take here: the median wall time of the last five complete trials of
    ``kind`` (``"screening"``: the screenings; ``"baseline"``: the baseline trials, which time the peers too and run
    the full gate and NCU) that timed it (the upper of the two middle ones for an even count), or None before there
    are any. A candidate's trial (``"experiment"``) may be accepted, which costs the full gate and the full NCU
    profile: its pace is the recent ones' median time outside those two steps plus the longest those two steps took
    in the last five that ran the full gate (a trial killed in them loses all it measured; one over-estimated only
    waits for the next call). H200: 0084 began by a pace of 250 s, the plain median of five trials of which four
    skipped the full gate (their timing was not accepted); its provisional "accepted" then ran the full gate, and
    the call's limit killed it there, twice (reports/evidence/2026-12-04-killed-0084/). A median is still beaten
    by a slow trial: the call's margin (``scripts/device.sh``'s ``MARGIN_S``) is for that.

    With ``timed`` (the cases, each a pass at a shape and dtype, that the trial's timing will measure: a move
    confined to its buckets times theirs alone), the timing step is paced apart: the recent ones' median seconds
    per timed case, times ``timed``."""
    def of_kind(t: TrialResult) -> bool:
        return t.kind == "experiment" and not t.against if kind == "baseline" else t.kind == kind

    done = [t for t in trials if of_kind(t) and t.status == "complete" and t.elapsed_s
            and measures_suite(t.suite, suite) and _clocked(t)]
    recent = done[-5:]
    if not recent:
        return None
    gated = [t for t in done if _ran_the_full_gate(t)][-5:]
    if kind != "experiment" or not gated:
        return _upper_median([t.elapsed_s for t in recent])

    def acceptance(t: TrialResult) -> float:
        return sum(t.step_seconds.get(step, 0.0) for step in ACCEPTANCE_STEPS)

    timing = 0.0
    per_case = [t.step_seconds["time"] / len(keys) for t in recent
                if t.step_seconds.get("time") and (keys := {r.key for r in t.timing_rows()})]
    if timed is not None and per_case:
        timing = timed * _upper_median(per_case)

    def outside(t: TrialResult) -> float:  # with ``timed``, the timing too is paced apart (above)
        return max(0.0, t.elapsed_s - acceptance(t) - (t.step_seconds.get("time", 0.0) if timing else 0.0))

    return _upper_median([outside(t) for t in recent]) + timing + max(acceptance(t) for t in gated)


def _clocked(trial: TrialResult) -> bool:
    """Whether a trial's recorded seconds can pace another: each finite and not negative. A notebook writes no
    NaN (``jsonable``), but JSON's reader takes ``NaN`` and ``1e999`` from a corrupt or edited one, and one such
    trial among the last made the pace NaN: ``trials_within`` then raised "cannot convert float NaN to integer"
    out of a loop with a deadline (an infinite one stopped it starting anything)."""
    return all(math.isfinite(s) and s >= 0 for s in (trial.elapsed_s or 0.0, *trial.step_seconds.values()))


def _ran_the_full_gate(trial: TrialResult) -> bool:
    """Whether a staged trial ran its full gate as a step of its own (a skipped one records its few milliseconds
    too, and "not run: ..." in ``correctness.full_gate``)."""
    return ("full_gate" in trial.step_seconds and trial.correctness is not None
            and trial.correctness.stage == "full")


def _upper_median(values: list[float]) -> float:
    """The median, or the upper of the two middle values of an even count."""
    return sorted(values)[len(values) // 2]


def screening_pace(trials: list[TrialResult], suite: str = "", cases: int | None = None,
                   candidates: int | None = None) -> float | None:
    """How long a screening of ``suite`` that times ``cases`` cases takes here: the last five complete screenings'
    median time outside their timing, plus ``cases`` times their median seconds per timed case. Outside the timing
    each candidate is imported, compiled and quick-gated beside the current best: with ``candidates`` (one or
    more), that part is their number plus one times the recent ones' median per such variant (H200: 0080's four
    took 48 s outside the timing, 0083's seven 90 s, where the pace of 78 s in all let 0083 begin and run 126 s;
    0053's two, 33 s). Screenings that recorded no candidates count in the plain median only. Per case, not per
    candidate and case: each case's inputs are drawn and the current best is timed beside the candidates whatever
    their number (H200: 148, 159 and 157 s of timing for two, three and four candidates at the same 50 cases,
    0053, 0055, 0057). A screening of one bucket's moves times that bucket's cases alone: 0074's took 61 s where
    the whole tuning split's had taken 244-265 s (0070, 0072), so one median of whole screenings would keep a short
    one from starting. Without ``cases``, or before any screening recorded its timing's seconds, ``trial_pace`` of
    the screenings."""
    # The last five that timed something: one whose candidates all failed their gate timed nothing, and five such
    # must not hide the timed ones behind the whole-screening median.
    timed = [t for t in trials if t.kind == "screening" and t.status == "complete" and t.elapsed_s
             and measures_suite(t.suite, suite) and t.screening is not None and t.screening.timing
             and t.step_seconds.get("time") and _clocked(t)][-5:]
    parts = [(max(0.0, t.elapsed_s - t.step_seconds["time"]),
              t.step_seconds["time"] / len({row.key for row in t.screening.timing}),
              len(t.screening.rows)) for t in timed]
    if cases is None or not parts:
        return trial_pace(trials, suite, kind="screening")
    per_variant = [outside / (count + 1) for outside, _, count in parts if count]
    if candidates and per_variant:
        outside = (candidates + 1) * _upper_median(per_variant)
    else:
        outside = _upper_median([outside for outside, _, _ in parts])
    return outside + cases * _upper_median([each for _, each, _ in parts])


def best_variant_file(kernel: str, root: Path) -> Path:
    """The best accepted variant of ``kernel``'s history in ``root`` (one device's, ``latest_best``), else the
    baseline: what ``bench`` measures and ``patch`` puts into a model. Right after a baseline change that is the
    earlier baseline's best (``carried_best``), which ``selfcheck`` gates on today's stack all the same."""
    best = latest_best(kernel, root)
    return baseline_path(kernel) if best is None else trial_variant_file(kernel, best, root)


def geomean_ratio(result: TrialResult, pass_name: str) -> float:
    return geomean([r.ratio for r in result.candidate_ratios(pass_name) if r.ratio > 0])


def geomean_interval(rows: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The suite-level ratio with its interval as the judge takes it: the geometric means of the per-shape
    ``(ratio, low, high)`` (a NaN bound anywhere makes that bound NaN)."""
    return geomean([r[0] for r in rows]), geomean([r[1] for r in rows]), geomean([r[2] for r in rows])


def pass_interval(result: TrialResult, pass_name: str) -> tuple[float, float, float]:
    """A pass's ``geomean_interval`` over the trial's shapes (``measured_ratios``), for a report: a shape whose
    ratio is not positive (a malformed record) is left out, and where any shape lacks a positive interval the
    suite's interval is unmeasured (NaN)."""
    times, _ = measured_ratios(result)
    rows = [v for key, v in times.items() if key[0] == pass_name and v[0] > 0]
    point, low, high = geomean_interval(rows)
    if not all(v[1] > 0 and v[2] > 0 for v in rows):  # NaN compares false: an unmeasured bound too
        return point, math.nan, math.nan
    return point, low, high
