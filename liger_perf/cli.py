"""The ``liger-perf`` command line."""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from liger_perf.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_JOB_ERROR, UserError
from liger_perf.core.wording import count, speedup

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="An NCU-profile-driven optimization loop for Triton kernels.")
# Wide enough for the gate's table when the output is a pipe or a notebook rather than a terminal.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _version(value: bool) -> None:
    if value:
        from liger_perf import __version__

        console.print(f"liger-perf {__version__}")
        raise typer.Exit()


@app.callback()
def workspace_option(
    ctx: typer.Context,
    workspace: Optional[str] = typer.Option(None, "--workspace", "-w", envvar="LIGER_PERF_WORKSPACE",
                                            help="the workspace (kernels/, notebooks/, reports/, guardrails.yaml); "
                                                 "default: the nearest folder upward with a guardrails.yaml, "
                                                 "else the current one"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """An NCU-profile-driven optimization loop for Triton kernels."""
    from liger_perf.core import workspace as ws

    # Stated once for this process and every process it starts (they run in folders of their own). A folder
    # that does not exist is a typo, not a new workspace, except for init.
    if workspace == "":  # `-w "$DIR"` with DIR unset: not the current folder by accident
        raise UserError("--workspace is an empty string (an unset variable?): name a folder, or leave the option out")
    ws.use(Path(workspace) if workspace is not None else ws.current().root, create=ctx.invoked_subcommand == "init")


@app.command("init")
def init_command(
    ctx: typer.Context,
    folder: Optional[str] = typer.Argument(None, metavar="DIR", help="the workspace folder to create or complete; "
                                                                    "default: --workspace, else the current folder"),
) -> None:
    """Make a workspace: kernels/, notebooks/, reports/, a commented guardrails.yaml and nightly.yaml, .gitignore."""
    from liger_perf.core.workspace import init_workspace

    # Not the workspace found upward: `init` in a subfolder of one makes a new one there.
    stated = ctx.parent.params.get("workspace") if ctx.parent is not None else None
    if folder == "":  # `init "$DIR"` with DIR unset: not the current folder by accident
        raise UserError("init: the folder given is an empty string (an unset variable?): name a folder, or give "
                        "none for the current one")
    folder = Path(folder or stated or ".")
    for path, made in init_workspace(folder):
        console.print(f"{'created' if made else 'kept   '} {path}", markup=False)
    console.print(f"workspace: {folder.absolute()} (next: `liger-perf new NAME --reference module:function`, or "
                  "`liger-perf kernels` for the built-in ones)", markup=False)


@app.command("new")
def new_command(
    name: str = typer.Argument(..., metavar="NAME",
                               help="the kernel's name: a Python identifier (kernels/NAME/ in the workspace)"),
    reference: str = typer.Option(..., help="module:function, the PyTorch reference; its signature becomes the "
                                            "interface (importable from the current folder)"),
    shapes: Optional[str] = typer.Option(None, help="the GPU suite's shapes, e.g. 4096x4096,8192x8192"),
    dtypes: Optional[str] = typer.Option(None, help="the GPU suite's dtypes, e.g. float32,bfloat16"),
    baseline: Optional[Path] = typer.Option(None, help="an existing Triton module to wrap as the baseline, instead "
                                                       "of the generated one (with --entry)"),
    entry: Optional[str] = typer.Option(None, help="the function of --baseline that the kernel calls"),
    force: bool = typer.Option(False, "--force", help="overwrite kernels/NAME/ if it exists"),
) -> None:
    """Scaffold kernels/NAME/spec.py and baseline.py from a PyTorch reference (a Triton baseline for an
    elementwise one), ready for `check` and `optimize`."""
    from liger_perf.scaffold import parse_dtypes, parse_shapes, scaffold_kernel
    from liger_perf.core.workspace import current

    if (baseline is None) != (entry is None):
        raise UserError("--baseline and --entry go together: the module and the function in it to call")
    from liger_perf.kernel.registry import kernel_names, kernel_origin

    shadowed = name in kernel_names() and kernel_origin(name) == "built-in"
    written = scaffold_kernel(current().kernels, name, reference,
                              shapes=parse_shapes(shapes) if shapes is not None else None,  # "": refused
                              dtypes=parse_dtypes(dtypes) if dtypes is not None else None,
                              baseline=baseline, entry=entry, force=force)
    for path in written:
        console.print(f"wrote {path}", markup=False, highlight=False)
    if shadowed:
        console.print(f"note: in this workspace {name} is now this kernel, not the built-in one of that name",
                      markup=False)
    console.print(f"next: `liger-perf check {name}`, then `liger-perf optimize {name}`", markup=False)


@app.command("kernels")
def kernels_command() -> None:
    """List the registered kernels with their passes, suites and dtypes."""
    from liger_perf.kernel.registry import get_spec, kernel_names, kernel_origin
    from liger_perf.kernel.spec import dtype_name, shape_label

    from liger_perf.core.workspace import current

    table = Table("kernel", "from", "passes", "suite", "shapes", "dtypes")
    for name in kernel_names():
        origin = kernel_origin(name)
        try:
            spec = get_spec(name)
        except UserError as e:  # one broken spec of the workspace: the others are still listed
            table.add_row(name, origin, f"[red]cannot be loaded[/red]: {escape(str(e))}", "", "", "")
            continue
        for suite, shapes in spec.suites.items():
            table.add_row(name, origin, ", ".join(spec.passes), suite, " ".join(shape_label(s) for s in shapes),
                          ", ".join(dtype_name(d) for d in spec.dtypes[suite]))
            name, origin = "", ""
    console.print(table)
    console.print(f"workspace: {current().root}", markup=False, highlight=False)


TRUSTED = typer.Option(False, "--trusted", help="the variant file is your own: run it without the static check of "
                                                 "generated code (still in the sandbox)")


def _vet_variant(kernel: str, variant: Path | None, trusted: bool, what: str = "variant file") -> None:
    """A variant file named on the command line meets the static check of generated code before anything imports
    it (inside, it would share its process with the gate that judges it), unless the caller vouches for it
    (``--trusted``). The kernel's own baseline is trusted, named or not."""
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.kernel.variants import missing_variant, parse_source, read_source
    from liger_perf.propose.safety import check_generated_source

    if variant is None or trusted:
        return
    if not variant.is_file():
        raise UserError(missing_variant(variant, what))
    if variant.resolve() == baseline_path(kernel).resolve():
        return
    source = read_source(variant)
    parse_source(source, variant)  # a syntax error is its own line: no check would pass it
    problem = check_generated_source(source, get_spec(kernel))
    if problem:
        raise UserError(f"variant {variant} fails the static check of generated code: {problem}. A file of your "
                        "own runs unchecked with --trusted (in the sandbox still: see docs/security.md)")


@app.command("check")
def check_command(
    kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel (see `liger-perf kernels`)"),
    variant: Optional[Path] = typer.Option(None, help="variant module to check; default: the kernel's baseline"),
    device: str = typer.Option("auto", help="auto | cuda | interpret"),
    convergence: bool = typer.Option(True, help="run the convergence check after the unit checks pass"),
    trusted: bool = TRUSTED,
) -> None:
    """Correctness gate: forward and every gradient against the reference (same dtype and float64)."""
    import time

    from liger_perf.gate.process import GATE_DONE, run_contained_gate, write_summary

    if os.environ.get(GATE_DONE) is None:  # the variant is imported in a process of its own (gate.process)
        _vet_variant(kernel, variant, trusted)
        run = run_contained_gate(kernel, variant, device, convergence)
        if run.unfinished:
            err_console.print(f"liger-perf: error: {run.unfinished}", highlight=False, markup=False)
        raise typer.Exit(run.code)
    from liger_perf.kernel.device import select_device

    dev = select_device(device)  # before any variant is imported: it decides compiled or interpreted Triton
    from liger_perf.gate.correctness import check_variant, gate_cases
    from liger_perf.gate.resume import resume
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.kernel.variants import load_variant

    spec = get_spec(kernel)
    loaded = load_variant(variant or baseline_path(kernel), spec)
    console.print(f"[bold]check {kernel}[/bold] variant {loaded.path} on {dev.describe()}")
    if dev.interpreted:
        console.print("No CUDA device: running the small interpreter suite under the Triton interpreter.")
    n_cases = len(gate_cases(spec, loaded, dev))
    started = time.time()
    if not dev.interpreted:  # every kernel the gate will compile, compiled in parallel first (a cold cache)
        from liger_perf.measure.precompile import precompile

        with console.status("precompiling the gate's kernels..."):
            compiled = precompile(spec, [loaded.path], dev, convergence=convergence, timeout_s=300, part="gate")
        console.print(f"precompiled: {count(compiled.get('items', 0), 'call')} in "
                      f"{count(compiled.get('workers', 0), 'process', 'processes')}, "
                      f"{compiled.get('seconds', 0):.0f} s, {compiled.get('failed', 0)} failed", markup=False)
    with console.status(f"checking {n_cases} cases...") as status:
        done = iter(range(1, n_cases + 1))
        result = check_variant(spec, loaded, dev, convergence=convergence, resumer=resume,
                               progress=lambda case: status.update(f"case {next(done, n_cases)}/{n_cases}: "
                                                                  f"{case.label()}"))
    peak = None
    if not dev.interpreted:
        import torch

        try:
            peak = torch.cuda.max_memory_allocated(dev.torch_device)
        except Exception:  # a faulted device answers nothing more
            peak = None
    write_summary(result, time.time() - started, peak)
    console.print(_gate_table(result.rows))
    if not result.convergence.empty:
        console.print(_convergence_table(result.convergence))
    elif result.convergence_skipped:
        console.print("convergence check skipped: the unit checks failed")
    if not result.passed:
        failures = result.failures()
        if result.machine_limited:
            err_console.print(f"[red]NOT RUN[/red]: {len(failures)} of {len(result.rows)} comparisons could not run "
                              f"on this machine: {failures['reason'].iloc[0]}")
            raise typer.Exit(EXIT_JOB_ERROR)
        err_console.print(f"[red]FAIL[/red]: {len(failures)} of {len(result.rows)} comparisons failed"
                          + ("" if result.convergence.empty else ", or the convergence run diverged"))
        raise typer.Exit(EXIT_FAILED)
    console.print(f"[green]PASS[/green]: {len(result.rows)} comparisons"
                  + ("" if result.convergence.empty else f" and {len(result.convergence)} convergence checks"))
    Path(os.environ[GATE_DONE]).write_text("passed")


@app.command("selfcheck")
def selfcheck_command(
    device: str = typer.Option("auto", help="auto | cuda | interpret: the device this machine checks"),
    kernel: Optional[list[str]] = typer.Option(None, help="only this kernel (repeat for several); default: all"),
) -> None:
    """Is this machine fit for trials? Gate of every kernel's baseline and best, a short trial of each baseline;
    writes reports/<device>/selfcheck.json. Run it after upgrading torch, Triton or the driver."""
    from liger_perf.kernel.registry import get_spec
    from liger_perf.selfcheck import PASS, run_selfcheck, summary_line, write_record

    for name in kernel or []:
        get_spec(name)  # a typo is one line, before anything runs
    from liger_perf.kernel.device import select_device
    from liger_perf.record.store import Store

    reports = Store(device=select_device(device).device_class).reports  # the trials' notebooks kept beside it
    record = run_selfcheck(device, kernel or None, keep=reports / "selfcheck",
                           echo=lambda line: console.print(line, markup=False, highlight=False))
    path = write_record(record, reports)
    at = f"commit {record['commit'][:12]}" if record["commit"] else "an unknown commit"
    table = Table(title=f"selfcheck on {record['stack'].get('gpu') or 'the Triton interpreter'} at {at}")
    for column in ("kernel", "step", "variant", "status", "seconds", "detail"):
        table.add_column(column, overflow="fold")
    for row in record["rows"]:
        status = row["status"] if row["status"] == PASS else f"[red]{row['status']}[/red]"
        table.add_row(row["kernel"], row["step"], escape(row["variant"]), status, f"{row['seconds']:.0f}",
                      escape(row["detail"]))
    console.print(table)
    line = summary_line(record)
    console.print(f"{line}\nrecord: {path}", markup=False, highlight=False)
    if not record["passed"]:
        raise typer.Exit(EXIT_FAILED)


@app.command("trial")
def trial_command(
    kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel (see `liger-perf kernels`)"),
    variant: Optional[Path] = typer.Option(None, help="variant module under trial; default: the kernel's baseline"),
    against: Optional[Path] = typer.Option(None, help="the current best's module, timed side by side with it"),
    name: Optional[str] = typer.Option(None, help="short name in the notebook's file name; default: the file's"),
    hypothesis: str = typer.Option("", help="what the change should do, and why"),
    prediction: str = typer.Option("", help="the predicted effect, e.g. 'backward 10% faster at H >= 8192'"),
    passes: str = typer.Option("forward,backward,full", help="comma-separated passes to time"),
    device: str = typer.Option("auto", help="auto | cuda | interpret"),
    repetitions: int = typer.Option(0, min=0, help="timed repetitions per contender; 0: 100 on a GPU, 5 "
                                                   "interpreted"),
    ncu: bool = typer.Option(True, help="profile with Nsight Compute (recorded as unavailable where it cannot)"),
    peers: Optional[bool] = typer.Option(None, help="also time eager, torch.compile and liger-kernel; "
                                                    "default: only in a kernel's first trial"),
    timeout: float = typer.Option(3600, help="seconds each step of the trial (a notebook cell) may run before "
                                             "the trial is recorded as crashed"),
    suite: str = typer.Option("", help="what the trial times: '' (the device's suite) | models-tune (GPU only)"),
    trusted: bool = TRUSTED,
) -> None:
    """Run one trial: a Papermill-executed notebook under notebooks/<device>/<kernel>/ (gate, timings, memory, NCU)."""
    from rich.markup import escape

    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.run import check_tuning_suite, history_device, run_trial
    from liger_perf.run.papermill import PapermillRunner
    from liger_perf.record.schema import HARNESS_ERROR
    from liger_perf.record.store import Store

    spec = get_spec(kernel)
    pass_list = [p.strip() for p in passes.split(",") if p.strip()]
    unknown = [p for p in pass_list if p not in spec.passes]
    if unknown or not pass_list:
        raise UserError(f"--passes {passes!r}: {kernel} has the passes {', '.join(spec.passes)}")
    _vet_variant(kernel, variant, trusted)
    _vet_variant(kernel, against, trusted, "--against file")
    variant = variant or baseline_path(kernel)
    runner = PapermillRunner()
    check_tuning_suite(suite, runner.mode(device))
    store = Store(device=history_device(runner, device))  # this device's history
    # One writer per kernel history: a trial beside a running optimize would race it for numbers and files.
    with store.lock("optimize", kernel, label="trial"), \
            console.status(f"trial of {kernel}: {variant} (executing the notebook)..."):
        run = run_trial(kernel, variant, against, root=store.notebooks, runner=runner, name=name,
                        hypothesis=hypothesis, prediction=prediction, passes=pass_list, device=device,
                        repetitions=repetitions, ncu=ncu, peers=peers, timeout_s=timeout, suite=suite)
    result = run.result
    console.print(f"[bold]{escape(str(run.notebook))}[/bold]: status {result.status}"
                  + (f" ({escape(result.reason)})" if result.reason else ""))
    if result.device == "interpret":
        console.print("Ran under the Triton interpreter on the CPU: its timings are CPU timings.")
    if result.ncu:
        console.print(f"ncu: {result.ncu.status}" + (f" ({result.ncu.reason})" if result.ncu.reason else ""),
                      markup=False)
    if result.status == HARNESS_ERROR:
        raise typer.Exit(EXIT_JOB_ERROR)
    if result.status != "complete":
        raise typer.Exit(EXIT_FAILED)


READ_DEVICE_HELP = ("whose history: auto (this machine's GPU, else the recorded GPU history, else the "
                    "interpreter's) | cuda | interpret | a device by name, e.g. nvidia-h200")


def _history_store(kernel: str, device: str):
    """The store of the history a read-only command reads (no GPU needed to read a GPU's)."""
    from liger_perf.record.history import warn
    from liger_perf.record.store import Store, reading_device

    return Store(device=reading_device(kernel, device, warn=warn))


@app.command("history")
def history_command(
    kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel"),
    format: str = typer.Option("table", "--format", help="table (one row per trial) | csv | json (every metric)"),
    device: str = typer.Option("auto", help=READ_DEVICE_HELP),
) -> None:
    """Print a kernel's trial history, read from its notebooks."""
    from liger_perf.record.history import history_frame, load_trials

    if format not in ("table", "csv", "json"):
        raise UserError(f"--format {format!r}: use table, csv or json")
    from liger_perf.kernel.registry import get_spec

    get_spec(kernel)
    store = _history_store(kernel, device)
    trials = load_trials(kernel, store.notebooks)
    if format == "csv":
        sys.stdout.write(history_frame(kernel, trials=trials).to_csv(index=False))
    elif format == "json":
        sys.stdout.write(history_frame(kernel, trials=trials).to_json(orient="records", indent=1) + "\n")
    elif not trials:
        console.print(f"no trials of {kernel} on {store.device} yet: `liger-perf optimize {kernel}` runs the first",
                      markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(history_table(kernel, store.device, trials))


NAME_WIDTH, TABLE_WIDTH = 24, 100


def history_table(kernel: str, device: str, trials) -> Table:
    """One row per trial, 100 columns wide: its verdict (or how it ended) and its gain on the target, the
    speedup over the best it ran against (that best's time / its time: above 1 is faster)."""
    from liger_perf.kernel.variants import target_buckets

    table = Table(title=f"{kernel} on {device}: trials", caption_justify="left",
                  caption="speedup: the target pass's time of the best it ran against / its own (geomean over "
                          "the suite, or over the dispatch buckets named under it: a move confined to them is "
                          "judged there), with its interval")
    # Fixed widths (rich would squeeze a short column to nothing before it cuts a long one): 100 columns in all,
    # 3 per column and 1 for the borders and padding.
    widths = {"trial": 5, "name": NAME_WIDTH, "verdict": 13, "speedup": 17}
    widths["hypothesis"] = TABLE_WIDTH - sum(widths.values()) - 3 * len(widths) - 4
    for header, width in widths.items():  # a name is broken at its hyphens by _wrap_name, never mid-word
        table.add_column(header, width=width, no_wrap=header not in ("name", "speedup"),
                         overflow="fold" if header in ("name", "speedup") else "ellipsis")
    for t in trials:
        verdict = t.verdict or {"complete": "-", "failed-correctness": "gate failed", "invalid-variant": "invalid"}.get(t.status, t.status)
        judged = t.judged
        ratio = judged.target_ratio if judged is not None else None
        low, high = judged.target_bounds if judged is not None else (None, None)
        # The point on one line, its interval on the next: "1.57x (faster)" / "[1.51x, 1.63x]".
        gain = speedup(ratio, low, high).replace(" [", "\n[", 1)
        if judged is not None and judged.suite_gain is not None:  # judged on the buckets it moves, not the suite
            gain += "\nin " + ", ".join(sorted(target_buckets(t.changes)))
        # Names, hypotheses and reasons come from the trials' notebooks (a crashing variant's message among
        # them): text, never markup.
        table.add_row(f"{t.trial_id:04d}", escape(_wrap_name(t.name, NAME_WIDTH)), escape(verdict), gain,
                      escape((t.hypothesis or t.reason or "-").replace("\n", " ")))
    return table


def _wrap_name(name: str, width: int) -> str:
    """A trial name on lines of at most ``width``, broken after a hyphen or an underscore, never inside a word
    (a word longer than the line stays whole)."""
    lines, line = [], ""
    for piece in re.findall(r"[^-_]+[-_]?|[-_]", name):
        if line and len(line) + len(piece.rstrip("-_")) > width:
            lines.append(line)
            line = piece
        else:
            line += piece
    return "\n".join([*lines, line])


def _dispatch_buckets(text: str) -> tuple[str, ...]:
    """``--buckets``: "2048x2,1024x2" -> ("2048x2", "1024x2"), each a key as a DISPATCH table writes it."""
    from liger_perf.kernel.variants import check_bucket

    found = tuple(dict.fromkeys(b.strip() for b in text.split(","))) if text.strip() else ()
    for bucket in found:
        try:
            check_bucket(bucket, "")
        except UserError:
            raise UserError(f"--buckets {bucket!r}: write a bucket as <row width rounded up to a power of two>x"
                            "<element bytes: 2, 4 or 8>, e.g. 2048x2 for 1025-2048 columns of bfloat16") from None
    return found


def _check_target(target: str | None) -> None:
    """``optimize``'s and ``plan``'s ``--target``: one of the judge's targets, or None for guardrails.yaml's."""
    from liger_perf.judge.guardrails import TARGETS

    if target is not None and target not in TARGETS:
        raise UserError(f"--target {target!r}: use one of {', '.join(TARGETS)}")


def _screen_default(screen: int | None, mode: str) -> int:
    """``--screen`` as given, else 4 on a GPU and 0 under the interpreter, whose timings are CPU timings:
    screening them would choose on noise."""
    return (0 if mode == "interpret" else 4) if screen is None else screen


@app.command("optimize")
def optimize_command(
    kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel"),
    target: Optional[str] = typer.Option(None, help="forward | backward | full | memory; default: guardrails.yaml's"),
    budget: Optional[int] = typer.Option(None, min=1, help="trials to run in this invocation, the baseline trial "
                                                           "included; default: 10 on a GPU, 3 interpreted"),
    proposer: str = typer.Option("rules", help="rules (offline, NCU-driven) | llm (an OpenAI-compatible endpoint: "
                                               "OPENAI_BASE_URL, OPENAI_API_KEY) | auto (rules, then the LLM)"),
    model: Optional[str] = typer.Option(None, help="the LLM's model name (or LIGER_PERF_MODEL)"),
    llm_config: Optional[Path] = typer.Option(None, help="YAML with base_url, api_key, model, timeout_s, ..."),
    device: str = typer.Option("auto", help="auto | cuda | interpret"),
    guardrails: Optional[Path] = typer.Option(None, help="acceptance rules; default: the workspace's guardrails.yaml "
                                                         "(the defaults where it has none)"),
    interactive: bool = typer.Option(False, help="after the baseline trial, show the diagnosis and the plan and "
                                                 "wait for a yes"),
    repetitions: int = typer.Option(0, min=0, help="timed repetitions per contender; 0: 100 on a GPU, 5 "
                                                   "interpreted"),
    convergence: bool = typer.Option(True, help="run the convergence part of the gate in every trial"),
    max_minutes: Optional[float] = typer.Option(None, min=0, help=(
        "be done within this many minutes: no trial or screening starts that the recent ones' pace says would end "
        "after it (with none of them finished here to go by, they start while time is left)")),
    screen: Optional[int] = typer.Option(None, min=0, help="candidates asked of the proposer per round and "
                                         "screened in one notebook (quick gate, a short side-by-side timing); only "
                                         "those that may be faster get a full trial. Default: 4 on a GPU, 0 "
                                         "(no screening) under the interpreter"),
    workers: int = typer.Option(1, min=1, help="trials at once, in rounds against the same best: a local Dask "
                                               "cluster of this many workers, worker i on GPU i"),
    scheduler: Optional[str] = typer.Option(None, help="tcp://HOST:8786: run the trials on this running Dask "
                                                       "cluster (one worker per GPU) instead"),
    unsandboxed: bool = typer.Option(False, help="let --proposer llm|auto run generated code where no sandbox "
                                                 "(bubblewrap) is available, with your permissions"),
    suite: str = typer.Option("", help="what the trials time: '' (the device's suite) | models-tune: the tuning "
                                       "split of real models' widths and token counts (GPU only; the held-out "
                                       "split is for bench alone)"),
    buckets: str = typer.Option("", help="tune only these dispatch buckets, comma-separated, e.g. 2048x2,1024x2 "
                                         "(row width rounded up to a power of two x element bytes); '' any"),
) -> None:
    """The loop: propose a variant, run its trial against the current best, judge it, record the verdict."""
    from liger_perf.kernel.device import select_device
    from liger_perf.judge.guardrails import load_guardrails
    from liger_perf.record.history import latest_best, load_trials
    from liger_perf.loop import OptimizeLoop
    from liger_perf.run.progress import PlainLog, describe, latest
    from liger_perf.propose import get_proposer
    from liger_perf.kernel.registry import get_spec
    from liger_perf.report import write_report
    from liger_perf.core.workspace import current
    from liger_perf.run import check_tuning_suite

    get_spec(kernel)
    _check_target(target)
    check_tuning_suite(suite)
    focus = _dispatch_buckets(buckets)
    rules = load_guardrails(guardrails or current().guardrails, target=target)
    from liger_perf.isolation.sandbox import require_sandbox, sandbox_required

    require_sandbox(proposer, unsandboxed)
    chosen = get_proposer(proposer, model=model, llm_config=str(llm_config) if llm_config else None)
    runner = None
    if workers > 1 or scheduler:
        from liger_perf.run.dask import DaskRunner

        if not scheduler and select_device(device).mode == "cuda":
            import torch

            if workers > torch.cuda.device_count():
                raise UserError(f"--workers {workers}: this host has {count(torch.cuda.device_count(), 'GPU')}, "
                                "one per worker; ask for fewer workers, or start a cluster across hosts (--scheduler)")
        runner = DaskRunner(workers=workers, scheduler=scheduler,
                            sandbox_required=sandbox_required(proposer, unsandboxed))
        console.print(f"Dask: {count(runner.workers, 'worker')} at {runner.client.scheduler.address}: rounds of "
                      f"{count(runner.workers, 'trial')} against the same best (dashboard: "
                      f"{runner.client.dashboard_link})", markup=False)
    # The workers' device decides the mode: the client of a remote cluster may have no GPU of its own.
    mode = runner.mode(device) if runner is not None else select_device(device).mode
    check_tuning_suite(suite, mode)  # before the interpreter's notice: the run would not start
    if budget is None:
        budget = 3 if mode == "interpret" else 10
    screen = _screen_default(screen, mode)
    if mode == "interpret":
        console.print(f"No CUDA device: a short loop ({count(budget, 'trial')}) under the Triton interpreter on the "
                      "CPU. Its timings are CPU timings and there is no NCU profile; the verdicts exercise the "
                      "machinery, not the GPU.")
    confirm = (lambda text: typer.confirm(f"{text}\nGo on with the loop?", default=False)) if interactive else None

    # Live progress of the trials under way (each one's step, from its progress file); the time a trial took
    # here before is the estimate.
    from liger_perf.run import history_device
    from liger_perf.run.papermill import PapermillRunner
    from liger_perf.record.store import Store

    store = Store(device=history_device(runner or PapermillRunner(), device))  # the trials' device's history
    store.kernel_reports(kernel)  # a file or a dangling link in its place: one line now, not after the trials
    history = load_trials(kernel, store.notebooks)
    # Each trial's expected time: its kind's recent pace, a screening's from the timings it makes
    # (``OptimizeLoop.request_pace``).
    running: dict[int, tuple[str, str, float, float | None]] = {}  # trial -> (label, artifacts, start, expected s)
    # A terminal shows a live status line; output that is not one (a log, a pipe, CI) gets plain lines instead:
    # one per change of a trial's step, and one at least every 30 s while a step runs.
    live = console.is_terminal or console.is_jupyter
    plain = None if live else PlainLog(lambda: dict(running), lambda line: console.print(
        line, markup=False, highlight=False, soft_wrap=True))

    def show(event):
        # Messages carry brackets (intervals, knob dicts) that are text, not console markup.
        if event.kind in ("trial-start", "screen-start"):
            request = event.request
            if request is not None:
                running[request.trial_id] = (f"{request.trial_id:04d} {request.name}", request.artifacts,
                                             time.time(), loop.request_pace(history, request))
            console.print(event.message if event.kind == "screen-start" else
                          f"trial {event.index} of at most {event.budget}: {event.message}", markup=False)
        elif event.kind in ("trial-end", "judged-pending", "screen-end") and event.trial is not None:
            if plain is not None:  # the steps it took since the last look, before the line that ends it
                plain.flush(event.trial.trial_id)
            running.pop(event.trial.trial_id, None)
            console.print(f"  {event.trial.notebook or ''}: {event.message}", markup=False)
        elif event.kind in ("carry-over", "waits"):
            console.print(event.message, markup=False)
        elif event.kind == "stop":
            best = event.trial
            console.print(f"stopped: {event.message}" + (f"\ncurrent best: trial {best.trial_id:04d} {best.name}"
                                                        if best is not None else ""), markup=False)

    try:
        loop = OptimizeLoop(kernel, rules, chosen, device=device, budget=budget, root=store.notebooks,
                            repetitions=repetitions,
                            convergence=convergence, confirm=confirm, on_event=show,
                            deadline=None if max_minutes is None else time.time() + 60 * max_minutes, runner=runner,
                            screen=screen, suite=suite, buckets=focus)
        if plain is not None:
            with plain:
                outcome = loop.run()
        elif interactive:  # a live display would fight the prompt
            outcome = loop.run()
        else:
            with _live_status(lambda: " | ".join(describe(label, latest(folder), started, expected_s)
                                                 for label, folder, started, expected_s in list(running.values()))):
                outcome = loop.run()
    finally:
        if runner is not None:
            runner.close()
    shipped = latest_best(kernel, store.notebooks)
    if shipped is not None and outcome.best is not None and shipped.trial_id != outcome.best.trial_id:
        # The loop's best is today's baseline's; an earlier baseline's best is kept until that one is measured.
        console.print(f"bench and patch keep trial {shipped.trial_id:04d} {shipped.name}, an earlier baseline's "
                      "best, until a trial against today's baseline is accepted or rejected", markup=False)
    report = write_report(kernel, load_trials(kernel, store.notebooks), store.kernel_reports(kernel))
    console.print(f"report: {report}")
    if outcome.harness_error:
        console.print(f"the harness failed (exit code {EXIT_JOB_ERROR}): {outcome.harness_error}", markup=False)
        raise typer.Exit(EXIT_JOB_ERROR)
    if outcome.baseline_failed:
        raise typer.Exit(EXIT_FAILED)


@app.command("plan")
def plan_command(
    kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel"),
    target: Optional[str] = typer.Option(None, help="forward | backward | full | memory; default: guardrails.yaml's"),
    device: str = typer.Option("auto", help=READ_DEVICE_HELP),
    guardrails: Optional[Path] = typer.Option(None, help="acceptance rules; default: the workspace's guardrails.yaml"),
    screen: Optional[int] = typer.Option(None, min=0, help="candidates per screening, as optimize's --screen; "
                                         "default: 4 for a GPU's history, 0 for the interpreter's"),
    suite: str = typer.Option("", help="as optimize's --suite: '' or models-tune"),
    buckets: str = typer.Option("", help="as optimize's --buckets, e.g. 2048x2,1024x2; '' any"),
    workers: int = typer.Option(1, min=1, help="as optimize's --workers: trials a round holds"),
    budget: int = typer.Option(10, min=1, help="as optimize's --budget: trials the run may begin"),
) -> None:
    """What `optimize` with the same options would begin next, read from the history: nothing runs and nothing is
    written, so no GPU is needed (a GPU's history is planned on any machine). The rules proposer's candidates, each
    with its changes and the hypothesis it would be trialled on."""
    from liger_perf.core.workspace import INTERPRET, current
    from liger_perf.judge.guardrails import load_guardrails
    from liger_perf.kernel.registry import get_spec
    from liger_perf.loop import OptimizeLoop
    from liger_perf.propose import get_proposer
    from liger_perf.record.history import load_trials, trial_pace
    from liger_perf.run import PlanOnly

    get_spec(kernel)
    _check_target(target)
    focus = _dispatch_buckets(buckets)
    rules = load_guardrails(guardrails or current().guardrails, target=target)
    store = _history_store(kernel, device)
    mode = "interpret" if store.device == INTERPRET else "cuda"
    loop = OptimizeLoop(kernel, rules, get_proposer("rules"), device=mode, budget=budget, root=store.notebooks,
                        runner=PlanOnly(mode, workers), suite=suite, buckets=focus,
                        screen=_screen_default(screen, mode))
    step = loop.plan()
    history = load_trials(kernel, store.notebooks)

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def pace(kind: str, each: bool = False, screened: list | None = None) -> str:
        """How long such a step takes here (the loop's own estimates: ``trial_pace``, and for a screening of the
        ``screened`` proposals ``screening_pace``, by the cases their changes time), to size a GPU call by."""
        if screened:
            seconds = loop.screening_pace(history, [p.changes or {} for p in screened])
        elif kind == "experiment" and step.trials:  # by the cases each trial times (its buckets' alone, or all)
            seconds = max((loop.trial_pace(history, p, step.best.variant.source) or 0.0 for p in step.trials))
        else:
            seconds = trial_pace(history, suite, kind=kind)
        return f" (about {seconds:.0f} s{' each' if each else ''} in the notebook, by this history's recent " \
               "ones)" if seconds else ""

    def show(proposals) -> None:
        for proposal in proposals:
            changes = ", ".join(f"{k}={v!r}" for k, v in (proposal.changes or {}).items()) or "code"
            say(f"  {proposal.name}: {changes}\n    {proposal.hypothesis}")

    say(f"{kernel}, the {store.device} history ({rules.target}"
        + (f", suite {suite}" if suite else "") + (f", buckets {', '.join(focus)}" if focus else "") + "):")
    for note in step.notes:
        say(note)
    if step.baseline_trial:
        baseline = current().relative(loop.baseline_file)
        last = next((t for t in reversed(history) if t.variant_sha == loop.baseline_sha and not t.against), None)
        said = (f"its last trial, {last.trial_id:04d}, ended {last.status}" + (f" ({last.reason})" if last.reason
                                                                               else "")
                if last is not None else "its source has no trial in this history yet")
        say(f"next: the baseline trial of {baseline}, with the peers timed beside it{pace('baseline')}: {said}")
        return
    best = f"trial {step.best.trial_id:04d} {step.best.name}"
    if step.stop:
        say(f"next: nothing (best: {best}): {step.stop}")
        return
    if step.screening:
        say(f"next: a screening of {count(len(step.screening), 'candidate')} against {best} in one notebook"
            + pace("screening", screened=step.screening)
            + ("" if step.trials else "; those that may be faster then get full trials, the fastest first") + ":")
        show(step.screening)
    if step.trials:
        say(f"then a round of full trials against {best}{pace('experiment', each=True)}: these first, then those "
            "the screening keeps, the fastest first:" if step.screening else
            f"next: {count(len(step.trials), 'full trial')} against {best}{pace('experiment', each=True)}, in "
            "this order:")
        show(step.trials)


@app.command("bench")
def bench_command(
    kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel"),
    variant: Optional[Path] = typer.Option(None, help="the variant to measure; default: the best accepted one "
                                                      "(the baseline if none was accepted)"),
    device: str = typer.Option("auto", help="auto | cuda | interpret"),
    repetitions: int = typer.Option(0, min=0, help="timed repetitions per contender; 0: 100 on a GPU, 5 "
                                                   "interpreted"),
    timeout: float = typer.Option(1800, help="seconds the measurement may run before it is stopped (the cases it "
                                             "finished are reported, in bench[-models][-shapes]-partial.*)"),
    suite: str = typer.Option("", help="'' (the device's suite) | models: real models' widths and token counts, "
                                       "the tuning and the held-out split side by side (GPU only)"),
    compile: bool = typer.Option(True, help="time torch.compile too; --no-compile leaves it out (it compiles every "
                                            "shape anew: minutes over the model suite)"),
    shapes: str = typer.Option("", help="only these shapes of the suite, comma-separated ROWSxCOLUMNS labels (every "
                                        "dtype of each), e.g. torch.compile at a few model shapes; its report is "
                                        "bench[-models]-shapes.*, the whole suite's is left alone"),
    trusted: bool = TRUSTED,
) -> None:
    """Best variant, baseline, liger-kernel, eager and torch.compile side by side in one run -> reports/<device>/<kernel>/."""
    from liger_perf.bench import run_bench, summary_table, write_bench_report
    from liger_perf.kernel.device import select_device
    from liger_perf.record.history import best_variant_file
    from liger_perf.kernel.registry import get_spec
    from liger_perf.record.store import Store

    from liger_perf.bench import SUITES, bench_cases

    spec = get_spec(kernel)
    if not 0 < timeout < math.inf:  # NaN too
        raise UserError(f"--timeout {timeout}: give a positive number of seconds, e.g. --timeout 1800")
    if suite not in SUITES:
        raise UserError(f"--suite {suite}: leave it out for the device's suite, or --suite models")
    here = select_device(device)
    mode, store = here.mode, Store(device=here.device_class)
    reports = store.kernel_reports(kernel)  # a file in its place: one line now, not after the measurement
    if suite == "models" and mode == "interpret":
        raise UserError("--suite models needs a GPU: its shapes (up to 64 Mi elements per tensor) would take hours "
                        "under the Triton interpreter; on the CPU, leave --suite out")
    chosen_shapes = tuple(dict.fromkeys(s.strip() for s in shapes.split(",") if s.strip()))
    bench_cases(spec, suite, here.suite, chosen_shapes)  # an unknown label: one line here, before the child starts
    _vet_variant(kernel, variant, trusted)  # a missing file is a one-line error here, not in the child process
    chosen = variant or best_variant_file(kernel, store.notebooks)
    if mode == "interpret":
        console.print("No CUDA device: benchmarking under the Triton interpreter on the CPU (CPU timings; no "
                      "torch.compile, liger-kernel or peak memory).")
    with console.status(f"bench of {kernel}: {chosen} beside the baseline and the peers..."):
        data = run_bench(kernel, chosen, device=device, repetitions=repetitions, timeout_s=timeout, suite=suite,
                         compiled=compile, shapes=chosen_shapes)
    path = write_bench_report(kernel, data, reports)
    table = summary_table(data)
    rich_table = Table(*table.columns)
    for row in table.itertuples(index=False):
        rich_table.add_row(*map(str, row))
    console.print(rich_table)
    console.print(f"bench report: {path}")
    if data.get("partial"):
        done = data["partial"]
        what = (f"after timing all {done['cases']} cases, before peak memory and accuracy"
                if done["cases_done"] == done["cases"] else f"after {done['cases_done']} of {done['cases']} cases")
        raise UserError(f"bench of {kernel} ran past {timeout:.0f} s and was stopped {what}: {path.name} holds what "
                        "it measured; pass a larger --timeout for all")


@app.command("patch")
def patch_command(
    list_: bool = typer.Option(False, "--list", help="show the model types it patches and with which kernel"),
) -> None:
    """What `liger_perf.models.patch.apply(model)` puts into a Hugging Face model (use it from Python)."""
    from liger_perf.models.patch import supported_table

    if not list_:
        console.print("liger_perf.models.patch.apply(model) patches a transformers model in place with the workspace's "
                      "best kernels; liger_perf.models.patch.unpatch(model) undoes it. `liger-perf patch --list` shows "
                      "what it patches; `liger-perf e2e` measures it in training steps.", highlight=False)
        return
    table = Table("model type", "patched")
    for model_type, what in supported_table():
        table.add_row(model_type, what)
    console.print(table)


@app.command("e2e")
def e2e_command(
    model: str = typer.Option("llama", help="llama | mistral | qwen2 | qwen3 | gemma | nemotron"),
    layers: int = typer.Option(0, min=0, help="decoder layers; 0: 8 on a GPU, 2 interpreted"),
    hidden: int = typer.Option(0, min=0, help="hidden size; 0: 4096 on a GPU, 64 interpreted"),
    seq: int = typer.Option(0, min=0, help="sequence length; 0: 4096 on a GPU, 16 interpreted"),
    batch: int = typer.Option(1, min=1, help="sequences per step"),
    dtype: str = typer.Option("", help="fp32 | bf16 | fp16; default: bf16 on a GPU, fp32 interpreted"),
    steps: int = typer.Option(0, min=0, help="training steps; 0: 20 on a GPU, 3 interpreted"),
    device: str = typer.Option("auto", help="auto | cuda | interpret"),
) -> None:
    """Train a randomly initialised transformers model unpatched, patched with liger-perf's best kernels and
    with liger-kernel's, interleaved: step time, tokens/s, peak memory, loss curves -> reports/<device>/e2e/."""
    from liger_perf.kernel.device import select_device
    from liger_perf.models.e2e import E2EConfig, mib_text, run_e2e, speedup_text, summary_rows, write_report
    from liger_perf.record.store import Store

    here = select_device(device)
    gpu = not here.interpreted
    if not gpu:
        console.print("No CUDA device: a tiny model under the Triton interpreter on the CPU (CPU timings; the "
                      "losses are what this run shows).")
    config = E2EConfig(model=model, layers=layers or (8 if gpu else 2), hidden=hidden or (4096 if gpu else 64),
                       seq=seq or (4096 if gpu else 16), batch=batch, dtype=dtype or ("bf16" if gpu else "fp32"),
                       steps=steps or (20 if gpu else 3), vocab=32000 if gpu else 256)
    with console.status("training...") as status:
        result = run_e2e(config, device=device, progress=lambda text: status.update(f"training: {text}"))
    path = write_report(result, Store(device=here.device_class).e2e_reports())
    table = Table("contender", "median step ms", "tokens/s", "speedup [95 %]", "peak MiB", "loss agrees")
    for r in summary_rows(result):
        table.add_row(r["contender"], f"{r['median_step_ms']:.3f}", f"{r['tokens_per_s']:.0f}",
                      speedup_text(r, len(result.step_ms[r["contender"]])),
                      mib_text(r["peak_mib"]), "yes" if r["agrees"] else "NO")
    console.print(table)
    console.print(f"e2e report: {path}")
    for name, where in result.parted.items():
        err_console.print(f"liger-perf: {name}'s loss parted from the unpatched one at {where}", highlight=False,
                          markup=False)
    if not result.passed:
        raise typer.Exit(EXIT_FAILED)


@app.command("diff")
def diff_command(kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel"),
                 device: str = typer.Option("auto", help=READ_DEVICE_HELP)) -> None:
    """The unified diff from the baseline to the best accepted variant (the one `bench` and `patch` use)."""
    from liger_perf.record.history import kept_best
    from liger_perf.kernel.registry import get_spec
    from liger_perf.report import variant_diff

    get_spec(kernel)
    base, best = kept_best(kernel, _history_store(kernel, device).notebooks)
    if best is None:
        err_console.print(f"{kernel}: no accepted variant yet; the baseline is the best")
        return
    if base is not None:
        err_console.print(f"{kernel}: `baseline.py` changed since trial {best.trial_id:04d} was accepted, and no "
                          "trial against it was accepted or rejected on its measurements yet, so `bench` and "
                          "`patch` keep that trial; "
                          f"the diff runs from the baseline it was tuned on (trial {base.trial_id:04d})",
                          soft_wrap=True)
    sys.stdout.write(variant_diff(kernel, best, base=base))


@app.command("report")
def report_command(kernel: str = typer.Argument(..., metavar="KERNEL", help="a registered kernel"),
                   device: str = typer.Option("auto", help=READ_DEVICE_HELP)) -> None:
    """Write reports/<device>/<kernel>/report.md (every trial, best vs baseline and peers, plots, the diff)."""
    from liger_perf.record.history import load_trials
    from liger_perf.kernel.registry import get_spec
    from liger_perf.report import write_report

    get_spec(kernel)
    store = _history_store(kernel, device)
    path = write_report(kernel, load_trials(kernel, store.notebooks), store.kernel_reports(kernel))
    console.print(f"report: {path}")


@app.command("nightly")
def nightly_command(
    config: Optional[Path] = typer.Option(None, help="the job's YAML; default: the workspace's nightly.yaml"),
    print_schedule: Optional[str] = typer.Option(None, "--print-schedule",
                                                 help="cron | systemd | github: print a ready schedule and exit"),
) -> None:
    """Unattended: re-validate each kernel's best on today's stack, then keep tuning; a morning summary.

    Exit code 1 when a regression was found (so that a scheduler can alert), else 3 when the job itself had errors
    (a trial the harness could not run, a kernel's job that failed: never a regression), 2 on bad input."""
    from liger_perf.nightly import Nightly, load_config, schedule
    from liger_perf.core.workspace import current

    if print_schedule is not None:
        sys.stdout.write(schedule(print_schedule, config))
        return
    if config is None and not current().nightly.is_file():
        raise UserError(f"no nightly.yaml in the workspace {current().root}: `liger-perf init` writes a commented "
                        "one (or pass --config FILE)")
    job = load_config(config or current().nightly)
    code, summary = Nightly(job, echo=lambda text: console.print(text, markup=False)).run()
    console.print(f"summary: {summary}" + {EXIT_FAILED: f"  (regressions found: exit code {EXIT_FAILED})",
                                           EXIT_JOB_ERROR: f"  (errors of the job, no regression: exit code "
                                                           f"{EXIT_JOB_ERROR})"}.get(code, ""))
    raise typer.Exit(code)


@contextlib.contextmanager
def _live_status(text):
    """A status line under the printed lines, refreshed every second from ``text()`` while the block runs."""
    stop = threading.Event()
    with console.status("starting...") as status:
        def refresh():
            while not stop.wait(1.0):
                status.update(escape(text()) or "between trials...")  # the trial's own words: never markup

        watcher = threading.Thread(target=refresh, daemon=True)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join()


def _gate_table(rows) -> Table:
    table = Table("shape", "dtype", "config", "layout", "seed", "output", "against", "max abs err", "max rel err",
                  "‖err‖/‖ref‖", "tolerance used", "verdict", title="correctness gate")
    for r in rows.itertuples():
        verdict = "[green]pass[/green]" if r.verdict == "pass" else f"[red]FAIL[/red] {escape(r.reason)}"
        table.add_row(r.shape, r.dtype, r.config, r.layout, str(r.seed), r.output, r.against,
                      f"{r.max_abs_err:.3g}", f"{r.max_rel_err:.3g}", f"{r.norm_rel_err:.3g}",
                      f"{r.tolerance_used:.2f}", verdict)
    return table


def _convergence_table(conv) -> Table:
    table = Table("options", "dtype", "steps", "max rel diff (loss)", "final weights rel diff", "verdict",
                  title="convergence: variant vs reference, same init and data")
    for (config, dtype), group in conv.groupby(["config", "dtype"], sort=False):
        steps = group[group["step"] != "final weights"]
        final = group[group["step"] == "final weights"]
        failed = group[group["verdict"] != "pass"]
        table.add_row(config, dtype, str(len(steps)), f"{steps['rel_diff'].max():.3g}",
                      f"{final['rel_diff'].iloc[0]:.3g}" if len(final) else "-",
                      "[green]pass[/green]" if failed.empty else
                      f"[red]FAIL[/red] step {failed['step'].iloc[0]}: {escape(str(failed['reason'].iloc[0]))}")
    return table


def _click_exceptions():
    """The CLI library's exceptions: typer's own copy of click where it has one (typer 0.2x), else click's."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions
    return exceptions


def usage_line(error) -> str:
    """A usage error of the CLI library as one line: ``--budget -1: Input should be greater than or equal to 1
    (see `liger-perf optimize --help`)``."""
    exceptions = _click_exceptions()
    message = error.format_message()
    param = getattr(error, "param", None)
    if isinstance(error, exceptions.BadParameter) and not isinstance(error, exceptions.MissingParameter) \
            and param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("-")]
        name = "/".join(opts) if opts else (param.name or "").upper()
        value = None
        errors = getattr(error.__cause__, "errors", None)  # typer's check of the value (pydantic) holds it
        if callable(errors):
            try:
                value = errors()[0].get("input")
            except Exception:  # a message without its value is still the message
                value = None
        message = f"{name}{f' {value}' if isinstance(value, (str, int, float)) else ''}: {error.message}"
    where = error.ctx.command_path if getattr(error, "ctx", None) is not None else "liger-perf"
    return f"{' '.join(message.split()).rstrip('.')} (see `{where} --help`)"


def main() -> None:
    # The CLI library runs outside its standalone mode, so that every way a command line can be wrong is one line
    # on stderr here: a usage error (exit code 2), a UserError from a command (2), an interrupted prompt (1).
    # --help, --version and typer.Exit(code) come back as their exit codes.
    from liger_perf.record.history import forget_warnings

    forget_warnings()  # each warning once per command
    exceptions = _click_exceptions()
    no_args = getattr(exceptions, "NoArgsIsHelpError", ())
    try:
        code = app(standalone_mode=False)
    except UserError as e:
        err_console.print(f"liger-perf: error: {e}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(EXIT_BAD_INPUT)
    except no_args as e:  # `liger-perf` alone: the help, as the library shows it
        e.show()
        sys.exit(e.exit_code)
    except exceptions.UsageError as e:
        err_console.print(f"liger-perf: error: {usage_line(e)}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(e.exit_code)
    except exceptions.ClickException as e:  # a file the library could not open, and the like
        err_console.print(f"liger-perf: error: {' '.join(e.format_message().split())}", highlight=False,
                          soft_wrap=True, markup=False)
        sys.exit(e.exit_code)
    except (getattr(exceptions, "Abort", typer.Abort), typer.Abort):
        err_console.print("liger-perf: aborted", highlight=False, markup=False)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
