"""Hostile or mistaken input outside the kernels: one line that says what to do, never a traceback, a hang or a
file overwritten through a link."""

import os
import subprocess
import sys

import pytest

from broken_variants import ROOT
from liger_perf.record.store import Store


def run_cli(*args, cwd, env=None, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "LIGER_PERF_WORKSPACE": str(cwd),
           **(env or {})}
    return subprocess.run([sys.executable, "-m", "liger_perf", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def one_line(out) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


@pytest.fixture
def ws(tmp_path):
    out = run_cli("init", str(tmp_path), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return tmp_path


def test_no_time_to_go_by_and_unlimited_time_are_not_a_crash():
    """`optimize --max-minutes inf` (and nightly's `wall_clock_s: .inf`) crashed with "cannot convert float NaN
    to integer" as soon as a trial's pace was known."""
    from liger_perf.loop import trials_within

    assert trials_within(float("inf"), 10.0, 1, 3) == 3
    assert trials_within(float("nan"), 10.0, 1, 3) == 0
    assert trials_within(25.0, 10.0, 1, 3) == 2
    assert trials_within(1e308, 0.5, 1, 3) == 3  # more rounds than an int holds: OverflowError


def test_a_guardrails_path_that_is_a_folder_or_a_device_is_not_called_missing(ws):
    for given, said in ((ws / "notebooks", "is a folder"), (os.devnull, "is a device or a pipe")):
        line = one_line(run_cli("plan", "relu_squared", "--guardrails", str(given), cwd=ws))
        assert said in line and "does not exist" not in line, line


def test_a_nightly_guardrails_typo_is_bad_input_before_anything_runs(ws):
    config = ws / "typo.yaml"
    config.write_text("kernels:\n  - name: relu_squared\n  - name: fused_add_rms_norm\nguardrails: guardrail.yaml\n")
    line = one_line(run_cli("nightly", "--config", str(config), cwd=ws))
    assert "guardrail.yaml does not exist" in line, line
    assert not (ws / "reports" / "interpret" / "nightly").exists()  # no summary of a night that never ran


def test_print_schedule_keeps_each_path_one_word_for_cron_systemd_and_github(tmp_path):
    """A workspace with a space (and a %) broke every schedule's command; a config named with ' #' or ': ' broke
    the GitHub workflow's YAML; a mistyped --config was printed into the schedule as it was."""
    import shlex

    import yaml

    ws = tmp_path / "my ws 100%"
    assert run_cli("init", str(ws), cwd=tmp_path).returncode == 0
    config = ws / "night #1: a.yaml"
    config.write_text("kernels:\n  - name: relu_squared\n")

    def schedule(kind):
        out = run_cli("nightly", "--print-schedule", kind, "--config", str(config), cwd=ws)
        assert out.returncode == 0, out.stderr
        return out.stdout

    cron = next(line for line in schedule("cron").splitlines() if line.startswith("0 2"))
    # cron turns an unescaped % into a newline; the shell then reads the quoted words
    assert shlex.split(cron.replace("\\%", "%"))[5:8] == ["cd", str(ws), "&&"], cron
    assert shlex.split(cron.replace("\\%", "%"))[-5:-3] == ["--config", str(config)], cron
    systemd = schedule("systemd")
    assert f"WorkingDirectory={str(ws).replace('%', '%%')}\n" in systemd
    assert f' --config "{str(config).replace("%", "%%")}"\n' in systemd, systemd
    steps = yaml.safe_load(schedule("github"))["jobs"]["nightly"]["steps"]
    run = next(step["run"] for step in steps if "nightly" in str(step.get("run")))
    assert shlex.split(run)[-2:] == ["--config", config.name], run  # relative: a CI checkout lives elsewhere
    assert "typo.yaml does not exist" in one_line(run_cli("nightly", "--print-schedule", "cron", "--config",
                                                          str(ws / "typo.yaml"), cwd=ws))


def test_max_minutes_nan_is_refused_not_read_as_no_time_left(ws):
    """A guard: the option's range refuses NaN today; were it let through, the loop would run no trial and say
    the wall-clock budget was spent."""
    line = one_line(run_cli("optimize", "relu_squared", "--max-minutes", "nan", cwd=ws))
    assert "--max-minutes nan" in line, line


def test_bench_timeout_must_be_a_positive_number(ws):
    for value in ("nan", "-5", "0"):
        line = one_line(run_cli("bench", "relu_squared", "--timeout", value, cwd=ws))
        assert "--timeout" in line and "positive number of seconds" in line, line


def test_a_file_where_the_kernels_reports_go_is_one_line_before_the_bench_measures(ws):
    (ws / "reports" / "interpret").mkdir(parents=True)
    (ws / "reports" / "interpret" / "relu_squared").write_text("not a folder")
    line = one_line(run_cli("bench", "relu_squared", "--shapes", "8x300", cwd=ws))
    assert "is a file, not a folder" in line, line


def test_a_report_never_writes_through_a_link_in_the_reports_folder(ws, tmp_path_factory):
    precious = tmp_path_factory.mktemp("elsewhere") / "precious.txt"
    precious.write_text("precious")
    folder = ws / "reports" / "interpret" / "relu_squared"
    folder.mkdir(parents=True)
    (folder / "report.md").symlink_to(precious)
    out = run_cli("report", "relu_squared", "--device", "interpret", cwd=ws)
    assert out.returncode == 0, out.stderr
    assert precious.read_text() == "precious"
    assert not (folder / "report.md").is_symlink() and "optimization report" in (folder / "report.md").read_text()
    (folder / "report.md").unlink()
    os.mkfifo(folder / "report.md")  # the write blocked for ever, waiting for a reader
    out = run_cli("report", "relu_squared", "--device", "interpret", cwd=ws, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (folder / "report.md").is_file() and "optimization report" in (folder / "report.md").read_text()


def test_a_fifo_as_the_last_notebook_of_a_history_does_not_hang_the_reader(ws):
    folder = ws / "notebooks" / "nvidia-h200" / "relu_squared"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "9999-fifo.ipynb")
    out = run_cli("history", "relu_squared", cwd=ws, timeout=60)  # hung for ever in store._ended
    assert out.returncode == 0, out.stderr
    assert "9999-fifo.ipynb" in out.stderr  # skipped with a warning, as every unreadable notebook is


@pytest.mark.parametrize("name, said", [("ｋern", "ASCII"), ("x" * 300, "300 characters long")])
def test_new_refuses_a_name_python_or_the_file_system_would_not_keep(ws, name, said):
    (ws / "myref.py").write_text("import torch\n\n\ndef sq(x):\n    return x * x\n")
    line = one_line(run_cli("new", name, "--reference", "myref:sq", cwd=ws))
    assert said in line, line
    assert not any((ws / "kernels").iterdir())


def test_new_writes_no_kernel_file_through_a_link(ws, tmp_path_factory):
    """`new --force` wrote spec.py through a link planted in kernels/NAME/; a dangling kernels/NAME ended in a
    traceback."""
    (ws / "myref.py").write_text("import torch\n\n\ndef sq(x):\n    return x * x\n")
    precious = tmp_path_factory.mktemp("elsewhere") / "precious.py"
    precious.write_text("precious")
    (ws / "kernels" / "gone").symlink_to(ws / "nowhere")
    assert "is a link to nothing" in one_line(run_cli("new", "gone", "--reference", "myref:sq", cwd=ws))
    (ws / "kernels" / "sq").mkdir()
    (ws / "kernels" / "sq" / "spec.py").symlink_to(precious)
    out = run_cli("new", "sq", "--reference", "myref:sq", "--force", cwd=ws)
    assert out.returncode == 0, out.stderr
    assert precious.read_text() == "precious" and not (ws / "kernels" / "sq" / "spec.py").is_symlink()


def test_new_says_a_reference_that_exits_on_import_is_a_script(ws):
    (ws / "script.py").write_text("import sys\n\nimport torch\n\n\ndef sq(x):\n    return x * x\n\n\n"
                                  "sys.exit(2)\n")
    out = run_cli("new", "zz", "--reference", "script:sq", cwd=ws)
    line = one_line(out)
    assert "exited" in line and "__main__" in line, line


def test_a_kernel_folder_whose_name_is_not_utf8_does_not_break_the_listing(ws):
    bad = os.fsdecode(b"k\xff")
    (ws / "kernels" / bad).mkdir()
    for name in ("spec.py", "baseline.py"):
        (ws / "kernels" / bad / name).write_bytes((ROOT / "kernels" / "relu_squared" / name).read_bytes())
    out = run_cli("kernels", cwd=ws)
    assert out.returncode == 0, out.stderr
    assert "relu_squared" in out.stdout


def test_scheduler_that_is_no_address_is_one_line(ws):
    line = one_line(run_cli("optimize", "relu_squared", "--scheduler", "bogus", cwd=ws))
    assert "--scheduler bogus" in line, line


def test_init_never_writes_through_a_dangling_link_nor_keeps_a_folder_for_a_file(tmp_path):
    """A clone may carry `nightly.yaml` as a link to a file that does not exist yet: init wrote the default
    there, wherever it pointed. A folder named guardrails.yaml was "kept", and the default rules applied."""
    elsewhere = tmp_path / "elsewhere" / "planted.yaml"
    elsewhere.parent.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "nightly.yaml").symlink_to(elsewhere)
    line = one_line(run_cli("init", str(ws), cwd=tmp_path))
    assert "is a link to" in line and "nightly.yaml" in line, line
    assert not elsewhere.exists()
    assert not (ws / "guardrails.yaml").exists()  # nothing written before the refusal
    (ws / "nightly.yaml").unlink()
    (ws / "guardrails.yaml").mkdir()
    line = one_line(run_cli("init", str(ws), cwd=tmp_path))
    assert "guardrails.yaml is a folder" in line, line
    (ws / "guardrails.yaml").rmdir()
    os.mkfifo(ws / "guardrails.yaml")
    line = one_line(run_cli("init", str(ws), cwd=tmp_path))
    assert "guardrails.yaml is a device or a pipe" in line, line


def test_init_with_an_empty_folder_name_is_not_the_current_folder(tmp_path):
    line = one_line(run_cli("init", "", cwd=tmp_path))  # `init "$DIR"` with DIR unset
    assert "empty string" in line, line
    line = one_line(run_cli("-w", "", "init", cwd=tmp_path))
    assert "--workspace is an empty string" in line, line
    assert not (tmp_path / "guardrails.yaml").exists()


def test_a_variant_module_is_rebuilt_beside_a_link_never_through_it(tmp_path):
    """A trial's variant file is rebuilt from its notebook where the file is gone: a link planted at that path
    had the notebook's source written into whatever it pointed at."""
    from liger_perf.record.history import load_trials, trial_variant_file

    trial = next(t for t in load_trials("fused_add_rms_norm", ROOT / "notebooks" / "nvidia-h200")
                 if t.trial_id == 94)
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    trial = trial.model_copy(update={"variant": trial.variant.model_copy(update={"path": str(tmp_path / "gone.py")})})
    root = tmp_path / "notebooks"
    planted = Store(root).trial_paths("fused_add_rms_norm", trial.trial_id, trial.name).variant
    planted.parent.mkdir(parents=True)
    planted.symlink_to(precious)
    rebuilt = trial_variant_file("fused_add_rms_norm", trial, root)
    assert precious.read_text() == "precious"
    assert rebuilt == planted and not rebuilt.is_symlink() and rebuilt.read_text() == trial.variant.source


#: Module texts whose KNOBS no reader can take, as a model may write them or a corrupt notebook record them.
UNREADABLE_KNOBS = {
    "a key no dict can hold": "KNOBS = {[1]: 2}\nKNOB_CHOICES = {}\n",
    "a list for KNOBS": "KNOBS = [1, 2]\nKNOB_CHOICES = {}\nDISPATCH = {}\n",
    "a number for a list of choices": 'KNOBS = {"a": 1}\nKNOB_CHOICES = {"a": 5}\nDISPATCH = {"1024x2": {"a": 7}}\n',
    "operators nested past the parser": 'KNOBS = {"a": ' + "-" * 5000 + "1}\nKNOB_CHOICES = {}\n",
}


@pytest.mark.parametrize("source", UNREADABLE_KNOBS.values(), ids=list(UNREADABLE_KNOBS))
def test_knobs_no_reader_can_take_are_one_line_and_a_history_s_never_stop_the_rules(source):
    """A trial notebook's variant source (or a model's module) whose KNOBS are no dict of knobs raised TypeError,
    AttributeError or RecursionError out of ``read_knobs``: the rules proposer, reading every earlier trial's
    settings, stopped the loop with a traceback over one corrupt notebook."""
    from liger_perf.core.errors import UserError
    from liger_perf.kernel.registry import baseline_path, get_spec
    from liger_perf.kernel.variants import read_dispatch, recorded_dispatch
    from liger_perf.propose import Context, Proposal
    from liger_perf.propose.rules import RulesProposer
    from liger_perf.record.history import load_trials

    with pytest.raises(UserError):
        read_dispatch(source)
    assert recorded_dispatch(source) == {}
    trials = [t for t in load_trials("relu_squared", ROOT / "notebooks" / "nvidia-h200") if t.trial_id < 2]
    corrupt = trials[-1].model_copy(update={"trial_id": 2, "variant": trials[-1].variant.model_copy(
        update={"source": source, "knobs": {"BLOCK_SIZE": 1}})})
    context = Context(get_spec("relu_squared"), "forward", [*trials, corrupt], trials[0],
                      baseline_path("relu_squared").read_text())
    assert isinstance(RulesProposer().propose(context), Proposal)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -5.0])
def test_a_corrupt_notebook_s_seconds_never_set_the_loop_s_pace(seconds):
    """JSON's reader takes NaN and 1e999 from a corrupt notebook: one such trial of two made ``trial_pace`` NaN,
    and ``trials_within`` raised "cannot convert float NaN to integer" out of a loop with a deadline."""
    from liger_perf.loop import trials_within
    from liger_perf.record.history import screening_pace, trial_pace
    from liger_perf.record.schema import TrialResult

    def trial(elapsed, kind="experiment", time=None):
        extra = {"step_seconds": {"time": time}, "screening": {"target": "full", "timing": [
            {"pass": "forward", "shape": "4096x4096", "dtype": "bfloat16", "contender": "candidate"}]}} \
            if time is not None else {}
        return TrialResult.model_validate({"kernel": "relu_squared", "status": "complete", "variant": {},
                                           "kind": kind, "elapsed_s": elapsed, **extra})

    trials = [trial(100.0), trial(seconds)]
    assert trial_pace(trials) == 100.0
    assert trials_within(600.0, trial_pace(trials), 1, 3) == 3
    screenings = [trial(100.0, "screening", 50.0), trial(100.0, "screening", seconds)]
    assert screening_pace(screenings, cases=1) == 100.0
