"""Training steps of a small real model, unpatched and patched, side by side: what a kernel is worth to a user.

``liger-perf e2e --model llama`` builds a ``transformers`` model from a config with random weights (nothing is
downloaded) and trains it on random tokens three ways, from the same weights and on the same batches:

* ``unpatched``: the model as ``transformers`` writes it;
* ``liger-perf``: patched with the workspace's best variants (``liger_perf.models.patch``);
* ``liger-kernel``: the same operations patched with liger-kernel's own functions, where it is installed (only
  the operations liger-perf patches, so the comparison is of kernels, not of how many of them).

The contenders' steps are interleaved, in a fresh random order each step, in one process. Reported: each
contender's median step time and tokens/s, its step time over the unpatched one with a bootstrap interval
(paired by step), peak memory of a step, and the loss curves, which must agree with the unpatched ones (float32
within ``LOSS_TOLERANCE``'s tight bound, half precision within its looser one); a contender whose loss parts
from the unpatched one fails, with the step where it did. Reports: ``reports/<device>/e2e/<model>.md``,
``.json``, and a loss-curve PNG.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from liger_perf.core.errors import UserError
from liger_perf.models.patch import FUSED, INSTALL_HINT, SUPPORTED, apply
from liger_perf.record.store import replaced, write_file
from liger_perf.core.wording import count, speedup

#: Relative difference of a patched loss from the unpatched one that still agrees, by dtype: float32 differs
#: only by summation order; half precision by its rounding, compounded over the steps.
LOSS_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 1e-2}
DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
          "fp16": torch.float16, "float16": torch.float16}
WARMUP_STEPS = 2  # compilation and allocator warm-up: their times are not counted
#: Weights drawn with this standard deviation, ten times transformers' default: at the default the logits of a
#: fresh model are near zero and its loss near log(vocab) whatever a layer computes (a norm 5 % off moved the loss
#: of a tiny Llama by 7e-6, relative), so the loss curves could not tell a wrong kernel from a right one.
INIT_STD = 0.2
UNPATCHED, LIGER_PERF, LIGER_KERNEL = "unpatched", "liger-perf", "liger-kernel"


@dataclass(frozen=True)
class E2EConfig:
    model: str = "llama"
    layers: int = 2
    hidden: int = 256
    seq: int = 128
    batch: int = 2
    dtype: str = "fp32"
    steps: int = 6
    lr: float = 1e-3
    seed: int = 0
    vocab: int = 1024


@dataclass
class E2EResult:
    config: E2EConfig
    device: str
    contenders: list[str]
    step_ms: dict[str, list[float]] = field(default_factory=dict)
    losses: dict[str, list[float]] = field(default_factory=dict)
    peak_mib: dict[str, float] = field(default_factory=dict)
    patched: dict[str, str] = field(default_factory=dict)  # contender -> what was patched
    parted: dict[str, str] = field(default_factory=dict)  # contender -> where its loss parted, if it did
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.parted


def build_model(config: E2EConfig, device: torch.device, dtype: torch.dtype):
    """A ``transformers`` causal LM of a model type ``liger_perf.models.patch`` knows, from a config with random weights,
    seeded: equal for equal configs."""
    try:
        import transformers
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    if config.model not in SUPPORTED:
        raise UserError(f"--model {config.model}: one of {', '.join(SUPPORTED)}")
    heads = max(1, config.hidden // 64) if config.hidden >= 64 else 1
    model_config = transformers.AutoConfig.for_model(
        config.model, vocab_size=config.vocab, hidden_size=config.hidden, intermediate_size=4 * config.hidden,
        num_hidden_layers=config.layers, num_attention_heads=heads, num_key_value_heads=heads,
        head_dim=config.hidden // heads, max_position_embeddings=max(config.seq, 16), initializer_range=INIT_STD)
    torch.manual_seed(config.seed)
    return transformers.AutoModelForCausalLM.from_config(model_config).to(device=device, dtype=dtype)


def _liger_kernel_functions() -> tuple[dict[str, Callable], str | None]:
    """liger-kernel's function for each operation liger-perf patches that it has, or why there are none."""
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except ImportError as e:
        return {}, f"liger-kernel is not installed ({e})"

    def fused(X, R, W, eps=1e-6, offset=0.0, casting_mode="llama", in_place=False):
        return LigerFusedAddRMSNormFunction.apply(X, R, W, eps, offset, casting_mode, in_place)
    return {FUSED: fused}, None


def run_e2e(config: E2EConfig, device: str = "auto", variants: dict[str, Path] | None = None,
            progress: Callable[[str], None] | None = None) -> E2EResult:
    from liger_perf.kernel.device import select_device

    dev = select_device(device)
    dtype = DTYPES.get(config.dtype)
    if dtype is None:
        raise UserError(f"--dtype {config.dtype}: one of {', '.join(DTYPES)}")
    if dev.interpreted and dtype == torch.bfloat16:
        raise UserError("--dtype bf16 needs a GPU: the Triton interpreter has no bfloat16 (use fp32 or fp16)")
    reference = build_model(config, dev.torch_device, dtype)
    state = {k: v.detach().clone() for k, v in reference.state_dict().items()}
    models: dict[str, Any] = {UNPATCHED: reference}
    result = E2EResult(config=config, device=dev.describe(), contenders=[UNPATCHED])
    result.patched[UNPATCHED] = "nothing"
    ours = build_model(config, dev.torch_device, dtype)
    ours.load_state_dict(state)
    report = apply(ours, device="interpret" if dev.interpreted else "auto", variants=variants)
    models[LIGER_PERF] = ours
    result.contenders.append(LIGER_PERF)
    result.patched[LIGER_PERF] = (f"{count(len(report.fused_layers), 'layer')} with {FUSED}, {len(report.relu_squared)} "
                                  f"relu2; {', '.join(f'{k}: {v}' for k, v in report.kernels.items())}")
    functions, why = _liger_kernel_functions()
    if functions and not dev.interpreted:
        theirs = build_model(config, dev.torch_device, dtype)
        theirs.load_state_dict(state)
        their_report = apply(theirs, functions=functions, relu2=False)
        models[LIGER_KERNEL] = theirs
        result.contenders.append(LIGER_KERNEL)
        result.patched[LIGER_KERNEL] = f"{count(len(their_report.fused_layers), 'layer')} with liger-kernel's {FUSED}"
    else:
        result.unavailable[LIGER_KERNEL] = why or "liger-kernel's Triton kernels need a GPU"

    generator = torch.Generator().manual_seed(config.seed + 1)
    batches = [torch.randint(0, config.vocab, (config.batch, config.seq), generator=generator)
               for _ in range(config.steps)]
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=config.lr) for name, m in models.items()}
    rng = np.random.default_rng(config.seed)
    for name in models:
        result.step_ms[name], result.losses[name], result.peak_mib[name] = [], [], 0.0
    for step, tokens in enumerate(batches):
        ids = tokens.to(dev.torch_device)
        for i in rng.permutation(len(result.contenders)):
            name = result.contenders[i]
            ms, loss, peak = _step(models[name], optimizers[name], ids, dev)
            result.losses[name].append(loss)
            if step >= WARMUP_STEPS or config.steps <= WARMUP_STEPS:
                result.step_ms[name].append(ms)
            result.peak_mib[name] = peak if math.isnan(peak) else max(result.peak_mib[name], peak)
        if progress:
            progress(f"step {step + 1}/{config.steps}")
    tolerance = LOSS_TOLERANCE[dtype]
    for name in result.contenders[1:]:
        for step, (ours_loss, ref_loss) in enumerate(zip(result.losses[name], result.losses[UNPATCHED])):
            if not math.isfinite(ours_loss) or abs(ours_loss - ref_loss) > tolerance * max(abs(ref_loss), 1e-6):
                result.parted[name] = (f"step {step + 1}: loss {ours_loss:.6g} against the unpatched {ref_loss:.6g} "
                                       f"(relative tolerance {tolerance:g})")
                break
    return result


def _step(model, optimizer, ids, dev) -> tuple[float, float, float]:
    """One training step: (milliseconds, loss, peak MiB of the step above what was allocated before it)."""
    cuda = not dev.interpreted
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    else:
        began = time.perf_counter()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if cuda:
        end.record()
        torch.cuda.synchronize()
        return (start.elapsed_time(end), float(loss.detach()),
                (torch.cuda.max_memory_allocated() - before) / 2**20)
    return (time.perf_counter() - began) * 1e3, float(loss.detach()), math.nan  # no allocator statistics


def summary_rows(result: E2EResult) -> list[dict[str, Any]]:
    """Per contender: median step, tokens/s, step time over the unpatched one (95 % paired bootstrap interval)."""
    from liger_perf.measure.timing import ratio_interval

    tokens = result.config.batch * result.config.seq
    reference = np.array(result.step_ms[UNPATCHED])
    rows = []
    for name in result.contenders:
        times = np.array(result.step_ms[name])
        ratio, low, high = ratio_interval(times, reference, 0.05, 2000, np.random.default_rng(0))
        median = float(np.median(times)) if len(times) else math.nan
        rows.append({"contender": name, "median_step_ms": median, "tokens_per_s": tokens / median * 1e3,
                     "speedup": 1 / ratio if ratio else math.nan,
                     "speedup_low": 1 / high if high else math.nan, "speedup_high": 1 / low if low else math.nan,
                     "peak_mib": result.peak_mib[name], "final_loss": result.losses[name][-1],
                     "agrees": name not in result.parted})
    return rows


def _json_safe(value):
    """NaN (no interval, no allocator statistics) as null: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def speedup_text(row: dict[str, Any], steps: int) -> str:
    """A row's speedup over the unpatched model as people read one (``1.02x (faster) [0.98x, 1.05x]``), from
    ``steps`` timed steps: without an interval where one step gave none."""
    if row["contender"] == UNPATCHED:
        return "1.00x (the reference)"

    def ratio(value):  # the time ratio a speedup stands for
        return 1 / value if value and math.isfinite(value) else None

    return speedup(ratio(row["speedup"]), ratio(row["speedup_high"]), ratio(row["speedup_low"]),
                   no_interval=f"{count(steps, 'timed step')}: no interval")


def mib_text(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def write_report(result: E2EResult, out: Path) -> Path:
    """``<model>.md``, ``.json`` and ``<model>-loss.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    c = result.config
    stem = c.model
    rows = summary_rows(result)
    data = {"config": c.__dict__, "device": result.device, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                      time.gmtime()),
            "contenders": result.contenders, "patched": result.patched, "unavailable": result.unavailable,
            "step_ms": result.step_ms, "losses": result.losses, "peak_mib": result.peak_mib,
            "parted": result.parted, "summary": rows}
    write_file(out / f"{stem}.json", json.dumps(_json_safe(data), indent=1) + "\n")
    lines = [f"# End to end: `{c.model}`, {count(c.layers, 'layer')}, hidden {c.hidden}, sequence {c.seq}, batch {c.batch}, "
             f"{c.dtype}", "",
             f"- {data['measured_at']} on {result.device}; {count(c.steps, 'step')} of AdamW (lr {c.lr:g}) on random tokens, "
             f"the first {min(WARMUP_STEPS, c.steps)} not timed; contenders interleaved in a random order each "
             "step, from the same weights.",
             *[f"- {name}: {what}" for name, what in result.patched.items()],
             *[f"- {name}: not run ({why})" for name, why in result.unavailable.items()], "",
             "| contender | median step ms | tokens/s | speedup vs unpatched [95 % interval] | peak MiB per step | "
             "final loss | loss agrees |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['contender']} | {r['median_step_ms']:.3f} | {r['tokens_per_s']:.0f} | "
                     f"{speedup_text(r, len(result.step_ms[r['contender']]))} | {mib_text(r['peak_mib'])} | "
                     f"{r['final_loss']:.6g} | {'yes' if r['agrees'] else 'NO: ' + result.parted[r['contender']]} |")
    write_file(out / f"{stem}.md", "\n".join(lines) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name in result.contenders:
            ax.plot(range(1, len(result.losses[name]) + 1), result.losses[name], marker="o", label=name)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(f"{c.model}: training loss")
        ax.legend()
        fig.tight_layout()
        with replaced(out / f"{stem}-loss.png") as fresh:
            fig.savefig(fresh, dpi=110, format="png")
        plt.close(fig)
    except ImportError:
        pass
    return out / f"{stem}.md"


__all__ = ["E2EConfig", "E2EResult", "LOSS_TOLERANCE", "build_model", "mib_text", "run_e2e", "speedup_text",
           "summary_rows", "write_report"]
