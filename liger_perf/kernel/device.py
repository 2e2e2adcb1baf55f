"""Where a variant runs: a CUDA GPU, or the Triton interpreter on the CPU.

Triton decides at ``@triton.jit`` time whether a kernel is compiled or interpreted, so the mode must be
settled before any variant module is imported; ``select_device`` does that by setting ``TRITON_INTERPRET``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from liger_perf.core.errors import UserError

MODES = ("auto", "cuda", "interpret")


@dataclass(frozen=True)
class Device:
    mode: str  # "cuda" or "interpret"
    torch_device: torch.device

    @property
    def interpreted(self) -> bool:
        return self.mode == "interpret"

    @property
    def suite(self) -> str:
        """Which of a spec's suites fits this device: the full GPU suite, or the small interpreter one."""
        return "interpret" if self.interpreted else "gpu"

    @property
    def device_class(self) -> str:
        """Whose history this device's trials join (``workspace.device_class``)."""
        from liger_perf.core.workspace import device_class

        return device_class(None if self.interpreted else torch.cuda.get_device_name(self.torch_device))

    def describe(self) -> str:
        if self.interpreted:
            return "Triton interpreter on the CPU (TRITON_INTERPRET=1): correctness only, timings are CPU timings"
        props = torch.cuda.get_device_properties(self.torch_device)
        return f"CUDA: {props.name} ({props.multi_processor_count} SMs)"

    def synchronize(self) -> None:
        if not self.interpreted:
            torch.cuda.synchronize(self.torch_device)


def select_device(mode: str = "auto") -> Device:
    """Resolve ``auto|cuda|interpret``; ``auto`` means CUDA when a device is visible, else the interpreter."""
    if mode not in MODES:
        raise UserError(f"unknown device mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "auto":
        interpret_forced = os.environ.get("TRITON_INTERPRET") == "1"
        mode = "cuda" if torch.cuda.is_available() and not interpret_forced else "interpret"
    if mode == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA device is visible here; use --device interpret (or auto)")
        os.environ.pop("TRITON_INTERPRET", None)
        _set_triton_interpret(False)
        return Device("cuda", torch.device("cuda", torch.cuda.current_device()))
    os.environ["TRITON_INTERPRET"] = "1"
    _set_triton_interpret(True)
    from liger_perf.kernel.interpreter import confine_memory, install

    install()  # helpers called inside a kernel are not re-patched: the same results, a third less time
    if not confine_memory():  # a kernel reads and writes only its tensors (the module's docstring says why)
        raise UserError("this Triton's interpreter is not one liger-perf can confine to a kernel's own tensors: "
                        "run on a GPU, or install the Triton this package is tested with")
    return Device("interpret", torch.device("cpu"))


def _set_triton_interpret(on: bool) -> None:
    # Newer Triton caches its environment knobs at import; keep them in step with the variable.
    try:
        from triton import knobs
    except ImportError:
        return
    try:
        knobs.runtime.interpret = on
    except AttributeError:
        pass
