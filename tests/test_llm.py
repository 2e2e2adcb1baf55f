"""The LLM proposer through the real openai client, against a recorded OpenAI-compatible server on loopback."""

import json
import os
import subprocess
import sys

import nbformat
import pytest

from liger_perf.record.history import load_trials
from liger_perf.propose import Context, Proposal
from liger_perf.propose.llm import LlmProposer, LlmSettings, build_prompt
from liger_perf.propose.safety import check_generated_source
from liger_perf.record.notebook import read_result
from liger_perf.record.schema import VERDICTS, Verdict
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.record.store import Store

from broken_variants import ROOT
from llm_server import FakeOpenAI, reply
from made_trials import confined_copy, make_trial

BASELINE = baseline_path("relu_squared").read_text()
GOOD = BASELINE.replace('"BLOCK_SIZE": 1024,', '"BLOCK_SIZE": 2048,')
BAD = {
    "imports os": ("import torch\nimport os\n" + BASELINE, "imports os"),
    "imports subprocess": (BASELINE.replace("import torch\n", "import torch\nfrom subprocess import run\n", 1),
                           "imports from subprocess"),
    "syntax error": (BASELINE.replace("def relu_squared(X):", "def relu_squared(X:"), "a syntax error at line "),
    # Python names no line for a null byte: the reason said "at line None"
    "null byte": (BASELINE + "\x00", "a syntax error: source code string cannot contain null bytes"),
    "no interface": (BASELINE.replace("def relu_squared(X):", "def relu_sq(X):"), "does not define relu_squared"),
    "writes a file": (BASELINE.replace('    return ReluSquaredFunction.apply(X)',
                                       '    open("/tmp/x", "w").write("x")\n    return ReluSquaredFunction.apply(X)'),
                      "uses open()"),
}


def _context():
    # The first two trials recorded on the H200 (baseline and A/A): later loop runs add to the history, and
    # these tests are about what the proposers do from that starting point.
    trials = [t for t in load_trials("relu_squared", ROOT / "notebooks" / "nvidia-h200") if t.trial_id < 2]
    return Context(get_spec("relu_squared"), "forward", trials, trials[0], BASELINE)


def _proposer(server, **settings):
    return LlmProposer(LlmSettings(base_url=server.base_url, api_key="sk-test", model="recorded",
                                   endpoint_retries=0, **settings))


def test_a_good_reply_becomes_a_proposal_with_its_audit():
    with FakeOpenAI([reply(GOOD)]) as server:
        proposal = _proposer(server).propose(_context())
    assert isinstance(proposal, Proposal) and proposal.source == GOOD
    assert proposal.changes == {"BLOCK_SIZE": 2048} and proposal.name == "llm-bigger-blocks"
    audit = proposal.audit
    assert audit["model"] == "recorded" and audit["endpoint_host"].startswith("127.0.0.1:")
    assert "sk-test" not in json.dumps(audit)  # never the key
    assert audit["prompt_tokens"] == 1000 and audit["exchanges"][0]["validation"] == "ok"
    sent = server.requests[0]["messages"][-1]["content"]
    assert sent == audit["prompt"]
    for trial in _context().trials:  # every earlier trial of the kernel is in the prompt
        assert f"#{trial.trial_id:04d} {trial.name}" in sent
    assert BASELINE in sent and "NCU" in sent and get_spec("relu_squared").math in sent


@pytest.mark.parametrize("kind", sorted(BAD))
def test_an_unsafe_or_broken_reply_is_rejected_with_the_reason_and_retried(kind):
    source, reason = BAD[kind]
    with FakeOpenAI([reply(source), reply(GOOD)]) as server:
        proposal = _proposer(server).propose(_context())
    assert proposal.source == GOOD
    first = proposal.audit["exchanges"][0]["validation"]
    assert reason in first, first
    retry = server.requests[1]["messages"][-1]["content"]
    assert retry.startswith("Your reply was rejected:") and reason in retry


def test_a_reply_too_long_for_a_module_is_rejected_and_only_its_start_is_kept():
    """A 3 MB reply is no proposal: kept whole in the audit (and sent back), a few of them made the trial's notebook
    too large for the history to read."""
    from liger_perf.propose.llm import KEPT_OF_A_LONG_REPLY

    long_reply = {"content": reply(GOOD)["content"] + " " * 3_000_000}
    with FakeOpenAI([long_reply, reply(GOOD)]) as server:
        proposal = _proposer(server).propose(_context())
    assert proposal.source == GOOD
    first = proposal.audit["exchanges"][0]
    assert "more than the 1000000" in first["validation"]
    assert len(first["reply"]) < KEPT_OF_A_LONG_REPLY + 100 and first["reply"].endswith("characters left out]")
    sent_back = server.requests[1]["messages"][-2]["content"]
    assert sent_back == first["reply"]


def test_replies_that_keep_failing_fall_back_to_the_rules_proposer():
    source, _ = BAD["imports os"]
    with FakeOpenAI([reply(source)] * 2) as server:
        proposal = _proposer(server, repairs=1).propose(_context())
    assert proposal.diagnosis != "llm" and "fell back to the rules proposer" in proposal.audit["fallback"]
    assert proposal.hypothesis.startswith("[rules proposer; the LLM step failed")


@pytest.mark.parametrize("failure", [{"status": 500}, {"status": 429}, {"hang": 3}])
def test_a_failing_or_hanging_endpoint_falls_back_to_the_rules_proposer(failure):
    with FakeOpenAI([failure] * 3) as server:
        proposal = _proposer(server, timeout_s=1).propose(_context())
    assert isinstance(proposal, Proposal) and proposal.diagnosis != "llm"
    assert "the endpoint failed" in proposal.audit["fallback"]


def _completion(**fields) -> dict:
    payload = {"id": "x", "object": "chat.completion", "created": 0, "model": "recorded", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply(GOOD)["content"]}}]}
    return {"raw": json.dumps({**payload, **fields}).encode()}


MALFORMED = {"no choices": _completion(choices=[]), "null choices": _completion(choices=None),
             "a null message": _completion(choices=[{"index": 0, "message": None}]),
             "content parts": _completion(choices=[{"index": 0, "message": {"role": "assistant", "content": [
                 {"type": "text", "text": "{}"}]}}]),
             "no JSON": {"raw": b"<html>502 Bad Gateway</html>"}}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_an_answer_with_no_message_falls_back_to_the_rules_proposer(kind):
    """A 200 the client takes without a check (an empty choices list, a null message, content parts, an HTML
    page) raised IndexError, TypeError, AttributeError or JSONDecodeError out of the loop."""
    with FakeOpenAI([MALFORMED[kind]]) as server:
        proposal = _proposer(server).propose(_context())
    assert isinstance(proposal, Proposal) and proposal.diagnosis != "llm"
    assert "the endpoint's answer" in proposal.audit["fallback"]


def test_token_counts_that_are_no_counts_are_not_a_crash():
    with FakeOpenAI([_completion(usage={"prompt_tokens": "5", "completion_tokens": None})]) as server:
        proposal = _proposer(server).propose(_context())
    assert proposal.source == GOOD and proposal.audit["prompt_tokens"] == 0


def test_a_reply_that_is_no_json_object_is_a_rejection_in_linear_time():
    """Arrays nested 100000 deep raised RecursionError out of parse_reply (a ValueError is what the proposer
    rejects); an integer of 5000 digits sent the model Python's "use sys.set_int_max_str_digits()"; and the
    code-fence regex backtracked from every fence that opened an object: 512 KB of them took 23 s."""
    import time

    from liger_perf.propose.llm import parse_reply

    for text in ("[" * 100000 + "]" * 100000, '{"source": 1' + "0" * 5000 + "}", "```{" * 250000):
        started = time.time()
        with pytest.raises(ValueError, match="not a JSON object with hypothesis"):
            parse_reply(text)
        assert time.time() - started < 2
    fenced = 'Here it is:\n```json\n{"name": "a"}\n```\nIt sets {BLOCK_SIZE} higher.'
    assert parse_reply(fenced) == {"name": "a"}


def test_lone_surrogates_in_a_reply_never_reach_the_trial_s_records():
    """JSON's "\\ud800" escape decodes to a lone surrogate, which no UTF-8 file holds: in the hypothesis it made
    the trial's request unserialisable and its notebook unwritable, a traceback out of the loop."""
    from liger_perf.record.schema import TrialRequest

    raw = {"content": "\ud800" + reply(GOOD, hypothesis="\ud800 bigger", name="big")["content"]}
    with FakeOpenAI([raw]) as server:
        proposal = _proposer(server).propose(_context())
    assert proposal.source == GOOD and proposal.hypothesis == "? bigger"
    TrialRequest(kernel="relu_squared", variant="/v.py", hypothesis=proposal.hypothesis,
                 prediction=proposal.prediction, proposer_audit=proposal.audit).model_dump_json()


def test_a_long_history_is_summarised_never_cut():
    context = _context()
    many = [context.trials[0].model_copy(update={"trial_id": i, "name": f"t{i}", "judged": Verdict(
        verdict="rejected", reasons=["x" * 2000])}) for i in range(40)]
    context.trials = many
    prompt = build_prompt(context, LlmSettings(base_url="http://x", model="m", max_prompt_chars=20000))
    assert "older trials are collapsed to one line each" in prompt
    assert all(f"#{i:04d} t{i}:" in prompt for i in range(40))


def test_a_batch_s_later_proposals_are_shown_the_ones_already_chosen():
    """Asked for a batch (a round of several workers, a screening), the model sees the round's earlier choices:
    without them every request of the batch is the same prompt, and the replies repeat one another."""
    context = _context()
    settings = LlmSettings(base_url="http://x", model="m")
    assert "Already chosen for this round" not in build_prompt(context, settings)
    context.pending_notes = ["bwd-tile-8192: larger backward tiles", "num-warps-8: more warps"]
    prompt = build_prompt(context, settings)
    assert "Already chosen for this round" in prompt and "- num-warps-8: more warps" in prompt


def test_static_checks():
    spec = get_spec("relu_squared")
    assert check_generated_source(BASELINE, spec) == ""
    assert "torch.load" in check_generated_source(BASELINE + "\nW = torch.load('w.pt')\n", spec)
    assert "__subclasses__" in check_generated_source(BASELINE + "\nC = object.__subclasses__()\n", spec)
    assert "environ" in check_generated_source(BASELINE + "\nimport math\nE = math.environ\n", spec)


UNCHECKABLE = {
    "a sum of 600 terms": (BASELINE + "\ndef g(x):\n    return " + "x + " * 600 + "x\n", "too deeply"),
    "a dispatch bucket no launch looks up": (BASELINE + '\nDISPATCH = {"../x": {"BLOCK_SIZE": 2048}}\n',
                                             "DISPATCH bucket '../x'"),
    "5000 unary minus signs": (BASELINE + "\nK = " + "-" * 5000 + "1\n", "too deeply"),
    "a lone surrogate": (BASELINE + "\nK = '\ud800'\n", "not UTF-8"),
}


@pytest.mark.parametrize("kind", sorted(UNCHECKABLE))
def test_a_module_the_parser_or_the_checks_cannot_hold_is_rejected_not_a_crash(kind):
    """The parser's MemoryError, the checks' RecursionError and the lone surrogate's UnicodeEncodeError (a JSON
    "\\ud800" escape in the reply) escaped the static check: the proposer stopped the loop with a traceback."""
    source, reason = UNCHECKABLE[kind]
    assert reason in check_generated_source(source, get_spec("relu_squared"))
    with FakeOpenAI([reply(source), reply(GOOD)]) as server:
        proposal = _proposer(server).propose(_context())
    assert proposal.source == GOOD and reason in proposal.audit["exchanges"][0]["validation"]


def _cli(args, env, timeout=900):
    from liger_perf.isolation import sandbox

    if args[0] == "optimize" and not sandbox.available():  # a machine without bubblewrap: said explicitly
        args = [*args, "--unsandboxed"]
    return subprocess.run([sys.executable, "-m", "liger_perf", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_generated_code_is_refused_where_there_is_no_sandbox_unless_the_user_says_so(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from liger_perf import cli
    from liger_perf.isolation import sandbox
    from liger_perf.core.errors import UserError

    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: "bubblewrap (bwrap) is not installed")
    monkeypatch.setenv("LIGER_PERF_NOTEBOOKS", str(tmp_path))
    for proposer in ("llm", "auto"):
        refused = CliRunner().invoke(cli.app, ["optimize", "relu_squared", "--proposer", proposer])
        assert isinstance(refused.exception, UserError) and "--unsandboxed" in str(refused.exception)
    allowed = CliRunner().invoke(cli.app, ["optimize", "relu_squared", "--proposer", "llm", "--unsandboxed"])
    assert isinstance(allowed.exception, UserError) and "OPENAI_BASE_URL" in str(allowed.exception)  # next check
    assert not list(tmp_path.iterdir())


def test_without_an_endpoint_the_command_says_how_to_configure_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "LIGER_PERF_"))}
    env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", LIGER_PERF_NOTEBOOKS=str(tmp_path))
    out = _cli(["optimize", "relu_squared", "--proposer", "llm"], env)
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1 and "OPENAI_BASE_URL" in lines[0], out.stderr


@pytest.mark.slow
def test_a_short_llm_loop_in_interpreter_mode_records_prompts_and_replies(tmp_path):
    with FakeOpenAI([reply(GOOD)]) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "OPENAI_BASE_URL": server.base_url,
               "OPENAI_API_KEY": "sk-test", "LIGER_PERF_NOTEBOOKS": str(tmp_path / "nb"),
               "LIGER_PERF_REPORTS": str(tmp_path / "reports")}
        out = _cli(["optimize", "relu_squared", "--target", "forward", "--budget", "2", "--proposer", "llm",
                    "--model", "recorded", "--repetitions", "2", "--no-convergence"], env)
    assert out.returncode == 0, out.stdout + out.stderr
    notebooks = Store(tmp_path / "nb" / "interpret").trial_notebooks("relu_squared")
    assert [p.name for p in notebooks] == ["0000-baseline.ipynb", "0001-llm-bigger-blocks.ipynb"]
    result = read_result(nbformat.read(notebooks[1], as_version=4))
    assert result.status == "complete" and result.variant.source == GOOD
    audit = result.proposer_audit
    assert audit["model"] == "recorded" and "#0000 baseline" in audit["prompt"]
    assert json.loads(audit["exchanges"][0]["reply"])["source"] == GOOD
    assert load_trials("relu_squared", tmp_path / "nb" / "interpret")[1].verdict in VERDICTS
    text = notebooks[1].read_text()
    assert "Proposer: llm" in text and "sk-test" not in text


def test_auto_uses_the_rules_while_they_have_moves_then_the_llm():
    from liger_perf.propose.llm import AutoProposer
    from liger_perf.kernel.variants import source_hash

    context = _context()
    assert AutoProposer(LlmSettings()).propose(context).diagnosis != "llm"  # no endpoint: rules alone
    # Not one of the knob moves the rules walk through (GOOD is one: BLOCK_SIZE 2048).
    novel = GOOD.replace("def relu_squared(X):", "def relu_squared(X):  # the model's own", 1)
    assert novel != GOOD
    with FakeOpenAI([reply(novel)]) as server:
        auto = AutoProposer(LlmSettings(base_url=server.base_url, model="recorded", endpoint_retries=0))
        first = auto.propose(context)
        assert first.diagnosis != "llm" and not server.requests  # the rules still have a move
        while (step := auto.rules.propose(context)).__class__ is Proposal:
            context.trials.append(make_trial(trial_id=len(context.trials), name=step.name,
                                             variant={"sha256": source_hash(step.source), "knobs": {}}))
        assert auto.propose(context).diagnosis == "llm" and len(server.requests) == 1


def test_an_edit_of_the_dispatch_table_is_recorded_bucket_by_bucket():
    """A model that moves one bucket's knob (and drops another bucket's entry) made changes named ``knob@bucket``:
    the judge judges them on those buckets, and the rules proposer learns from them."""
    from liger_perf.kernel.registry import baseline_path
    from liger_perf.kernel.variants import with_knobs

    base = with_knobs(baseline_path("fused_add_rms_norm").read_text(), {"num_warps@1024x2": 8})
    edited = with_knobs(base, {"num_warps@1024x2": "auto", "bwd_tile_elements@8192x2": 16384})
    trials = [t for t in load_trials("fused_add_rms_norm", ROOT / "notebooks" / "nvidia-h200") if t.trial_id < 1]
    context = Context(get_spec("fused_add_rms_norm"), "backward", trials, trials[0], base)
    with FakeOpenAI([reply(edited)]) as server:
        proposal = _proposer(server).propose(context)
    assert isinstance(proposal, Proposal), proposal
    assert proposal.changes == {"num_warps@1024x2": "auto", "bwd_tile_elements@8192x2": 16384}
    # The prompt explains the table where the best carries one, and only there.
    assert "## Its dispatch table" in server.requests[0]["messages"][-1]["content"]
    assert "## Its dispatch table" not in build_prompt(_context(), LlmSettings(base_url="http://x", model="m"))


def test_the_prompt_names_the_shapes_the_trials_time():
    """A loop on the tuning split of the model suite tells the model those shapes, not the GPU suite's."""
    import dataclasses

    context = _context()
    settings = LlmSettings(base_url="http://x", model="m", max_prompt_chars=200000)
    assert "GPU benchmark shapes: " in build_prompt(context, settings)
    prompt = build_prompt(dataclasses.replace(context, suite="models-tune"), settings)
    assert "GPU benchmark shapes" not in prompt and "the models-tune suite" in prompt
    widths = {c.shape[-1] for c in context.spec.cases("models-tune", "bench")}
    assert all(f"x{w}" in prompt for w in widths)



def test_the_prompt_asks_for_what_the_static_check_takes():
    """The prompt told the model to import itertools, operator and dataclasses, which the static check refuses
    (every such reply cost a repair round). Its rules are now read from the check's own lists: every allowed import
    and builtin is named, no refused module is, and the rules the check added (no private attributes, no direct
    forward/backward) are said."""
    from liger_perf.propose.safety import ALLOWED_BUILTINS, ALLOWED_IMPORTS

    prompt = build_prompt(_context(), LlmSettings(base_url="http://x", model="m", max_prompt_chars=200000))
    rules = prompt[prompt.index("## Reply"):]
    assert all(name in rules for name in ALLOWED_IMPORTS - {"__future__"})
    assert all(name in rules for name in ALLOWED_BUILTINS if name[0].islower())
    assert not any(name in rules for name in ("itertools", "operator", "dataclasses"))
    assert "private (_name) attribute" in rules and "never its forward or backward directly" in rules

def test_the_prompt_of_a_best_timed_on_its_bucket_alone_shows_its_profile_over_the_suite():
    """With 0085 timed and profiled on bucket 4096x2 alone, the model is shown the best's NCU profile and
    diagnoses over the suite (0078's launches where 0085 ran 0078's code) and told over what 0085's ratios were
    measured."""
    trials = load_trials("fused_add_rms_norm", ROOT / "notebooks" / "nvidia-h200")
    history = [t for t in trials if t.trial_id < 85]
    confined = confined_copy(next(t for t in trials if t.trial_id == 85), {"4096x2"})
    context = Context(get_spec("fused_add_rms_norm"), "backward", [*history, confined], confined,
                      confined.variant.source, suite="models-tune")
    prompt = build_prompt(context, LlmSettings(base_url="http://x", model="m", max_prompt_chars=400000))
    profile = prompt[prompt.index("## The current best's NCU profile"):prompt.index("## What the rules proposer")]
    assert "NCU backward 26214x2560 bfloat16" in profile  # bucket 4096x2, 0085's own
    assert "NCU backward 4096x16384 float32" in profile  # bucket 16384x4, 0078's
    diagnosed = prompt[prompt.index("## What the rules proposer"):prompt.index("## Every earlier trial")]
    assert "16384" in diagnosed
    assert "over bucket 4096x2 alone" in prompt
