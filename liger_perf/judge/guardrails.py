"""``guardrails.yaml``: when the loop may accept a variant, validated on load.

A broken file is a one-line error naming the file, the line and the key, and what to write instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from liger_perf.core.config import YamlModel, load_yaml_model

TARGETS = ("forward", "backward", "full", "memory")


class Guardrails(YamlModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: What must improve: a pass's time, or peak memory (forward plus backward).
    target: Literal["forward", "backward", "full", "memory"] = "backward"
    #: How per-shape ratios (candidate / current best) combine into the suite-level number.
    aggregate: Literal["geomean"] = "geomean"
    #: No other metric (each pass's time, peak memory; every shape and dtype) may be this much worse than the
    #: current best, measured side by side in the same trial (a time decided on its interval: wholly above the
    #: limit rejects, containing it re-measures)...
    max_regression: float = Field(0.05, gt=0, lt=1)
    #: ...nor this much worse than the baseline, through the chain of accepted variants.
    max_cumulative_regression: float = Field(0.05, gt=0, lt=1)
    #: No output or gradient (per dtype and options) may lie this much farther from the float64 reference than
    #: the current best's, on the same inputs (``liger_perf.measure.accuracy``).
    max_accuracy_regression: float = Field(0.05, gt=0, lt=10)
    #: The target's suite-level interval (built from the trial's simultaneous per-shape intervals) must lie
    #: wholly on the better side at this confidence; otherwise the trial is inconclusive.
    confidence: float = Field(0.95, ge=0.5, lt=1)
    #: The correctness gate cannot be switched off; the key exists so that nobody wonders.
    correctness: Literal["hard"] = "hard"
    #: The loop stops after two judged rounds in a row whose best target gain is smaller than this.
    min_gain: float = Field(0.01, ge=0, lt=1)
    #: The loop stops when the best variant's target pass runs at this fraction of the bandwidth floor at
    #: every shape (nothing left to win).
    floor_fraction_stop: float = Field(0.97, gt=0, le=1.5)
    #: Seconds each step of a trial (a cell of its notebook: the gate, the timing, NCU) may run before the trial
    #: is recorded as crashed.
    trial_timeout_s: float = Field(3600, gt=0, allow_inf_nan=False)
    #: A move confined to dispatch buckets (its source the best's with only their ``DISPATCH`` entries changed)
    #: is timed on their shapes alone: elsewhere both contenders launch the same kernels with the same settings,
    #: and the judge counts the ratio there as 1. True: time every shape of the suite all the same.
    time_outside_buckets: bool = False

    @model_validator(mode="after")
    def _cumulative_at_least_per_step(self):
        if self.max_cumulative_regression < self.max_regression:
            raise ValueError("max_cumulative_regression must be at least max_regression")
        return self


def load_guardrails(path: str | Path | None, **overrides) -> Guardrails:
    """Read and validate ``path`` (None: the defaults above, for a workspace without a ``guardrails.yaml``);
    ``overrides`` (such as the command line's ``--target``) win over the file."""
    if path is None:
        return Guardrails(**{k: v for k, v in overrides.items() if v is not None})
    return load_yaml_model(path, Guardrails, **overrides)
