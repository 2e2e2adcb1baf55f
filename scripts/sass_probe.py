"""What the GPU would run, without a GPU: a variant's kernel compiled for an H200 (sm_90) as its launch at a shape
compiles it, with Triton's own ptxas, and what the code holds (a diagnosis, no gate):

    python3 scripts/sass_probe.py OUT_DIR ROWSxCOLS:DTYPE[,...] NAME=VARIANT[:PASS] [NAME=INDUCTOR_CODE.py ...]

For each shape and contender it writes OUT_DIR/<shape>-<dtype>/<name>.sass and prints one JSON line: registers a
thread, stack (spills) and shared memory, warps, grid, and the global loads (``LDG``, ``LDGSTS``) the SASS issues
before and after the first barrier (``BAR.SYNC``, a row sum's: no load is issued across a barrier, so a load
written after the sum waits its latency after it). A variant is a kernel module of ``fused_add_rms_norm``
(``kernels/``, ``notebooks/<device>/<kernel>/variants/``); its launch is recorded by running its forward and
backward on the meta device with the H200's 132 SMs, so the constexprs, warps and grid are those of its dispatch
table at that shape. ``PASS`` is ``backward`` (the default) or ``forward``. ``INDUCTOR_CODE.py`` is a module
``torch.compile`` generated (``scripts/inductor_probe.py`` writes them): its one Triton kernel is compiled with
Inductor's launch (8 warps, 16 rows a program, one stage). Use the device's Triton (3.6 on the H200): its bundled
ptxas then makes the same code, and the registers printed are those NCU measures there.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

H200 = GPUTarget("cuda", 90, 32)
H200_SMS = 132
TOOLS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
LOAD = r"\bLDG(?:STS)?\b"  # a global load into registers, or into shared memory (a pipelined loop's cp.async)
POINTER = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.int32: "*i32"}


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Recorder:
    """Stands in for a ``@triton.jit`` kernel: keeps each launch's grid, arguments and keywords."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def variant_launch(path: Path, shape: tuple[int, int], dtype: torch.dtype, pass_name: str):
    """The kernel, arguments and options of the variant's ``pass_name`` launch at ``shape``."""
    # A name per file and pass, the same in every run (hash() of a str changes with PYTHONHASHSEED).
    module = _module(path, "probed_" + hashlib.sha1(f"{path}:{pass_name}".encode()).hexdigest()[:16])
    module._multiprocessor_count = lambda device: H200_SMS
    recorders = {name: _Recorder(getattr(module, name)) for name in ("_forward_kernel", "_backward_kernel",
                                                                     "_sum_rows_kernel")}
    for name, recorder in recorders.items():
        setattr(module, name, recorder)
    X, R = (torch.empty(shape, dtype=dtype, device="meta", requires_grad=True) for _ in range(2))
    W = torch.empty(shape[-1], dtype=dtype, device="meta", requires_grad=True)
    Y, S = module.fused_add_rms_norm(X, R, W)
    torch.autograd.backward([Y, S], [torch.empty_like(Y), torch.empty_like(S)])
    recorder = recorders["_forward_kernel" if pass_name == "forward" else "_backward_kernel"]
    grid, args, kwargs = recorder.launches[-1]
    values = dict(zip(recorder.kernel.arg_names, args))
    options = {"num_warps": kwargs.pop("num_warps"), "num_stages": kwargs.pop("num_stages", None) or 3}
    return recorder.kernel, values, kwargs, options, grid[0]


def inductor_launch(path: Path, shape: tuple[int, int]):
    """The Triton kernel of an Inductor module (``code-1.py``), with the launch Inductor gave it: its pointers'
    types from the signature Inductor wrote (``triton_meta``)."""
    source = path.read_text()
    body = source.split("@triton.jit\n", 1)[1].split("''', device_str")[0]
    with tempfile.TemporaryDirectory() as folder:  # the JIT reads the kernel's source from its file
        module_path = Path(folder) / "inductor_kernel.py"
        module_path.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + body)
        kernel = next(v for v in vars(_module(module_path, "inductor_kernel")).values()
                      if isinstance(v, triton.runtime.jit.JITFunction))
    signature = ast.literal_eval(re.search(r"triton_meta=\{'signature': (\{[^}]*\})", source).group(1))
    split = int(re.search(r"'RSPLIT_SIZE': (\d+)", source).group(1))
    values = {name: kind for name, kind in signature.items() if kind.startswith("*")}
    values.update(xnumel=shape[0], r0_numel=shape[1])
    constexprs = {"XBLOCK": 1, "RSPLIT_SIZE": split, "NUM_STAGES": 1}
    return kernel, values, constexprs, {"num_warps": 8, "num_stages": 1}, triton.cdiv(shape[0], split)


def compile_for_h200(kernel, values: dict, constexprs: dict, options: dict):
    """Compiles as the JIT specialises: tensors are 16-byte aligned pointers, an int of 1 a constant, an int
    divisible by 16 marked so (its loads may then be vectorised)."""
    signature, attributes = {}, {}
    for index, name in enumerate(kernel.arg_names):
        value = values.get(name)
        if name in constexprs:
            signature[name] = "constexpr"
        elif isinstance(value, torch.Tensor) or isinstance(value, str):
            signature[name] = POINTER[value.dtype] if isinstance(value, torch.Tensor) else value
            attributes[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):  # before int: a bool is one
            signature[name] = "u1"
        elif isinstance(value, int) and value == 1:
            signature[name], constexprs = "constexpr", {**constexprs, name: 1}
        elif isinstance(value, int):
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value % 16 == 0:
                attributes[(index,)] = [["tt.divisibility", 16]]
        else:
            signature[name] = "fp32"
    return triton.compile(ASTSource(kernel, signature, constexprs, attributes), target=H200, options=options)


def describe(compiled, out: Path) -> dict:
    cubin = out.with_suffix(".cubin")
    cubin.write_bytes(compiled.asm["cubin"])
    sass = subprocess.run([TOOLS / "cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    usage = subprocess.run([TOOLS / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True,
                           check=True).stdout
    cubin.unlink()
    out.with_suffix(".sass").write_text(sass)
    before, _, after = sass.partition("BAR.SYNC")
    return {"registers": int(re.search(r"REG:(\d+)", usage).group(1)),
            "stack": int(re.search(r"STACK:(\d+)", usage).group(1)), "shared": compiled.metadata.shared,
            "num_warps": compiled.metadata.num_warps, "loads_before_barrier": len(re.findall(LOAD, before)),
            "loads_after_barrier": len(re.findall(LOAD, after))}


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(__doc__)
    out_dir, shapes, contenders = Path(argv[0]), argv[1].split(","), argv[2:]
    for shape_text in shapes:
        size, dtype_name = shape_text.split(":")
        shape = tuple(int(n) for n in size.split("x"))
        folder = out_dir / f"{size}-{dtype_name}"
        folder.mkdir(parents=True, exist_ok=True)
        for contender in contenders:
            name, _, target = contender.partition("=")
            path, _, pass_name = target.partition(":")
            if "_inductor" in Path(path).read_text()[:2000]:
                kernel, values, constexprs, options, grid = inductor_launch(Path(path), shape)
            else:
                kernel, values, constexprs, options, grid = variant_launch(
                    Path(path), shape, getattr(torch, dtype_name), pass_name or "backward")
            row = describe(compile_for_h200(kernel, values, constexprs, options), folder / name)
            print(json.dumps({"shape": shape_text, "name": name, "kernel": kernel.__name__, "grid": grid, **row,
                              "constexprs": {k: v for k, v in constexprs.items() if k.isupper()}}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
