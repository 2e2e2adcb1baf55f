"""The rules proposer, on the real NCU metrics of the baselines recorded on the H200."""

import copy

from liger_perf.history import load_trials
from liger_perf.proposers import Context, Proposal, Stop
from liger_perf.proposers.rules import RulesProposer, diagnose
from liger_perf.registry import baseline_path, get_spec
from liger_perf.schema import Ncu
from liger_perf.variants import read_knobs, source_hash

from made_trials import make_trial


def _context(kernel, target, extra_trials=()):
    # The first baseline trial recorded on the H200, alone: later loop runs add to the history, and these
    # tests are about what the proposer does from that one profile.
    baseline = next(t for t in load_trials(kernel) if t.name == "baseline" and t.device == "cuda")
    return Context(get_spec(kernel), target, [baseline, *extra_trials], baseline,
                   baseline_path(kernel).read_text())


def test_diagnoses_the_fused_backward_spills_at_the_widest_rows_first():
    baseline = next(t for t in load_trials("fused_add_rms_norm") if t.name == "baseline")
    diagnoses = diagnose(baseline, "backward")
    assert diagnoses[0].name == "spills" and "2048x32768" in diagnoses[0].evidence
    assert "local-memory traffic" in diagnoses[0].evidence
    assert {"under_one_wave", "low_achieved_occupancy"} <= {d.name for d in diagnoses}
    assert diagnose(make_trial(ncu={"status": "unavailable"}), "backward") == []


def test_proposes_the_remedy_the_diagnosis_points_to_with_hypothesis_and_prediction():
    proposal = RulesProposer().propose(_context("fused_add_rms_norm", "backward"))
    assert isinstance(proposal, Proposal)
    assert proposal.changes == {"bwd_column_chunked": "per_row", "BLOCK_SIZE": 8192}
    assert proposal.diagnosis == "spills"
    assert "register spills" in proposal.hypothesis and proposal.prediction
    knobs, _ = read_knobs(proposal.source)
    assert knobs["bwd_column_chunked"] == "per_row" and knobs["BLOCK_SIZE"] == 8192


def test_without_spills_a_narrow_row_backward_gets_multi_row_tiles():
    context = _context("fused_add_rms_norm", "backward")
    context.best = copy.deepcopy(context.best)
    for launch in context.best.launches():
        for key in [k for k in launch.metrics if "mem_local" in k]:
            launch.metrics[key] = 0.0
    diagnoses = [d.name for d in diagnose(context.best, "backward")]
    assert "spills" not in diagnoses and diagnoses[0] in ("under_one_wave", "low_achieved_occupancy")
    proposal = RulesProposer().propose(context)
    assert proposal.changes == {"bwd_tile_elements": 8192} and "tiles" in proposal.hypothesis


def test_never_proposes_a_variant_the_history_holds():
    first = RulesProposer().propose(_context("fused_add_rms_norm", "backward"))
    held = make_trial(name="x", variant={"sha256": source_hash(first.source), "knobs": {}}, verdict="rejected")
    second = RulesProposer().propose(_context("fused_add_rms_norm", "backward", [held]))
    assert second.changes == {"bwd_column_chunked": "per_row", "BLOCK_SIZE": 16384}


def test_a_rejection_that_won_on_the_target_rules_out_no_direction():
    context = _context("fused_add_rms_norm", "backward")
    first = RulesProposer().propose(context)
    base_knobs = read_knobs(context.best_source)[0]
    context.trials.append(make_trial(name="baseline", variant={"sha256": "base", "knobs": base_knobs}))
    rejected = dict(name="too-broad", variant={"sha256": source_hash(first.source), "knobs": {}},
                    verdict="rejected", changes=first.changes, against={"sha256": "base"})
    context.trials.append(make_trial(**rejected, gain=0.09))
    assert RulesProposer().propose(context).changes == {"bwd_column_chunked": "per_row", "BLOCK_SIZE": 16384}
    context.trials[-1] = make_trial(**rejected, gain=-0.01)
    after_a_loss = RulesProposer().propose(context)
    assert "bwd_column_chunked" not in after_a_loss.changes  # that direction is ruled out from False


def test_a_rejected_direction_is_not_repeated():
    context = _context("relu_squared", "forward")
    context.best = copy.deepcopy(context.best)
    context.best.ncu = Ncu(status="unavailable", reason="test")  # only exploration moves are left
    first = RulesProposer().propose(context)
    assert first.changes == {"BLOCK_SIZE": 4096}
    rejected = make_trial(name="bigger-blocks", variant={"sha256": "other", "knobs": {}}, verdict="rejected",
                          changes={"BLOCK_SIZE": 2048}, against={"sha256": context.best.variant_sha})
    context.trials.append(rejected)
    proposal = RulesProposer().propose(context)
    assert proposal.changes == {"num_warps": 8}  # no larger BLOCK_SIZE from 1024 again, not even 4096


def test_says_why_it_stops_when_nothing_is_left():
    context = _context("relu_squared", "forward")
    context.best = copy.deepcopy(context.best)
    context.best.ncu = Ncu(status="unavailable", reason="test")
    proposer = RulesProposer()
    while isinstance(step := proposer.propose(context), Proposal):
        context.trials.append(make_trial(name=step.name, variant={"sha256": source_hash(step.source), "knobs": {}}))
    assert isinstance(step, Stop) and "nothing left to try for forward" in step.reason
