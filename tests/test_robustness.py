"""No bad input crashes a reader: arbitrary bytes, arbitrary JSON and malformed trial results in notebook files
are skipped with a warning, and every read-only command over them exits cleanly."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from liger_perf.record import notebook as record
from liger_perf.record.history import history_frame, load_trials
from liger_perf.report import variant_diff, write_report

from broken_variants import ROOT

KERNEL = "relu_squared"
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
# A notebook whose result (and verdict) outputs hold anything: near misses of a real trial first.
RESULT_KEYS = st.fixed_dictionaries({"format": st.just(record.FORMAT), "kernel": st.just(KERNEL)},
                                    optional={"status": JSON | st.sampled_from(["complete", "crashed"]),
                                              "variant": JSON, "timing": JSON | st.just({"rows": [{}]}),
                                              "memory": JSON, "ncu": JSON, "fingerprint": JSON,
                                              "against": JSON, "trial_id": JSON})


def _notebook(result, verdict) -> str:
    def cell(tag, mime, payload):
        return {"cell_type": "code", "metadata": {"tags": [tag]}, "source": "", "execution_count": 1,
                "outputs": [{"output_type": "display_data", "metadata": {}, "data": {mime: payload}}]}

    return json.dumps({"cells": [cell("result", record.RESULT_MIME, result),
                                 cell("verdict", record.VERDICT_MIME, verdict)],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


CONTENTS = (st.binary(max_size=200)
            | JSON.map(lambda v: json.dumps(v).encode())
            | st.tuples(RESULT_KEYS | JSON, JSON).map(lambda rv: _notebook(*rv).encode()))


def _read_everything(root: Path) -> list:
    trials = load_trials(KERNEL, root)
    history_frame(KERNEL, root, trials)
    from liger_perf.cli import history_table

    history_table(KERNEL, "interpret", trials)  # the history command's table
    with tempfile.TemporaryDirectory() as out:
        write_report(KERNEL, trials, Path(out))
    variant_diff(KERNEL, None)
    return trials


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@pytest.mark.slow
@given(content=CONTENTS)
def test_any_file_content_is_read_or_skipped_with_a_warning_never_a_crash(content, capsys):
    capsys.readouterr()  # the fixture is shared by the examples: start from an empty capture
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / KERNEL
        folder.mkdir()
        (folder / "0001-anything.ipynb").write_bytes(content)
        trials = _read_everything(Path(root))
        warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("liger-perf: warning")]
        assert len(trials) == 1 or len(warnings) == 1  # read, or skipped with one line saying why
        assert len(warnings) <= 1


def test_the_commands_skip_a_folder_of_hostile_notebooks_and_exit_cleanly(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "nb" / "interpret" / KERNEL  # the interpreter's history: no GPU here, none recorded
    folder.mkdir(parents=True)
    hostile = [b"[]", b"\xff\xfe\x00", b'{"cells": [1, "x", null], "nbformat": 4}', b"{" * 10,
               ("[" * 100000 + "]" * 100000).encode(), _notebook([1, 2], None).encode(),
               _notebook({"format": record.FORMAT, "kernel": KERNEL, "status": "complete", "variant": {}},
                         [1]).encode(),
               _notebook({"format": record.FORMAT, "kernel": "fused_add_rms_norm", "status": "complete",
                          "variant": {}}, None).encode()]
    for i, content in enumerate(hostile):
        (folder / f"{i:04d}-hostile.ipynb").write_bytes(content)
    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path / "nb"))
    monkeypatch.setenv("LIGER_PERF_REPORTS", str(tmp_path / "reports"))
    for command in (["history", KERNEL], ["history", KERNEL, "--format", "json"], ["report", KERNEL],
                    ["diff", KERNEL]):
        code, out, err = _liger_perf(command, monkeypatch, capsys)
        assert code == 0, (command, err[-2000:])
        assert "Error:" not in out
        warnings = [line for line in err.splitlines() if line.startswith("liger-perf: warning")]
        assert len(warnings) == len(hostile), (command, err)  # one line each (the verdict list: unjudged)


def _liger_perf(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """``liger-perf ARGS`` run in this process through the command's own entry point: (exit code, stdout,
    stderr). An exception that escapes it (a traceback for the user) fails the test here."""
    from liger_perf import cli

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["liger-perf", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


LOCKER = """
import sys, time
from pathlib import Path
from liger_perf.core.errors import UserError
from liger_perf.record.store import Lock
start = float(sys.argv[2])
while time.time() < start:
    pass
try:
    with Lock(Path(sys.argv[1]), "optimize"):
        print("ran", flush=True)
        time.sleep(3)
except UserError as e:
    print("refused", e, flush=True)
"""


@pytest.mark.slow
def test_of_many_runs_started_at_once_exactly_one_takes_the_lock(tmp_path):
    import time

    start = time.time() + 4  # every process is up and spinning by then
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [subprocess.Popen([sys.executable, "-c", LOCKER, str(tmp_path), str(start)], env=env,
                             stdout=subprocess.PIPE, text=True) for _ in range(12)]
    outputs = [run.communicate(timeout=60)[0] for run in runs]
    assert sum(out.startswith("ran") for out in outputs) == 1, outputs
    assert sum("another optimize run (pid" in out for out in outputs) == 11, outputs
    assert not (tmp_path / ".optimize.lock").exists()  # the one that ran leaves nothing behind


def _bad_inputs(tmp: Path) -> list[tuple[list[str], dict, str]]:
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00binary")
    (tmp / "int-keys.yaml").write_text("1: 2\n3: [4]\n")
    (tmp / "truth-for-a-number.yaml").write_text("timeout_s: yes\n")  # one second, read as a number
    (tmp / "not-utf8.py").write_bytes(b"\xff\xfe" + b"x = 1\n")
    (tmp / "a-file").write_text("")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    return [
        (["optimize", KERNEL, "--guardrails", str(tmp / "binary.yaml")], {}, "is not UTF-8 text"),
        (["optimize", KERNEL, "--guardrails", str(tmp / "int-keys.yaml")], {}, "key 1 is not a name"),
        (["nightly", "--config", str(tmp / "binary.yaml")], {}, "is not UTF-8 text"),
        (["nightly", "--config", str(tmp / "int-keys.yaml")], {}, "key 1 is not a name"),
        (["optimize", KERNEL, "--proposer", "llm", "--llm-config", str(tmp / "int-keys.yaml")], {},
         "key 1 is not a name"),
        (["optimize", KERNEL, "--proposer", "llm", "--llm-config", str(tmp / "truth-for-a-number.yaml")], {},
         "timeout_s: give a number, not true or false"),
        (["check", KERNEL, "--variant", str(tmp / "not-utf8.py")], {}, "is not UTF-8 text"),
        (["history", KERNEL], {"LIGER_PERF_NOTEBOOKS": str(tmp / "a-file")}, "is a file, not a folder"),
        (["trial", KERNEL], {"LIGER_PERF_NOTEBOOKS": str(tmp / "dangling")}, "is a link to nothing"),
    ]


def test_bad_files_and_paths_are_one_line_errors_never_tracebacks(tmp_path, monkeypatch, capsys):
    for args, env_extra, expected in _bad_inputs(tmp_path):
        with monkeypatch.context() as scope:
            scope.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path / "nb"))
            scope.setenv("LIGER_PERF_REPORTS", str(tmp_path / "reports"))
            for name, value in env_extra.items():
                scope.setenv(name, value)
            code, out, err = _liger_perf(args, scope, capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and expected in lines[0], (args, out, err)
        assert lines[0].startswith("liger-perf: error:")


def test_a_link_or_a_huge_file_in_the_history_is_one_warning_never_read(tmp_path, monkeypatch, capsys):
    """A link in the notebooks folder is never followed (a warning once showed part of /etc/passwd through
    one); a 50 MB file is not read as a trial; each warning is said once per command, however often the
    command reads the history."""
    from liger_perf.record.history import NOTEBOOK_LIMIT, load_trials

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:the secret line\n")
    folder = tmp_path / "nb" / "interpret" / KERNEL
    folder.mkdir(parents=True)
    (folder / "0000-link.ipynb").symlink_to(secret)
    with open(folder / "0001-huge.ipynb", "wb") as f:
        f.truncate(NOTEBOOK_LIMIT + 1)
    capsys.readouterr()
    for _ in range(3):
        assert load_trials(KERNEL, tmp_path / "nb" / "interpret") == []
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("liger-perf: warning")]
    assert len(lines) == 2 and "the secret line" not in err
    assert "symbolic link" in lines[0] and "larger than any trial notebook" in lines[1]


def test_two_notebooks_with_one_number_are_both_read_and_named_in_one_warning(tmp_path, capsys):
    """Histories merged from two runs that never saw each other (a GPU call begun before the last one's results
    were unpacked: 0056 twice on the H200) leave two trials with one number, which the loop cannot order."""
    folder = tmp_path / "nb" / "interpret" / KERNEL
    folder.mkdir(parents=True)
    result = {"format": record.FORMAT, "kernel": KERNEL, "status": "complete", "variant": {"sha256": "a"}}
    for name in ("0003-first.ipynb", "0004-a-trial.ipynb", "0004-a-screening.ipynb", "0005-last.ipynb"):
        (folder / name).write_text(_notebook(result, None))
    capsys.readouterr()
    for _ in range(2):  # once per command, however often it reads the history
        trials = load_trials(KERNEL, tmp_path / "nb" / "interpret")
    assert [t.trial_id for t in trials] == [3, 4, 4, 5]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("liger-perf: warning")]
    assert len(lines) == 1 and "number 0004" in lines[0]
    assert "0004-a-trial.ipynb" in lines[0] and "0004-a-screening.ipynb" in lines[0] and "next free number" in lines[0]
    (folder / "0004-a-screening.ipynb").rename(folder / "0006-a-screening.ipynb")
    load_trials(KERNEL, tmp_path / "nb" / "interpret")
    assert "liger-perf: warning" not in capsys.readouterr().err
