"""Put the workspace's best accepted kernels into a Hugging Face ``transformers`` model, in place.

What is patched, per model type (``SUPPORTED``):

* **Llama-family decoder layers** (Llama, Mistral, Qwen2, Qwen3, Gemma; Nemotron has LayerNorm1P and only
  its relu2 is patched): the attention's residual add and the
  post-attention RMSNorm, ``S = residual + attn; Y = RMSNorm(S)``, become one ``fused_add_rms_norm`` call
  (``Y`` feeds the MLP, ``S`` is the next residual). Llama's RMSNorm is casting mode ``llama`` (float32
  statistics, ``S * rstd`` cast back before the weight) with offset 0; Gemma's is ``gemma`` (all in float32,
  weight ``1 + w``) with offset 1. The MLP's residual add and the next layer's input norm stay as they are:
  they belong to two layers, and fusing them would mean rewriting the model's forward, not a layer's.
* **A ``relu2`` activation** (``transformers.activations.ReLUSquaredActivation``, wherever it sits) becomes
  ``relu_squared``.

A layer is patched only if it has exactly the structure the fused forward replaces (``input_layernorm``,
``self_attn``, ``post_attention_layernorm`` of the expected norm class, ``mlp``, and no other norm); anything
else is left alone and named in the report. ``unpatch`` restores every patched forward and module.

The kernels are the best accepted variants of the workspace's history for the device the model is on (see
``best_variant_file``), else the baselines. Loading a variant runs its code in this process: a variant the
loop accepted passed the gate in the sandbox, and patching is the user's choice to run it.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from liger_perf.core.errors import UserError
from liger_perf.core.workspace import current
from liger_perf.kernel.passes import as_tuple

#: model_type -> (the RMSNorm class name its decoder layers use, casting mode, weight offset)
SUPPORTED = {
    "llama": ("LlamaRMSNorm", "llama", 0.0),
    "mistral": ("MistralRMSNorm", "llama", 0.0),
    "qwen2": ("Qwen2RMSNorm", "llama", 0.0),
    "qwen3": ("Qwen3RMSNorm", "llama", 0.0),
    "gemma": ("GemmaRMSNorm", "gemma", 1.0),
    "nemotron": (None, None, None),  # LayerNorm1P, no RMSNorm to fuse; relu2 MLPs
}
FUSED, RELU2 = "fused_add_rms_norm", "relu_squared"
_PATCHED = "_liger_perf_patched"  # on a patched model: its PatchReport
_ORIGINAL = "_liger_perf_original_forward"  # on a patched layer: its forward before

#: The activation dtypes the kernels take; a model in another (float64) keeps PyTorch's own forward.
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

INSTALL_HINT = "transformers is not installed: pip install 'liger-perf[models]' (or pip install transformers)"


@dataclass
class PatchReport:
    model_type: str
    kernels: dict[str, str] = field(default_factory=dict)  # kernel -> the variant file used
    fused_layers: list[str] = field(default_factory=list)  # module names of the decoder layers patched
    relu_squared: list[str] = field(default_factory=list)  # module names of the activations replaced
    left_alone: list[str] = field(default_factory=list)  # "name: why" of layers that did not match

    def summary(self) -> str:
        lines = [f"patched a {self.model_type} model: {len(self.fused_layers)} decoder layers with "
                 f"{FUSED}, {len(self.relu_squared)} relu2 activations with {RELU2}"]
        lines += [f"  {kernel}: {path}" for kernel, path in self.kernels.items()]
        lines += [f"  left alone: {why}" for why in self.left_alone]
        return "\n".join(lines)


def supported_table() -> list[tuple[str, str]]:
    """(model type, what is patched) for ``liger-perf patch --list``."""
    rows = [(name, (f"{FUSED} (casting {casting}, offset {offset:g}) in each decoder layer; " if casting else "")
             + f"{RELU2} for relu2") for name, (_, casting, offset) in SUPPORTED.items()]
    # apply(model) refuses any other type (strict); only apply(model, strict=False) patches its relu2 activations.
    return rows + [("any other", f"refused by apply(model); apply(model, strict=False) puts in {RELU2} for relu2 "
                                 "activations only")]


def best_variant_file(kernel: str, device: str = "auto") -> Path:
    """The best accepted variant of ``kernel`` in the workspace's history for ``device`` (see
    ``store.reading_device``: on a machine without a GPU, the latest GPU history), else its baseline."""
    from liger_perf.record.history import best_variant_file as best_in
    from liger_perf.record.store import Store, reading_device

    return best_in(kernel, Store(device=reading_device(kernel, device)).notebooks)


def load_kernel(kernel: str, variant: Path | None = None, device: str = "auto") -> tuple[Any, Path]:
    """The kernel's module (a variant file, else the best accepted one) and the file it came from.

    The history's best may be a proposer's code, which ran only in the sandbox, and here it is imported into the
    model's own process, with its environment and files: it meets the static check of generated code first (a
    file named by ``variant`` is the caller's own choice, imported as it is)."""
    from liger_perf.kernel.registry import get_spec
    from liger_perf.kernel.variants import load_variant, read_source
    from liger_perf.propose.safety import check_generated_source

    spec = get_spec(kernel)
    path = variant or best_variant_file(kernel, device)
    if variant is None:
        problem = check_generated_source(read_source(path), spec)
        if problem:
            raise UserError(f"the best accepted {kernel} variant {path} fails the static check of generated code "
                            f"({problem}), so it is not imported outside the sandbox; once you have read it, "
                            "pass its path in apply()'s variants to use it anyway")
    return load_variant(path, spec).module, path


def apply(model, device: str = "auto", variants: dict[str, Path] | None = None,
          functions: dict[str, Callable] | None = None, relu2: bool = True, strict: bool = True) -> PatchReport:
    """Patch ``model`` in place (see the module docstring) and say what was patched. ``variants``: kernel ->
    file, instead of the workspace's best; ``functions``: kernel -> a function with the kernel's interface to use
    as it is (another library's, for a comparison); a kernel missing from ``functions`` when it is given is not
    patched. ``relu2``: patch relu2 activations too. ``strict``: refuse a model type ``SUPPORTED`` does not list
    (else only its relu2 activations are patched)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if getattr(model, _PATCHED, None) is not None:
        raise UserError("this model is patched already: liger_perf.models.patch.unpatch(model) first")
    if model_type not in SUPPORTED and strict:
        raise UserError(f"model type {model_type!r} is not supported: one of {', '.join(SUPPORTED)} "
                        "(liger-perf patch --list)")
    variants = variants or {}
    report = PatchReport(model_type=str(model_type))
    norm_class, casting, offset = SUPPORTED.get(model_type, (None, None, None))
    if norm_class is not None:
        layers = [(name, m) for name, m in model.named_modules() if hasattr(m, "post_attention_layernorm")]
        fused = None
        for name, layer in layers:
            why = _mismatch(layer, norm_class)
            if why:
                report.left_alone.append(f"{name}: {why}")
                continue
            if functions is not None and FUSED not in functions:
                report.left_alone.append(f"{name}: no {FUSED} function given")
                continue
            if fused is None and functions is not None:
                fused, report.kernels[FUSED] = functions[FUSED], getattr(functions[FUSED], "__module__", "given")
            elif fused is None:
                module, path = load_kernel(FUSED, variants.get(FUSED), device)
                fused, report.kernels[FUSED] = module.fused_add_rms_norm, current().relative(path)
            _fuse_layer(layer, fused, casting, offset)
            report.fused_layers.append(name)
    activations = _relu2_modules(model) if relu2 and (functions is None or RELU2 in functions) else []
    if activations:
        if functions is not None:
            kernel, report.kernels[RELU2] = functions[RELU2], getattr(functions[RELU2], "__module__", "given")
        else:
            module, path = load_kernel(RELU2, variants.get(RELU2), device)
            kernel, report.kernels[RELU2] = module.relu_squared, current().relative(path)
        for parent, attr, name in activations:
            original = getattr(parent, attr)
            setattr(parent, attr, _ReluSquared(kernel, original))
            report.relu_squared.append(name)
    setattr(model, _PATCHED, report)
    return report


def unpatch(model) -> None:
    """Undo ``apply``: every patched layer's forward and every replaced activation back as they were."""
    if getattr(model, _PATCHED, None) is None:
        raise UserError("this model is not patched by liger-perf")
    for module in model.modules():
        if _ORIGINAL in vars(module):  # a layer: its forward was set on the instance
            del module.forward
            delattr(module, _ORIGINAL)
        for attr, child in list(module.named_children()):
            if isinstance(child, _ReluSquared):
                setattr(module, attr, child.original)
    delattr(model, _PATCHED)


# -- decoder layers ---------------------------------------------------------------------------------------------

def _mismatch(layer, norm_class: str) -> str | None:
    """Why ``layer`` is not a decoder layer the fused forward can stand in for, or None."""
    for attr in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"):
        if not hasattr(layer, attr):
            return f"no {attr}"
    norm = layer.post_attention_layernorm
    if type(norm).__name__ != norm_class:
        return f"post_attention_layernorm is a {type(norm).__name__}, not {norm_class}"
    extra = [n for n, m in layer.named_children() if n not in ("input_layernorm", "post_attention_layernorm")
             and "norm" in type(m).__name__.lower()]
    if extra:
        return f"more norms than a Llama-family layer ({', '.join(extra)}): another structure"
    if _eps(norm) is None or getattr(norm, "weight", None) is None:
        return "its post-attention norm has no weight or epsilon"
    return None


def _eps(norm) -> float | None:
    for attr in ("variance_epsilon", "eps"):
        value = getattr(norm, attr, None)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _fuse_layer(layer, fused, casting: str, offset: float) -> None:
    """Give ``layer`` (one instance) a forward in which the attention's residual add and the post-attention norm
    are one fused call; the class and every other layer keep theirs."""
    original = layer.forward
    norm = layer.post_attention_layernorm
    eps = _eps(norm)

    def forward(self, hidden_states, *args, **kwargs):
        # transformers passes everything after hidden_states by keyword; a caller that does not gets the original
        # forward, unfused. So does a norm weight in another dtype than the activations (float32 master weights
        # under autocast): PyTorch then returns the norm in float32, the kernel in the activations' dtype. And so
        # do activations in a dtype the kernel refuses (a float64 model).
        if args or norm.weight.dtype != hidden_states.dtype or hidden_states.dtype not in KERNEL_DTYPES:
            return original(hidden_states, *args, **kwargs)
        residual = hidden_states
        attention, *_ = as_tuple(self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs))
        if attention.dtype != residual.dtype:
            # An attention that returns another dtype (under autocast): PyTorch's add promotes, the kernel takes
            # one dtype; the layer's own arithmetic, unfused.
            summed = residual + attention
            return summed + self.mlp(norm(summed))
        normed, residual = fused(attention, residual, norm.weight, eps=eps, offset=offset, casting_mode=casting)
        return residual + self.mlp(normed)

    layer.forward = types.MethodType(forward, layer)
    setattr(layer, _ORIGINAL, original)


# -- relu2 ------------------------------------------------------------------------------------------------------

def _relu2_modules(model) -> list[tuple[Any, str, str]]:
    """(parent module, attribute, full name) of every ``ReLUSquaredActivation`` in ``model``."""
    try:
        from transformers.activations import ReLUSquaredActivation
    except ImportError:
        return []
    found = []
    for parent_name, parent in model.named_modules():
        for attr, child in parent.named_children():
            if isinstance(child, ReLUSquaredActivation):
                found.append((parent, attr, f"{parent_name}.{attr}" if parent_name else attr))
    return found


class _ReluSquared(torch.nn.Module):
    """``relu(x) ** 2`` by the relu_squared kernel; keeps the module it replaced, for ``unpatch`` (in a list: not
    a submodule, so the model's modules and state dict are what they were)."""

    def __init__(self, kernel, original):
        super().__init__()
        self.kernel = kernel
        self._replaced = [original]

    @property
    def original(self):
        return self._replaced[0]

    def forward(self, x):
        # A dtype the kernel refuses (float64, integers) goes to the module it replaced.
        return self.kernel(x) if x.dtype in KERNEL_DTYPES else self.original(x)


__all__ = ["INSTALL_HINT", "KERNEL_DTYPES", "PatchReport", "SUPPORTED", "apply", "best_variant_file", "load_kernel",
           "supported_table", "unpatch"]
