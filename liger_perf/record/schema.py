"""The types of a trial: what it is asked to do (``TrialRequest``) and what it found (``TrialResult``).

Defined once, here, and used by every writer and reader: the trial notebook validates its result into a
``TrialResult`` before it emits it, and the history reads every notebook back into one (a result that does not
fit is skipped with a warning, never half-read). The notebooks committed before these types existed fit them
as they are: every key they hold has a field, and nothing was renamed, so no migration is needed.

Rows keep their JSON keys; ``pass`` is a Python keyword, so it is the field ``pass_name`` (alias ``pass``).
Unknown keys are kept (``extra="allow"``): a result written by a newer liger-perf stays readable here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from liger_perf.measure.metrics import NCU_DURATION, STALL_PREFIX, STALL_SUFFIX  # noqa: F401  (read from here too)

FORMAT = "liger-perf-trial/1"
Key = tuple[str, str, str]  # (pass or "memory", shape, dtype)

#: A trial's status. ``harness-error``: the trial never reached its variant (the notebook kernel or a dependency
#: failed first); it says nothing about the variant, which may be tried again.
Status = Literal["running", "complete", "invalid-variant", "failed-correctness", "crashed", "harness-error"]
STATUSES: tuple[str, ...] = Status.__args__
HARNESS_ERROR = "harness-error"
#: provisional: it would be accepted, but its gate ran under the Triton interpreter only, which sees no race
#: and no GPU bfloat16 rounding; never accepted, and never the current best (a GPU trial decides).
VerdictName = Literal["accepted", "rejected", "inconclusive", "provisional"]
VERDICTS: tuple[str, ...] = VerdictName.__args__
#: revalidation: a nightly check of the best, never judged; screening: a batch of candidates timed briefly
#: against the best to choose which get a full trial (never judged, never accepted: see ``Screening``).
Kind = Literal["experiment", "revalidation", "screening"]
#: staged: the quick gate before any timing, the full gate (and convergence, and the full NCU profile) only when
#: the trial's own measurements would be accepted under ``TrialRequest.guardrails``; full: the full gate first;
#: quick: the quick gate only and a light NCU profile, never the full gate: a trial that checks the machine
#: (``selfcheck``, whose own step gates the variant in full), never one that can be accepted.
GateMode = Literal["full", "staged", "quick"]
#: What a trial times: "" the device's own suite ("gpu" or "interpret"), or "models-tune", the tuning split of the
#: suite drawn from real models (``liger_perf.kernel.model_shapes``). The held-out split cannot be asked for: the
#: loop and the judge never read it.
BenchSuite = Literal["", "models-tune"]
#: The suites a trial may time besides the device's own ("", the default).
TUNING_SUITES: tuple[str, ...] = ("models-tune",)


def measures_suite(recorded: str, asked: str) -> bool:
    """Whether a trial that recorded ``recorded`` as its suite timed what a request for ``asked`` times: the same
    named suite, or for "" (the device's) any device suite ("gpu", "interpret"; "" in a bare record)."""
    return recorded == asked if asked else recorded not in TUNING_SUITES


class ScreenEntry(BaseModel):
    """One candidate of a screening batch: its module and why it was proposed."""

    model_config = ConfigDict(extra="forbid")

    name: str
    variant: str  # an absolute path
    hypothesis: str = ""
    prediction: str = ""
    changes: dict[str, Any] | None = None
    proposer_audit: dict[str, Any] | None = None  # a model's prompt and replies, as a trial records them


class TrialRequest(BaseModel):
    """Everything one trial needs: what to run, against what, how to measure it, and why it is tried."""

    model_config = ConfigDict(extra="forbid")

    kernel: str
    variant: str  # the module under trial (an absolute path)
    against: str = ""  # the current best's module, timed side by side; empty for a kernel's first trial
    trial_id: int = Field(0, ge=0)
    name: str = ""
    passes: list[str] = ["forward", "backward", "full"]
    device: Literal["auto", "cuda", "interpret"] = "auto"
    repetitions: int = Field(0, ge=0)  # 0: the device's default (100 on a GPU, 5 interpreted)
    confidence: float = Field(0.95, gt=0, lt=1)
    ncu: bool = True
    peers: bool = False  # also time eager, torch.compile and liger-kernel (a kernel's first trial)
    convergence: bool = True
    timeout_s: float = Field(3600, gt=0)  # each cell of the notebook; past it the trial is recorded as crashed
    artifacts: str = ""  # folder for large outputs (the .ncu-rep)
    hypothesis: str = ""
    prediction: str = ""
    changes: dict[str, Any] | None = None  # the knob changes from the variant this one was derived from
    proposer_audit: dict[str, Any] | None = None  # an LLM proposer's model, prompt, replies and checks
    kind: Kind = "experiment"
    suite: BenchSuite = ""
    gate: GateMode = "full"
    #: The guardrails a staged trial decides with whether its timing would be accepted (``Guardrails`` as a dict).
    guardrails: dict[str, Any] | None = None
    #: A screening request's candidates (``variant`` is then the current best, as ``against``).
    screen: list[ScreenEntry] = []
    #: Time (and measure peak memory at) only these dispatch buckets' shapes of the suite: the loop asks for it
    #: when the candidate is the best's source with only these buckets' ``DISPATCH`` entries changed, so that
    #: everywhere else both would launch the same kernels with the same settings (``judge.confined_buckets``,
    #: which the judge asks again). Empty: every shape.
    buckets: list[str] = []


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _Case(_Record):
    """A measurement's case: pass (or "memory"), shape and dtype."""

    pass_name: str = Field(alias="pass")
    shape: str
    dtype: str

    @property
    def key(self) -> Key:
        return (self.pass_name, self.shape, self.dtype)


class TimingRow(_Case):
    """One contender at one case: its median time, and its ratio to ``relative_to`` with the interval."""

    contender: str  # candidate | against | eager | torch.compile | liger-kernel ...
    relative_to: str = ""  # the contender the ratio is taken to ("against" in a judged trial)
    median_ms: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    bandwidth_fraction: float | None = None  # of the copy bandwidth measured in the same run
    min_bytes: int | None = None
    reps: int | None = None


class SpotCheck(_Case):
    """One timed call's outputs, on inputs drawn afresh for it, compared with the float64 reference."""

    contender: str
    passed: bool
    reason: str = ""


class _Shape(_Record):
    """A suite case without its pass: shape and dtype."""

    shape: str
    dtype: str


class Timing(_Record):
    repetitions: int = 0
    warmup: int = 0
    confidence: float = 0.95
    intervals: str = ""
    #: Each ratio's interval is widened by this over the reference's median (the timer's resolution).
    resolution_ms: float = 0.0
    copy_bandwidth_bytes_per_s: float | None = None
    reference_contender: str = ""
    contenders: list[str] = []
    rows: list[TimingRow] = []
    spot_checks: list[SpotCheck] = []
    #: The dispatch buckets the timing was confined to (``TrialRequest.buckets``); empty: the whole suite.
    buckets: list[str] = []
    #: The suite's cases left untimed by that confinement (each a shape and dtype, every pass and peak memory):
    #: there the candidate runs the current best's code, and the judge counts its ratio as 1.
    left_out: list[_Shape] = []


class MemoryRow(_Record):
    shape: str
    dtype: str
    contender: str
    peak_bytes: float | None = None  # forward + backward, above the inputs; None under the interpreter


class AccuracyRow(_Record):
    """One contender's error against the float64 reference, for one output or gradient at one case."""

    shape: str
    dtype: str
    config: str = ""
    output: str
    contender: str
    error: float | None = None  # ‖got − ref64‖ / ‖ref64‖; None where it is not a number (see below)
    nonfinite: bool = False  # the result was not finite where the reference is
    reduction: bool = False  # a sum over rows (``KernelSpec.row_reductions``): its order moves the error
    raised: str = ""  # the contender raised on this case (the current best or a peer; never the candidate)


class Accuracy(_Record):
    seed: int = 0
    rows: list[AccuracyRow] = []


class Memory(_Record):
    rows: list[MemoryRow] = []
    note: str = ""


class NcuLaunch(_Case):
    """One profiled kernel launch: its contender, case, kernel name and ``{metric: value}``."""

    kernel: str
    contender: str = "candidate"  # "against": the current best's durations, profiled to cross-check its timing
    launch: int = 0
    metrics: dict[str, float | None] = {}

    def metric(self, name: str, default: float = 0.0) -> float:
        value = self.metrics.get(name)
        return default if value is None else value

    def stalls(self) -> dict[str, float]:
        """Warp-stall reason -> stalls per issued instruction."""
        return {k[len(STALL_PREFIX):-len(STALL_SUFFIX)]: v for k, v in self.metrics.items()
                if k.startswith(STALL_PREFIX) and k.endswith(STALL_SUFFIX) and v is not None}


class NcuAdvice(_Case):
    kernel: str = ""
    rule: str = ""
    section: str = ""
    title: str = ""
    type: str = ""
    message: str = ""
    estimated_speedup_pct: float | None = None


class Ncu(_Record):
    status: str  # ok | unavailable
    #: full: every shape with NCU's sections and the best's durations; light: the kept metrics at the widest
    #: shape only (a staged trial whose timing would not be accepted)
    scope: Literal["full", "light"] = "full"
    reason: str = ""
    report: str | None = None
    passes: list[str] = []
    units: dict[str, str] = {}
    launches: list[NcuLaunch] = []
    advice: list[NcuAdvice] = []
    #: The current best's durations-only profile: "ok", or why it failed (a trial that has nothing to hold the
    #: best's times to is not trusted); None in trials recorded before it was taken.
    against_durations: str | None = None


class Correctness(_Record):
    passed: bool
    comparisons: int = 0
    cases: int = 0
    failures: list[dict[str, Any]] = []
    convergence: str = ""
    interpreted: bool = False  # the gate ran under the Triton interpreter (never enough to accept)
    draws: int = 0  # distinct seeds drawn over the cases
    worst_tolerance_used: float | None = None  # the closest a passing comparison came to its tolerance (1 = at it)
    #: "full": the whole gate ran (old notebooks: always); "quick": only the quick gate, and ``full_gate`` says
    #: why the full one did not run. Nothing is ever accepted on the quick gate alone.
    stage: Literal["quick", "full"] = "full"
    full_gate: str = ""
    quick_seconds: float | None = None


class ScreeningRow(_Record):
    """One screened candidate: its quick gate, its brief side-by-side ratios, and whether it gets a full trial."""

    name: str
    sha256: str
    source: str = ""
    changes: dict[str, Any] | None = None
    hypothesis: str = ""
    proposer_audit: dict[str, Any] | None = None
    quick_gate: str = ""  # "pass", or why it failed
    ratio: float | None = None  # geomean over the target's shapes, candidate / current best (< 1 is better)
    ci_low: float | None = None
    ci_high: float | None = None
    kept: bool = False  # gets a full trial
    reason: str = ""  # why it was dropped, or why it was kept


class Screening(_Record):
    target: str
    repetitions: int = 0
    confidence: float = 0.95
    rows: list[ScreeningRow] = []
    timing: list[TimingRow] = []  # per shape and candidate, relative to "against"


class Fingerprint(_Record):
    """Where a trial ran: the software stack and the device (its GPU fields None under the interpreter)."""

    device_mode: str | None = None
    gpu: str | None = None
    sm_count: int | None = None
    compute_capability: str | None = None
    gpu_memory_gib: float | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    liger_perf: str | None = None
    liger_kernel: str | None = None
    platform: str | None = None
    cpu: str | None = None
    git_commit: str | None = None
    git_dirty: bool = False


class VariantRecord(_Record):
    path: str = ""
    sha256: str | None = None  # None only in a trial recorded crashed by an older runner
    source: str = ""  # the full source: with it the notebook alone rebuilds the module
    knobs: dict[str, Any] | None = None


class JudgedRatio(_Case):
    ratio: float | None = None


class Verdict(_Record):
    """The optimize loop's judgement of a trial, recorded in the notebook's ``verdict`` cell."""

    verdict: VerdictName
    reasons: list[str] = []
    target: str | None = None
    target_ratio: float | None = None  # geomean candidate / current best on the target (< 1 is better)
    target_interval: list[float | None] | None = None
    ratios: list[JudgedRatio] = []
    gain: float = 0.0  # 1 - target_ratio
    #: 1 - the target's geomean over the whole suite, where the target is one dispatch bucket's (``target_ratio``
    #: is then that bucket's): what rounds and chains compare, so that a gain in one bucket is not set against a
    #: gain everywhere as if they were alike. None: the target was the whole suite (``gain``).
    suite_gain: float | None = None
    proposer: str | None = None
    superseded_by: int | None = None  # another candidate of the same round gained more
    suspicious: list[str] = []  # why the measurements themselves are not to be trusted (never accepted)
    #: Suspicious only of the current best's measurements (the run may have slowed it): one more trial is owed.
    recheck: bool = False

    @property
    def target_bounds(self) -> tuple[float | None, float | None]:
        """``target_interval`` as (low, high), None where it is missing or one-sided."""
        low, high = (list(self.target_interval or []) + [None, None])[:2]
        return low, high


class TrialResult(_Record):
    """A trial's structured result, as the notebook's ``result`` cell holds it (see ``liger_perf.record.notebook``)."""

    format: str = FORMAT
    kernel: str
    trial_id: int = 0
    name: str = ""
    kind: Kind = "experiment"
    status: Status
    reason: str = ""
    device: str = ""  # the device mode it ran in: cuda | interpret
    suite: str = ""
    passes: list[str] = []
    hypothesis: str = ""
    prediction: str = ""
    changes: dict[str, Any] | None = None
    proposer_audit: dict[str, Any] | None = None
    variant: VariantRecord
    against: VariantRecord | None = None
    fingerprint: Fingerprint | None = None
    correctness: Correctness | None = None
    timing: Timing | None = None
    memory: Memory | None = None
    accuracy: Accuracy | None = None
    ncu: Ncu | None = None
    screening: Screening | None = None
    peers_unavailable: dict[str, str] = {}
    step_seconds: dict[str, float] = {}
    elapsed_s: float | None = None
    replayed_from: str | None = None  # the recorded notebook a replay runner served

    # Not part of the result cell: where the history found it, and the loop's verdict from the verdict cell.
    notebook: str | None = Field(None, exclude=True)
    recorded_trial_id: int | None = Field(None, exclude=True)  # the number the result itself holds
    judged: Verdict | None = Field(None, exclude=True)

    @property
    def verdict(self) -> str | None:
        return self.judged.verdict if self.judged else None

    @property
    def verdict_reasons(self) -> list[str]:
        return self.judged.reasons if self.judged else []

    @property
    def gain(self) -> float:
        return self.judged.gain if self.judged else 0.0

    @property
    def suite_gain(self) -> float:
        """The judged gain over the whole suite (``Verdict.suite_gain``; ``gain`` where the target was the suite)."""
        if self.judged is None:
            return 0.0
        return self.judged.suite_gain if self.judged.suite_gain is not None else self.judged.gain

    @property
    def variant_sha(self) -> str | None:
        return self.variant.sha256

    @property
    def against_sha(self) -> str | None:
        return self.against.sha256 if self.against else None

    def timing_rows(self, contender: str | None = None, pass_name: str | None = None) -> list[TimingRow]:
        rows = self.timing.rows if self.timing else []
        return [r for r in rows if (contender is None or r.contender == contender)
                and (pass_name is None or r.pass_name == pass_name)]

    @property
    def left_out_keys(self) -> set[Key]:
        """The cases a confined timing left out (``Timing.left_out``), as keys of every pass the trial ran and of
        peak memory; empty for a trial that timed the whole suite."""
        if self.timing is None:
            return set()
        return {(name, case.shape, case.dtype) for case in self.timing.left_out
                for name in (*self.passes, "memory")}

    def candidate_ratios(self, pass_name: str | None = None) -> list[TimingRow]:
        """The candidate's rows measured against the current best (the rows a judgement rests on)."""
        return [r for r in self.timing_rows("candidate", pass_name)
                if r.relative_to == "against" and r.ratio is not None]

    def memory_rows(self) -> list[MemoryRow]:
        return self.memory.rows if self.memory else []

    def accuracy_rows(self, contender: str | None = None) -> list[AccuracyRow]:
        rows = self.accuracy.rows if self.accuracy else []
        return [r for r in rows if contender is None or r.contender == contender]

    def launches(self, pass_name: str | None = None, contender: str = "candidate") -> list[NcuLaunch]:
        launches = self.ncu.launches if self.ncu else []
        return [launch for launch in launches if (pass_name is None or launch.pass_name == pass_name)
                and launch.contender == contender]

    def payload(self) -> dict[str, Any]:
        """The JSON object the ``result`` cell holds (its keys as written: ``pass``, not ``pass_name``)."""
        return self.model_dump(mode="json", by_alias=True)
