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

A layer is patched only if it is transformers' own decoder layer class of the model type, its post-attention norm
transformers' own RMSNorm class (not a subclass, not a look-alike of the same name: the fused forward stands in for
their code, so it must be their code), with no forward of its own set on either and no other norm; anything else is
left alone and named in the report. A relu2 activation likewise must be ``ReLUSquaredActivation`` itself.

Each call reads the layer as it is then: its norm, the norm's epsilon and weight. A call the kernel cannot
stand in for runs the layer's own forward: arguments passed by position, a norm since replaced or hooked (its hooks
would not fire inside a fused call), a weight of another shape or dtype, float64 activations (the kernels compute
in float32 at most). So a deep copy of a patched model runs its own modules, and hooks on a patched relu2
activation still fire (its forward is replaced on the instance, the module stays). ``unpatch`` restores every
patched forward. A patched model pickles (``torch.save``) as the unpatched one: the kernels are this process's
imports of the workspace's files, so a loaded model is a plain one until ``apply`` patches it again.

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

@dataclass(frozen=True)
class Family:
    """How a model type's decoder layers are fused: transformers' classes by name, and the norm's arithmetic."""

    layer_class: str | None  # the decoder layer class in transformers.models.<type>.modeling_<type>; None: no fusing
    norm_class: str | None  # its RMSNorm class there
    eps_attribute: str | None  # where that norm keeps its epsilon
    casting: str | None = None  # the fused kernel's casting mode
    offset: float | None = None  # the weight offset (Gemma: 1 + w)


SUPPORTED = {
    "llama": Family("LlamaDecoderLayer", "LlamaRMSNorm", "variance_epsilon", "llama", 0.0),
    "mistral": Family("MistralDecoderLayer", "MistralRMSNorm", "variance_epsilon", "llama", 0.0),
    "qwen2": Family("Qwen2DecoderLayer", "Qwen2RMSNorm", "variance_epsilon", "llama", 0.0),
    "qwen3": Family("Qwen3DecoderLayer", "Qwen3RMSNorm", "variance_epsilon", "llama", 0.0),
    "gemma": Family("GemmaDecoderLayer", "GemmaRMSNorm", "eps", "gemma", 1.0),
    "nemotron": Family(None, None, None),  # LayerNorm1P, no RMSNorm to fuse; relu2 MLPs
}
FUSED, RELU2 = "fused_add_rms_norm", "relu_squared"
_PATCHED = "_liger_perf_patched"  # on a patched model: its PatchReport
_PATCHED_FORWARD = "_liger_perf_patched_forward"  # on a patched module: the kernel its instance forward puts in

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

    def __reduce__(self):
        # Pickled with the model (torch.save), the report loads as None, so the loaded model reads as not patched:
        # its modules pickle without the patch (``_set_patch``). ``type(None)`` keeps the pickle loadable
        # where liger_perf is not installed.
        return type(None), ()

    def __copy__(self) -> "PatchReport":
        return PatchReport(**vars(self))

    def __deepcopy__(self, memo) -> "PatchReport":  # a deep copy of the model is patched still
        import copy

        return PatchReport(**copy.deepcopy(vars(self), memo))

    def summary(self) -> str:
        lines = [f"patched a {self.model_type} model: {len(self.fused_layers)} decoder layers with "
                 f"{FUSED}, {len(self.relu_squared)} relu2 activations with {RELU2}"]
        lines += [f"  {kernel}: {path}" for kernel, path in self.kernels.items()]
        lines += [f"  left alone: {why}" for why in self.left_alone]
        return "\n".join(lines)


def supported_table() -> list[tuple[str, str]]:
    """(model type, what is patched) for ``liger-perf patch --list``."""
    rows = [(name, (f"{FUSED} (casting {family.casting}, offset {family.offset:g}) in each decoder layer; "
                    if family.casting else "") + f"{RELU2} for relu2") for name, family in SUPPORTED.items()]
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
    family = SUPPORTED.get(model_type)
    # What to patch first, then the kernels, then the model: a kernel that fails to load leaves it untouched.
    layers = []
    if family is not None and family.layer_class is not None:
        classes = _family_classes(model_type, family)
        for name, layer in model.named_modules():
            if not hasattr(layer, "post_attention_layernorm"):
                continue
            why = _mismatch(layer, family, classes)
            if why is None and functions is not None and FUSED not in functions:
                why = f"no {FUSED} function given"
            if why:
                report.left_alone.append(f"{name}: {why}")
            else:
                layers.append((name, layer))
    activations = _relu2_modules(model) if relu2 and (functions is None or RELU2 in functions) else []
    fused = relu_squared = None
    if layers:
        fused, report.kernels[FUSED] = _kernel(FUSED, functions, variants, device)
    if activations:
        relu_squared, report.kernels[RELU2] = _kernel(RELU2, functions, variants, device)
    for name, layer in layers:
        _fuse_layer(layer, fused, family, classes)
        report.fused_layers.append(name)
    for name, activation in activations:
        _replace_relu2(activation, relu_squared)
        report.relu_squared.append(name)
    setattr(model, _PATCHED, report)
    return report


def _kernel(kernel: str, functions, variants, device) -> tuple[Callable, str]:
    """The function to put in for ``kernel`` and what to call it in the report."""
    if functions is not None:
        return functions[kernel], getattr(functions[kernel], "__module__", "given")
    module, path = load_kernel(kernel, variants.get(kernel), device)
    return getattr(module, kernel), current().relative(path)


def unpatch(model) -> None:
    """Undo ``apply``: every patched layer's forward and every replaced activation back as they were."""
    if getattr(model, _PATCHED, None) is None:
        raise UserError("this model is not patched by liger-perf")
    for module in model.modules():
        if _PATCHED_FORWARD in vars(module):  # a layer or an activation: its forward was set on the instance
            _remove_patch(module)
    delattr(model, _PATCHED)


# -- pickling ---------------------------------------------------------------------------------------------------

#: What ``apply`` sets on the instance of a layer or an activation it patches; none of it is pickled.
_PATCH_ATTRIBUTES = ("forward", _PATCHED_FORWARD, "__getstate__", "__deepcopy__")


def _set_patch(module, forward: Callable, mark: str) -> None:
    """Patch ``module`` (one instance, a layer or an activation): ``forward`` bound to it, marked ``mark``, and
    pickled without the patch, deep-copied with it.

    Unpickled, the instance forward would not come back: a bound method pickles as ``getattr(module, "forward")``,
    which on load finds the class's forward, and the module came back unfused but marked patched. So the patch is
    left out of the pickled state (``__getstate__``, looked up on the instance by pickle and by copy). A deep copy
    in this process keeps it, its forward bound to the copy (``__deepcopy__``, looked up on the instance first).
    The module is in a reference cycle already (its forward is bound to it); the model, which ``apply`` marks with
    its report alone, is not put in one (the collector, not ``del``, would free its weights)."""
    module.forward = types.MethodType(forward, module)
    setattr(module, _PATCHED_FORWARD, mark)
    module.__getstate__ = types.MethodType(_state_without_patch, module)
    module.__deepcopy__ = types.MethodType(_deep_copy_with_patch, module)


def _remove_patch(module) -> None:
    """Undo ``_set_patch``: the module runs, pickles and copies as its class does."""
    for name in _PATCH_ATTRIBUTES:
        vars(module).pop(name, None)


def _state_without_patch(self) -> dict:
    state = type(self).__getstate__(self)
    return {key: value for key, value in state.items() if key not in _PATCH_ATTRIBUTES}


def _deep_copy_with_patch(self, memo):
    # What copy.deepcopy does for any object, with the class's state (patch included) instead of the instance's
    # __getstate__: the bound methods in it are rebound to the copy (copy's rule for methods).
    import copy

    cls = type(self)
    copied = cls.__new__(cls)
    memo[id(self)] = copied
    copied.__setstate__(copy.deepcopy(cls.__getstate__(self), memo))
    return copied


# -- decoder layers ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Classes:
    layer: type | None  # transformers' decoder layer class of the model type (None: not in this transformers)
    norm: type | None


def _family_classes(model_type: str, family: Family) -> _Classes:
    import importlib

    try:
        module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    except ImportError:
        return _Classes(None, None)
    return _Classes(getattr(module, family.layer_class, None), getattr(module, family.norm_class, None))


def _mismatch(layer, family: Family, classes: _Classes) -> str | None:
    """Why ``layer`` is not a decoder layer the fused forward can stand in for, or None."""
    if classes.layer is None or classes.norm is None:
        return "this transformers has no such decoder layer or norm class"
    if type(layer) is not classes.layer:
        # A subclass, a remote-code class of the same name: the fused forward would stand in for code it never read.
        return f"a {type(layer).__qualname__}, not transformers' {classes.layer.__qualname__}"
    if "forward" in vars(layer):
        return "a forward of its own is set on it (another library's patch?)"
    for attr in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp"):
        if not hasattr(layer, attr):
            return f"no {attr}"
    norm = layer.post_attention_layernorm
    if type(norm) is not classes.norm:
        return f"post_attention_layernorm is a {type(norm).__qualname__}, not transformers' {classes.norm.__qualname__}"
    extra = [n for n, m in layer.named_children() if n not in ("input_layernorm", "post_attention_layernorm")
             and "norm" in type(m).__name__.lower()]
    if extra:
        return f"more norms than a Llama-family layer ({', '.join(extra)}): another structure"
    if not isinstance(getattr(norm, "weight", None), torch.Tensor) or _eps(norm, family) is None:
        return "its post-attention norm has no weight or epsilon"
    return None


def _eps(norm, family: Family) -> float | None:
    eps = getattr(norm, family.eps_attribute, None)
    return None if isinstance(eps, bool) or not isinstance(eps, (int, float)) else float(eps)


def _has_hooks(module) -> bool:
    """Whether calling ``module`` would run a hook (its own, or a global one): a fused call would skip them."""
    from torch.nn.modules import module as nn_module

    own = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    every = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
             "_global_backward_pre_hooks")
    return any(getattr(module, name, None) for name in own) or any(getattr(nn_module, name, None) for name in every)


def _fusable(norm, family: Family, classes: _Classes, hidden_states) -> float | None:
    """The norm's epsilon when the kernel computes exactly what calling ``norm`` on ``hidden_states`` would, else
    None. Read at each call: the norm may have been replaced, hooked or moved since the patch."""
    if type(norm) is not classes.norm or "forward" in vars(norm) or _has_hooks(norm):
        return None
    weight = getattr(norm, "weight", None)
    if (not isinstance(weight, torch.Tensor) or weight.shape != hidden_states.shape[-1:]
            or weight.dtype != hidden_states.dtype or hidden_states.dtype not in KERNEL_DTYPES):
        # A weight in another dtype (float32 master weights under autocast): PyTorch then returns the norm in
        # float32, the kernel in the activations' dtype. A float64 model: the kernels compute in float32 at most.
        return None
    return _eps(norm, family)


def _fuse_layer(layer, fused, family: Family, classes: _Classes) -> None:
    """Give ``layer`` (one instance) a forward in which the attention's residual add and the post-attention norm
    are one fused call; the class and every other layer keep theirs. The forward holds no module of the model
    (a deep copy of the model rebinds it to the copy's layer, which it reads at each call)."""

    def forward(self, hidden_states, *args, **kwargs):
        # transformers passes everything after hidden_states by keyword; a caller that does not gets the layer's
        # own forward, unfused. So does a norm the kernel cannot stand in for (``_fusable``).
        norm = self.post_attention_layernorm
        eps = None if args else _fusable(norm, family, classes, hidden_states)
        if eps is None:
            return type(self).forward(self, hidden_states, *args, **kwargs)
        residual = hidden_states
        attention, *_ = as_tuple(self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs))
        if attention.dtype != residual.dtype:
            # An attention that returns another dtype (under autocast): PyTorch's add promotes, the kernel takes
            # one dtype; the layer's own arithmetic, unfused.
            summed = residual + attention
            return summed + self.mlp(norm(summed))
        normed, residual = fused(attention, residual, norm.weight, eps=eps, offset=family.offset,
                                 casting_mode=family.casting)
        return residual + self.mlp(normed)

    _set_patch(layer, forward, FUSED)


# -- relu2 ------------------------------------------------------------------------------------------------------

def _relu2_modules(model) -> list[tuple[str, Any]]:
    """(full name, module) of every ``ReLUSquaredActivation`` in ``model``: that class itself, with no forward of
    its own (a subclass may compute anything: ``relu(x) ** 3``, a leaky relu)."""
    try:
        from transformers.activations import ReLUSquaredActivation
    except ImportError:
        return []
    return [(name, module) for name, module in model.named_modules()
            if type(module) is ReLUSquaredActivation and "forward" not in vars(module)]


def _replace_relu2(activation, kernel) -> None:
    """``relu(x) ** 2`` by the relu_squared kernel, set as the instance's forward: the module stays where it was,
    with its hooks (they run around the kernel as around the module's own forward)."""

    def forward(self, x):
        # A dtype the kernel does not compute in (float64, integers) goes to the module's own forward.
        return kernel(x) if x.dtype in KERNEL_DTYPES else type(self).forward(self, x)

    _set_patch(activation, forward, RELU2)


__all__ = ["Family", "INSTALL_HINT", "KERNEL_DTYPES", "PatchReport", "SUPPORTED", "apply", "best_variant_file",
           "load_kernel", "supported_table", "unpatch"]
