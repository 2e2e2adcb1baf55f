import math

import pytest

from liger_perf.core.errors import UserError
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.variants import load_variant, read_knobs, with_knobs

from gate_cover import pairwise_cases


def test_knobs_are_readable_without_import():
    knobs, choices = read_knobs(baseline_path("fused_add_rms_norm").read_text())
    assert knobs["bwd_rows_per_program"] == "auto"
    for name, value in knobs.items():
        assert value in choices[name], name


def test_with_knobs_writes_a_loadable_variant_with_new_values(tmp_path):
    source = baseline_path("fused_add_rms_norm").read_text()
    new = with_knobs(source, {"num_warps": 8, "bwd_column_chunked": "per_row", "BLOCK_SIZE": 256})
    assert read_knobs(new)[0]["num_warps"] == 8
    assert read_knobs(source)[0]["num_warps"] == "auto"  # the original text is untouched
    path = tmp_path / "v1.py"
    path.write_text(new)
    module = load_variant(path, get_spec("fused_add_rms_norm")).module
    assert module.KNOBS["bwd_column_chunked"] == "per_row"


def test_with_knobs_rejects_values_outside_choices():
    source = baseline_path("relu_squared").read_text()
    with pytest.raises(UserError, match="not allowed"):
        with_knobs(source, {"num_warps": 3})
    with pytest.raises(UserError, match="unknown knob"):
        with_knobs(source, {"warps": 4})


# Each of the backward's algorithms, at shapes where it is really taken (the interpreter gate's rows are 37 to
# 100 columns wide, so chunks of 64 columns: a 100-column row is a full chunk and a masked one, a narrower row
# one masked chunk): (knobs, the launch settings that prove the path is taken).
ALGORITHMS = {
    "per_row_chunks": ({"bwd_column_chunked": "per_row", "fwd_column_chunked": True, "BLOCK_SIZE": 64},
                       {"bwd_chunk_mode": 1, "fwd_chunked": True, "bwd_BLOCK_SIZE": 64}),
    "rows_outer_chunks": ({"bwd_column_chunked": "rows_outer", "BLOCK_SIZE": 64, "bwd_rows_per_program": 8},
                          {"bwd_chunk_mode": 2, "fwd_chunked": False, "bwd_BLOCK_SIZE": 64}),
    "row_tiles": ({"bwd_tile_elements": 512, "bwd_num_warps": "auto", "dw_reduction": "triton", "num_stages": 2,
                   "fwd_rows_per_program": 2},
                  {"bwd_chunk_mode": 0, "bwd_tile_rows": 4, "bwd_BLOCK_SIZE": 128}),
    # The dW reduction inside the launch, with two rows per program: several groups, so both levels run.
    "fused_dw_reduction": ({"bwd_fused_dw_max_cols": 1024, "bwd_rows_per_program": 2, "bwd_elements_per_thread": 4},
                           {"bwd_chunk_mode": 0, "bwd_tile_rows": 1, "bwd_num_warps": 1}),
    "fused_dw_per_row_chunks": ({"bwd_fused_dw_max_cols": 1024, "bwd_column_chunked": "per_row", "BLOCK_SIZE": 64},
                                {"bwd_chunk_mode": 1, "bwd_BLOCK_SIZE": 64}),
    # Row tiles in one bucket of the dispatch table (float32 rows of 65-128 columns); float16 runs the defaults.
    "row_tiles_in_one_bucket": ({"bwd_tile_elements@128x4": 512, "bwd_num_warps@128x4": "auto"},
                                {"bwd_chunk_mode": 0, "bwd_tile_rows": 4, "bwd_BLOCK_SIZE": 128}),
    # dW added up before dX, W + offset reloaded per row: the one-row loop, then the tile loop.
    "dw_before_dx_weight_reloaded": ({"bwd_dw_order": "before_dx", "bwd_weight_reload": True},
                                     {"bwd_chunk_mode": 0, "bwd_tile_rows": 1, "bwd_dw_before_dx": True,
                                      "bwd_reload_w": True}),
    "row_tiles_dw_before_dx_weight_reloaded": ({"bwd_tile_elements": 512, "bwd_dw_order": "before_dx",
                                                "bwd_weight_reload": True},
                                               {"bwd_tile_rows": 4, "bwd_dw_before_dx": True, "bwd_reload_w": True}),
    # dW accumulated as a [tile rows, H] float32 tile, summed over its rows once after the loop, in both orders.
    "row_tiles_dw_tile_accumulator": ({"bwd_tile_elements": 512, "bwd_dw_accumulator": "tile"},
                                      {"bwd_tile_rows": 4, "bwd_dw_tile": True, "bwd_dw_before_dx": False}),
    "row_tiles_dw_tile_accumulator_before_dx": ({"bwd_tile_elements": 512, "bwd_dw_accumulator": "tile",
                                                 "bwd_dw_order": "before_dx", "bwd_rows_per_program": 16},
                                                {"bwd_tile_rows": 4, "bwd_dw_tile": True, "bwd_dw_before_dx": True}),
    # Each SM's rows split between two programs, each walking tiles half the size (4 rows of 128, not 8).
    "split_programs": ({"bwd_programs_per_sm": 2, "bwd_tile_elements": 1024, "bwd_dw_accumulator": "tile"},
                      {"bwd_tile_rows": 4, "bwd_programs_per_sm": 2, "bwd_dw_tile": True}),
    "split_programs_one_row": ({"bwd_programs_per_sm": 4, "bwd_fused_dw_max_cols": 1024},
                               {"bwd_tile_rows": 1, "bwd_programs_per_sm": 4}),
    # A number of rows per program: the split leaves grid and tile as they are.
    "split_with_rows_per_program": ({"bwd_programs_per_sm": 4, "bwd_tile_elements": 1024, "bwd_rows_per_program": 8},
                                    {"bwd_tile_rows": 8, "bwd_programs_per_sm": 1}),
    # At most 8 rows a program (the interpreter's 4 "SMs" would give 256 at 1021 rows), walked one row a step
    # there; the shapes of a few rows keep the 4-row tile and its dW tile.
    "capped_rows_per_program": ({"bwd_max_rows_per_program": 8, "bwd_dw_order": "before_dx", "bwd_tile_elements": 512,
                                 "bwd_dw_accumulator": "tile"},
                                {"bwd_max_rows_per_program": 8, "bwd_tile_rows": 4, "bwd_dw_tile": True,
                                 "bwd_dw_before_dx": True}),
    # dS_out loaded with the row's dY and S, before its sum (the one-row loop, then the tile loop); the forward's W
    # with X and R.
    "ds_and_w_loaded_with_the_row": ({"bwd_ds_load": "with_row", "fwd_w_load": "with_row"},
                                     {"bwd_chunk_mode": 0, "bwd_tile_rows": 1, "bwd_ds_with_row": True,
                                      "fwd_w_with_row": True}),
    "row_tiles_ds_loaded_with_the_row": ({"bwd_tile_elements": 512, "bwd_ds_load": "with_row"},
                                         {"bwd_tile_rows": 4, "bwd_ds_with_row": True}),
    # Gradients rounded where autograd rounds them (the baseline rounds them once).
    "gradients_rounded_as_autograd": ({"bwd_grad_rounding": "autograd", "bwd_tile_elements": 512},
                                      {"bwd_chunk_mode": 0, "bwd_tile_rows": 4}),
}


def test_the_pairwise_cases_meet_every_pair():
    spec = get_spec("fused_add_rms_norm")
    cases = pairwise_cases(spec, "interpret")
    keys = [(c.shape, c.dtype, tuple(sorted(c.config.items()))) for c in cases]
    assert len(set(keys)) == len(cases) == len(spec.check_shapes["interpret"]) * len(spec.check_configs)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        wanted = {(x[a], y[b]) for x in keys for y in keys}
        assert {(k[a], k[b]) for k in keys} == wanted


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_each_backward_algorithm_passes_the_gate(tmp_path, interpret_device, algorithm):
    import torch

    from liger_perf.gate.correctness import check_variant

    knobs, expected = ALGORITHMS[algorithm]
    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / f"{algorithm}.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(), knobs))
    variant = load_variant(path, spec)
    settings = variant.module._launch_settings(100, torch.float32, torch.device("cpu"))
    assert {k: settings[k] for k in expected} == expected
    result = check_variant(spec, variant, interpret_device, convergence=False, fail_fast=True,
                           cases=pairwise_cases(spec, interpret_device.suite))
    assert result.failures().empty, result.failures()[["case", "output", "reason"]].to_string()


@pytest.mark.parametrize("split", [2, 4])
def test_programs_per_sm_splits_the_grid_and_each_program_s_tile(tmp_path, split):
    """``bwd_programs_per_sm``: "auto" rows per program give ``split`` times the programs of one per SM, each
    walking tiles ``split`` times smaller, and the gradients stay the baseline's up to the dW partials' order."""
    import torch

    spec = get_spec("fused_add_rms_norm")
    runs = {}
    for name, changes in {"one": {}, "split": {"bwd_programs_per_sm": split}}.items():
        path = tmp_path / f"{name}.py"
        path.write_text(with_knobs(baseline_path(spec.name).read_text(), {"bwd_tile_elements": 1024, **changes}))
        module = load_variant(path, spec).module
        kernel, grids = module._backward_kernel, []

        class Recorded:  # records the backward's grid, launches the real kernel
            def __getitem__(self, grid):
                grids.append(grid)
                return kernel[grid]

        module._backward_kernel = Recorded()
        generator = torch.Generator().manual_seed(3)
        X, R = (torch.randn(61, 100, generator=generator).requires_grad_() for _ in range(2))
        W = (1 + 0.1 * torch.randn(100, generator=generator)).requires_grad_()
        Y, S = module.fused_add_rms_norm(X, R, W)
        (Y * torch.randn(61, 100, generator=generator)).sum().backward()
        settings = module._launch_settings(100, torch.float32, torch.device("cpu"))
        runs[name] = (grids[0][0], settings["bwd_tile_rows"], X.grad, W.grad)
    sm = module._multiprocessor_count(torch.device("cpu"))
    assert runs["one"][:2] == (math.ceil(61 / math.ceil(61 / sm)), 8)
    assert runs["split"][:2] == (math.ceil(61 / math.ceil(61 / (sm * split))), 8 // split)
    assert runs["split"][0] > runs["one"][0]
    torch.testing.assert_close(runs["split"][2], runs["one"][2])
    torch.testing.assert_close(runs["split"][3], runs["one"][3], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cap, rows_per_program, max_fill", [(0, "auto", 1.0), (8, "auto", 1.0), (16, "auto", 1.0),
                                                             (8, 4, 1.0), (8, "auto", 0.875), (8, "auto", 0.75)])
def test_the_row_cap_makes_short_one_row_programs_only_where_auto_rows_exceed_it(tmp_path, cap, rows_per_program,
                                                                                 max_fill):
    """``bwd_max_rows_per_program``: "auto" rows per program (61 rows over the interpreter's 4 "SMs": 16 each)
    capped at 8 give 8 programs, each walking one row a step with warps for one row, not the 4-row tile; a cap of 16
    or none leaves the 4 programs and their tile; a number of rows per program ignores it; so does a row that fills
    more of its block than ``bwd_row_cap_max_fill`` (100 columns are 78 % of 128: capped at 87.5 %, not at 75 %).
    The gradients are the float64 reference's within float32 rounding either way."""
    import torch

    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / "capped.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(),
                               {"bwd_max_rows_per_program": cap, "bwd_rows_per_program": rows_per_program,
                                "bwd_row_cap_max_fill": max_fill, "bwd_tile_elements": 512, "bwd_num_warps": "auto", "bwd_elements_per_thread": 4,
                                "bwd_dw_accumulator": "tile"}))
    module = load_variant(path, spec).module
    kernel, launches = module._backward_kernel, []

    class Recorded:  # records the backward's grid and launch options, launches the real kernel
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append((grid[0], kwargs["TILE_ROWS"], kwargs["num_warps"], kwargs["DW_TILE"]))
                return kernel[grid](*args, **kwargs)
            return launch

    module._backward_kernel = Recorded()
    generator = torch.Generator().manual_seed(3)
    X, R = (torch.randn(61, 100, generator=generator).requires_grad_() for _ in range(2))
    W = (1 + 0.1 * torch.randn(100, generator=generator)).requires_grad_()
    Y, S = module.fused_add_rms_norm(X, R, W)
    cotangent = torch.randn(61, 100, generator=generator)
    (Y * cotangent).sum().backward()
    assert module._multiprocessor_count(torch.device("cpu")) == 4
    # 512 elements of 128-column rows: a 4-row tile (its dW tile too), 4 warps at 4 elements a thread; one row:
    # 1 warp, no dW tile.
    expected = {(0, "auto", 1.0): (4, 4, 4, True), (8, "auto", 1.0): (8, 1, 1, False),
                (16, "auto", 1.0): (4, 4, 4, True), (8, 4, 1.0): (16, 4, 4, True),
                (8, "auto", 0.875): (8, 1, 1, False), (8, "auto", 0.75): (4, 4, 4, True)}[(cap, rows_per_program,
                                                                                           max_fill)]
    assert launches[0] == expected
    S64, W64 = (X + R).detach().double().requires_grad_(), W.detach().double().requires_grad_()
    Y64 = S64 * torch.rsqrt(S64.pow(2).mean(-1, keepdim=True) + 1e-6)
    (Y64.float().double() * W64 * cotangent.double()).sum().backward()
    torch.testing.assert_close(X.grad.double(), S64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(W.grad.double(), W64.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tile", ["row", 512])
@pytest.mark.parametrize("knobs", [{"bwd_dw_order": "before_dx"}, {"bwd_weight_reload": True},
                                   {"bwd_dw_order": "before_dx", "bwd_weight_reload": True},
                                   {"bwd_ds_load": "with_row", "fwd_w_load": "with_row"},
                                   {"bwd_ds_load": "with_row", "bwd_dw_order": "before_dx", "bwd_weight_reload": True}])
def test_the_register_order_knobs_change_no_bit_of_any_gradient(tmp_path, interpret_device, knobs, tile):
    """The order a row's dW term is added up in, where W + offset is read from and when a row's dS_out (or the
    forward's W) is loaded free registers or move latency; they must not change what is computed: the same float32
    sums in the same order, so every output bitwise the baseline's."""
    import torch

    spec = get_spec("fused_add_rms_norm")
    grads = {}
    for name, changes in {"baseline": {}, "variant": knobs}.items():
        path = tmp_path / f"{name}.py"
        path.write_text(with_knobs(baseline_path(spec.name).read_text(), {"bwd_tile_elements": tile, **changes}))
        module = load_variant(path, spec).module
        generator = torch.Generator().manual_seed(5)
        X, R = (torch.randn(23, 100, generator=generator, dtype=torch.float16).requires_grad_() for _ in range(2))
        W = (1 + 0.1 * torch.randn(100, generator=generator)).to(torch.float16).requires_grad_()
        Y, S = module.fused_add_rms_norm(X, R, W, offset=0.5)
        (Y.float() * torch.randn(23, 100, generator=generator)).sum().add(S.float().pow(2).sum()).backward()
        grads[name] = (Y, S, X.grad, R.grad, W.grad)
    for base, variant in zip(grads["baseline"], grads["variant"]):
        assert torch.equal(base, variant)
    assert grads["variant"][4].abs().sum() > 0


@pytest.mark.parametrize("rows", [1, 7, 23])
def test_the_tile_accumulator_changes_only_the_order_of_dws_float32_sums(tmp_path, interpret_device, rows):
    """``bwd_dw_accumulator="tile"`` sums a program's dW terms per tile row first, then over the rows: dX, Y and S
    bitwise the baseline's, dW within float32 rounding of it (and never the one-row walk's business: a tile of
    one row leaves the accumulator as it was)."""
    import torch

    spec = get_spec("fused_add_rms_norm")
    grads, settings = {}, {}
    for name, changes in {"baseline": {}, "variant": {"bwd_dw_accumulator": "tile"}}.items():
        path = tmp_path / f"{name}.py"
        path.write_text(with_knobs(baseline_path(spec.name).read_text(), {"bwd_tile_elements": 512, **changes}))
        module = load_variant(path, spec).module
        settings[name] = module._launch_settings(100, torch.float32, torch.device("cpu"))
        generator = torch.Generator().manual_seed(rows)
        X, R = (torch.randn(rows, 100, generator=generator).requires_grad_() for _ in range(2))
        W = (1 + 0.1 * torch.randn(100, generator=generator)).requires_grad_()
        Y, S = module.fused_add_rms_norm(X, R, W, offset=0.5)
        (Y * torch.randn(rows, 100, generator=generator)).sum().add(S.pow(2).sum()).backward()
        grads[name] = (Y, S, X.grad, R.grad, W.grad)
    assert settings["variant"]["bwd_dw_tile"] and not settings["baseline"]["bwd_dw_tile"]
    for base, variant in zip(grads["baseline"][:4], grads["variant"][:4]):
        assert torch.equal(base, variant)
    torch.testing.assert_close(grads["variant"][4], grads["baseline"][4], rtol=1e-5, atol=1e-5)
    assert grads["variant"][4].abs().sum() > 0


def test_the_tile_accumulator_is_off_where_a_step_is_one_row(tmp_path):
    import torch

    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / "v.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(), {"bwd_dw_accumulator": "tile",
                                                                            "bwd_tile_elements": 8192}))
    module = load_variant(path, spec).module
    assert module._launch_settings(1536, torch.bfloat16, torch.device("cpu"))["bwd_dw_tile"]  # 4 rows of 2048
    assert not module._launch_settings(8192, torch.bfloat16, torch.device("cpu"))["bwd_dw_tile"]  # one row


def test_the_baseline_takes_the_one_row_unchunked_path():
    import torch

    spec = get_spec("fused_add_rms_norm")
    settings = load_variant(baseline_path(spec.name), spec).module._launch_settings(5000, torch.bfloat16, torch.device("cpu"))
    assert settings["bwd_chunk_mode"] == 0 and settings["bwd_tile_rows"] == 1
    assert settings["BLOCK_SIZE"] == settings["bwd_BLOCK_SIZE"] == 8192
    assert settings["num_warps"] == settings["bwd_num_warps"] == 16


def test_the_fused_dw_reduction_is_deterministic_and_leaves_its_counters_at_zero(tmp_path, interpret_device):
    """Two backward passes give bitwise the same dW, equal to the separate reduction's to float32 rounding, and
    each launch hands its ticket counters back at zero (else the next launch never finds its last ticket)."""
    import torch

    spec = get_spec("fused_add_rms_norm")
    source = baseline_path(spec.name).read_text()
    dws = {}
    for name, knobs in {"fused": {"bwd_fused_dw_max_cols": 1024, "bwd_rows_per_program": 2},
                        "separate": {"bwd_rows_per_program": 2, "dw_reduction": "triton"}}.items():
        path = tmp_path / f"{name}.py"
        path.write_text(with_knobs(source, knobs))
        module = load_variant(path, spec).module
        generator = torch.Generator().manual_seed(3)
        X, R = torch.randn(37, 100, generator=generator), torch.randn(37, 100, generator=generator)
        W = torch.randn(100, generator=generator, requires_grad=True)
        dY = torch.randn(37, 100, generator=generator)
        runs = []
        for _ in range(2):
            W.grad = None
            Y, S = module.fused_add_rms_norm(X, R, W)
            Y.backward(dY)
            runs.append(W.grad.clone())
            assert all(int(c.abs().sum()) == 0 for c in module._TICKET_COUNTERS.values())
        assert torch.equal(runs[0], runs[1])
        assert bool(module._TICKET_COUNTERS) == (name == "fused")  # the in-launch path was taken, or not
        dws[name] = runs[0]
    assert dws["fused"].abs().sum() > 0
    torch.testing.assert_close(dws["fused"], dws["separate"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, rows_per_program", [(1, 1), (3, 1), (600, 1), (40, 8)])
def test_the_triton_dw_reduction_sums_every_partial_whatever_their_number(tmp_path, interpret_device, rows,
                                                                         rows_per_program):
    """dW by the Triton reduction equals torch's sum of the same partials: 1 and 3 partials (in a tile of 32
    rows), 600 (more than one tile holds: two steps) and 5. The tile holds every partial of the default grid (one
    per SM) and of two programs per SM."""
    import torch

    spec = get_spec("fused_add_rms_norm")
    source = baseline_path(spec.name).read_text()
    tile = load_variant(baseline_path(spec.name), spec).module._reduction_tile
    assert tile(132) == (256, 16) and tile(264) == tile(600) == (512, 8) and tile(40) == (64, 64)
    assert tile(1) == (32, 128)
    generator = torch.Generator().manual_seed(5)
    X, R, dY = (torch.randn(rows, 24, generator=generator) for _ in range(3))
    W0 = torch.randn(24, generator=generator)
    dws = {}
    for reduction in ("torch", "triton"):
        path = tmp_path / f"{reduction}.py"
        path.write_text(with_knobs(source, {"bwd_rows_per_program": rows_per_program, "dw_reduction": reduction}))
        module = load_variant(path, spec).module
        W = W0.clone().requires_grad_(True)
        Y, _ = module.fused_add_rms_norm(X, R, W)
        Y.backward(dY)
        dws[reduction] = W.grad
    assert dws["torch"].abs().sum() > 0
    torch.testing.assert_close(dws["triton"], dws["torch"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("knobs", [{}, {"bwd_fused_dw_max_cols": 1024, "bwd_rows_per_program": 2}])
def test_no_rows_give_empty_outputs_and_a_zero_dw(tmp_path, interpret_device, knobs):
    import torch

    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / "variant.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(), knobs))
    module = load_variant(path, spec).module
    X, R = torch.randn(2, 0, 40), torch.randn(2, 0, 40)
    W = torch.randn(40, requires_grad=True)
    Y, S = module.fused_add_rms_norm(X, R, W)
    assert Y.shape == S.shape == (2, 0, 40)
    (Y.sum() + S.sum()).backward()
    assert torch.equal(W.grad, torch.zeros(40))


def test_a_change_to_one_bucket_is_written_into_the_dispatch_table_and_taken_at_its_shapes_only(tmp_path):
    import torch

    from liger_perf.kernel.variants import dispatch_bucket, read_dispatch

    spec = get_spec("fused_add_rms_norm")
    source = baseline_path(spec.name).read_text()
    assert read_dispatch(source) == {}
    new = with_knobs(source, {"bwd_tile_elements@128x4": 512, "num_stages@128x4": 2})
    assert read_knobs(new)[0] == read_knobs(source)[0]  # the defaults are untouched
    assert read_dispatch(new) == {"128x4": {"bwd_tile_elements": 512, "num_stages": 2}}
    # A second bucket is a line of its own; an entry set back to the default is dropped with its bucket.
    newer = with_knobs(new, {"num_warps@8192x2": 8})
    assert list(read_dispatch(newer)) == ["128x4", "8192x2"]
    assert '    "8192x2": {"num_warps": 8},\n' in newer
    assert read_dispatch(with_knobs(newer, {"num_warps@8192x2": "auto"})) == read_dispatch(new)
    path = tmp_path / "dispatched.py"
    path.write_text(new)
    module = load_variant(path, spec).module
    settings = {dtype: module._launch_settings(100, dtype, torch.device("cpu"))
                for dtype in (torch.float32, torch.float16)}
    assert settings[torch.float32]["bwd_tile_rows"] == 4 and settings[torch.float32]["num_stages"] == 2
    assert settings[torch.float16]["bwd_tile_rows"] == 1 and settings[torch.float16]["num_stages"] is None
    # The kernel's own bucket key is the harness's, at every width and dtype size (a table written by one is read
    # by the other): each probe width gets an entry of its own, which the module must find.
    widths = [0, 1, 2, 3, 63, 64, 65, 100, 4096, 5120, 8191, 8192, 8193, 12288, 65536]
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for width in widths:
            bucket = dispatch_bucket((3, width), dtype)
            assert module._knobs_for(width, dtype) == {**read_knobs(new)[0], **read_dispatch(new).get(bucket, {})}
            if width == 0:  # no bucket a table may name: the defaults
                assert bucket == f"0x{dtype.itemsize}"
                continue
            probe = tmp_path / f"probe_{width}_{dtype.itemsize}.py"
            probe.write_text(with_knobs(source, {f"num_warps@{bucket}": 2}))
            assert load_variant(probe, spec).module._knobs_for(width, dtype)["num_warps"] == 2


@pytest.mark.parametrize("table, why", [
    ('{"8192": {}}', "is not"), ('{"8000x2": {}}', "is not"), ('{"8192x3": {}}', "is not"), ('{"08192x2": {}}', "is not"),
    ('{"8192x2": {"warps": 4}}', "unknown knob"), ('{"8192x2": {"num_warps": 3}}', "not allowed"),
    ('{"8192x2": 4}', "must map"), ("dict()", "plain literal")])
def test_a_dispatch_table_that_names_no_bucket_knob_or_allowed_value_is_refused_in_one_line(table, why):
    from liger_perf.kernel.variants import read_dispatch

    source = baseline_path("fused_add_rms_norm").read_text().replace("\nDISPATCH = {}\n", f"\nDISPATCH = {table}\n")
    with pytest.raises(UserError, match=why):
        read_dispatch(source)


def test_a_variant_without_a_table_takes_no_change_to_one_bucket_nor_one_to_a_bucket_no_kernel_would_look_up(
        tmp_path):
    with pytest.raises(UserError, match="no DISPATCH table"):
        with_knobs(baseline_path("relu_squared").read_text(), {"num_warps@8192x2": 4})
    with pytest.raises(UserError, match="is not"):
        with_knobs(baseline_path("fused_add_rms_norm").read_text(), {"num_warps@foo": 4})
    # A written table the harness cannot read as the kernel does is refused before the module is imported.
    path = tmp_path / "odd.py"
    path.write_text(baseline_path("fused_add_rms_norm").read_text().replace(
        "\nDISPATCH = {}\n", '\nDISPATCH = {"08192x2": {"num_warps": 8}}\n'))
    with pytest.raises(UserError, match="is not"):
        load_variant(path, get_spec("fused_add_rms_norm"))


def test_a_plain_change_leaves_a_table_it_does_not_touch_as_written():
    source = with_knobs(baseline_path("fused_add_rms_norm").read_text(), {"num_warps@8192x2": 8})
    commented = source.replace('"8192x2": {"num_warps": 8},', '"8192x2": {"num_warps": 8},  # tuned by trial 12')
    assert "# tuned by trial 12" in with_knobs(commented, {"num_stages": 2})


def test_a_move_of_two_knobs_in_one_bucket_is_made_by_its_changes_in_any_order():
    """``judge.made_by`` (the ``--buckets`` scope check, a move confined to its bucket) asks with the changes
    sorted; the rules proposer's two-knob remedy wrote them in its own order (2026-12-04: a run stopped on
    ``bwd_max_rows_per_program@4096x4=16`` with ``bwd_dw_order@4096x4``, a move inside its bucket)."""
    from liger_perf.judge import made_by

    base = with_knobs(baseline_path("fused_add_rms_norm").read_text(), {"num_warps@8192x2": 8})
    changes = {"bwd_max_rows_per_program@4096x4": 16, "bwd_dw_order@4096x4": "before_dx"}
    written = with_knobs(base, changes)
    assert written != with_knobs(base, dict(sorted(changes.items())))  # the entry's knobs in the changes' order
    assert made_by(written, base, changes) and made_by(written, base, dict(reversed(changes.items())))
    assert not made_by(written, base, {**changes, "bwd_max_rows_per_program@4096x4": 32})
    assert not made_by(written, base, {"bwd_max_rows_per_program@4096x4": 16})


def test_the_bucket_cases_count_every_row_knob_and_stay_inside_even_a_tiny_bucket():
    spec = get_spec("fused_add_rms_norm")
    knobs = {**read_knobs(baseline_path(spec.name).read_text())[0], "bwd_rows_per_program": 16}
    shapes = spec.bucket_shapes("32768x4", knobs, "gpu")
    assert {(15, 32767), (16, 32767), (17, 32767), (3, 16385), (37, 32768)} <= set(shapes)
    assert all(16384 < width <= 32768 for _, width in shapes)
    assert all(width == 2 for _, width in spec.bucket_shapes("2x2", knobs, "gpu"))
    assert {width for _, width in spec.bucket_shapes("1x4", knobs, "gpu")} == {1}


def test_on_a_gpu_a_half_precision_bucket_is_checked_in_bfloat16_and_float16_in_every_layout(tmp_path):
    import torch

    from liger_perf.gate.correctness import gate_cases
    from liger_perf.kernel.device import Device

    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / "dispatched.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(), {"num_warps@8192x2": 8}))
    gpu = Device("cuda", torch.device("cuda"))
    plain = {(g.case.shape, g.case.dtype, g.probe) for g in gate_cases(spec, load_variant(baseline_path(spec.name), spec), gpu)}
    cases = [g for g in gate_cases(spec, load_variant(path, spec), gpu) if (g.case.shape, g.case.dtype, g.probe) not in plain]
    assert {g.case.dtype for g in cases} == {torch.bfloat16, torch.float16}
    assert {g.probe.cotangents for g in cases} == {"contiguous", "sliced", "transposed", "expanded"}
    assert {g.probe.batched for g in cases} == {True, False}


def test_the_gate_checks_every_bucket_of_the_table_in_its_own_dtype(interpret_device, tmp_path):
    """A bucket the check sweep has no shape in (float32 rows of 4097-8192 columns under the interpreter) gets
    cases of its own, at its narrowest, its fullest and one-short widths, in every casting mode."""
    from liger_perf.gate.correctness import gate_cases

    spec = get_spec("fused_add_rms_norm")
    path = tmp_path / "dispatched.py"
    path.write_text(with_knobs(baseline_path(spec.name).read_text(), {"bwd_rows_per_program@8192x4": 4}))
    before = {(g.case.shape, g.case.dtype) for g in gate_cases(spec, load_variant(baseline_path(spec.name), spec),
                                                                 interpret_device)}
    cases = [g for g in gate_cases(spec, load_variant(path, spec), interpret_device)
             if (g.case.shape, g.case.dtype) not in before]
    import torch

    found = {(g.case.shape, g.case.dtype) for g in cases}
    assert {((3, 4097), torch.float32), ((3, 8191), torch.float32), ((3, 8192), torch.float32),
            ((37, 8192), torch.float32), ((4, 8191), torch.float32), ((5, 8191), torch.float32)} <= found
    assert all(4096 < shape[-1] <= 8192 and dtype == torch.float32 for shape, dtype in found)
    assert len({tuple(sorted(g.case.config.items())) for g in cases}) == len(spec.check_configs)


def test_cases_split_by_buckets_keep_the_suite_s_order_and_fall_back_to_all_where_none_falls_in():
    """What a trial confined to buckets times and leaves out (``variants.split_by_buckets``)."""
    import torch

    from liger_perf.kernel.spec import Case
    from liger_perf.kernel.variants import split_by_buckets

    cases = [Case((16, 200), torch.float16, {}), Case((16, 200), torch.float32, {}), Case((8, 4000), torch.float16, {}),
             Case((8, 130), torch.float16, {})]
    inside, outside = split_by_buckets(cases, {"256x2"})
    assert inside == [cases[0], cases[3]] and outside == [cases[1], cases[2]]
    assert split_by_buckets(cases, {"256x2", "4096x2", "256x4"}) == (cases, [])
    assert split_by_buckets(cases, {"65536x2"}) == (cases, []) == split_by_buckets(cases, set())


# Compiles the baseline's kernels for an H200 (sm_90) with Triton's own ptxas, no GPU needed, and prints, for each
# kernel, how many global loads its PTX issues before its first barrier (the row sum's) and in all. Run without the
# interpreter: under it ``triton.jit`` gives no compilable function.
_LOADS_BEFORE_THE_SUM = r"""
import importlib.util, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

spec = importlib.util.spec_from_file_location("compiled_baseline", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
late = sys.argv[2] == "after_sum"
common = dict(CASTING=0, BLOCK_SIZE=1024)
kernels = {
    "_backward_kernel": dict(common, CHUNK_MODE=0, TILE_ROWS=int(sys.argv[3]), NUM_STAGES=None, FUSED_DW=False,
                             REDUCE_COLS=1024, ROUND_ONCE=True, DW_BEFORE_DX=False, RELOAD_W=False, DW_TILE=False,
                             DS_WITH_ROW=not late),
    "_forward_kernel": dict(common, ROWS_PER_PROGRAM=1, CHUNKED=False, W_WITH_ROW=not late),
}
for name, constexprs in kernels.items():
    fn = getattr(module, name)
    signature = {arg: "constexpr" if arg in constexprs else "fp32" if arg in ("offset", "eps")
                 else "*fp32" if arg.isupper() else "i32" for arg in fn.arg_names}
    source = ASTSource(fn, signature, constexprs)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]
    before = ptx.split("bar.sync", 1)[0]
    print(name, len(re.findall(r"ld\.global", before)), len(re.findall(r"ld\.global", ptx)))
"""


@pytest.mark.parametrize("tile_rows", [1, 2])
def test_loads_written_with_the_row_are_issued_before_its_sum(tmp_path, tile_rows):
    """``bwd_ds_load`` and ``fwd_w_load`` exist for the code the GPU runs, which no interpreter shows: a row's sum
    crosses warps behind a barrier, and the compiler issues no load across one. In the compiled code for an H200,
    "with_row" must put every load of the one-row and tile loops (the backward) and of a whole row (the forward)
    before the first barrier, where "after_sum" leaves the dS_out and W loads after it."""
    import os
    import subprocess
    import sys

    script = tmp_path / "loads_before_the_sum.py"
    script.write_text(_LOADS_BEFORE_THE_SUM)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    counts = {}
    for order in ("after_sum", "with_row"):
        done = subprocess.run([sys.executable, str(script), str(baseline_path("fused_add_rms_norm")), order,
                               str(tile_rows)], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        counts[order] = {name: (int(before), int(total)) for name, before, total in map(str.split,
                                                                                          done.stdout.splitlines())}
    for kernel in ("_backward_kernel", "_forward_kernel"):
        (late, late_total), (early, early_total) = counts["after_sum"][kernel], counts["with_row"][kernel]
        assert early == early_total == late_total > late, (kernel, counts)
