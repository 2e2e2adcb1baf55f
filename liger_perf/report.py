"""``reports/<device>/<kernel>/``: a markdown report of one history, with plots, and the winning change as a diff.

Everything in it is read from the trial notebooks. One convention for people, as in ``bench``: a **speedup** is
the other's time over this one's (above 1: faster). The best variant's speedup over the baseline is the inverse
of the product of the accepted chain's side-by-side time ratios (each measured in one run), a step counted only
where it changed the case's code (``judge.drift_ratios``, the judge's own estimate); times for the plots
are the baseline trial's medians scaled by those ratios, and peers' times are from the baseline trial itself.
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import pandas as pd

from liger_perf.judge import drift_ratios
from liger_perf.record.history import (accepted_chain, baseline_trials, best_timing_rows, carried_best, carried_tip,
                                       geomean, pass_interval)
from liger_perf.kernel.registry import baseline_path
from liger_perf.record.schema import TrialResult
from liger_perf.record.store import replaced, write_file
from liger_perf.kernel.variants import bucket_columns, recorded_dispatch, source_hash
from liger_perf.core.wording import speedup


def variant_diff(kernel: str, best: TrialResult | None, base: TrialResult | None = None) -> str:
    """Unified diff from the baseline to the best accepted variant ('' when the baseline is still best): from
    ``base``'s source, the earlier baseline trial a carried best was tuned on, else from today's ``baseline.py``."""
    if best is None:
        return ""
    source = base.variant.source if base is not None else baseline_path(kernel).read_text()
    origin = f"trial {base.trial_id:04d} baseline" if base is not None else f"kernels/{kernel}/baseline.py"
    return "".join(difflib.unified_diff(source.splitlines(keepends=True),
                                        best.variant.source.splitlines(keepends=True),
                                        fromfile=origin, tofile=f"trial {best.trial_id:04d} {best.name}"))


def markdown_table(frame: pd.DataFrame) -> str:
    """A pipe table (pandas' own ``to_markdown`` needs one more dependency for these few lines)."""
    if frame.empty:
        return "(none)"
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    # A pipe inside a cell is escaped, not replaced: a gate's reason reads "||err||/||ref||" as it was written.
    body = ["| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _fmt(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def trials_table(trials: list[TrialResult], passes: list[str]) -> pd.DataFrame:
    rows = []
    for t in trials:
        memory = [r.ratio for r in (t.judged.ratios if t.judged else []) if r.pass_name == "memory" and r.ratio]
        # A timing confined to its move's buckets measured their shapes alone (elsewhere: the best's code).
        over = f" over bucket {', '.join(t.timing.buckets)} alone" if t.timing and t.timing.left_out else ""
        rows.append({
            "trial": f"{t.trial_id:04d}", "name": t.name, "device": t.device,
            "changes": ", ".join(f"{k}={v}" for k, v in (t.changes or {}).items()) or "-",
            "hypothesis": t.hypothesis or "-",
            **{f"{p} speedup": speedup(*pass_interval(t, p)) + over for p in passes},
            "peak memory ratio": _fmt(geomean(memory)) if memory else "-",
            "status": t.status, "verdict": t.verdict or "-",
            "reasons": "; ".join(t.verdict_reasons or [t.reason]),
        })
    return pd.DataFrame(rows)


def dispatch_table(chain: list[TrialResult], baseline: TrialResult | None = None,
                   trials: list[TrialResult] = ()) -> pd.DataFrame:
    """The best's dispatch table (the accepted chain's last, or the baseline's), an entry per row (bucket, the
    widths and element size it covers, knob, value), with the trial that set the value it has now: one of the
    chain, or the baseline's own. Given the whole history (``trials``), an entry a carry-over brought from the
    earlier baseline's best it names (``history.carried_tip``) is credited to the trial that set it there, and
    names the carry-overs (a carry-over moves every tuned entry at once: "set by" the carry-over alone would say
    nothing of where a value was found)."""
    setters = _dispatch_setters(chain, baseline, list(trials))
    rows = []
    for (bucket, knob), (value, origin, carriers) in setters.items():
        who = "the baseline" if origin is baseline else f"trial {origin.trial_id:04d} {origin.name}"
        if carriers:
            numbers = [f"{t.trial_id:04d}" for t in carriers]
            who += ", carried over by " + (f"trial {numbers[0]}" if len(numbers) == 1 else
                                           f"trials {', '.join(numbers[:-1])} and {numbers[-1]}")
        rows.append({"bucket": bucket, "columns": bucket_columns(bucket), "element bytes": bucket.partition("x")[2],
                     "knob": knob, "value": value, "set by": who})
    return pd.DataFrame(rows)


def _dispatch_setters(chain: list[TrialResult], baseline: TrialResult | None, trials: list[TrialResult]) -> dict:
    """(bucket, knob) -> (value, the trial that set it or ``baseline``, the carry-overs that brought it here), in
    the order of the best's table."""
    set_by: dict[tuple[str, str], TrialResult] = {}
    previous: dict = {}
    for trial in [*([baseline] if baseline is not None else []), *chain]:
        table = recorded_dispatch(trial.variant.source)
        for bucket, entry in table.items():
            for knob, value in entry.items():
                if previous.get(bucket, {}).get(knob, _UNSET) != value:
                    set_by[(bucket, knob)] = trial
        previous = table
    setters = {(bucket, knob): (value, set_by[(bucket, knob)], []) for bucket, entry in previous.items()
               for knob, value in entry.items()}
    # A carry-over's entries come from the earlier best it names, where a trial of that chain set them (or
    # carried them over in turn: the trials before it have smaller numbers, so this ends).
    for step in chain:
        carried = carried_tip(step, trials)
        if carried is None:
            continue
        old = _dispatch_setters(carried[1], carried[0], trials)
        for key, (value, setter, _) in setters.items():
            if setter is step and key in old and old[key][0] == value:  # what it runs is what the old best ran
                _, origin, carriers = old[key]
                setters[key] = (value, origin, [*carriers, step])
    return setters


_UNSET = object()


def write_report(kernel: str, trials: list[TrialResult], out: Path) -> Path:
    """Write ``report.md`` (and PNG plots) into ``out`` for the trials of one device class (one history);
    return the report's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from liger_perf.kernel.registry import get_spec

    spec = get_spec(kernel)
    out.mkdir(parents=True, exist_ok=True)
    baseline_sha = source_hash(baseline_path(kernel).read_text())
    baseline, chain = accepted_chain(trials, baseline_sha)
    todays_baseline = baseline
    # While a changed baseline has not been measured against, bench and patch keep an earlier baseline's best
    # (``history.carried_best``): the report shows that chain, on the baseline it was measured against.
    carried_from = None
    carried = carried_best(trials, baseline_sha)
    if carried is not None:
        carried_from = carried[0]
        baseline, chain = accepted_chain(trials, carried_from.variant_sha)
    best = chain[-1] if chain else None
    # The best against the baseline as the judge estimates it: a step's noise where it left a case's code as it
    # was is not counted (``judge.drift_ratios``).
    ratios = drift_ratios(chain, trials)
    earlier = None  # no trial ran today's baseline.py: the last one of an earlier baseline stands for it
    if baseline is None:
        earlier = next((t for t in reversed(baseline_trials(trials)) if t.timing_rows("candidate")), None)
        baseline = earlier
    lines = [f"# {kernel}: optimization report", ""]
    if not trials:
        lines.append("No trials yet: run `liger-perf optimize` or `liger-perf trial` first.")
        write_file(out / "report.md", "\n".join(lines) + "\n")
        return out / "report.md"
    devices = sorted({t.device for t in trials})
    fingerprint = (todays_baseline or baseline or trials[0]).fingerprint
    lines += [f"Trials: {len(trials)} on {', '.join(devices)}"
              + (f" ({fingerprint.gpu}, torch {fingerprint.torch}, triton {fingerprint.triton})"
                 if fingerprint and fingerprint.gpu else " (Triton interpreter on the CPU: CPU timings)"),
              "Best: " + (f"trial {best.trial_id:04d} `{best.name}`" if best else "today's `baseline.py` (nothing "
                                                                                 "accepted on it yet)")
              + (f", on the baseline of trial {carried_from.trial_id:04d}: `baseline.py` changed since, and no "
                 "trial against it was accepted or rejected on its measurements yet. Until then `bench` and "
                 "`patch` use this one, and the sections below compare it with that earlier baseline."
                 if carried_from is not None else ""), "",
              "## Every trial", "",
              "Speedup: the time of the best the trial ran against over the candidate's, geometric mean over "
              "shapes and dtypes, measured side by side in the trial, with its interval: `1.57x (faster) [1.51x, "
              "1.63x]`. Peak memory ratio: the "
              "candidate's peak over the best's (below 1: less memory).", ""]
    lines += [markdown_table(trials_table(trials, list(spec.passes))), ""]

    if baseline is not None:
        rows = []
        best_rows = best_timing_rows(best, trials) if best is not None else []
        for r in baseline.timing_rows("candidate"):
            ratio = ratios.get(r.key) if chain else 1.0  # None: not timed by every accepted step
            row = {"pass": r.pass_name, "shape": r.shape, "dtype": r.dtype, "speedup vs baseline": speedup(ratio)}
            best_fraction = None
            if best is not None:
                best_fraction = next((b.bandwidth_fraction for b in best_rows if b.key == r.key), None)
            row["best % of bandwidth floor"] = _fmt(100 * (best_fraction if best_fraction is not None
                                                          else r.bandwidth_fraction or math.nan), 1)
            for p in baseline.timing_rows():
                if p.key == r.key and p.contender not in ("candidate", "against") and p.ratio:
                    row[f"speedup vs {p.contender}"] = speedup(ratio / p.ratio if ratio else None)
            rows.append(row)
        lines += ["## Best against the baseline and the peers, per shape", "",
                  "Speedup of the best (the other's time / the best's; above 1: faster). Vs the baseline: the "
                  "inverse of the product of the accepted chain's side-by-side time ratios, each step's only where "
                  "it changed the shape's code (`-`: a shape some accepted step did not time, on another suite); vs "
                  "a peer: the peer's "
                  f"time ratio to the baseline in trial {baseline.trial_id:04d} over the best's."
                  + (f" No trial of this history ran today's `baseline.py`: trial {baseline.trial_id:04d} ran an "
                     f"earlier one (sha256 `{baseline.variant_sha[:16]}`), and nothing was accepted against it."
                     if earlier is not None else ""), "",
                  markdown_table(pd.DataFrame(rows)), ""]
        plots = _plot_times(baseline, ratios if chain else None, out, plt)
        lines += [f"![{p.stem}]({p.name})" for p in plots] + [""]
    table = dispatch_table(chain, baseline, trials)
    if not table.empty:
        lines += ["## The best's dispatch table", "",
                  "Knobs the best runs at the shapes of one bucket instead of its defaults (`DISPATCH`), each with "
                  "the accepted trial that set it (and, for a value found on an earlier baseline, the trials that "
                  "carried it over).", "", markdown_table(table), ""]
    diff = variant_diff(kernel, best, base=carried_from)
    lines += ["## The winning change", "", "```diff", diff or "(none: the baseline is still the best)", "```", ""]
    write_file(out / "best.diff", diff)
    write_file(out / "report.md", "\n".join(lines))
    return out / "report.md"


def _plot_times(baseline: TrialResult, ratios: dict | None, out: Path, plt) -> list[Path]:
    frame = pd.DataFrame([r.model_dump(by_alias=True) for r in baseline.timing_rows()])
    if frame.empty:
        return []
    paths = []
    for (pass_name, dtype), group in frame.groupby(["pass", "dtype"], sort=False):
        fig, ax = plt.subplots(figsize=(7, 4))
        shapes = list(dict.fromkeys(group["shape"]))
        for contender, series in group.groupby("contender", sort=False):
            times = series.set_index("shape").loc[shapes, "median_ms"]
            ax.plot(shapes, times.to_numpy(), marker="o", label="baseline" if contender == "candidate" else contender)
        base = group[group["contender"] == "candidate"].set_index("shape").loc[shapes, "median_ms"]
        # No chain: the best is the baseline; a shape some accepted step did not time: no point.
        best = [t * (1.0 if ratios is None else ratios.get((pass_name, s, dtype), math.nan))
                for s, t in zip(shapes, base)]
        ax.plot(shapes, best, marker="s", linestyle="--", linewidth=2, label="best")  # dashed: may cover the baseline
        ax.set_yscale("log")
        ax.set_xlabel("shape")
        ax.set_ylabel("median time (ms)")
        ax.set_title(f"{pass_name}, {dtype}")
        ax.tick_params(axis="x", rotation=30)
        ax.legend()
        fig.tight_layout()
        path = out / f"time-{pass_name}-{dtype}.png"
        with replaced(path) as fresh:
            fig.savefig(fresh, dpi=90, format="png")
        plt.close(fig)
        paths.append(path)
    return paths
