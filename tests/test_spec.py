import torch

from liger_perf.kernel.registry import get_spec, kernel_names


def test_registry_finds_both_kernels():
    assert {"fused_add_rms_norm", "relu_squared"} <= set(kernel_names())


def test_min_bytes_counts_each_input_and_output_once():
    spec = get_spec("fused_add_rms_norm")
    rows, hidden = 2048, 4096
    # forward: X, R read, Y, S written (rows x hidden each) plus W; bf16 = 2 bytes
    assert spec.min_bytes("forward", (rows, hidden), torch.bfloat16) == 2 * (4 * rows * hidden + hidden)
    assert spec.min_bytes("backward", (rows, hidden), torch.float32) == 4 * (4 * rows * hidden + 2 * hidden)
    relu = get_spec("relu_squared")
    assert relu.min_bytes("backward", (10, 10), torch.float32) == 3 * 100 * 4


def test_inputs_are_fresh_unless_seeded():
    spec = get_spec("fused_add_rms_norm")
    a = spec.make_inputs((4, 8), torch.float32, torch.device("cpu"))
    b = spec.make_inputs((4, 8), torch.float32, torch.device("cpu"))
    assert not torch.equal(a["X"], b["X"])
    seeded = [spec.make_inputs((4, 8), torch.float32, torch.device("cpu"), torch.Generator().manual_seed(3))
              for _ in range(2)]
    assert torch.equal(seeded[0]["X"], seeded[1]["X"])
    assert (a["X"] != 0).all()


def test_reference_casting_modes_differ_in_half_precision():
    spec = get_spec("fused_add_rms_norm")
    inputs = spec.make_inputs((8, 64), torch.float16, torch.device("cpu"), torch.Generator().manual_seed(0))
    llama = spec.reference(inputs, {"casting_mode": "llama"})[0]
    gemma = spec.reference(inputs, {"casting_mode": "gemma"})[0]
    assert llama.dtype == gemma.dtype == torch.float16
    assert not torch.equal(llama, gemma)
