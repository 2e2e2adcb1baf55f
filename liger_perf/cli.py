"""The ``liger-perf`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from liger_perf.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="An NCU-profile-driven optimization loop for Triton kernels.")
# Wide enough for the gate's table when the output is a pipe or a notebook rather than a terminal.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


@app.command("kernels")
def kernels_command() -> None:
    """List the registered kernels with their passes, suites and dtypes."""
    from liger_perf.registry import get_spec, kernel_names
    from liger_perf.spec import dtype_name, shape_label

    table = Table("kernel", "passes", "suite", "shapes", "dtypes")
    for name in kernel_names():
        spec = get_spec(name)
        for suite, shapes in spec.suites.items():
            table.add_row(name, ", ".join(spec.passes), suite, " ".join(shape_label(s) for s in shapes),
                          ", ".join(dtype_name(d) for d in spec.dtypes[suite]))
    console.print(table)


@app.command("check")
def check_command(
    kernel: str = typer.Argument(..., help="a registered kernel (see `liger-perf kernels`)"),
    variant: Optional[Path] = typer.Option(None, help="variant module to check; default: the kernel's baseline"),
    device: str = typer.Option("auto", help="auto | cuda | interpret"),
    convergence: bool = typer.Option(True, help="run the convergence check after the unit checks pass"),
) -> None:
    """Correctness gate: forward and every gradient against the reference (same dtype and float64)."""
    from liger_perf.device import select_device

    dev = select_device(device)  # before any variant is imported: it decides compiled or interpreted Triton
    from liger_perf.correctness import check_variant
    from liger_perf.registry import baseline_path, get_spec
    from liger_perf.variants import load_variant

    spec = get_spec(kernel)
    loaded = load_variant(variant or baseline_path(kernel), spec)
    console.print(f"[bold]check {kernel}[/bold] variant {loaded.path} on {dev.describe()}")
    if dev.interpreted:
        console.print("No CUDA device: running the small interpreter suite under the Triton interpreter.")
    n_cases = len(spec.cases(dev.suite, "check"))
    with console.status(f"checking {n_cases} cases...") as status:
        done = iter(range(1, n_cases + 1))
        result = check_variant(spec, loaded, dev, convergence=convergence,
                               progress=lambda case: status.update(f"case {next(done)}/{n_cases}: {case.label()}"))
    console.print(_gate_table(result.rows))
    if not result.convergence.empty:
        console.print(_convergence_table(result.convergence))
    elif result.convergence_skipped:
        console.print("convergence check skipped: the unit checks failed")
    if not result.passed:
        failures = result.failures()
        err_console.print(f"[red]FAIL[/red]: {len(failures)} of {len(result.rows)} comparisons failed"
                          + ("" if result.convergence.empty else ", or the convergence run diverged"))
        raise typer.Exit(1)
    console.print(f"[green]PASS[/green]: {len(result.rows)} comparisons"
                  + ("" if result.convergence.empty else f" and {len(result.convergence)} convergence checks"))


def _gate_table(rows) -> Table:
    table = Table("shape", "dtype", "config", "layout", "output", "against", "max abs err", "max rel err",
                  "‖err‖/‖ref‖", "verdict", title="correctness gate")
    for r in rows.itertuples():
        verdict = "[green]pass[/green]" if r.verdict == "pass" else f"[red]FAIL[/red] {r.reason}"
        table.add_row(r.shape, r.dtype, r.config, r.layout, r.output, r.against, f"{r.max_abs_err:.3g}",
                      f"{r.max_rel_err:.3g}", f"{r.norm_rel_err:.3g}", verdict)
    return table


def _convergence_table(conv) -> Table:
    table = Table("dtype", "steps", "max rel diff (loss)", "final weights rel diff", "verdict",
                  title="convergence: variant vs reference, same init and data")
    for dtype, group in conv.groupby("dtype", sort=False):
        steps = group[group["step"] != "final weights"]
        final = group[group["step"] == "final weights"]
        ok = (group["verdict"] == "pass").all()
        table.add_row(dtype, str(len(steps)), f"{steps['rel_diff'].max():.3g}", f"{final['rel_diff'].iloc[0]:.3g}",
                      "[green]pass[/green]" if ok else "[red]FAIL[/red]")
    return table


def main() -> None:
    # In standalone mode the CLI library prints usage errors itself and exits with their code; what reaches
    # here is a UserError from a command, which becomes one line on stderr.
    try:
        app()
    except UserError as e:
        err_console.print(f"liger-perf: error: {e}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
