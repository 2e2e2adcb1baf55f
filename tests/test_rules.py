"""The rules proposer, on the real NCU metrics of the baselines recorded on the H200."""

import copy
import pytest

from liger_perf.record.history import load_trials
from liger_perf.propose import Context, Proposal, Stop
from liger_perf.propose.rules import RulesProposer, _direction, diagnose, knob_pass
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.record.schema import Ncu, Verdict
from liger_perf.kernel.spec import Remedy
from liger_perf.kernel.variants import (dispatch_bucket, knobs_in, read_dispatch, read_knobs, source_hash,
                                       with_knobs)

from broken_variants import ROOT
from made_trials import confined_copy
from made_trials import make_trial


def _recorded_trials(kernel):
    """The kernel's recorded H200 history, read from its folder (``notebooks/<device>/`` once histories are
    kept per device class, ``notebooks/`` before)."""
    for folder in (ROOT / "notebooks" / "nvidia-h200", ROOT / "notebooks"):
        if (folder / kernel).is_dir():
            return load_trials(kernel, folder)
    raise AssertionError(f"no recorded history of {kernel} under {ROOT / 'notebooks'}")


def _without_table(source):
    """A variant as the recorded history's are: without a dispatch table, so every move changes every shape."""
    assert "\nDISPATCH = {}\n" in source or "DISPATCH" not in source
    return source.replace("\nDISPATCH = {}\n", "\n")


def _context(kernel, target, extra_trials=(), table=False):
    # The first baseline trial recorded on the H200, alone: later loop runs add to the history, and these
    # tests are about what the proposer does from that one profile. ``table``: today's baseline as it is, with
    # its (empty) dispatch table, which the proposer then tunes bucket by bucket.
    baseline = next(t for t in _recorded_trials(kernel) if t.name == "baseline" and t.device == "cuda")
    source = baseline_path(kernel).read_text()
    return Context(get_spec(kernel), target, [baseline, *extra_trials], baseline,
                   source if table else _without_table(source))


def test_diagnoses_the_fused_backward_spills_at_the_widest_rows_first():
    baseline = next(t for t in _recorded_trials("fused_add_rms_norm") if t.name == "baseline")
    diagnoses = diagnose(baseline, "backward")
    assert diagnoses[0].name == "spills" and "2048x32768" in diagnoses[0].evidence
    assert "local-memory traffic" in diagnoses[0].evidence
    assert {"under_one_wave", "low_achieved_occupancy"} <= {d.name for d in diagnoses}
    assert diagnose(make_trial(ncu={"status": "unavailable"}), "backward") == []


def test_proposes_the_remedy_the_diagnosis_points_to_with_hypothesis_and_prediction():
    proposal = RulesProposer().propose(_context("fused_add_rms_norm", "backward"))
    assert isinstance(proposal, Proposal)
    # Fewer live vectors first (no extra traffic), then the chunked walks (an L2 re-read per row).
    assert proposal.changes == {"bwd_dw_order": "before_dx"}
    assert proposal.diagnosis == "spills"
    assert "register spills" in proposal.hypothesis and proposal.prediction
    knobs, _ = read_knobs(proposal.source)
    assert knobs["bwd_dw_order"] == "before_dx" and knobs["bwd_column_chunked"] is False


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
    assert second.changes == {"bwd_weight_reload": True}
    also = make_trial(name="y", variant={"sha256": source_hash(second.source), "knobs": {}}, verdict="rejected")
    third = RulesProposer().propose(_context("fused_add_rms_norm", "backward", [held, also]))
    assert third.changes == {"bwd_column_chunked": "per_row", "BLOCK_SIZE": 8192}
    knobs, _ = read_knobs(third.source)
    assert knobs["bwd_column_chunked"] == "per_row" and knobs["BLOCK_SIZE"] == 8192


def _without_knobs(source, *names):
    """A variant as one written before ``names`` were knobs: their KNOBS and KNOB_CHOICES lines gone."""
    for name in names:
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(f'"{name}"'))
    assert not set(names) & set(read_knobs(source)[0])
    return source


def test_a_rejection_that_won_on_the_target_rules_out_no_direction():
    # A best older than the register-order knobs: its spills remedies are the chunked walks, whose second one
    # moves the first one's knob the same way (False -> "per_row"), which a rejection without a gain rules out.
    context = _context("fused_add_rms_norm", "backward")
    context.best_source = _without_knobs(context.best_source, "bwd_dw_order", "bwd_weight_reload")
    first = RulesProposer().propose(context)
    assert first.changes == {"bwd_column_chunked": "per_row", "BLOCK_SIZE": 8192}
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


# -- a spec without remedies: the proposer searches KNOB_CHOICES ---------------------------------------------

def _without_remedies(kernel, target):
    context = _context(kernel, target)
    context.spec = copy.copy(context.spec)  # a copy: the registry may hand every caller the same spec
    context.spec.remedies = {}
    return context


def _moved(context, proposal):
    """The one knob a proposal changes, with its value before and after; the source must say the same."""
    before, choices = read_knobs(context.best_source)
    after, _ = read_knobs(proposal.source)
    moved = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert len(moved) == 1 and proposal.changes == {k: new for k, (_, new) in moved.items()}
    ((knob, (old, new)),) = moved.items()
    assert new in choices[knob] and new != old
    return knob, old, new


def _run(context, proposal):
    context.trials.append(make_trial(trial_id=len(context.trials), name=proposal.name,
                                     variant={"sha256": source_hash(proposal.source), "knobs": {}}))


def test_a_spec_without_remedies_explores_one_knob_at_a_time():
    context = _without_remedies("relu_squared", "forward")
    first = RulesProposer().propose(context)
    assert isinstance(first, Proposal)
    knob, old, new = _moved(context, first)
    assert first.diagnosis.startswith("explore-knobs")
    assert "Exploring KNOB_CHOICES, not a hand-written remedy" in first.hypothesis
    assert f"knob {knob} from {old!r} to {new!r}" in first.hypothesis and first.prediction
    _run(context, first)
    second = RulesProposer().propose(context)
    assert isinstance(second, Proposal) and second.source != first.source
    _moved(context, second)


def test_the_nearest_values_of_a_knob_come_first():
    context = _without_remedies("relu_squared", "forward")
    context.best = copy.deepcopy(context.best)
    context.best.ncu = Ncu(status="unavailable", reason="test")  # no diagnosis: the plain walk
    knobs, choices = read_knobs(context.best_source)
    distances = {}
    while isinstance(step := RulesProposer().propose(context), Proposal):
        knob, old, new = _moved(context, step)
        distances.setdefault(knob, []).append(abs(choices[knob].index(new) - choices[knob].index(old)))
        _run(context, step)
    assert distances and all(d == sorted(d) for d in distances.values())
    # A forward target never moves a knob that only the backward uses.
    assert set(distances) == {k for k in knobs if knob_pass(k) != "backward"}


def test_a_spec_without_remedies_stops_when_every_knob_choice_is_tried():
    context = _without_remedies("relu_squared", "forward")
    knobs, choices = read_knobs(context.best_source)
    proposed = set()
    while isinstance(step := RulesProposer().propose(context), Proposal):
        ((knob, value),) = step.changes.items()
        assert (knob, value) not in proposed  # never the same configuration twice
        proposed.add((knob, value))
        _run(context, step)
    assert isinstance(step, Stop) and "nothing left to try for forward" in step.reason
    assert "knob choices are exhausted" in step.reason
    assert proposed == {(k, v) for k in knobs if knob_pass(k) != "backward" for v in choices[k] if v != knobs[k]}


def test_knob_exploration_follows_the_spec_remedies_once_they_are_used_up():
    context = _context("relu_squared", "forward")  # with the spec's hand-written remedies
    seen = []
    while isinstance(step := RulesProposer().propose(context), Proposal):
        seen.append(step.diagnosis)
        _run(context, step)
    explored = [d.startswith("explore-knobs") for d in seen]
    assert explored[0] is False and True in explored
    assert explored == sorted(explored)  # every remedy first, then the search


def test_the_diagnosed_pass_s_knobs_are_explored_first():
    context = _without_remedies("fused_add_rms_norm", "full")
    top = max(((p, d) for p in ("forward", "backward") for d in diagnose(context.best, p)),
              key=lambda pd: pd[1].severity)
    assert top[0] == "backward"  # the recorded profile: the backward spills
    proposal = RulesProposer().propose(context)
    knob, _, _ = _moved(context, proposal)
    assert knob_pass(knob) == "backward" and proposal.diagnosis == f"explore-knobs:{top[1].name}"
    assert f"the backward diagnosis {top[1].name}" in proposal.hypothesis

    # With the backward's profile gone, the forward's diagnosis orders the search: a forward knob first.
    context.best = copy.deepcopy(context.best)
    for launch in context.best.launches("backward"):
        launch.metrics.clear()
    assert not diagnose(context.best, "backward") and diagnose(context.best, "forward")
    knob, _, _ = _moved(context, RulesProposer().propose(context))
    assert knob_pass(knob) == "forward"


def test_the_diagnosis_sets_which_way_a_knob_moves_first():
    context = _without_remedies("fused_add_rms_norm", "backward")  # the recorded backward spills
    assert diagnose(context.best, "backward")[0].name == "spills"
    context.best_source = with_knobs(context.best_source, {"bwd_num_warps": 8, "bwd_tile_elements": 4096})
    knobs, choices = read_knobs(context.best_source)
    first = {}
    while isinstance(step := RulesProposer().propose(context), Proposal) and len(first) < 2:
        knob, old, new = _moved(context, step)
        if knob in ("bwd_num_warps", "bwd_tile_elements"):
            first.setdefault(knob, (old, new))
        _run(context, step)
    # Spills: spread the tile over more warps, hold a smaller tile; one step along each list first.
    old, new = first["bwd_num_warps"]
    assert new > old and choices["bwd_num_warps"].index(new) == choices["bwd_num_warps"].index(old) + 1
    old, new = first["bwd_tile_elements"]
    assert new < old and choices["bwd_tile_elements"].index(new) == choices["bwd_tile_elements"].index(old) - 1


# -- the launch model, extra launches, and knob settings the history ran on an older baseline --------------------

def _recorded(kernel, trial_id):
    return next(t for t in _recorded_trials(kernel) if t.trial_id == trial_id)


def _on_todays_baseline(trial):
    """The recorded trial's knobs written onto today's baseline (knobs it lacks at today's defaults), without a
    dispatch table as the recorded variants are."""
    return with_knobs(_without_table(baseline_path(trial.kernel).read_text()), dict(trial.variant.knobs))


def test_the_launch_model_foresees_trial_0008_s_shared_memory_failure_and_0017_s_spills():
    """Trial 0008 crashed on the H200 (OutOfResources: 393288 bytes of shared memory > 232448); trial 0017
    spilled at 2048x16384 and nowhere else. The spec's launch model says both before anything runs."""
    import torch

    from liger_perf.propose.resources import launch_problem, limits_for, spilling_shapes

    spec = get_spec("fused_add_rms_norm")
    crashed, best = _recorded("fused_add_rms_norm", 8), _recorded("fused_add_rms_norm", 17)
    assert crashed.status == "crashed" and "shared memory" in crashed.reason
    limits = limits_for(best.fingerprint.compute_capability)
    shapes, dtypes = spec.suites["gpu"], [torch.float32, torch.bfloat16]
    assert crashed.variant.knobs is None  # it crashed before they were read: its best's, and its change
    crashed_knobs, _ = read_knobs(with_knobs(_on_todays_baseline(_recorded("fused_add_rms_norm", 6)),
                                             crashed.changes))
    problem = launch_problem(spec, crashed_knobs, ["backward"], shapes, dtypes, limits)
    assert problem and "shared memory" in problem and "2048x16384 float32" in problem
    best_knobs, _ = read_knobs(_on_todays_baseline(best))
    assert launch_problem(spec, best_knobs, ["forward", "backward"], shapes, dtypes, limits) is None
    recorded_spills = {f"{launch.shape} {launch.dtype}" for launch in best.launches("backward")
                       if (launch.metrics.get("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum") or 0) > 0}
    assert set(spilling_shapes(spec, best_knobs, "backward", [(2048, h) for h in (1024, 4096, 8192, 16384)],
                               dtypes, limits)) == recorded_spills == {"2048x16384 float32", "2048x16384 bfloat16"}


def test_a_remedy_that_cannot_launch_is_skipped_for_the_next():
    spec = copy.copy(get_spec("fused_add_rms_norm"))
    spec.remedies = {"backward": {"spills": [Remedy({"num_stages": 3}, "deeper pipelining", "faster"),
                                             Remedy({"num_stages": 2}, "pipelining", "faster")]}}
    best = _recorded("fused_add_rms_norm", 17)
    proposal = RulesProposer().propose(Context(spec, "backward", [best], best, _on_todays_baseline(best)))
    assert proposal.changes == {"num_stages": 2}


def test_extra_launches_are_diagnosed_where_the_dw_reduction_takes_a_large_share():
    best = _recorded("fused_add_rms_norm", 17)
    extra = next(d for d in diagnose(best, "backward") if d.name == "extra_launches")
    assert "2048x1024 float32" in extra.evidence and "reduce_kernel" in extra.evidence
    assert 0.3 < extra.severity < 0.5  # 9.3 of 22.8 us in trial 0017's profile
    remedy = get_spec("fused_add_rms_norm").remedies["backward"]["extra_launches"][0]
    assert "bwd_fused_dw_max_cols" in remedy.changes


def test_knob_settings_the_history_ran_on_an_older_baseline_are_not_proposed_again():
    """Every source changes with the baseline; the settings do not. From the best of the recorded history,
    rewritten onto today's baseline, no proposal repeats a recorded trial's knob settings."""
    trials = _recorded_trials("fused_add_rms_norm")
    best = _recorded("fused_add_rms_norm", 17)
    source = _on_todays_baseline(best)
    defaults, _ = read_knobs(baseline_path("fused_add_rms_norm").read_text())
    ran = [{**defaults, **t.variant.knobs} for t in trials if t.variant.knobs and t.kind != "screening"]
    context = Context(get_spec("fused_add_rms_norm"), "backward", trials, best, source,
                      baseline_source=baseline_path("fused_add_rms_norm").read_text())
    proposed = []
    for _ in range(4):
        proposal = RulesProposer().propose(context)
        knobs, _ = read_knobs(proposal.source)
        assert knobs not in ran, proposal.name
        proposed.append(proposal.name)
        context.pending.append(source_hash(proposal.source))
    assert len(set(proposed)) == 4


def test_a_launch_model_that_cannot_read_the_knobs_rules_nothing_out():
    """A variant a model wrote may set knob values its spec's author never listed; the proposer goes on."""
    import torch

    from liger_perf.propose.resources import DEFAULT_LIMITS, launch_problem

    spec = get_spec("fused_add_rms_norm")
    knobs, _ = read_knobs(baseline_path("fused_add_rms_norm").read_text())
    odd = {**knobs, "num_stages": "three"}  # "three" - 1 raises in the spec's model
    assert launch_problem(spec, odd, ["backward"], [(2048, 4096)], [torch.float32], DEFAULT_LIMITS) is None
    assert launch_problem(spec, {**knobs, "num_stages": 3, "BLOCK_SIZE": 16384}, ["backward"], [(2048, 16384)],
                          [torch.float32], DEFAULT_LIMITS) is not None


def test_with_a_dispatch_table_a_remedy_goes_into_the_diagnosed_bucket_only():
    """The spill at 2048x32768 float32 is remedied in bucket 32768x4 (16385-32768 columns of float32) alone:
    the defaults, which every other shape runs, stay as they are."""
    proposal = RulesProposer().propose(_context("fused_add_rms_norm", "backward", table=True))
    assert proposal.changes == {"bwd_dw_order@32768x4": "before_dx"}
    assert proposal.diagnosis == "spills" and "Only in bucket 32768x4 (16385-32768 columns" in proposal.hypothesis
    assert read_knobs(proposal.source)[0] == read_knobs(baseline_path("fused_add_rms_norm").read_text())[0]
    assert read_dispatch(proposal.source) == {"32768x4": {"bwd_dw_order": "before_dx"}}


def test_with_a_dispatch_table_the_walk_moves_one_bucket_at_a_time_the_furthest_from_the_floor_first():
    spec = copy.copy(get_spec("fused_add_rms_norm"))
    spec.remedies = {}  # straight to the walk over KNOB_CHOICES
    context = _context("fused_add_rms_norm", "backward", table=True)
    context.spec = spec
    rows = [r for r in context.best.timing_rows("candidate", "backward") if r.bandwidth_fraction is not None]
    furthest = min(rows, key=lambda r: r.bandwidth_fraction)
    bucket = dispatch_bucket(furthest.shape, furthest.dtype)
    proposal = RulesProposer().propose(context)
    [(name, value)] = proposal.changes.items()
    assert name.endswith(f"@{bucket}") and f"in bucket {bucket}" in proposal.hypothesis
    assert list(read_dispatch(proposal.source)) == [bucket]
    # The same move rejected without gain rules out that bucket's move, not the same move in another bucket.
    knob = name.partition("@")[0]
    rejected = make_trial(verdict="rejected", gain=-0.01, against={"sha256": context.best.variant_sha},
                          variant={"sha256": source_hash(proposal.source), "source": proposal.source,
                                   "knobs": read_knobs(proposal.source)[0]}, changes=proposal.changes)
    trials = [*context.trials, rejected]
    old = read_knobs(context.best_source)[0][knob]
    moves = RulesProposer._rejected_moves(trials, read_knobs(context.best_source)[1])
    assert {m for m in moves if m[0].startswith(f"{knob}@")} == {
        (name, repr(old), _direction(read_knobs(context.best_source)[1][knob], old, value))}
    again = RulesProposer().propose(Context(spec, "backward", trials, context.best, context.best_source))
    assert again.changes != proposal.changes


def test_with_a_dispatch_table_settings_a_trial_ran_are_not_proposed_again():
    """A complete trial that ran an entry is found by its settings, not its source: the same entry written onto
    another source (a changed comment, say) is not proposed again."""
    spec = copy.copy(get_spec("fused_add_rms_norm"))
    spec.remedies = {}
    context = _context("fused_add_rms_norm", "backward", table=True)
    context.spec = spec
    first = RulesProposer().propose(context)
    ran = make_trial(variant={"sha256": "other", "source": first.source + "\n# a comment\n",
                              "knobs": read_knobs(first.source)[0]})
    second = RulesProposer().propose(Context(spec, "backward", [*context.trials, ran], context.best,
                                             context.best_source))
    assert second.changes != first.changes


def test_with_a_dispatch_table_the_buckets_take_turns_and_no_move_is_a_no_op_at_its_shapes():
    """Twelve proposals, each rejected in turn: the buckets (and then the defaults) take a move each before any
    bucket gets a second one, and every bucket move changes what some timed shape of its bucket runs."""
    import torch

    spec = copy.copy(get_spec("fused_add_rms_norm"))
    spec.remedies = {}
    context = _context("fused_add_rms_norm", "backward", table=True)
    context.spec = spec
    best = context.best
    cases = {}
    for row in best.timing_rows("candidate", "backward"):
        cases.setdefault(dispatch_bucket(row.shape, row.dtype), set()).add(
            (tuple(map(int, row.shape.split("x"))), getattr(torch, row.dtype)))
    trials, scopes = list(context.trials), []
    knobs = read_knobs(context.best_source)[0]
    for n in range(16):
        proposal = RulesProposer().propose(Context(spec, "backward", trials, best, context.best_source))
        [(name, value)] = proposal.changes.items()
        knob, _, bucket = name.partition("@")
        scopes.append(bucket or "defaults")
        if bucket:
            assert any(spec.effective_settings(knobs, s, d) != spec.effective_settings({**knobs, knob: value}, s, d)
                       for s, d in cases[bucket]), name
        trials.append(make_trial(trial_id=100 + n, verdict="rejected", gain=-0.01, changes=proposal.changes,
                                 against={"sha256": best.variant_sha},
                                 variant={"sha256": source_hash(proposal.source), "source": proposal.source,
                                          "knobs": read_knobs(proposal.source)[0]}))
    turn = len(cases) + 1
    assert len(set(scopes[:turn])) == turn and scopes[turn - 1] == "defaults", scopes
    assert scopes[turn] == scopes[0], scopes  # the second round starts with the first bucket again


def test_with_a_dispatch_table_every_bucket_gets_its_own_diagnosis():
    baseline = _context("fused_add_rms_norm", "backward", table=True).best
    spills = [d for d in diagnose(baseline, "backward", per_bucket=True) if d.name == "spills"]
    buckets = [dispatch_bucket(d.shape, d.dtype) for d in spills]
    assert len(buckets) == len(set(buckets)) >= 2  # one per bucket: both dtypes of the widest rows spill
    assert [d.name for d in diagnose(baseline, "backward")].count("spills") == 1  # without: the worst case only


def test_a_batch_spreads_over_diagnoses_and_buckets():
    """A screening batch holds at most two answers to one problem (with a table, a bucket): the third candidate
    is for another bucket's problem, not a third remedy for the worst one."""
    from liger_perf.propose.rules import BATCH_PER_DIAGNOSIS

    context = _context("fused_add_rms_norm", "backward", table=True)
    scopes = []
    for _ in range(BATCH_PER_DIAGNOSIS + 1):
        proposal = RulesProposer().propose(context)
        scopes.append((proposal.diagnosis, {name.partition("@")[2] for name in proposal.changes}))
        context.pending.append(source_hash(proposal.source))
    assert scopes[0] == scopes[1] == ("spills", {"32768x4"})  # the worst spill first, as without a batch
    assert scopes[2] == ("spills", {"32768x2"}), scopes  # the same diagnosis read in the next bucket


def test_a_batch_takes_a_third_remedy_of_a_problem_before_an_undirected_move():
    """The cap spreads a batch only while another diagnosed problem has a remedy left: with one diagnosis that
    has remedies (its two register-order ones pending), the third candidate is its next remedy, not an
    exploration move, and no hypothesis says that no diagnosis is left."""
    context = _context("fused_add_rms_norm", "backward", table=True)
    spec = copy.copy(context.spec)
    spec.remedies = {"backward": {"spills": context.spec.remedies["backward"]["spills"],
                                  "explore": context.spec.remedies["backward"]["explore"]}}
    context.spec = spec
    proposals = []
    for _ in range(3):
        proposals.append(RulesProposer().propose(context))
        context.pending.append(source_hash(proposals[-1].source))
    assert [p.changes for p in proposals] == [{"bwd_dw_order@32768x4": "before_dx"},
                                              {"bwd_weight_reload@32768x4": True},
                                              {"bwd_dw_order@32768x2": "before_dx"}]
    context.pending = context.pending[:2]
    context.best = context.best.model_copy(deep=True)  # now a profile of the worst spill alone
    context.best.ncu.launches = [launch for launch in context.best.ncu.launches
                                 if (launch.shape, launch.dtype) == ("2048x32768", "float32")]
    third = RulesProposer().propose(context)
    assert third.diagnosis == "spills" and third.changes == {"bwd_column_chunked@32768x4": "per_row",
                                                             "BLOCK_SIZE@32768x4": 8192}
    assert "no NCU diagnosis left" not in third.hypothesis


def test_a_best_older_than_a_remedys_knob_gets_the_remedies_it_has():
    """The recorded bests predate the register-order knobs: their remedies are passed over, in a batch too."""
    context = _context("fused_add_rms_norm", "backward", table=True)
    context.best_source = _without_knobs(context.best_source, "bwd_dw_order", "bwd_weight_reload")
    first = RulesProposer().propose(context)
    assert first.changes == {"bwd_column_chunked@32768x4": "per_row", "BLOCK_SIZE@32768x4": 8192}
    context.pending.append(source_hash(first.source))
    assert "bwd_dw_order" not in str(RulesProposer().propose(context).changes)


def _peer_context(peer_faster_at: tuple[str, str], share: float = 0.5, pass_name: str = "backward"):
    """Today's baseline with its dispatch table, its baseline trial the recorded one (re-labelled as today's):
    every peer ten times slower than the baseline except torch.compile at ``peer_faster_at`` in ``pass_name``,
    which takes ``share`` of the baseline's time."""
    context = _context("fused_add_rms_norm", "backward", table=True)
    source = context.best_source
    baseline = context.best.model_copy(deep=True)
    baseline.variant.sha256, baseline.variant.source = source_hash(source), source
    ours = {r.key: r.median_ms for r in baseline.timing_rows("candidate")}
    for row in baseline.timing_rows():
        if row.contender in ("torch.compile", "liger-kernel"):
            faster = row.contender == "torch.compile" and (row.pass_name, row.shape, row.dtype) == \
                (pass_name, *peer_faster_at)
            row.median_ms = ours[row.key] * (share if faster else 10)
    context.best, context.trials = baseline, [baseline]
    return context


def test_a_bucket_where_a_peer_is_faster_is_remedied_first():
    """The NCU severity puts the widest rows' spills first (32768 columns); but where torch.compile is twice as
    fast as the best (1024 columns, bfloat16), that bucket's problems come first, and the hypothesis says why."""
    from liger_perf.propose.rules import peer_leads

    context = _peer_context(("2048x1024", "bfloat16"))
    leads = peer_leads(context.trials, context.baseline_source or context.best_source, ["backward"])
    assert leads[("backward", "1024x2")].peer == "torch.compile"
    assert leads[("backward", "1024x2")].lead == pytest.approx(2.0) and leads[("backward", "1024x2")].ahead
    assert leads[("backward", "32768x4")].lead == pytest.approx(0.1)
    assert ("forward", "1024x2") not in leads  # the target's pass only
    context.baseline_source = context.best_source
    proposal = RulesProposer().propose(context)
    assert {name.partition("@")[2] for name in proposal.changes} == {"1024x2"}, proposal.changes
    assert "A peer is faster there: the best takes 2.00x torch.compile's backward time" in proposal.hypothesis


def test_once_the_accepted_steps_overtake_the_peer_the_bucket_takes_its_place_by_severity_again():
    context = _peer_context(("2048x1024", "bfloat16"))
    context.baseline_source = context.best_source
    baseline = context.best
    # An accepted step that took that case to 0.4 of the baseline's time (faster than the peer's 0.5).
    step = baseline.model_copy(deep=True)
    step.variant.sha256 = "step"
    for row in step.timing_rows("candidate"):
        row.relative_to, row.ratio = "against", 0.4 if (row.pass_name, row.shape, row.dtype) == (
            "backward", "2048x1024", "bfloat16") else 1.0
        row.ci_low = row.ci_high = row.ratio
    step.trial_id, step.against = 1, step.variant.model_copy(update={"sha256": baseline.variant_sha})
    step = step.model_copy(update={"judged": Verdict(verdict="accepted", gain=0.1)})
    context.trials = [baseline, step]
    from liger_perf.propose.rules import peer_leads

    assert peer_leads(context.trials, context.baseline_source, ["backward"])[("backward", "1024x2")].lead == \
        pytest.approx(0.8)
    proposal = RulesProposer().propose(context)  # the profile is the baseline's: the worst spill first again
    assert {name.partition("@")[2] for name in proposal.changes} == {"32768x4"}, proposal.changes
    assert "A peer is faster" not in proposal.hypothesis


def test_a_peer_within_the_noise_of_the_best_does_not_reorder_the_buckets():
    context = _peer_context(("2048x1024", "bfloat16"), share=0.99)
    context.baseline_source = context.best_source
    proposal = RulesProposer().propose(context)
    assert {name.partition("@")[2] for name in proposal.changes} == {"32768x4"}, proposal.changes
    assert "A peer is faster" not in proposal.hypothesis


def test_with_a_full_target_the_peer_lead_is_read_in_the_full_pass():
    """The judge scores a full target on the full pass: a peer ahead only in the backward does not reorder."""
    from liger_perf.propose.rules import peer_leads

    ahead_in_full = _peer_context(("2048x1024", "bfloat16"), pass_name="full")
    ahead_in_full.target, ahead_in_full.baseline_source = "full", ahead_in_full.best_source
    proposal = RulesProposer().propose(ahead_in_full)
    assert {name.partition("@")[2] for name in proposal.changes} == {"1024x2"}, proposal.changes
    assert "torch.compile's full time" in proposal.hypothesis
    ahead_in_backward = _peer_context(("2048x1024", "bfloat16"))
    ahead_in_backward.target, ahead_in_backward.baseline_source = "full", ahead_in_backward.best_source
    assert not peer_leads(ahead_in_backward.trials, ahead_in_backward.baseline_source, ["full"])[
        ("full", "1024x2")].ahead
    proposal = RulesProposer().propose(ahead_in_backward)
    assert "A peer is faster" not in proposal.hypothesis


def test_with_a_table_a_batch_spreads_over_buckets_not_only_over_diagnoses():
    """Two diagnoses of one bucket are one problem. Where torch.compile leads (1024 columns, bfloat16), that
    bucket's too few waves and its low achieved occupancy come first: two remedies for them, then the third
    candidate goes to another bucket, not to a second diagnosis of the same one."""
    context = _peer_context(("2048x1024", "bfloat16"))
    context.baseline_source = context.best_source
    narrow = {d.name for d in diagnose(context.best, "backward", per_bucket=True)
              if dispatch_bucket(d.shape, d.dtype) == "1024x2"}
    assert {"under_one_wave", "low_achieved_occupancy"} <= narrow  # the bucket has more than one problem
    buckets = []
    for _ in range(3):
        proposal = RulesProposer().propose(context)
        buckets.append({name.partition("@")[2] for name in proposal.changes})
        context.pending.append(source_hash(proposal.source))
    assert buckets[0] == buckets[1] == {"1024x2"} and buckets[2] != {"1024x2"}, buckets


def test_a_move_screened_out_in_one_bucket_stays_ruled_out_while_that_bucket_runs_the_same_settings():
    """Screening 0037 dropped ``bwd_weight_reload@16384x4`` against 0036; 0039 then changed bucket 16384x2 only.
    On 0039 the same move in 16384x4 measures what 0037 measured: it is not proposed again. Once 16384x4 itself
    runs other settings, it may be."""
    from liger_perf.propose.rules import _KnobsRan

    base = baseline_path("fused_add_rms_norm").read_text()
    move = {"bwd_weight_reload@16384x4": True}
    dropped = with_knobs(base, move)
    screening = make_trial(kind="screening", against={"sha256": source_hash(base)}, variant={"sha256": "batch"},
                           screening={"target": "backward", "rows": [
                               {"name": "0-reload", "sha256": source_hash(dropped), "source": dropped,
                                "kept": False, "changes": move}]})

    def ran_on(changes_to_best: dict, candidate: dict) -> bool:
        best = with_knobs(base, changes_to_best)
        return _KnobsRan([screening], read_knobs(best)[0], base, read_dispatch(best))(candidate)

    assert ran_on({}, move)  # the screened settings themselves
    assert ran_on({"bwd_dw_order@16384x2": "before_dx"}, move)  # another bucket changed since
    assert not ran_on({"bwd_dw_order@16384x4": "before_dx"}, move)  # this bucket changed since
    assert not ran_on({"bwd_dw_order@16384x2": "before_dx"}, {"bwd_weight_reload@16384x2": True})


def _carried_over_0045():
    """Trial 0045 (the best of the H200 history on the baseline of trial 0035) and its knobs written onto today's
    baseline, as the loop's carry-over trial would run them; with 0035's source, the baseline the chain is on."""
    from liger_perf.kernel.variants import changes_between, recorded_dispatch

    trials = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 45]
    old_baseline, best = (next(t for t in trials if t.trial_id == n) for n in (35, 45))
    moves = changes_between(old_baseline.variant.knobs, recorded_dispatch(old_baseline.variant.source),
                            best.variant.knobs, recorded_dispatch(best.variant.source))
    return trials, best, with_knobs(baseline_path("fused_add_rms_norm").read_text(), moves), old_baseline.variant.source


def test_shared_memory_stalls_are_diagnosed_where_a_16_bit_tile_sums_dw_across_warps():
    """Trial 0045's profile: at 2047x896 and 43690x1536 bfloat16 (buckets 1024x2, 2048x2: a tile's rows on
    different warps) short-scoreboard and MIO-throttle stalls outweigh the waits on memory; at the same shapes in
    float32, and at every wider 16-bit row, the waits on memory lead."""
    _, best, _, _ = _carried_over_0045()
    found = [d for d in diagnose(best, "backward", per_bucket=True) if d.name == "shared_memory_stalls"]
    assert {dispatch_bucket(d.shape, d.dtype) for d in found} == {"1024x2", "2048x2"}
    at_1536 = next(d for d in found if d.shape == "43690x1536")
    assert "9.6 cycles" in at_1536.evidence and "waits on memory 4.1" in at_1536.evidence
    assert 0.4 < at_1536.severity < 0.5
    remedy = get_spec("fused_add_rms_norm").remedies["backward"]["shared_memory_stalls"][0]
    assert remedy.changes == {"bwd_dw_accumulator": "tile"}


def test_the_register_limit_caps_occupancy_only_where_a_grid_has_blocks_waiting():
    """0045's backward runs one program per SM (0.97 waves): every block is resident, so its 25 % theoretical
    occupancy by registers is not a limit a remedy could lift. Its forward (a program per row, many waves) is."""
    _, best, _, _ = _carried_over_0045()
    assert "register_limited_occupancy" not in {d.name for d in diagnose(best, "backward", per_bucket=True)}
    limited = [d for d in diagnose(best, "forward", per_bucket=True) if d.name == "register_limited_occupancy"]
    assert limited and all(launch.metric("launch__waves_per_multiprocessor") > 1
                           for launch in best.launches("forward")
                           if (launch.shape, launch.dtype) in {(d.shape, d.dtype) for d in limited})


def test_told_which_buckets_to_tune_the_proposer_changes_those_alone():
    """From 0045 carried over: unfocused, a bucket where liger-kernel leads (16384x4) comes first; told to tune
    2048x2, the shared-memory remedy there, then only 2048x2 moves; a bucket no case falls in: a stop."""
    trials, best, source, old_baseline = _carried_over_0045()
    spec = get_spec("fused_add_rms_norm")

    def context(buckets=()):
        return Context(spec, "backward", trials, best, source, baseline_source=old_baseline, suite="models-tune",
                       buckets=buckets)

    assert "@16384x4" in next(iter(RulesProposer().propose(context()).changes))
    focused = context(("2048x2",))
    first = RulesProposer().propose(focused)
    assert first.changes == {"bwd_dw_accumulator@2048x2": "tile"} and first.diagnosis == "shared_memory_stalls"
    assert "short-scoreboard" in first.hypothesis
    for _ in range(5):
        focused.pending.append(source_hash(RulesProposer().propose(focused).source))
        proposal = RulesProposer().propose(focused)
        assert all(name.endswith("@2048x2") for name in proposal.changes), proposal.changes
    stop = RulesProposer().propose(context(("65536x2",)))
    assert isinstance(stop, Stop) and "65536x2" in stop.reason


def test_told_to_tune_a_bucket_no_diagnosis_reaches_its_batch_holds_the_spec_s_remedies_before_the_walk(monkeypatch):
    """From trial 0071 (the H200 history), `--buckets 2048x4`: the NCU profile of 43690x1536 float32 tripped no rule
    (DRAM at 73 % of its peak, above the memory-latency rule's 60 % of then, kept here), so no diagnosis reached the
    bucket. The batch was four steps of the blind walk over KNOB_CHOICES (one row per program, two tile sizes, 4
    elements a thread); it is now the spec's remedies for no diagnosis in
    particular, written into that bucket alone, the split of each SM's rows between two programs among them."""
    monkeypatch.setattr("liger_perf.propose.rules.MEMORY_LATENCY_DRAM_PCT", 60)
    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 71]
    best = next(t for t in history if t.trial_id == 71)
    context = _tuning_context(history, best, "backward", "2048x4")
    assert not [d for d in diagnose(best, "backward", per_bucket=True)
                if dispatch_bucket(d.shape, d.dtype) == "2048x4"]
    batch = []
    for _ in range(4):
        proposal = RulesProposer().propose(context)
        assert isinstance(proposal, Proposal), proposal
        batch.append(proposal)
        context.pending.append(source_hash(proposal.source))
        context.pending_sources.append(proposal.source)
    assert all(p.diagnosis == "explore" and list(p.changes) and all(n.endswith("@2048x4") for n in p.changes)
               for p in batch), [(p.diagnosis, p.changes) for p in batch]
    assert {"bwd_programs_per_sm@2048x4": 2} in [p.changes for p in batch]
    assert all("no NCU diagnosis reaches this bucket" in p.hypothesis and "Only in bucket 2048x4" in p.hypothesis
               for p in batch)
    assert all(read_dispatch(p.source).keys() == read_dispatch(best.variant.source).keys() | {"2048x4"}
               for p in batch)


def test_memory_latency_is_read_below_the_floor_target_and_brings_pipelining_into_the_bucket():
    """Trial 0087's NCU profile of 12289x896 float32 (bucket 1024x4): DRAM at 66 % of its peak, long-scoreboard stalls
    first. Under the rule's old 60 % it tripped nothing, and `--buckets 1024x4` screened tile sizes and rows per
    program, no pipelining. Below 75 % (85 % of the copy floor) it is memory latency, and the batch holds
    `num_stages`; a profile at 81 % (43690x1536 float32, bucket 2048x4) still trips nothing."""
    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 88]
    best = next(t for t in history if t.trial_id == 87)
    found = {(dispatch_bucket(d.shape, d.dtype), d.name): d for d in diagnose(best, "backward", per_bucket=True)}
    assert "DRAM at 66%" in found[("1024x4", "memory_latency")].evidence
    assert not [key for key in found if key[0] == "2048x4"]
    context = _tuning_context(history, best, "backward", "1024x4")
    batch = [p.changes for p in _batch(context, 6)]
    assert {"num_stages@1024x4": 2} in batch and {"num_stages@1024x4": 3} in batch, batch


def test_a_forward_screening_holds_no_backward_move_and_walks_warps_from_what_auto_runs():
    """`plan --target forward --buckets 8192x4` on trial 0087: its walk held num_stages 1 (which pipelines the
    backward's row loop alone: the forward runs as before) and num_warps 1, the list's neighbour of "auto", where
    "auto" runs 16 warps at every case of the bucket (rows of 8192 elements). Now a move must change the target's
    pass in its bucket, and the walk steps from 16: to 8 and 32."""
    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 88]
    best = next(t for t in history if t.trial_id == 87)
    context = _tuning_context(history, best, "forward", "8192x4")
    batch = [p.changes for p in _batch(context, 6)]
    warps = [changes["num_warps@8192x4"] for changes in batch if "num_warps@8192x4" in changes]
    assert warps == [8, 32], batch
    while isinstance(proposal := RulesProposer().propose(context), Proposal):  # every move left, to the end
        batch.append(proposal.changes)
        context.pending.append(source_hash(proposal.source))
        context.pending_sources.append(proposal.source)
    # The forward's own knobs and the warps it runs; no num_stages, BLOCK_SIZE (no chunk narrower than its rows)
    # or dw_reduction, which leave the forward as it runs there. (A backward knob only beside the warps, to keep
    # the backward as it ran: the next test.)
    assert {name.partition("@")[0] for changes in batch for name in changes} == {
        "fwd_rows_per_program", "fwd_w_load", "num_warps", "bwd_num_warps"}, batch
    assert all("num_warps@8192x4" in changes for changes in batch if "bwd_num_warps@8192x4" in changes), batch


def test_a_forward_move_of_a_shared_knob_keeps_the_backward_as_it_ran():
    """`plan --target forward --buckets 8192x4` on trial 0087 held num_warps 8 and 32, which the backward follows
    there (``bwd_num_warps`` "same"): the screening timed the forward, and the full trial's guardrail would then
    meet a backward of 8 or 32 warps where "auto" runs 16. Each warps move now comes with ``bwd_num_warps``
    "auto": the forward changes at every case of the bucket, the backward at none. A backward screening's moves
    are its own, unpaired."""
    from liger_perf.propose.rules import _buckets_to_tune, _changes_nothing
    from liger_perf.record.history import best_timing_rows

    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 88]
    best = next(t for t in history if t.trial_id == 87)
    spec = get_spec("fused_add_rms_norm")
    context = _tuning_context(history, best, "forward", "8192x4")
    batch = _batch(context, 6)
    warps = [p for p in batch if "num_warps@8192x4" in p.changes]
    assert [p.changes for p in warps] == [
        {"num_warps@8192x4": 8, "bwd_num_warps@8192x4": "auto"},
        {"num_warps@8192x4": 32, "bwd_num_warps@8192x4": "auto"}], [p.changes for p in batch]
    assert all("bwd_num_warps='auto', which runs the backward there as the best does" in p.hypothesis
               for p in warps)
    here = knobs_in(*read_knobs(best.variant.source)[:1], read_dispatch(best.variant.source), "8192x4")
    cases = _buckets_to_tune(best_timing_rows(best, history), "forward")[1]["8192x4"]
    assert cases
    for proposal in warps:
        changes = {name.partition("@")[0]: v for name, v in proposal.changes.items()}
        assert _changes_nothing(spec, here, changes, cases, "backward")
        assert not any(_changes_nothing(spec, here, changes, [case], "forward") for case in cases)
    backward = _tuning_context(history, best, "backward", "8192x4")
    assert not any("fwd_" in name for p in _batch(backward, 6) for name in p.changes)


def _tuning_context(history, best, target, *buckets):
    """The loop's context on the fused kernel's H200 history, tuning split, as `optimize --suite models-tune
    --buckets ...` builds it with `best` the current best."""
    return Context(get_spec("fused_add_rms_norm"), target, history, best, best.variant.source,
                   baseline_source=baseline_path("fused_add_rms_norm").read_text(), suite="models-tune",
                   buckets=buckets)


def _batch(context, size=4):
    """What the loop's screening would hold: proposals asked for one after another, the earlier ones pending."""
    batch = []
    for _ in range(size):
        proposal = RulesProposer().propose(context)
        assert isinstance(proposal, Proposal), proposal
        batch.append(proposal)
        context.pending.append(source_hash(proposal.source))
        context.pending_sources.append(proposal.source)
    return batch


def test_in_a_bucket_no_diagnosis_reaches_moves_measured_faster_elsewhere_come_first_and_slower_ones_last(
        monkeypatch):
    """From trial 0073, `--buckets 4096x4`: the spec's list begins with the in-launch dW sum, which screenings 0060
    (1024x2) and 0072 (2048x4) found clearly slower, and holds the split of each SM's rows, faster in 2048x2
    (screening 0070) and 2048x4 (0073 accepted it). The batch takes the moves faster in the most buckets first
    (dW before dX, faster in three: 0039, 0042, 0045; the split in two) and leaves the dW sum out; each
    hypothesis says what the move did where. (The memory-latency rule at its 60 % of then: no diagnosis reaches
    the bucket.)"""
    from liger_perf.propose.rules import _move_key, _moves_measured

    monkeypatch.setattr("liger_perf.propose.rules.MEMORY_LATENCY_DRAM_PCT", 60)

    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 73]
    best = next(t for t in history if t.trial_id == 73)
    measured = _moves_measured(history, "backward")
    # One result per bucket, the latest: 0073's verdict stands for 2048x4, not 0072's screening beside it.
    assert measured[_move_key({"bwd_programs_per_sm@2048x4": 2})] == {"2048x2": 1, "2048x4": 1}
    assert measured[_move_key({"bwd_fused_dw_max_cols@1024x2": 8192})] == {"1024x2": -1, "2048x4": -1}
    assert _moves_measured(history, "forward") == {}  # judged on another target: no evidence for this one
    context = _tuning_context(history, best, "backward", "4096x4")
    batch = _batch(context)
    assert batch[0].changes == {"bwd_dw_order@4096x4": "before_dx"}, [p.changes for p in batch]
    assert {"bwd_programs_per_sm@4096x4": 2} in [p.changes for p in batch]
    assert not any("bwd_fused_dw_max_cols@4096x4" in p.changes for p in batch), [p.changes for p in batch]
    balances = [sum(measured.get(_move_key(p.changes), {}).values()) for p in batch]
    assert balances == sorted(balances, reverse=True) and balances[0] == 3, balances
    split = next(p for p in batch if p.changes == {"bwd_programs_per_sm@4096x4": 2})
    assert "faster beyond the interval in 2048x2, 2048x4. Ranked by that" in split.hypothesis


def test_a_move_faster_in_another_bucket_is_screened_in_a_bucket_no_diagnosis_reaches():
    """From trial 0085, `--buckets 8192x2`: num_stages 3 was accepted in 2048x2 (0071) and 4096x2 (0085, 1.28x)
    but is no remedy of the spec's, and 8192x2's profiled case trips no rule, so nothing offered it there. It is
    in the batch now, said to be carried from those buckets; before screening 0070 found it faster in 2048x2, it
    is not."""
    from liger_perf.propose.rules import carried_moves

    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 85]
    best = next(t for t in history if t.trial_id == 85)

    def batch_of(trials):
        context = _tuning_context(trials, best, "backward", "8192x2")
        return _batch(context)

    batch = batch_of(history)
    carried = next(p for p in batch if p.changes == {"num_stages@8192x2": 3})
    assert "the same move ran faster beyond its interval in 2048x2, 4096x2" in carried.hypothesis
    assert "a move faster in another bucket" in carried.hypothesis and "8192x2" in carried.hypothesis
    assert all(list(p.changes) and all(n.endswith("@8192x2") for n in p.changes) for p in batch)
    before_0070 = [t for t in history if t.trial_id < 70]
    assert {"num_stages@8192x2": 3} not in [p.changes for p in batch_of(before_0070)]
    # A move faster in this very bucket (against an earlier best) and nowhere else says so.
    reload = next(p for p in batch if p.changes == {"bwd_weight_reload@8192x2": True})
    assert "a move faster in another bucket" in reload.hypothesis  # 16384x2 and 16384x4 besides 8192x2
    # Only moves faster somewhere are carried, those of the pass tuned or shared, their values as the knobs take
    # them, the most buckets first; a value no literal reads back (a float's inf) leaves its move out.
    measured = {(("num_stages", "3"),): {"2048x2": 1, "4096x2": 1},
                (("bwd_dw_order", "'before_dx'"),): {"8192x2": 1, "1024x2": -1},
                (("bwd_tile_elements", "8192"),): {"2048x2": 0, "4096x4": -1},
                (("fwd_rows_per_program", "2"),): {"1024x2": 1, "2048x2": 1, "4096x2": 1},
                (("bwd_eps_scale", "inf"),): {"1024x2": 1}}
    moves = carried_moves(measured, "backward")
    assert [(dict(r.changes), buckets) for r, buckets in moves] == [({"num_stages": 3}, ("2048x2", "4096x2")),
                                                                    ({"bwd_dw_order": "before_dx"}, ("8192x2",))]
    assert "8192x2" in moves[1][0].why and "1024x2" not in moves[1][0].why
    assert [dict(r.changes) for r, _ in carried_moves(measured, "forward")] == [{"fwd_rows_per_program": 2},
                                                                               {"num_stages": 3}]


def test_a_move_slower_in_this_very_bucket_against_an_earlier_best_comes_after_every_other():
    """From trial 0071 (`--buckets 2048x2`, which 0071's profile no longer diagnoses): screening 0070 found
    bwd_tile_elements@2048x2=16384 1.26x slower against 0069, and the split of each SM's rows faster. 0071 moved
    num_stages there, so neither is the same settings any more: the split comes first, the tile after every
    other remedy (the in-launch dW sum, slower in 1024x2, just before it)."""
    from liger_perf.propose.rules import _move_key, _moves_measured

    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 71]
    best = next(t for t in history if t.trial_id == 71)
    measured = _moves_measured(history, "backward")
    assert measured[_move_key({"bwd_tile_elements@2048x2": 16384})]["2048x2"] == -1
    assert measured[_move_key({"bwd_programs_per_sm@2048x2": 2})] == {"2048x2": 1}
    context = _tuning_context(history, best, "backward", "2048x2")
    batch = _batch(context, 10)  # the spec's eight and the two moves faster in other buckets (dW before dX, W reloaded)
    assert all(p.diagnosis == "explore" for p in batch)
    assert batch[0].changes == {"bwd_programs_per_sm@2048x2": 2}, [p.changes for p in batch]
    assert "In this bucket against an earlier best faster (so it comes first)." in batch[0].hypothesis
    assert [p.changes for p in batch[-2:]] == [{"bwd_fused_dw_max_cols@2048x2": 8192},
                                               {"bwd_tile_elements@2048x2": 16384}]
    assert "slower beyond it in 1024x2; in this bucket against an earlier best slower (so it comes last)" in \
        batch[-1].hypothesis


def test_what_a_move_did_counts_only_for_a_plain_move_and_the_latest_result_in_a_bucket():
    """A trial's verdict stands over the screening before it in the same bucket; a variant whose source is not
    the best's with just its changes (a proposer's code edit beside the knob) counts for nothing; a one-sided
    interval is no result, and no reason to fail."""
    from liger_perf.propose.rules import _move_key, _moves_measured

    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 73]
    key = _move_key({"bwd_programs_per_sm@2048x4": 2})
    trial = next(t for t in history if t.trial_id == 73)
    slower = trial.model_copy(deep=True)
    slower.judged.target_interval = [1.1, 1.2]
    assert _moves_measured([*history[:-1], slower], "backward")[key]["2048x4"] == -1  # the trial over 0072's row
    edited = slower.model_copy(deep=True)
    edited.variant.source += "\nCODE_CHANGED = True\n"
    assert _moves_measured([*history[:-1], edited], "backward")[key]["2048x4"] == 1  # 0072's screening alone
    lopsided = slower.model_copy(deep=True)
    lopsided.judged.target_interval = [0.9]
    assert _moves_measured([*history[:-1], lopsided], "backward")[key]["2048x4"] == 1
    # A screened candidate it dropped (a wrong result, say) is not "faster", whatever its interval.
    screening = next(t for t in history if t.trial_id == 72).model_copy(deep=True)
    row = next(r for r in screening.screening.rows if r.changes == {"bwd_programs_per_sm@2048x4": 2})
    assert row.ci_high < 1
    row.kept = False
    before = [t for t in history if t.trial_id < 72]
    assert _moves_measured([*before, screening], "backward")[key] == {"2048x2": 1, "2048x4": 0}
    # The latest result stands, a screening's too: one run after the trial, against a later best, found it slower.
    later = screening.model_copy(deep=True, update={"trial_id": 74})
    row = next(r for r in later.screening.rows if r.changes == {"bwd_programs_per_sm@2048x4": 2})
    row.ci_low, row.ci_high = 1.05, 1.10
    assert _moves_measured([*history, later], "backward")[key]["2048x4"] == -1


def test_a_diagnosed_bucket_whose_remedies_are_spent_is_explored_before_the_walk():
    """From trial 0073, `--buckets 4096x2`: the profile diagnoses memory latency there. Once the spec's remedies for
    it are in the batch, the spec's exploration moves follow in that bucket (more rows per program, more warps,
    ...), not the blind walk over KNOB_CHOICES; their hypothesis says the diagnoses' remedies are spent."""
    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 73]
    best = next(t for t in history if t.trial_id == 73)
    assert any(dispatch_bucket(d.shape, d.dtype) == "4096x2" for d in diagnose(best, "backward", per_bucket=True))
    context = _tuning_context(history, best, "backward", "4096x2")
    batch = _batch(context, 10)
    kinds = [p.diagnosis for p in batch]
    assert "explore" in kinds and not any(k.startswith("explore-knobs") for k in kinds), kinds
    first = kinds.index("explore")
    assert all(k != "explore" for k in kinds[:first]) and set(kinds[first:]) == {"explore"}, kinds
    assert all(name.endswith("@4096x2") for p in batch[first:] for name in p.changes)
    assert batch[first].hypothesis.startswith("the remedies for this bucket's NCU diagnoses are tried or ruled out")


def test_without_buckets_or_a_peer_ahead_the_spec_s_exploration_goes_to_the_defaults_as_before():
    """No --buckets and no peer ahead: an undiagnosed bucket gets nothing of its own; the spec's exploration moves
    go to the defaults (every bucket), as they did before buckets no diagnosis reaches were explored."""
    spec = copy.copy(get_spec("fused_add_rms_norm"))
    spec.remedies = {"backward": {"explore": get_spec("fused_add_rms_norm").remedies["backward"]["explore"]}}
    context = _context("fused_add_rms_norm", "backward", table=True)
    context.spec = spec
    proposal = RulesProposer().propose(context)
    assert proposal.diagnosis == "explore" and all("@" not in name for name in proposal.changes), proposal.changes
    focused = _context("fused_add_rms_norm", "backward", table=True)
    focused.spec, focused.buckets = spec, ("2048x4",)
    proposal = RulesProposer().propose(focused)  # told to tune 2048x4: there, though a remedy-less diagnosis reads it
    assert proposal.diagnosis == "explore" and all(n.endswith("@2048x4") for n in proposal.changes), proposal.changes


def test_a_bucket_where_a_peer_is_ahead_and_no_diagnosis_reaches_gets_the_spec_s_remedies_there_first():
    """Unfocused, a peer twice as fast at 2048x1024 bfloat16, where the NCU profile read nothing (its launches
    there removed): the spec's remedies for no diagnosis in particular go into that bucket first, ahead of the
    diagnosed spills elsewhere and of the defaults; with the peer within the noise, the spills come first again."""
    def context(share):
        peer = _peer_context(("2048x1024", "bfloat16"), share=share)
        peer.baseline_source = peer.best_source
        peer.best.ncu.launches = [launch for launch in peer.best.ncu.launches
                                  if dispatch_bucket(launch.shape, launch.dtype) != "1024x2"]
        assert not [d for d in diagnose(peer.best, "backward", per_bucket=True)
                    if dispatch_bucket(d.shape, d.dtype) == "1024x2"]
        return peer

    first = RulesProposer().propose(context(0.5))
    assert first.diagnosis == "explore" and {n.partition("@")[2] for n in first.changes} == {"1024x2"}, first.changes
    assert "A peer is faster there" in first.hypothesis
    assert {n.partition("@")[2] for n in RulesProposer().propose(context(0.99)).changes} == {"32768x4"}


def test_a_batch_holds_no_two_candidates_that_run_the_same_at_every_timed_shape(monkeypatch):
    """Screening 0060 on the H200 (best 0059, `--buckets 1024x2`) spent three of its four slots on
    bwd_fused_dw_max_cols@1024x2 = 8192, 4096 and 2048: at 896 columns, the bucket's only timed width, each sums dW
    inside the backward, so the three measured one variant three times. From the same history a batch now holds
    one of them, and no two of its candidates run the same settings at every case the best was timed at. (The
    memory-latency rule at its 60 % of then, which ranked the extra launch's remedies first.)"""
    import torch

    monkeypatch.setattr("liger_perf.propose.rules.MEMORY_LATENCY_DRAM_PCT", 60)

    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 59]
    best = next(t for t in history if t.trial_id == 59)
    spec = get_spec("fused_add_rms_norm")
    context = _tuning_context(history, best, "backward", "1024x2")
    # A pending candidate that changes code beside the knobs runs other code (no twin of a knob move), and one
    # whose table a proposer wrote out of bounds is no reason to fail: neither holds a move back.
    coded = with_knobs(best.variant.source, {"bwd_fused_dw_max_cols@1024x2": 8192}) + "\nCODE_CHANGED = True\n"
    out_of_bounds = best.variant.source.replace('"1024x2": {"bwd_dw_accumulator": "tile"}',
                                                '"1024x2": {"bwd_dw_accumulator": "tile", "num_stages": 7}')
    assert out_of_bounds != best.variant.source
    context.pending_sources += [coded, out_of_bounds]
    assert RulesProposer().propose(context).changes == {"bwd_fused_dw_max_cols@1024x2": 8192}
    context.pending_sources.clear()
    batch = _batch(context)
    fused = [p.changes for p in batch if "bwd_fused_dw_max_cols@1024x2" in p.changes]
    assert len(fused) == 1, [p.changes for p in batch]
    cases = {(r.shape, r.dtype) for r in best.timing_rows("candidate")}

    def runs(source):  # what a candidate runs at every timed case
        knobs, table = read_knobs(source)[0], read_dispatch(source)
        return tuple(repr(spec.effective_settings(knobs_in(knobs, table, dispatch_bucket(shape, dtype)),
                                                  tuple(map(int, shape.split("x"))), getattr(torch, dtype)))
                     for shape, dtype in sorted(cases))

    assert len({runs(p.source) for p in batch}) == len(batch)
    # At the rule's threshold of today (memory latency first, by its severity) a batch holds no twins either.
    monkeypatch.undo()
    context.pending.clear()
    context.pending_sources.clear()
    batch = _batch(context, 6)
    assert batch[0].diagnosis == "memory_latency" and len({runs(p.source) for p in batch}) == len(batch), [
        p.changes for p in batch]
    assert len([p for p in batch if "bwd_fused_dw_max_cols@1024x2" in p.changes]) <= 1


def test_a_move_that_runs_as_a_screened_out_one_at_every_timed_case_is_not_proposed():
    """Had screening 0060 dropped only bwd_fused_dw_max_cols@1024x2=8192, the next batch would have held 4096 and
    2048: other values, but at 896 columns, the bucket's only timed width, each sums dW inside the backward as 8192
    did. They count as measured; the batch moves on to other knobs."""
    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id <= 60]
    screening = next(t for t in history if t.trial_id == 60).model_copy(deep=True)
    screening.screening.rows = [row for row in screening.screening.rows
                                if row.changes in ({"bwd_fused_dw_max_cols@1024x2": 8192},
                                                   {"dw_reduction@1024x2": "triton"})]
    assert len(screening.screening.rows) == 2
    history = [screening if t.trial_id == 60 else t for t in history]
    best = next(t for t in history if t.trial_id == 59)
    context = _tuning_context(history, best, "backward", "1024x2")
    for _ in range(3):
        proposal = RulesProposer().propose(context)
        assert isinstance(proposal, Proposal), proposal
        assert "bwd_fused_dw_max_cols@1024x2" not in proposal.changes, proposal.changes
        context.pending.append(source_hash(proposal.source))
        context.pending_sources.append(proposal.source)


def test_a_best_timed_on_its_bucket_alone_still_offers_every_bucket_of_the_suite():
    """The buckets to tune, and the cases each holds, are the best's rows over the suite, and its diagnoses its NCU
    profile over the suite: with 0085 timed and profiled on bucket 4096x2 alone, those of 0078 (whose code it runs
    elsewhere) fill the rest. Unfocused, the proposer's
    first move is the one it makes after 0085 timed everywhere; told to tune 8192x2, it moves 8192x2."""
    history = [t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id < 85]
    whole = next(t for t in _recorded_trials("fused_add_rms_norm") if t.trial_id == 85)
    confined = confined_copy(whole, {"4096x2"})

    def proposal(best, buckets=()):
        return RulesProposer().propose(Context(
            get_spec("fused_add_rms_norm"), "backward", [*history, best], best, best.variant.source,
            baseline_source=baseline_path("fused_add_rms_norm").read_text(), suite="models-tune", buckets=buckets))

    # Its NCU profile over the suite: 0078's launches where 0085 profiled bucket 4096x2 alone.
    from liger_perf.record.history import best_as_profiled

    def diagnosed(trial):
        return sorted((d.name, d.shape, d.dtype) for d in diagnose(trial, "backward", per_bucket=True))

    profiled = best_as_profiled(confined, [*history, confined])
    assert diagnosed(profiled) == diagnosed(whole) != diagnosed(confined) and len(diagnosed(whole)) > 2
    assert best_as_profiled(whole, [*history, whole]) is whole  # timed everywhere: its own profile
    # A left-out case its own profile holds (a shape profiled in a dtype of another bucket) is not taken again:
    # twice its launches would read as a second kernel taking half the pass.
    case = ("26214x2560", "float32")  # bucket 4096x4, at the shape 0085 profiled in 4096x2
    extra = [launch for launch in whole.launches() if (launch.shape, launch.dtype) == case]
    wider = confined.model_copy(deep=True)
    wider.ncu.launches += extra
    merged = best_as_profiled(wider, [*history, wider])
    assert extra and [launch for launch in merged.launches() if (launch.shape, launch.dtype) == case] == extra
    assert diagnosed(merged) == diagnosed(whole)
    # A best whose own profile failed is diagnosed as having none, not from an earlier trial's.
    unprofiled = confined.model_copy(deep=True)
    unprofiled.ncu.status = "unavailable"
    assert best_as_profiled(unprofiled, [*history, unprofiled]) is unprofiled
    first = proposal(confined)
    assert isinstance(first, Proposal) and first.changes == proposal(whole).changes
    focused = proposal(confined, ("8192x2",))
    assert isinstance(focused, Proposal), focused
    assert all(name.endswith("@8192x2") for name in focused.changes)
