"""``guardrails.yaml``: when the loop may accept a variant, validated on load.

A broken file is a one-line error naming the file, the line and the key, and what to write instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from liger_perf.errors import UserError

TARGETS = ("forward", "backward", "full", "memory")


class Guardrails(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: What must improve: a pass's time, or peak memory (forward plus backward).
    target: Literal["forward", "backward", "full", "memory"] = "backward"
    #: How per-shape ratios (candidate / current best) combine into the suite-level number.
    aggregate: Literal["geomean"] = "geomean"
    #: No other metric (each pass's time, peak memory; every shape and dtype) may be this much worse than the
    #: current best, measured side by side in the same trial...
    max_regression: float = Field(0.05, gt=0, lt=1)
    #: ...nor this much worse than the baseline, through the chain of accepted variants.
    max_cumulative_regression: float = Field(0.05, gt=0, lt=1)
    #: The target's suite-level interval (built from the trial's simultaneous per-shape intervals) must lie
    #: wholly on the better side at this confidence; otherwise the trial is inconclusive.
    confidence: float = Field(0.95, ge=0.5, lt=1)
    #: The correctness gate cannot be switched off; the key exists so that nobody wonders.
    correctness: Literal["hard"] = "hard"
    #: The loop stops after two judged trials in a row whose target gain is smaller than this.
    min_gain: float = Field(0.01, ge=0, lt=1)
    #: The loop stops when the best variant's target pass runs at this fraction of the bandwidth floor at
    #: every shape (nothing left to win).
    floor_fraction_stop: float = Field(0.97, gt=0, le=1.5)
    #: Seconds a trial may run before it is recorded as crashed.
    trial_timeout_s: float = Field(3600, gt=0)

    @model_validator(mode="after")
    def _cumulative_at_least_per_step(self):
        if self.max_cumulative_regression < self.max_regression:
            raise ValueError("max_cumulative_regression must be at least max_regression")
        return self


def _key_lines(text: str) -> dict[str, int]:
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def load_guardrails(path: str | Path, **overrides) -> Guardrails:
    """Read and validate ``path``; ``overrides`` (such as the command line's ``--target``) win over the file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist: copy guardrails.yaml from the project root, or pass --guardrails")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{where}: not valid YAML ({getattr(e, 'problem', e)}): fix the syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys to values (target: backward, ...), "
                        f"found a {type(data).__name__}")
    lines = _key_lines(text)
    try:
        return Guardrails(**{**data, **{k: v for k, v in overrides.items() if v is not None}})
    except ValidationError as e:
        error = e.errors()[0]
        key = str(error["loc"][0]) if error["loc"] else ""
        line = f":{lines[key]}" if key in lines else ""
        if error["type"] == "extra_forbidden":
            allowed = ", ".join(Guardrails.model_fields)
            raise UserError(f"{path}{line}: unknown key {key!r}: the keys are {allowed}") from None
        message = error["msg"].removeprefix("Value error, ")
        value = f" (got {error['input']!r})" if key and not isinstance(error.get("input"), dict) else ""
        raise UserError(f"{path}{line}: {key or 'guardrails'}: {message}{value}") from None
