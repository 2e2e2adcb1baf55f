"""Proposers (strategies): what to try next, from the whole history of a kernel.

A proposer sees a ``Context`` (the spec, every trial so far, the current best and its source, the target) and
returns a ``Proposal`` (a complete variant module with its hypothesis and predicted effect) or ``Stop`` (with
the reason nothing is left to try). The loop does not care how a proposal was made: the offline rules proposer
turns knobs that NCU diagnoses point to; a code-writing LLM proposer can sit beside it behind the same interface.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from liger_perf.core.errors import UserError
from liger_perf.record.schema import HARNESS_ERROR, TrialResult
from liger_perf.kernel.spec import KernelSpec


@dataclass
class Context:
    spec: KernelSpec
    target: str
    trials: list[TrialResult]  # every readable trial of this kernel on this device mode, in order
    best: TrialResult  # the current best's trial
    best_source: str
    #: sha256 of the candidates already chosen for the round being filled: propose something else
    pending: list[str] = field(default_factory=list)
    #: Those candidates' names and hypotheses (a batch's earlier proposals), for a proposer that writes code
    pending_notes: list[str] = field(default_factory=list)
    #: Those candidates' sources: a proposal that runs what one of them runs at every timed shape would only
    #: measure it twice (screening 0060 on the H200: bwd_fused_dw_max_cols@1024x2 = 8192, 4096 and 2048, all
    #: "fused" at 896 columns, three slots of four)
    pending_sources: list[str] = field(default_factory=list)
    #: Today's baseline source: its knob values are what an older variant, written before a knob existed, ran
    #: at ("" where unknown: the latest baseline trial's knobs stand in)
    baseline_source: str = ""
    #: What the trials time: "" the device's suite, or "models-tune" (the tuning split of real models' shapes)
    suite: str = ""
    #: The dispatch buckets to tune (``optimize --buckets``): a proposal changes only their entries; empty: any
    buckets: tuple[str, ...] = ()


@dataclass
class Proposal:
    name: str
    source: str
    hypothesis: str
    prediction: str
    changes: dict[str, Any] = field(default_factory=dict)
    diagnosis: str = ""
    #: What the proposer asked and was answered (model, endpoint host, prompt, replies, tokens, validation,
    #: fallback), recorded in the trial notebook for audit; None for the rules proposer.
    audit: dict[str, Any] | None = None


@dataclass
class Stop:
    reason: str


def tried_sources(context: Context) -> set[str]:
    """The sha256 of every variant the history has run or screened out, and of the round's candidates chosen so
    far: a proposer never proposes one again. A trial the harness failed before it reached its variant does not count: that
    variant was never tried."""
    # A candidate a screening dropped was tried; one it kept is tried by its full trial (if the budget or a
    # killed loop cut that short, it may be proposed again).
    screened = {row.sha256 for t in context.trials if t.screening is not None for row in t.screening.rows
                if not row.kept}
    return {t.variant_sha for t in context.trials if t.status != HARNESS_ERROR} | screened | set(context.pending)


class Proposer(Protocol):
    name: str

    def propose(self, context: Context) -> Proposal | Stop: ...


def get_proposer(name: str, model: str | None = None, llm_config: str | None = None) -> Proposer:
    """``rules`` (offline), ``llm`` (an OpenAI-compatible endpoint) or ``auto`` (rules, then the LLM)."""
    if name == "rules":
        from liger_perf.propose.rules import RulesProposer

        return RulesProposer()
    if name in ("llm", "auto"):
        from liger_perf.propose.llm import AutoProposer, LlmProposer, load_settings

        settings = load_settings(model, llm_config)
        return LlmProposer(settings) if name == "llm" else AutoProposer(settings)
    raise UserError(f"unknown proposer {name!r}: use rules, llm or auto")
