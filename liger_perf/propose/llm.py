"""The LLM proposer: a model reads every trial of the kernel and writes the next variant module.

It talks to any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp) through the ``openai`` package.
The prompt holds the spec, the current best's full source, one line per earlier trial (the most recent ones with
their reasons, NCU metrics and NCU's advice), and the rules proposer's diagnoses. The reply is a JSON object
with a hypothesis, a predicted effect per pass and the complete module; a reply that fails the static checks
(``safety``) is sent back with the reason, a bounded number of times. When the endpoint fails (timeouts, rate
limits, server errors, after the client's own retries with backoff), that step falls back to the rules
proposer and says so. Everything asked and answered is kept in ``Proposal.audit`` for the trial notebook.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pydantic import Field, ValidationError

from liger_perf.core.config import YamlModel, read_yaml_mapping
from liger_perf.core.errors import UserError
from liger_perf.record.history import best_as_profiled, geomean
from liger_perf.propose import Context, Proposal, Stop, tried_sources
from liger_perf.propose.rules import RulesProposer, diagnose
from liger_perf.propose.safety import check_generated_source, rules_in_words
from liger_perf.record.schema import NCU_DURATION, TrialResult
from liger_perf.kernel.spec import dtype_name, shape_label
from liger_perf.kernel.variants import carries_dispatch, changes_between, read_knobs, recorded_dispatch, source_hash
from liger_perf.core.wording import count

CONFIG_ENV = "LIGER_PERF_LLM_CONFIG"
SYSTEM = ("You are an expert Triton and CUDA performance engineer. You improve one Triton kernel module at a "
          "time, guided by Nsight Compute profiles and by every earlier experiment. You never change the math or "
          "the casting mode, and the module must keep its public interface.")


class LlmSettings(YamlModel):
    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    timeout_s: float = Field(120, gt=0)
    endpoint_retries: int = Field(2, ge=0, le=10)  # the openai client's own retries, with exponential backoff
    repairs: int = Field(3, ge=0, le=10)  # invalid replies sent back with the reason
    max_prompt_chars: int = Field(60000, ge=2000)
    recent_trials: int = Field(5, ge=1)  # trials shown in full (reasons, NCU); older ones get one line


def load_settings(model: str | None = None, config: str | Path | None = None) -> LlmSettings:
    """A config file (``--llm-config``, ``$LIGER_PERF_LLM_CONFIG``), then the environment, then ``--model``."""
    data: dict[str, Any] = {}
    path = config or os.environ.get(CONFIG_ENV)
    if path:
        data, _ = read_yaml_mapping(path, "LLM config")
    for key, env in (("base_url", "OPENAI_BASE_URL"), ("api_key", "OPENAI_API_KEY"), ("model", "LIGER_PERF_MODEL")):
        if os.environ.get(env):
            data[key] = os.environ[env]
    if model:
        data["model"] = model
    try:
        return LlmSettings(**data)
    except ValidationError as e:
        error = e.errors()[0]
        raise UserError(f"LLM config: {'.'.join(map(str, error['loc']))}: "
                        f"{error['msg'].removeprefix('Value error, ')}") from None


def require_endpoint(settings: LlmSettings) -> None:
    if not settings.base_url or not settings.model:
        missing = " and ".join(w for w, v in (("an endpoint", settings.base_url), ("a model", settings.model)) if not v)
        raise UserError(f"--proposer llm needs {missing}: set OPENAI_BASE_URL (and OPENAI_API_KEY) and pass --model "
                        f"NAME (or LIGER_PERF_MODEL), or write them in a YAML file named by --llm-config")


def endpoint_configured(settings: LlmSettings) -> bool:
    return bool(settings.base_url and settings.model)


# -- the prompt ---------------------------------------------------------------------------------------------

def _timed_shapes(spec, suite: str) -> str:
    """The shapes and dtypes the trials time: the GPU suite's, or the tuning split's (``suite``)."""
    if not suite:
        return (f"GPU benchmark shapes: {', '.join(shape_label(s) for s in spec.suites.get('gpu', []))}; dtypes "
                f"{', '.join(dtype_name(d) for d in spec.dtypes['gpu'])}")
    cases = spec.cases(suite, "bench")
    shapes = ", ".join(dict.fromkeys(shape_label(c.shape) for c in cases))
    return (f"Benchmark shapes (real models' widths at a training step's tokens, the {suite} suite): {shapes}; "
            f"dtypes {', '.join(dict.fromkeys(dtype_name(c.dtype) for c in cases))}")


def _spec_section(spec, suite: str = "") -> str:
    tolerances = "; ".join(f"{dtype_name(d)}: same-dtype atol {t.same_dtype.atol:g} rtol {t.same_dtype.rtol:g}"
                           for d, t in spec.tolerances.items())
    return "\n".join([
        f"Kernel: {spec.name}", f"Math: {spec.math}", f"Public interface (must stay): {', '.join(spec.interface)}",
        f"Passes: {', '.join(spec.passes)}",
        _timed_shapes(spec, suite),
        f"Options the correctness gate sweeps (casting modes and the like): {list(map(dict, spec.check_configs))}",
        f"Tolerances: {tolerances}",
        "Correctness is a hard gate: forward and every gradient against a casting-faithful PyTorch reference in "
        "the same dtype and against float64, odd shapes, padded strides, NaN-poisoned allocations."])


def _ratios(trial: TrialResult) -> str:
    rows = [r for r in trial.candidate_ratios() if r.ratio > 0]
    stated = ", ".join(f"{p} x{geomean([r.ratio for r in rows if r.pass_name == p]):.3f}"
                       for p in dict.fromkeys(r.pass_name for r in rows)) or "-"
    if rows and trial.timing is not None and trial.timing.left_out:  # a move timed on its buckets' shapes alone
        stated += f" (over bucket {', '.join(trial.timing.buckets)} alone; elsewhere it ran the best's code)"
    return stated


def _trial_line(trial: TrialResult) -> str:
    if trial.screening is not None:  # a batch screened against the best: each candidate and what became of it
        return f"#{trial.trial_id:04d} screening of {len(trial.screening.rows)} candidates: " + "; ".join(
            f"{row.name} ({', '.join(f'{k}={v}' for k, v in (row.changes or {}).items()) or 'code change'}): "
            f"{'kept for a full trial' if row.kept else 'dropped'}, {row.reason}" for row in trial.screening.rows)
    changes = ", ".join(f"{k}={v}" for k, v in (trial.changes or {}).items()) or "-"
    return (f"#{trial.trial_id:04d} {trial.name}: changes {changes}; time ratios vs its best {_ratios(trial)}"
            f"; status {trial.status}; verdict {trial.verdict or '-'}")


def _ncu_lines(trial: TrialResult, limit: int = 12) -> list[str]:
    ncu = trial.ncu
    if ncu is None or ncu.status != "ok":
        return [f"  NCU: unavailable ({ncu.reason if ncu else 'not recorded'})"]
    keep = (NCU_DURATION, "launch__registers_per_thread",
            "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
            "launch__waves_per_multiprocessor")
    lines = []
    for launch in trial.launches()[-limit:]:
        metrics = ", ".join(f"{k.split('__')[1].split('.')[0]}={launch.metrics[k]:.4g}"
                            for k in keep if launch.metrics.get(k) is not None)
        lines.append(f"  NCU {launch.pass_name} {launch.shape} {launch.dtype} {launch.kernel}: {metrics}")
    for advice in ncu.advice[:6]:
        lines.append(f"  NCU advice ({advice.pass_name} {advice.shape} {advice.dtype} {advice.rule}): "
                     f"{advice.message[:400]}")
    return lines


def build_prompt(context: Context, settings: LlmSettings) -> str:
    """The user message: everything the history holds, the oldest trials collapsed first when it is too long."""
    trials = context.trials
    target = context.target
    profiled = best_as_profiled(context.best, trials)  # over the suite, where its own trial was confined
    diagnoses = [f"- {p} {d.name} (severity {d.severity:.2f}): {d.evidence}"
                 for p in (["forward", "backward"] if target == "full" else [target]) if target != "memory"
                 for d in diagnose(profiled, p)]
    recent = settings.recent_trials
    while True:
        detailed = trials[-recent:] if recent else []
        collapsed = trials[: len(trials) - len(detailed)]
        table = [_trial_line(t) for t in collapsed]
        for t in detailed:
            table.append(_trial_line(t))
            table.append(f"  hypothesis: {t.hypothesis or '-'}")
            table.append(f"  verdict reasons: {'; '.join(t.verdict_reasons or [t.reason or '-'])}")
            table += _ncu_lines(t)
        note = (f"({len(collapsed)} older trials are collapsed to one line each to fit the context.)"
                if collapsed else "")
        prompt = "\n\n".join(filter(None, [
            "## The kernel", _spec_section(context.spec, context.suite),
            f"## Goal\nMake the {target} {'peak memory' if target == 'memory' else 'time'} smaller, geometric mean "
            "over every shape and dtype, without slowing any pass or raising peak memory by more than 5% at any "
            "shape, and without changing the results.",
            f"## The current best (trial {context.best.trial_id:04d} {context.best.name}), full source\n"
            f"```python\n{context.best_source}\n```",
            ("## Its dispatch table\nThe module's DISPATCH literal maps a shape bucket, \"<row width rounded up to a "
             "power of two>x<element bytes>\" (\"8192x2\": 4097-8192 columns of bfloat16 or float16), to the knobs "
             "that differ from KNOBS there. A change to one bucket's entry is judged on that bucket's shapes, and "
             "must slow no other shape. Prefer a change to one bucket where the profile points to one.")
            if carries_dispatch(context.best_source) else "",
            (f"## Buckets to tune\nChange only the DISPATCH entries of {', '.join(context.buckets)}: nothing else.")
            if context.buckets else "",
            "## The current best's NCU profile\n" + "\n".join(_ncu_lines(profiled, limit=40)),
            "## What the rules proposer diagnoses\n" + ("\n".join(diagnoses) or "(no NCU diagnosis)"),
            f"## Every earlier trial, oldest first ({len(trials)})\n" + "\n".join(table), note,
            ("## Already chosen for this round (propose something different from each)\n"
             + "\n".join(f"- {n}" for n in context.pending_notes)) if context.pending_notes else "",
            "## Reply\nReply with one JSON object and nothing else: {\"hypothesis\": \"why the change should help, "
            "citing the profile\", \"prediction\": {\"forward\": \"...\", \"backward\": \"...\"}, \"name\": "
            "\"short-kebab-name\", \"source\": \"the complete new module\"}. The module must define "
            f"{', '.join(context.spec.interface)} (KNOBS and KNOB_CHOICES as plain literals). "
            f"{rules_in_words()} Do not repeat a variant that is already in the history."]))
        if len(prompt) <= settings.max_prompt_chars or recent == 0:
            return prompt
        recent -= 1


def parse_reply(text: str) -> dict:
    """The JSON object of a reply, also when a model wraps it in a code fence or adds a sentence."""
    candidates = [text]
    fenced = _fenced_object(text)
    if fenced:
        candidates.insert(0, fenced)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (ValueError, RecursionError):  # no JSON, an integer past 4300 digits, arrays nested thousands deep
            continue
        if isinstance(data, dict):
            return data
    raise ValueError("the reply is not a JSON object with hypothesis, prediction, name and source")


def _fenced_object(text: str) -> str:
    """The object of the reply's first code fence that opens one (a json fence), up to the last closing brace a
    fence closes; '' where there is none. Two linear scans: one regex (fence, object, fence) backtracked over the
    rest of the reply from every fence that opened an object and was never closed (a 512 KB reply of them took
    23 s, and the time grows with the square of the length)."""
    opened = re.search(r"```(?:json)?\s*\{", text)
    if opened is None:
        return ""
    start = opened.end() - 1
    closes = [m.start() for m in re.finditer(r"\}\s*```", text) if m.start() >= start]
    return text[start:closes[-1] + 1] if closes else ""


# -- the proposer -------------------------------------------------------------------------------------------

def _reply_text(response) -> str | None:
    """The first choice's message text ('' where the model said nothing); None where the answer holds no message:
    a server or proxy in trouble answers 200 with no choices, a null message or content parts, and the client
    checks none of it (``response.choices[0]`` raised IndexError out of the loop)."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return None
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if message is None or not isinstance(content, (str, type(None))):
        return None
    return content or ""


def _text(value) -> str:
    """``value`` as text that UTF-8 can hold: a lone surrogate (JSON's "\\ud800" escape, in the reply or in a
    field of its object) becomes "?". Kept as it was, it reached the trial's request and notebook, whose writes
    raised UnicodeEncodeError (and PydanticSerializationError) out of the loop."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _tokens(usage, name: str) -> int:
    """A token count the endpoint reports; 0 where it reports none, or something that is no count."""
    value = getattr(usage, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


#: The longest reply read as a proposal. A variant module and its JSON object take tens of kilobytes; a longer reply
#: is rejected, and only its first ``KEPT_OF_A_LONG_REPLY`` characters go into the audit and back to the model: kept
#: whole, four 10 MB replies made the trial's notebook larger than ``NOTEBOOK_LIMIT``, and the history then skipped it.
MAX_REPLY_CHARS = 1_000_000
KEPT_OF_A_LONG_REPLY = 2_000


class LlmProposer:
    name = "llm"

    def __init__(self, settings: LlmSettings, fallback=None, client=None):
        require_endpoint(settings)
        self.settings = settings
        self.fallback = fallback or RulesProposer()
        if client is None:
            from openai import OpenAI

            client = OpenAI(base_url=settings.base_url, api_key=settings.api_key or "not-needed",
                            timeout=settings.timeout_s, max_retries=settings.endpoint_retries)
        self.client = client

    def propose(self, context: Context) -> Proposal | Stop:
        import openai

        prompt = build_prompt(context, self.settings)
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]
        audit: dict[str, Any] = {"proposer": "llm", "model": self.settings.model,
                                 "endpoint_host": urlparse(self.settings.base_url).netloc, "prompt": prompt,
                                 "exchanges": [], "prompt_tokens": 0, "completion_tokens": 0, "fallback": None}
        tried = tried_sources(context)
        for attempt in range(self.settings.repairs + 1):
            started = time.time()
            try:
                response = self.client.chat.completions.create(model=self.settings.model, messages=messages,
                                                               temperature=0.2)
            except (openai.APIError, openai.APIConnectionError, openai.APITimeoutError) as e:
                return self._fall_back(context, audit, f"the endpoint failed after the client's retries: "
                                                       f"{type(e).__name__}: {str(e)[:200]}")
            except ValueError as e:  # a 200 whose body is no JSON (a proxy's HTML page): json's error, not openai's
                return self._fall_back(context, audit, f"the endpoint's answer is not JSON: {str(e)[:200]}")
            reply = _reply_text(response)
            if reply is None:
                return self._fall_back(context, audit, "the endpoint's answer holds no message text (no choices, "
                                                       "no message, or content that is not a string)")
            reply = _text(reply)
            usage = getattr(response, "usage", None)
            audit["prompt_tokens"] += _tokens(usage, "prompt_tokens")
            audit["completion_tokens"] += _tokens(usage, "completion_tokens")
            if len(reply) > MAX_REPLY_CHARS:
                problem, proposal = (f"the reply holds {len(reply)} characters, more than the {MAX_REPLY_CHARS} "
                                     "a module and its JSON object need: send the object alone"), None
                left_out = len(reply) - KEPT_OF_A_LONG_REPLY
                reply = reply[:KEPT_OF_A_LONG_REPLY] + f"\n[{left_out} more characters left out]"
            else:
                problem, proposal = self._validate(reply, context, tried)
            audit["exchanges"].append({"attempt": attempt + 1, "reply": reply, "validation": problem or "ok",
                                       "seconds": round(time.time() - started, 2)})
            if proposal is not None:
                proposal.audit = audit
                return proposal
            messages += [{"role": "assistant", "content": reply},
                         {"role": "user", "content": f"Your reply was rejected: {problem}. Reply again with the "
                                                     "complete JSON object, fixing that."}]
        return self._fall_back(context, audit, f"{count(self.settings.repairs + 1, 'reply', 'replies')} in a row failed the checks; "
                                               f"the last: {audit['exchanges'][-1]['validation']}")

    def _validate(self, reply: str, context: Context, tried: set) -> tuple[str, Proposal | None]:
        try:
            data = parse_reply(reply)
        except ValueError as e:
            return str(e), None
        source = data.get("source")
        if not isinstance(source, str) or not source.strip():
            return "the JSON object has no \"source\" with the complete module", None
        problem = check_generated_source(source, context.spec)
        if problem:
            return problem, None
        if source_hash(source) in tried:
            return ("that module is already in the history or chosen for this round; propose something new",
                    None)
        prediction = data.get("prediction")
        prediction = _text("; ".join(f"{k}: {v}" for k, v in prediction.items()) if isinstance(prediction, dict)
                           else str(prediction or ""))
        # An edit of the dispatch table is recorded bucket by bucket (``knob@bucket``): judged on its buckets.
        changes = changes_between(read_knobs(context.best_source)[0], recorded_dispatch(context.best_source),
                                  read_knobs(source)[0], recorded_dispatch(source))
        name = re.sub(r"[^a-z0-9-]+", "-", str(data.get("name") or "llm-variant").lower()).strip("-")[:50]
        return "", Proposal(name=f"llm-{name}" if not name.startswith("llm") else name, source=source,
                            hypothesis=_text(data.get("hypothesis") or ""), prediction=prediction, changes=changes,
                            diagnosis="llm")

    def _fall_back(self, context: Context, audit: dict, reason: str) -> Proposal | Stop:
        audit["fallback"] = f"fell back to the rules proposer: {reason}"
        step = self.fallback.propose(context)
        if isinstance(step, Proposal):
            step.audit = audit
            step.hypothesis = f"[rules proposer; the LLM step failed: {reason}] {step.hypothesis}"
            return step
        return Stop(f"the LLM step failed ({reason}) and the rules proposer has {step.reason}")


class AutoProposer:
    """The rules proposer while its diagnoses have knob changes left; then the LLM, if an endpoint is set."""

    name = "auto"

    def __init__(self, settings: LlmSettings):
        self.rules = RulesProposer()
        self.llm = LlmProposer(settings, fallback=self.rules) if endpoint_configured(settings) else None

    def propose(self, context: Context) -> Proposal | Stop:
        step = self.rules.propose(context)
        if isinstance(step, Proposal) or self.llm is None:
            return step
        return self.llm.propose(context)
