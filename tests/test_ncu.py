"""The NCU reader, on real reports recorded on the H200 (scripts/record_ncu_fixtures.py), and its fallbacks."""

import lzma
import os
import shutil
import stat


from liger_perf.measure import ncu
from liger_perf.kernel.registry import baseline_path
from liger_perf.measure.ncu_driver import parse_range_name, range_name

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ncu")


def _fixture(name, tmp_path):
    out = tmp_path / name
    with lzma.open(os.path.join(FIXTURES, name + ".xz")) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def test_reads_the_fused_kernels_backward_profile(tmp_path):
    metrics, advice = ncu.read_report(_fixture("fused_add_rms_norm-2048x32768-bfloat16.ncu-rep", tmp_path))
    # Every kernel is attributed to its pass and case through the NVTX process range, including the
    # backward kernels that autograd launches from its own thread.
    assert set(metrics["pass"]) == {"forward", "backward"}
    assert set(metrics["shape"]) == {"2048x32768"} and set(metrics["dtype"]) == {"bfloat16"}
    backward = metrics[(metrics["pass"] == "backward") & (metrics["kernel"] == "_backward_kernel")]
    value = dict(zip(backward["metric"], backward["value"]))
    assert value["launch__registers_per_thread"] == 64
    assert value["l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum"] > 0  # the spills at H = 32768
    assert 0 < value["sm__warps_active.avg.pct_of_peak_sustained_active"] <= 100
    assert value["dram__bytes_read.sum"] > 0 and value["dram__bytes_write.sum"] > 0
    assert 0 < value["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"] <= 100
    assert all(m in value for m in ncu.KEPT_METRICS), set(ncu.KEPT_METRICS) - set(value)
    assert any(m.startswith(ncu.STALL_PREFIX) for m in backward["metric"])
    assert {"SOLBottleneck", "CPIStall"} & set(advice["rule"])
    assert advice["message"].str.len().min() > 0
    table = ncu.summary_table(metrics)
    assert list(table["kernel"])[:2] == ["_forward_kernel", "_backward_kernel"]


def test_reads_relu_squared_profile(tmp_path):
    metrics, _ = ncu.read_report(_fixture("relu_squared-4096x4096-float32.ncu-rep", tmp_path))
    kernels = set(zip(metrics["pass"], metrics["kernel"]))
    assert kernels == {("forward", "_forward_kernel"), ("backward", "_backward_kernel")}


def test_range_names_round_trip():
    assert parse_range_name(range_name("backward", "2048x1024", "bfloat16")) == ("backward", "2048x1024", "bfloat16")
    assert parse_range_name("something else") is None


def test_interpreter_mode_is_unavailable_with_a_reason(tmp_path):
    result = ncu.profile("relu_squared", baseline_path("relu_squared"), ["forward"], True, tmp_path / "r")
    assert result.status == "unavailable" and "interpreter" in result.reason


def _fake_ncu(tmp_path, script):
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_missing_ncu_and_forbidden_counters_are_unavailable_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    result = ncu.profile("relu_squared", baseline_path("relu_squared"), ["forward"], False, tmp_path / "r")
    assert result.status == "unavailable" and "not on PATH" in result.reason

    fake = _fake_ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"; exit 1\n')
    monkeypatch.setattr(ncu, "find_ncu", lambda: fake)
    result = ncu.profile("relu_squared", baseline_path("relu_squared"), ["forward"], False, tmp_path / "r")
    assert result.status == "unavailable" and "ERR_NVGPUCTRPERM" in result.reason

    fake = _fake_ncu(tmp_path, 'echo "==ERROR== something broke"; exit 7\n')
    monkeypatch.setattr(ncu, "find_ncu", lambda: fake)
    result = ncu.profile("relu_squared", baseline_path("relu_squared"), ["forward"], False, tmp_path / "r")
    assert result.status == "unavailable" and "exited with 7" in result.reason


def test_ncu_command_profiles_only_the_driver_range_at_real_clocks(tmp_path):
    cmd = ncu.ncu_command("ncu", "fused_add_rms_norm", baseline_path("fused_add_rms_norm"), ["backward"],
                          tmp_path / "r.ncu-rep")
    joined = " ".join(cmd)
    assert "--profile-from-start off" in joined and "--clock-control none" in joined and "--nvtx" in cmd
    for section in ncu.SECTIONS:
        assert f"--section {section}" in joined
    assert "dram__bytes_read.sum" in joined and "dram__bytes_write.sum" in joined
    assert cmd[-4:] == ["fused_add_rms_norm", str(baseline_path("fused_add_rms_norm")), "--passes", "backward"]
