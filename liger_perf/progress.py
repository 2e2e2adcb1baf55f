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
    if not folder:
        return None
    from liger_perf.contained import read_untrusted

    text = read_untrusted(Path(folder) / FILE_NAME, limit=64 * 1024)  # the trial's process writes it
    try:
        lines = (text or "").splitlines()
        return json.loads(lines[-1]) if lines else None
    except (ValueError, IndexError):
        return None


def describe(name: str, state: dict | None, started: float, expected_s: float | None) -> str:
    """One status line: ``0012 name: gate 12/40 (case) · 45 s · about 60 s left``."""
    elapsed = time.time() - started
    where = "starting"
    if state:
        where = (f"[GPU {state['gpu']}] " if state.get("gpu") else "") + state["step"] + (f" {state['done']}/{state['total']}" if state.get("total") else "") + \
            (f" ({state['detail']})" if state.get("detail") else "")
    left = ""
    if expected_s and math.isfinite(expected_s):
        left = f" · about {max(0.0, expected_s - elapsed):.0f} s left" if elapsed < expected_s else " · overdue"
    return f"{name}: {where} · {elapsed:.0f} s{left}"
