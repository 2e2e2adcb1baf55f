# AOT ID: ['0_backward']
from ctypes import c_void_p, c_long, c_int
import torch
import math
import random
import os
import tempfile
from math import inf, nan
from cmath import nanj
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.utils import maybe_profile
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import start_graph, end_graph
from torch._C import _cuda_getCurrentRawStream as get_raw_stream

aten = torch.ops.aten
inductor_ops = torch.ops.inductor
_quantized = torch.ops._quantized
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
assert_alignment = torch._C._dynamo.guards.assert_alignment
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
empty_strided_cpu_pinned = torch._C._dynamo.guards._empty_strided_cpu_pinned
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu
empty_strided_mtia = torch._C._dynamo.guards._empty_strided_mtia
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
alloc_from_pool = torch.ops.inductor._alloc_from_pool
async_compile = AsyncCompile()
empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p


# kernel path: /tmp/torchinductor_root/fz/cfzqnor6aqhu5sxv7f644iynrpkdsyps55g44ppupnfbcgwe4uvw.py
# Topologically Sorted Source Nodes: [h_1, mul_2, add_2, mul_3, sum_1, mul_4, mul_5, sum_2, add_3, pow_2, mul_6, mul_7, expand, div, pow_3, mul_8, mul_9, add_4], Original ATen: [aten.mul, aten.add, aten.sum, aten.pow, aten.expand, aten.div]
# Source node to ATen node mapping:
#   add_2 => add_2
#   add_3 => add_3
#   add_4 => add_4
#   div => div
#   expand => expand
#   h_1 => mul
#   mul_2 => mul_2
#   mul_3 => mul_3
#   mul_4 => mul_4
#   mul_5 => mul_5
#   mul_6 => mul_6
#   mul_7 => mul_7
#   mul_8 => mul_8
#   mul_9 => mul_9
#   pow_2 => pow_2
#   pow_3 => pow_3
#   sum_1 => sum_1
#   sum_2 => sum_2
# Graph fragment:
#   %tangents_1 : Tensor "f32[16384, 2304][2304, 1]cuda:0" = PlaceHolder[target=tangents_1]
#   %primals_3 : Tensor "f32[2304][1]cuda:0" = PlaceHolder[target=primals_3]
#   %add : Tensor "f32[16384, 2304][2304, 1]cuda:0" = PlaceHolder[target=add]
#   %tangents_2 : Tensor "f32[16384, 2304][2304, 1]cuda:0" = PlaceHolder[target=tangents_2]
#   %rsqrt : Tensor "f32[16384, 1][1, 1]cuda:0" = PlaceHolder[target=rsqrt]
#   %sum_2 : Tensor "f32[16384, 1][1, 16384]cuda:0" = PlaceHolder[target=sum_2]
#   %mul : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%add, %rsqrt), kwargs = {})
#   %mul_2 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%tangents_1, %mul), kwargs = {})
#   %add_2 : Tensor "f32[2304][1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Tensor](args = (%primals_3, 0.0), kwargs = {})
#   %mul_3 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=2] = call_function[target=torch.ops.aten.mul.Tensor](args = (%tangents_1, %add_2), kwargs = {})
#   %sum_1 : Tensor "f32[1, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.sum.dim_IntList](args = (%mul_2, [0], True), kwargs = {})
#   %mul_4 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_3, %add), kwargs = {})
#   %mul_5 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_3, %rsqrt), kwargs = {})
#   %sum_2 : Tensor "f32[16384, 1][1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.sum.dim_IntList](args = (%mul_4, [1], True), kwargs = {})
#   %add_3 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Tensor](args = (%tangents_2, %mul_5), kwargs = {})
#   %pow_2 : Tensor "f32[16384, 1][1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%rsqrt, 3), kwargs = {})
#   %mul_6 : Tensor "f32[16384, 1][1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Scalar](args = (%sum_2, -0.5), kwargs = {})
#   %mul_7 : Tensor "f32[16384, 1][1, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%mul_6, %pow_2), kwargs = {})
#   %expand : Tensor "f32[16384, 2304][1, 0]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.expand.default](args = (%mul_7, [16384, 2304]), kwargs = {})
#   %div : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.div.Scalar](args = (%expand, 2304), kwargs = {})
#   %pow_3 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.pow.Tensor_Scalar](args = (%add, 1.0), kwargs = {})
#   %mul_8 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Scalar](args = (%pow_3, 2.0), kwargs = {})
#   %mul_9 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.mul.Tensor](args = (%div, %mul_8), kwargs = {})
#   %add_4 : Tensor "f32[16384, 2304][2304, 1]cuda:0"[num_users=1] = call_function[target=torch.ops.aten.add.Tensor](args = (%add_3, %mul_9), kwargs = {})
#   return %sum_2,%add_4
triton_per_fused_add_div_expand_mul_pow_sum_0 = async_compile.triton('triton_per_fused_add_div_expand_mul_pow_sum_0', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.persistent_reduction(
    size_hints={'x': 16384, 'r0_': 4096},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp32', 'in_ptr1': '*fp32', 'in_ptr2': '*fp32', 'in_ptr3': '*fp32', 'in_ptr4': '*fp32', 'out_ptr1': '*fp32', 'ws_ptr': '*fp32', 'xnumel': 'i32', 'r0_numel': 'i32', 'XBLOCK': 'constexpr', 'RSPLIT_SIZE': 'constexpr', 'NUM_STAGES': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {}, 'native_matmul': False, 'enable_fp_fusion': True, 'launch_pdl': False, 'disable_ftz': False, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (3,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]], (6,): [['tt.divisibility', 16]], (7,): [['tt.divisibility', 16]], (8,): [['tt.divisibility', 16]]}]},
    inductor_meta={'grid_type': 'MixOrderReductionGrid', 'autotune_hints': set(), 'kernel_name': 'triton_per_fused_add_div_expand_mul_pow_sum_0', 'mutated_arg_names': [], 'optimize_mem': True, 'no_x_dim': None, 'atomic_add_found': False, 'num_load': 5, 'num_store': 0, 'num_reduction': 1, 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': False, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'RSPLIT_SIZE': 16}
)
@triton.jit
def triton_per_fused_add_div_expand_mul_pow_sum_0(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, out_ptr1, ws_ptr, xnumel, r0_numel, XBLOCK : tl.constexpr, RSPLIT_SIZE : tl.constexpr, NUM_STAGES : tl.constexpr):
    xnumel = 16384
    r0_numel = 2304
    R0_BLOCK: tl.constexpr = 4096
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * RSPLIT_SIZE
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = r0_index < r0_numel
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    accum0 = tl.full([R0_BLOCK], 0, tl.float32)[None, :]
    split_size = min(RSPLIT_SIZE, xnumel - xoffset)
    for _ in tl.range(0, split_size, XBLOCK, num_stages=NUM_STAGES):
        x0 = xindex
        xindex += XBLOCK
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2304*x0), r0_mask, other=0.0)
        tmp1 = tl.load(in_ptr1 + (r0_1), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp5 = tl.load(in_ptr2 + (r0_1 + 2304*x0), r0_mask, other=0.0)
        tmp11 = tl.load(in_ptr3 + (r0_1 + 2304*x0), r0_mask, other=0.0)
        tmp12 = tl.load(in_ptr4 + (x0), None, eviction_policy='evict_last')
        tmp2 = tl.full([1, 1], 0.0, tl.float32)
        tmp3 = tmp1 + tmp2
        tmp4 = tmp0 * tmp3
        tmp6 = tmp4 * tmp5
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
        tmp9 = tl.where(r0_mask, tmp7, 0)
        tmp10 = tl.sum(tmp9, 1)[:, None].to(tl.float32)
        tmp13 = tmp4 * tmp12
        tmp14 = tmp11 + tmp13
        tmp15 = tl.full([1, 1], -0.5, tl.float32)
        tmp16 = tmp10 * tmp15
        tmp17 = tmp12 * tmp12
        tmp18 = tmp17 * tmp12
        tmp19 = tmp16 * tmp18
        tmp20 = tl.full([1, 1], 0.00043402777777777775, tl.float32)
        tmp21 = tmp19 * tmp20
        tmp22 = tl.full([1, 1], 2.0, tl.float32)
        tmp23 = tmp5 * tmp22
        tmp24 = tmp21 * tmp23
        tmp25 = tmp14 + tmp24
        tmp26 = tmp5 * tmp12
        tmp27 = tmp0 * tmp26
        tl.store(out_ptr1 + (r0_1 + 2304*x0), tmp25, r0_mask)
        tmp28 = tl.sum(tmp27, 0)
        tmp29 = accum0 + tmp28
        accum0 = tmp29
    tl.store(ws_ptr + (tl.program_id(0) + 0 * tl.num_programs(0)) * r0_numel + r0_index, accum0, r0_mask)
''', device_str='cuda')


async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def recursively_apply_fns(self, fns):
        new_callables = []
        for fn, c in zip(fns, self.partitions):
            new_callables.append(fn(c))
        self.partitions = new_callables

    def call(self, args):
        primals_3, add, rsqrt, tangents_1, tangents_2 = args
        args.clear()
        assert_size_stride(primals_3, (2304, ), (1, ))
        assert_size_stride(add, (16384, 2304), (2304, 1))
        assert_size_stride(rsqrt, (16384, 1), (1, 1))
        assert_size_stride(tangents_1, (16384, 2304), (2304, 1))
        assert_size_stride(tangents_2, (16384, 2304), (2304, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf3 = empty_strided_cuda((16384, 2304), (2304, 1), torch.float32)
            # Call mix order reduction kernel
            # Topologically Sorted Source Nodes: [h_1, mul_2, add_2, mul_3, sum_1, mul_4, mul_5, sum_2, add_3, pow_2, mul_6, mul_7, expand, div, pow_3, mul_8, mul_9, add_4], Original ATen: [aten.mul, aten.add, aten.sum, aten.pow, aten.expand, aten.div]
            workspace_0 = empty_strided_cuda((2359296, ), (1, ), torch.float32)
            stream0 = get_raw_stream(0)
            triton_per_fused_add_div_expand_mul_pow_sum_0.run(tangents_1, primals_3, add, tangents_2, rsqrt, buf3, workspace_0, 16384, 2304, stream=stream0)
            buf1 = workspace_0[0 * 1024 * 2304 : (0 + 1) * 1024 * 2304].view(1024, 2304).sum(dim=0)
            del workspace_0
            del add
            del primals_3
            del rsqrt
            del tangents_1
            del tangents_2
        return (buf3, buf3, reinterpret_tensor(buf1, (2304, ), (1, ), 0), )

runner = Runner(partitions=[])
call = runner.call
recursively_apply_fns = runner.recursively_apply_fns


def get_args():
    from torch._dynamo.testing import rand_strided
    primals_3 = rand_strided((2304, ), (1, ), device='cuda:0', dtype=torch.float32)
    add = rand_strided((16384, 2304), (2304, 1), device='cuda:0', dtype=torch.float32)
    rsqrt = rand_strided((16384, 1), (1, 1), device='cuda:0', dtype=torch.float32)
    tangents_1 = rand_strided((16384, 2304), (2304, 1), device='cuda:0', dtype=torch.float32)
    tangents_2 = rand_strided((16384, 2304), (2304, 1), device='cuda:0', dtype=torch.float32)
    return [primals_3, add, rsqrt, tangents_1, tangents_2]


def benchmark_compiled_module(args, times=10, repeat=10):
    from torch._inductor.utils import print_performance
    fn = lambda: call(list(args))
    return print_performance(fn, times=times, repeat=repeat)


if __name__ == "__main__":
    from torch._inductor.wrapper_benchmark import compiled_module_main
    args = get_args()
    compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))
