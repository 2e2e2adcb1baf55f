"""The shapes real models train at, split into the widths the loop may tune on and widths it never reads.

A kernel tuned at a handful of widths can lose at every other one (on the H200 the fused best's knobs acted only at
the suite's widths: 0.83-0.95x of liger-kernel at H = 5120, 6144 and 12288). So the benchmark's model suite is drawn
from the configurations of open model families: their hidden sizes (what a norm over the residual stream sees) and
their MLP intermediate sizes (what an activation such as relu² sees), at the tokens of a training step on one GPU.

Each distinct width belongs to one split, by its place in the sorted list of widths (every third one is held out:
the held-out widths lie between tuned ones, and no tuned width tells the loop a held-out one). ``"tune"`` is what
the loop may measure and judge on; ``"held-out"`` is read only by ``liger-perf bench --suite models``, which
reports both side by side. ``tests/test_model_shapes.py`` keeps every other module away from the held-out split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WidthKind = Literal["hidden", "intermediate"]
Split = Literal["tune", "held-out"]
SPLITS: tuple[Split, ...] = ("tune", "held-out")
HELD_OUT_EVERY = 3  # the 2nd, 5th, 8th, ... distinct width (sorted) is held out


@dataclass(frozen=True)
class ModelWidths:
    """One model's widths, as its published configuration gives them (``hidden_size``, ``intermediate_size``;
    for a mixture of experts, the dense MLP's)."""

    family: str
    model: str
    hidden: int
    intermediate: int


MODELS: tuple[ModelWidths, ...] = (
    ModelWidths("Llama 3.2", "Llama-3.2-1B", 2048, 8192),
    ModelWidths("Llama 3.2", "Llama-3.2-3B", 3072, 8192),
    ModelWidths("Llama 3.1", "Llama-3.1-8B", 4096, 14336),
    ModelWidths("Llama 3.1", "Llama-3.1-70B", 8192, 28672),
    ModelWidths("Llama 3.1", "Llama-3.1-405B", 16384, 53248),
    ModelWidths("Qwen 2.5", "Qwen2.5-0.5B", 896, 4864),
    ModelWidths("Qwen 2.5", "Qwen2.5-1.5B", 1536, 8960),
    ModelWidths("Qwen 2.5", "Qwen2.5-7B", 3584, 18944),
    ModelWidths("Qwen 2.5", "Qwen2.5-14B", 5120, 13824),
    ModelWidths("Qwen 2.5", "Qwen2.5-72B", 8192, 29568),
    ModelWidths("Qwen 3", "Qwen3-0.6B", 1024, 3072),
    ModelWidths("Qwen 3", "Qwen3-4B", 2560, 9728),
    ModelWidths("Qwen 3", "Qwen3-8B", 4096, 12288),
    ModelWidths("Qwen 3", "Qwen3-32B", 5120, 25600),
    ModelWidths("Mistral", "Mistral-7B", 4096, 14336),
    ModelWidths("Mistral", "Mistral-Large-2", 12288, 28672),
    ModelWidths("Mistral Nemo", "Mistral-Nemo-12B", 5120, 14336),
    ModelWidths("Gemma 2", "gemma-2-2b", 2304, 9216),
    ModelWidths("Gemma 2", "gemma-2-9b", 3584, 14336),
    ModelWidths("Gemma 2", "gemma-2-27b", 4608, 36864),
    ModelWidths("Gemma 3", "gemma-3-1b", 1152, 6912),
    ModelWidths("Gemma 3", "gemma-3-12b", 3840, 15360),
    ModelWidths("Gemma 3", "gemma-3-27b", 5376, 21504),
    ModelWidths("DeepSeek V3", "DeepSeek-V3", 7168, 18432),
    ModelWidths("Phi-3", "Phi-3-mini", 3072, 8192),
    ModelWidths("Phi-4", "phi-4", 5120, 17920),
    ModelWidths("OLMo 2", "OLMo-2-13B", 5120, 13824),
    ModelWidths("Nemotron-4", "Nemotron-4-15B", 6144, 24576),
)

#: Tokens of a training step on one GPU (micro-batch x sequence), 1k to 64k, with a few counts no power of two
#: divides (a last partial block, rows that do not split evenly over the SMs).
TOKENS: tuple[int, ...] = (1024, 2047, 4096, 8192, 12289, 16384, 32768, 65536)
#: Each width meets one count of each half of TOKENS, a short step and a long one (``model_shapes``). Taken two at
#: a time from the whole of TOKENS instead (until 2026-12-03), the narrowest widths met only the shortest steps, and
#: the loop tuned the 513-1024-column bucket (16-bit) on 896 columns at 1024 and 2047 tokens alone: 20-28 us a
#: backward, where the timer's resolution leaves no margin (``reports/evidence/2026-12-03-loop-fused_add_rms_norm/``).
#: No case above this many elements per tensor: a width whose turn falls on more tokens takes the most that fit.
#: 64 Mi elements (128 MiB in bfloat16, 2.5 times the H200's L2) keeps every large case a DRAM-bound one, as a
#: training step's are. At 256 Mi the bench of the 86 cases did not finish in 421 s on the H200
#: (``reports/evidence/2026-12-02-device.log``, its call at a91815a): each case's inputs were drawn on the CPU
#: then (now on the device: ``KernelSpec.make_inputs``) and are held by four slots per contender.
MAX_ELEMENTS = 2**26


def widths(kind: WidthKind) -> list[int]:
    """The distinct widths of ``kind`` over every model, ascending."""
    return sorted({getattr(m, kind) for m in MODELS})


def split_of(width: int, kind: WidthKind) -> Split:
    """Which split ``width`` belongs to (see the module's docstring); a width no model has is neither."""
    order = widths(kind)
    if width not in order:
        raise ValueError(f"{width} is no {kind} width of the model suite")
    return "held-out" if order.index(width) % HELD_OUT_EVERY == 1 else "tune"


def models_of(width: int, kind: WidthKind) -> list[str]:
    """The models that have ``width`` (for the report's legend)."""
    return [m.model for m in MODELS if getattr(m, kind) == width]


def model_shapes(kind: WidthKind, split: Split) -> list[tuple[int, int]]:
    """(tokens, width) of every case of ``split``: the n-th width (ascending) at the n-th count, cyclically, of
    the lower half of TOKENS and of its upper half (so that every width, and both splits, meet a short step and a
    long one), capped at MAX_ELEMENTS (one case where the cap makes the two the same)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {', '.join(SPLITS)}")
    half = len(TOKENS) // 2
    shapes = []
    for n, width in enumerate(widths(kind)):
        for counts in (TOKENS[:half] or TOKENS, TOKENS[half:]):
            tokens = min(counts[n % len(counts)], MAX_ELEMENTS // width)
            if split_of(width, kind) == split and (tokens, width) not in shapes:
                shapes.append((tokens, width))
    return shapes
