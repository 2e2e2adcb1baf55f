"""``liger-perf bench``: the best variant beside the baseline and the peers, side by side in one run.

Contenders: the best accepted variant (or a given one), the baseline, ``liger-kernel`` (when installed),
PyTorch eager and ``torch.compile``, timed interleaved on the same inputs (``liger_perf.measure.timing``), with the copy
bandwidth measured in the same run. Every ratio is a peer's median time over the best's, so > 1 means the best
is that many times faster. The measurement runs in a child process under a time limit, as trials do: the best
may be proposer-written code.

Results: ``reports/<device>/<kernel>/bench.json`` (every figure), ``bench.md`` (tables) and ``bench-*.png`` (plots).
With ``suite="models"`` the shapes are real models' (``liger_perf.kernel.model_shapes``), the tuning split and the
held-out split side by side: ``bench-models.json``, ``bench-models.md``, ``bench-models-*.png``. With ``shapes``
(a subset of the suite's shape labels), the same files with ``-shapes`` after the stem (``bench-models-shapes.json``,
...): the whole suite's report is left alone.

A bench stopped by its time limit still reports the cases it finished: the child appends each case's samples to
``PARTIAL_FILE``, and the report of those goes to the stem with ``-partial`` after it (``bench-partial.md``,
...), without peak memory or accuracy, which the child measures last.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from liger_perf.core.errors import UserError
from liger_perf.isolation.sandbox import run_contained
from liger_perf.record.history import geomean
from liger_perf.record.store import replaced, write_file
from liger_perf.report import markdown_table
from liger_perf.core.workspace import current

BEST = "best"
PLOT_MAX_WIDTH = 48  # inches
#: The child's samples so far, in its scratch folder: a line of JSON per finished case, after a first line with
#: what the summary needs besides them. A bench past its --timeout keeps the cases it finished (2026-12-03 on the
#: H200: a bench of torch.compile at two shapes ran past its limit and returned nothing,
#: ``reports/evidence/2026-12-03-bench-compile-best-0061/stopped-log.txt``).
PARTIAL_FILE = "bench-partial.json"
RESULT_LIMIT = 32 * 2**20  # the most of a child's result read back (the model suite's whole bench: 0.6 MB)


#: ``--suite``: the device's own suite (empty), or both model suites, each case marked with its split.
SUITES = ("", "models")


def bench_cases(spec, suite: str, device_suite: str, shapes: tuple[str, ...] = ()) -> tuple[list, dict[str, str]]:
    """The cases a bench times: the device's suite, or both model splits (``suite="models"``), limited to the
    shape labels ``shapes`` (every dtype of each) when given; and, for the model suite, shape label -> split.
    A label the suite does not hold is a ``UserError`` that lists the suite's labels."""
    from liger_perf.kernel.spec import MODEL_SUITES, shape_label

    split_of: dict[str, str] = {}
    if suite == "models":
        cases = []
        for name, split in MODEL_SUITES.items():
            these = spec.cases(name, "bench")
            split_of.update({shape_label(c.shape): split for c in these})
            cases += these
    else:
        cases = spec.cases(device_suite, "bench")
    if shapes:
        labels = list(dict.fromkeys(shape_label(c.shape) for c in cases))
        unknown = [s for s in shapes if s not in labels]
        if unknown:
            raise UserError(f"--shapes {','.join(unknown)}: not in the {suite or device_suite} suite; its shapes "
                            f"are {','.join(labels)}")
        cases = [c for c in cases if shape_label(c.shape) in shapes]
    return cases, split_of


def measure(kernel: str, variant: str, device_arg: str, repetitions: int, suite: str = "",
            compiled: bool = True, shapes: tuple[str, ...] = (), partial: Path | None = None) -> dict:
    """The worker: time and measure peak memory of every contender (runs in the child process). ``compiled``:
    time ``torch.compile`` too (it compiles every case's shape anew, minutes over the model suite). ``shapes``:
    only these shape labels (``bench_cases``), e.g. to time ``torch.compile`` at some of the model suite's.
    ``partial``: where to append each finished case's samples (``partial_result`` reads it)."""
    from liger_perf.kernel.device import select_device

    device = select_device(device_arg)  # before any variant is imported
    from liger_perf.measure.fingerprint import fingerprint
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.measure.timing import TimingPlan, copy_bandwidth, peak_memory, peer_contenders, time_suite
    from liger_perf.kernel.variants import load_variant

    spec = get_spec(kernel)
    best = load_variant(variant, spec)
    contenders = {BEST: spec.variant_forward(best.module)}
    baseline = load_variant(baseline_path(kernel), spec)
    if baseline.sha256 != best.sha256:
        contenders["baseline"] = spec.variant_forward(baseline.module)
    peers, unavailable = peer_contenders(spec, device)
    if not compiled and peers.pop("torch.compile", None) is not None:
        unavailable["torch.compile"] = "left out of this run (--no-compile)"
    contenders.update(peers)
    plan = TimingPlan.default(device, repetitions)
    cases, split_of = bench_cases(spec, suite, device.suite, shapes)
    bandwidth = copy_bandwidth(device)
    head = {"kernel": kernel, "variant": {"path": str(variant), "sha256": best.sha256},
            "device": device.mode, "suite": suite or device.suite,
            "fingerprint": fingerprint(device, current().root),
            "repetitions": plan.repetitions, "copy_bandwidth_bytes_per_s": bandwidth,
            "contenders": list(contenders), "unavailable": unavailable, "shapes": list(shapes)}
    if partial is not None:
        _append_line(partial, {"head": head, "plan": dataclasses.asdict(plan), "split_of": split_of,
                               "cases": len(cases)})
    parts = []
    for index, case in enumerate(cases):
        # One case at a time, each with a random stream of its own (the contenders' order and the input slots),
        # apart from the one the summary's bootstrap draws from.
        seed = int(np.random.SeedSequence([plan.seed, index]).generate_state(1)[0])
        parts.append(time_suite(spec, contenders, [case], list(spec.passes), device,
                                dataclasses.replace(plan, seed=seed)))
        if partial is not None:
            _append_line(partial, {"samples": parts[-1].to_dict("records")})
    samples = _in_pass_order(pd.concat(parts), list(spec.passes))
    summary = _summary(samples, spec, bandwidth, plan, split_of)
    memory = peak_memory(spec, contenders, cases, device)
    from liger_perf.measure.accuracy import accuracy_cases
    from liger_perf.measure.accuracy import measure as measure_accuracy

    accurate = {k: v for k, v in contenders.items() if k != "torch.compile"}  # it would compile every case again
    accuracy = measure_accuracy(spec, accurate, device, accuracy_cases(spec, device.suite))
    return {**head, "measured_at": time.time(), "rows": summary.to_dict("records"),
            "memory": memory.to_dict("records"), "accuracy": accuracy}


def _in_pass_order(samples: pd.DataFrame, passes: list[str]) -> pd.DataFrame:
    order = {p: i for i, p in enumerate(passes)}  # tables and readers group by pass first
    return samples.sort_values("pass", key=lambda col: col.map(order), kind="stable").reset_index(drop=True)


def _summary(samples: pd.DataFrame, spec, bandwidth: float, plan, split_of: dict) -> pd.DataFrame:
    from liger_perf.measure.timing import summarize

    summary = summarize(samples, BEST, spec, bandwidth, plan)
    if split_of:
        summary["split"] = summary["shape"].map(split_of)
    return summary


def _append_line(path: Path, data: dict) -> None:
    # One write per line: a child stopped mid-write leaves the lines before it whole (``partial_result`` drops
    # a cut last line).
    with path.open("a") as file:
        file.write(json.dumps(data, default=float) + "\n")


def partial_result(path: Path) -> dict | None:
    """The bench of the cases a stopped child finished (``measure``'s ``partial`` file), as ``measure`` returns
    it with ``partial`` = {cases_done, cases} added and no peak memory or accuracy; None without a finished case."""
    from liger_perf.isolation.contained import read_untrusted
    from liger_perf.kernel.registry import get_spec
    from liger_perf.measure.timing import TimingPlan

    written = read_untrusted(path, limit=RESULT_LIMIT)  # by the child, which imported the variant
    if written is None:
        return None
    lines = []
    for text in written.splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:  # the line a stopped child was writing
            break
    if len(lines) < 2:
        return None
    first, cases = lines[0], lines[1:]
    head, spec = first["head"], get_spec(first["head"]["kernel"])
    samples = _in_pass_order(pd.DataFrame([row for case in cases for row in case["samples"]]), list(spec.passes))
    summary = _summary(samples, spec, head["copy_bandwidth_bytes_per_s"], TimingPlan(**first["plan"]),
                       first["split_of"])
    return {**head, "measured_at": time.time(), "rows": summary.to_dict("records"), "memory": [], "accuracy": [],
            "partial": {"cases_done": len(cases), "cases": first["cases"]}}


def run_bench(kernel: str, variant: Path, device: str = "auto", repetitions: int = 0,
              timeout_s: float = 1800, suite: str = "", compiled: bool = True, shapes: tuple[str, ...] = ()) -> dict:
    """Run ``measure`` in a child process under ``timeout_s``; its JSON result (``partial_result``'s where the
    time ran out after a case was done: ``data["partial"]`` says how many)."""
    # The child imports the variant: in the sandbox where there is one, with the allow-listed environment (no
    # secret of this process), in a scratch folder, where it also writes its result.
    from liger_perf.isolation.contained import read_untrusted

    with tempfile.TemporaryDirectory(prefix="liger-perf-bench-") as scratch:
        out = Path(scratch) / "bench.json"
        argv = [sys.executable, "-m", "liger_perf.bench", kernel, str(Path(variant).resolve()), device,
                str(repetitions), str(out), suite, "compiled" if compiled else "eager-only", ",".join(shapes)]
        try:
            done = run_contained(argv, Path(scratch), readable=[Path(variant).resolve()], timeout=timeout_s,
                                 capture_output=True, text=True)
        except subprocess.TimeoutExpired:
            data = partial_result(Path(scratch) / PARTIAL_FILE)
            if data is None:
                raise UserError(f"bench of {kernel} ran past {timeout_s:.0f} s and was stopped before its first "
                                "case was done; pass a larger --timeout") from None
            return data
        written = read_untrusted(out, limit=RESULT_LIMIT)  # never through a link the child left, nor a FIFO
        if done.returncode != 0 or written is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"bench of {kernel} failed in its child process: {tail[0]}")
        try:
            return json.loads(written)
        except (ValueError, RecursionError) as e:
            raise UserError(f"bench of {kernel}: its child process wrote no readable result ({type(e).__name__})"
                            ) from None


def speedups(data: dict) -> pd.DataFrame:
    """Per pass, shape and dtype: each contender's median, each peer's time over the best's (with its
    simultaneous interval) and the best's fraction of the bandwidth floor: the trials' timing table."""
    from liger_perf.measure.timing import timing_table

    frame = pd.DataFrame(data["rows"])
    table = timing_table(frame).round(4).reset_index()
    if "split" in frame:  # the model suite: the tuning split first, then the held-out one
        table.insert(0, "split", table["shape"].map(dict(zip(frame["shape"], frame["split"]))))
        table = table.sort_values("split", key=lambda c: c.map({"tune": 0}).fillna(1), kind="stable")
    return table.reset_index(drop=True)


def summary_table(data: dict) -> pd.DataFrame:
    """Per pass and peer: geometric mean and minimum of (peer time / best time) over shapes and dtypes, and the
    best's lowest fraction of the bandwidth floor."""
    frame = pd.DataFrame(data["rows"])
    keys = ["split", "pass"] if "split" in frame else ["pass"]  # the model suite: its two splits side by side
    rows = []
    for key, group in frame.groupby(keys, sort=False):
        best = group[group["contender"] == BEST]
        for contender in [c for c in data["contenders"] if c != BEST]:
            ratios = group[group["contender"] == contender]["ratio"].tolist()
            rows.append({**dict(zip(keys, key)), "peer": contender,
                         "geomean peer / best": round(geomean(ratios), 3),
                         "min peer / best": round(min(ratios), 3),
                         "best: lowest % of floor": round(100 * best["bandwidth_fraction"].min(), 1)})
    return pd.DataFrame(rows)


def accuracy_table(data: dict) -> pd.DataFrame:
    """Per dtype, options and output: each contender's error against float64 (the largest over the shapes, on
    the same inputs), and the best's error over each other contender's (above 1: the best is less accurate)."""
    frame = pd.DataFrame(data.get("accuracy") or [])
    if frame.empty:
        return frame
    table = frame.pivot_table(index=["dtype", "config", "output"], columns="contender", values="error",
                              aggfunc="max", sort=False)
    out = table.apply(lambda column: column.map(lambda v: f"{v:.3g}"))
    for other in [c for c in table.columns if c != BEST]:
        out[f"{BEST} error / {other}'s"] = (table[BEST] / table[other]).round(2)
    return out.reset_index()


def memory_table(data: dict) -> pd.DataFrame:
    frame = pd.DataFrame(data["memory"])
    if frame.empty or frame["peak_bytes"].isna().all():
        return pd.DataFrame()
    table = frame.pivot_table(index=["shape", "dtype"], columns="contender", values="peak_bytes", sort=False)
    table = table[[c for c in data["contenders"] if c in table.columns]]
    out = (table / 2**20).round(1).add_suffix(" MiB")
    if "eager" in table:
        out[f"{BEST} saves vs eager"] = (100 * (1 - table[BEST] / table["eager"])).round(1).astype(str) + " %"
    return out.reset_index()


def write_bench_report(kernel: str, data: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    # Committed and read on other machines: the variant named inside the workspace, not by this machine's path.
    data = {**data, "variant": {**data["variant"], "path": current().relative(data["variant"]["path"])}}
    stem = "bench-models" if data.get("suite") == "models" else "bench"
    if data.get("shapes"):  # a subset (--shapes) leaves the whole suite's report alone
        stem += "-shapes"
    if data.get("partial"):  # and so does a run stopped by its time limit
        stem += "-partial"
    write_file(out / f"{stem}.json", json.dumps(data, indent=1, default=float))
    fp = data["fingerprint"]
    when = datetime.fromtimestamp(data["measured_at"], timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    where = (f"{fp['gpu']} ({fp['sm_count']} SMs), driver {fp['driver']}, CUDA {fp['cuda']}" if fp.get("gpu")
             else "the Triton interpreter on the CPU: CPU timings, not GPU figures")
    lines = [f"# `{kernel}`: the best variant beside the baseline and the peers", "",
             f"- Measured {when} on {where}; torch {fp['torch']}, triton {fp['triton']}, "
             f"liger-kernel {fp.get('liger_kernel') or 'not installed'}.",
             f"- Best: `{data['variant']['path']}` (sha256 `{data['variant']['sha256'][:16]}`).",
             f"- {data['repetitions']} interleaved repetitions per contender, medians; copy bandwidth measured in "
             f"the same run: {data['copy_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s (bytes read + written). "
             "`peer / best` > 1: the best is that many times faster (95 % simultaneous intervals).",
             *[f"- Not measured: {name} ({why})." for name, why in data.get("unavailable", {}).items()],
             *(["- Shapes from real models (`liger_perf/kernel/model_shapes.py`): the `tune` split, which the loop "
                "may tune on, and the `held-out` split, which only this command reads, side by side."]
               if stem.startswith("bench-models") else []),
             *([f"- Only the shapes {', '.join(data['shapes'])} (`--shapes`, every dtype of each): a subset of the "
                "suite, so its geomeans are not the suite's."] if data.get("shapes") else []),
             *([_stopped_line(data["partial"])] if data.get("partial") else []), "",
             "## Summary", "", markdown_table(summary_table(data)), "",
             "## Per shape", "", markdown_table(speedups(data)), ""]
    accuracy = accuracy_table(data)
    if not accuracy.empty:
        lines += ["## Accuracy against float64 (every contender on the same inputs)", "",
                  "‖result − float64 reference‖ / ‖reference‖, the largest over the shapes; `best error / X's` "
                  "above 1: the best is less accurate than X.", "", markdown_table(accuracy), ""]
    memory = memory_table(data)
    if not memory.empty:
        lines += ["## Peak memory of forward + backward (above the inputs)", "", markdown_table(memory), ""]
    for path in _plot(data, out, plt, stem):
        lines.append(f"![{path.stem}]({path.name})")
    write_file(out / f"{stem}.md", "\n".join(lines) + "\n")
    return out / f"{stem}.md"


def _stopped_line(partial: dict) -> str:
    if partial["cases_done"] == partial["cases"]:
        return (f"- **Stopped by its time limit after timing all {partial['cases']} cases**, before peak memory and "
                "accuracy, which come last.")
    return (f"- **Stopped by its time limit after {partial['cases_done']} of {partial['cases']} cases**: these are "
            "the cases it finished (no peak memory or accuracy, which come last), so its geomeans are not the "
            "suite's.")


def _plot(data: dict, out: Path, plt, stem: str = "bench") -> list[Path]:
    frame = pd.DataFrame(data["rows"])
    peers = [c for c in data["contenders"] if c != BEST]
    paths = []
    for pass_name, group in frame.groupby("pass", sort=False):
        cases = list(dict.fromkeys(zip(group["shape"], group["dtype"])))
        # At most PLOT_MAX_WIDTH inches: the model suite has some 160 cases per pass.
        fig, ax = plt.subplots(figsize=(min(PLOT_MAX_WIDTH, max(6, 0.6 * len(cases) * max(1, len(peers)))), 4))
        width = 0.8 / max(1, len(peers))
        for i, peer in enumerate(peers):
            series = group[group["contender"] == peer].set_index(["shape", "dtype"])
            values = [series.loc[c, "ratio"] if c in series.index else math.nan for c in cases]
            ax.bar([j + i * width for j in range(len(cases))], values, width, label=peer)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
        ax.set_xticklabels([f"{s}\n{d}" for s, d in cases], fontsize=7)
        ax.set_ylabel("peer time / best time")
        ax.set_title(f"{pass_name}: how many times faster the best is")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"{stem}-{pass_name}.png"
        with replaced(path) as fresh:
            fig.savefig(fresh, dpi=90, format="png")
        plt.close(fig)
        paths.append(path)
    return paths


def _main(argv: list[str]) -> None:
    kernel, variant, device, repetitions, out, suite, compiled, shapes = argv
    data = measure(kernel, variant, device, int(repetitions), suite, compiled == "compiled",
                   tuple(filter(None, shapes.split(","))), partial=Path(out).with_name(PARTIAL_FILE))
    Path(out).write_text(json.dumps(data, default=float))


if __name__ == "__main__":
    _main(sys.argv[1:])
