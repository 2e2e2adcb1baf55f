"""A running trial's progress, as the loop's terminal shows it: which step, how far, how long it has taken.

The trial's notebook kernel appends one JSON line per step taken to ``progress.jsonl`` in the trial's artifacts
folder (``{"t": time, "step": "gate", "done": 3, "total": 40, "detail": "..."}``); whoever watches the trial reads
the last line. A file, not a socket: it works from any process the trial runs in (the notebook's kernel, a Dask
worker's on this host), and a reader that finds no file or a torn line just shows less.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path

FILE_NAME = "progress.jsonl"


class ProgressLog:
    """The writer, in the trial's process."""

    def __init__(self, folder: str | Path | None):
        self.path = Path(folder) / FILE_NAME if folder else None
        self.started = time.time()

    def report(self, step: str, done: int = 0, total: int = 0, detail: str = "") -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"t": time.time(), "started": self.started, "step": step, "done": done,
                                    "total": total, "detail": detail.strip()[:80], "host": socket.gethostname(),
                                    "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "")}) + "\n")
        except OSError:  # progress is a courtesy: a trial never fails for it
            pass


def latest(folder: str | Path | None) -> dict | None:
    """The last step a trial reported (None before its first, or when unreadable)."""
    reported = steps(folder)
    return reported[-1] if reported else None


def steps(folder: str | Path | None) -> list[dict]:
    """Every step a trial reported that is still in the last 64 KB of its file, in order: what a plain log of the
    trial prints, one line per change of step. The trial's process writes the file, the code under trial with it:
    a torn line, or one whose fields are not of the types ``ProgressLog`` writes, is skipped."""
    if not folder:
        return []
    from liger_perf.isolation.contained import read_untrusted

    found = []
    for line in (read_untrusted(Path(folder) / FILE_NAME, limit=64 * 1024) or "").splitlines():
        try:
            state = json.loads(line)
        except ValueError:
            continue
        if isinstance(state, dict) and all(isinstance(state.get(key, default), kind) for key, kind, default in (
                ("t", (int, float), None), ("step", str, None), ("done", int, 0), ("total", int, 0),
                ("detail", str, ""), ("gpu", str, ""))):
            found.append(state)
    return found


def describe(name: str, state: dict | None, started: float, expected_s: float | None,
             now: float | None = None) -> str:
    """One status line: ``0012 name: gate 12/40 (case) · 45 s · about 60 s left`` (``now``: the time it
    describes, default the present)."""
    elapsed = (time.time() if now is None else now) - started
    where = "starting"
    if state:
        where = (f"[GPU {state['gpu']}] " if state.get("gpu") else "") + state["step"] + (f" {state['done']}/{state['total']}" if state.get("total") else "") + \
            (f" ({state['detail']})" if state.get("detail") else "")
    left = ""
    if expected_s and math.isfinite(expected_s):
        left = f" · about {max(0.0, expected_s - elapsed):.0f} s left" if elapsed < expected_s else " · overdue"
    # The step and its detail come from the trial's process: no control characters reach a terminal or a log.
    return "".join(c if c.isprintable() else "?" for c in f"{name}: {where} · {elapsed:.0f} s{left}")


def pace_kind(request) -> str:
    """The kind of step whose recent pace estimates ``request``'s time (``history.trial_pace``): a screening, a
    baseline trial (run against nothing: the peers, the full gate, NCU), or a candidate's trial."""
    return "screening" if request.kind == "screening" else "experiment" if request.against else "baseline"


class PlainLog:
    """The running trials' progress for output that is not a terminal (a log file, a pipe, CI), where a live
    status line shows nothing: one plain line whenever a trial's step changes, and one at least every
    ``every_s`` while a step runs. ``running()``: trial number -> (label, artifacts folder, start time, expected
    seconds or None) of the trials under way; ``echo``: prints one line. ``poll`` runs every ``poll_s`` in a
    thread of its own while the ``with`` block runs; ``flush(trial)`` says the steps a trial reported since (call
    it before its end line)."""

    def __init__(self, running, echo, every_s: float = 30.0, poll_s: float = 1.0):
        import threading

        self.running, self.echo = running, echo
        self.every_s, self.poll_s = every_s, poll_s
        self.seen: dict[int, tuple[float, str, float]] = {}  # trial -> (last step's time, its step, last line at)
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "PlainLog":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def _watch(self) -> None:
        while not self.stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        for trial in list(self.running()):
            self.flush(trial, heartbeat=True)

    def flush(self, trial: int, heartbeat: bool = False) -> None:
        with self.lock:
            where = self.running().get(trial)
            if where is None:
                return
            label, folder, started, expected_s = where
            last_t, last_step, last_line = self.seen.get(trial, (0.0, "", started))
            reported = steps(folder)
            for state in (state for state in reported if state["t"] > last_t):
                last_t = state["t"]
                if state["step"] != last_step:
                    last_step, last_line = state["step"], time.time()
                    self._say(describe(label, state, started, expected_s, now=state["t"]))
            if heartbeat and time.time() - last_line >= self.every_s:
                last_line = time.time()
                self._say(describe(label, reported[-1] if reported else None, started, expected_s))
            self.seen[trial] = (last_t, last_step, last_line)

    def _say(self, line: str) -> None:
        self.echo("  " + line)
