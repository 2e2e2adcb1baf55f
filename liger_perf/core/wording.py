"""How a comparison and a count read wherever a person reads them (the loop's lines, the judge's reasons, the
history table, the reports). No imports of the package: every module may use it.

The notebooks keep **time ratios** (a candidate's time over the current best's, below 1 is faster), as measured.
A person reads a **speedup**: the other's time over this one's, the inverse of the ratio, its interval inverted
too, worded ``1.57x (faster) [1.51x, 1.63x]``, ``0.35x (slower) [0.32x, 0.52x]`` or ``1.00x (no change)``.
"""

from __future__ import annotations

import math


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def speedup(ratio: float | None, low: float | None = None, high: float | None = None, *,
            no_interval: str = "") -> str:
    """The speedup that a time ratio (``ratio``, candidate / other, with its interval ``[low, high]``) stands
    for: ``1.57x (faster) [1.51x, 1.63x]``. Without an interval, only the point (and ``no_interval``, when given,
    after a comma: why there is none); ``-`` for no ratio at all."""
    if not _positive(ratio):
        return "-"
    point = f"{1 / ratio:.2f}x"
    word = "no change" if point == "1.00x" else "faster" if ratio < 1 else "slower"
    text = f"{point} ({word})"
    if _positive(low) and _positive(high):
        return f"{text} [{1 / high:.2f}x, {1 / low:.2f}x]"
    return f"{text}, {no_interval}" if no_interval else text


def speedup_limit(max_slowdown: float) -> str:
    """A guardrail's limit on time (``max_regression`` 0.05: at most 5 % more time) as the speedup it allows
    down to: ``0.952x``."""
    return f"{1 / (1 + max_slowdown):.3f}x"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 trial``, ``3 trials``, ``0 trials``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
