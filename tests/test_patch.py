"""liger_perf.models.patch and liger-perf e2e on tiny transformers models, under the interpreter."""

import json

import pytest
import torch

from liger_perf.core.errors import UserError
from liger_perf.kernel.registry import baseline_path, get_spec
from liger_perf.kernel.variants import load_variant

transformers = pytest.importorskip("transformers")

from liger_perf.models import patch  # noqa: E402
from liger_perf.models.e2e import E2EConfig, run_e2e, write_report  # noqa: E402


def _tiny(model_type, seed=0):
    configs = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
               "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM),
               "nemotron": (transformers.NemotronConfig, transformers.NemotronForCausalLM),
               "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel)}
    config_class, model_class = configs[model_type]
    if model_type == "gpt2":
        config = config_class(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    else:
        config = config_class(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=16,
                              initializer_range=0.2)  # as e2e's models: a loss that depends on every layer
    torch.manual_seed(seed)
    return model_class(config)


def _fused_baseline():
    return load_variant(baseline_path("fused_add_rms_norm"), get_spec("fused_add_rms_norm")).module.fused_add_rms_norm


def _losses(model, steps=2):
    generator = torch.Generator().manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 64, (2, 8), generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("model_type,casting,offset", [("llama", "llama", 0.0), ("gemma", "gemma", 1.0)])
def test_patching_fuses_each_decoder_layer_and_trains_the_same(model_type, casting, offset, interpret_device):
    """Exactly the decoder layers are patched, every training step goes through the fused kernel with the
    layer's casting mode, offset and epsilon, and the losses agree with the unpatched model's."""
    calls = []
    fused = _fused_baseline()

    def counting(X, R, W, eps, offset, casting_mode, in_place=False):
        calls.append((tuple(X.shape), eps, offset, casting_mode))
        return fused(X, R, W, eps=eps, offset=offset, casting_mode=casting_mode, in_place=in_place)

    unpatched, patched = _tiny(model_type), _tiny(model_type)
    report = patch.apply(patched, functions={patch.FUSED: counting})
    assert report.fused_layers == ["model.layers.0", "model.layers.1"] and not report.left_alone
    assert report.relu_squared == []
    ours, theirs = _losses(patched), _losses(unpatched)
    assert len(calls) == 2 * 2  # two layers, two forward passes
    assert {c[1:] for c in calls} == {(patched.model.layers[0].post_attention_layernorm.variance_epsilon
                                       if model_type == "llama" else patched.model.layers[0].post_attention_layernorm.eps,
                                       offset, casting)}
    assert ours == pytest.approx(theirs, rel=1e-5)


def test_a_wrong_kernel_shows_in_the_loss(interpret_device):
    fused = _fused_baseline()

    def scaled(X, R, W, **options):
        Y, S = fused(X, R, W, **options)
        return Y * 1.05, S

    unpatched, patched = _tiny("llama"), _tiny("llama")
    patch.apply(patched, functions={patch.FUSED: scaled})
    assert _losses(patched, 1) != pytest.approx(_losses(unpatched, 1), rel=1e-5)


def test_a_float64_model_keeps_pytorch_s_forward_and_trains_the_same(interpret_device):
    # The kernels take float32, bfloat16 and float16 (a float64 input raises): a float64 model is patched but each
    # call goes to the layer's and the activation's own forward.
    for model_type, kernel in (("llama", patch.FUSED), ("nemotron", patch.RELU2)):
        unpatched, patched = _tiny(model_type).double(), _tiny(model_type).double()
        report = patch.apply(patched, device="interpret")
        assert report.fused_layers or report.relu_squared
        assert _losses(patched) == _losses(unpatched), kernel


def test_an_attention_in_another_dtype_gets_the_layer_s_own_add_and_norm(interpret_device):
    # An attention that returns bfloat16 beside float32 activations (autocast): PyTorch's add promotes, and the
    # layer's own arithmetic is what the fused call must not change.
    calls, fused = [], _fused_baseline()

    def counting(X, R, W, **options):
        calls.append(X.dtype)
        return fused(X, R, W, **options)

    model = _tiny("llama")
    patch.apply(model, functions={patch.FUSED: counting})
    layer, hidden = model.model.layers[0], torch.randn(1, 4, 32)
    attention = torch.randn(1, 4, 32, dtype=torch.bfloat16)
    layer.self_attn.forward = lambda hidden_states, **kwargs: (attention, None)
    summed = hidden + attention
    expected = summed + layer.mlp(layer.post_attention_layernorm(summed))
    assert torch.equal(layer(hidden), expected) and calls == []
    attention = torch.randn(1, 4, 32)  # the same dtype: fused
    layer(hidden)
    assert calls == [torch.float32]


def test_unpatch_restores_the_model_and_a_second_patch_is_refused(interpret_device):
    model = _tiny("nemotron")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modules_before = [type(m).__name__ for m in model.modules()]
    report = patch.apply(model, device="interpret")
    assert report.fused_layers == []  # LayerNorm1P: nothing to fuse; its relu2 activations are replaced
    assert report.relu_squared == ["model.layers.0.mlp.act_fn", "model.layers.1.mlp.act_fn"]
    assert "relu_squared" in report.kernels
    # A committed e2e report names the variant as the workspace sees it, not by this machine's absolute path.
    assert report.kernels["relu_squared"] == "kernels/relu_squared/baseline.py"
    assert list(model.state_dict()) == list(before)  # the replacement holds no parameters or submodules
    with pytest.raises(UserError, match="patched already"):
        patch.apply(model)
    patch.unpatch(model)
    assert [type(m).__name__ for m in model.modules()] == modules_before
    llama = _tiny("llama")
    patch.apply(llama, functions={patch.FUSED: _fused_baseline()})
    patch.unpatch(llama)
    assert all("forward" not in vars(layer) for layer in llama.model.layers)
    with pytest.raises(UserError, match="not patched"):
        patch.unpatch(llama)


def test_an_unknown_model_type_is_one_clear_line():
    with pytest.raises(UserError, match=r"model type 'gpt2' is not supported: one of llama, .*patch --list"):
        patch.apply(_tiny("gpt2"))
    # `patch --list` says so: its "any other" row read as if such a model were patched.
    rows = dict(patch.supported_table())
    assert set(rows) == {*patch.SUPPORTED, "any other"} and rows["any other"].startswith("refused by apply(model)")


def test_a_layer_of_another_structure_is_left_alone_and_named(interpret_device):
    model = _tiny("llama")
    model.model.layers[1].pre_feedforward_layernorm = torch.nn.LayerNorm(32)  # a Gemma2-like extra norm
    report = patch.apply(model, functions={patch.FUSED: _fused_baseline()})
    assert report.fused_layers == ["model.layers.0"]
    assert report.left_alone == ["model.layers.1: more norms than a Llama-family layer (pre_feedforward_layernorm):"
                                 " another structure"]


def test_e2e_reports_agreeing_losses_and_catches_a_parting_one(tmp_path, interpret_device):
    config = E2EConfig(model="llama", layers=1, hidden=32, seq=8, batch=1, dtype="fp32", steps=3, vocab=64)
    result = run_e2e(config, device="interpret")
    assert result.passed and result.contenders == ["unpatched", "liger-perf"]
    assert "liger-kernel" in result.unavailable
    assert len(result.losses["liger-perf"]) == 3 and len(result.step_ms["liger-perf"]) == 1  # 2 warm-up steps
    path = write_report(result, tmp_path)
    data = json.loads((tmp_path / "llama.json").read_text())
    assert data["summary"][1]["agrees"] is True and data["summary"][1]["peak_mib"] is None
    assert "| liger-perf |" in path.read_text() and (tmp_path / "llama-loss.png").stat().st_size > 0
    # One timed step gives no interval: said so, never shown as [nan, nan].
    assert "nan" not in path.read_text() and ", 1 timed step: no interval |" in path.read_text(), path.read_text()

    broken = tmp_path / "broken.py"
    broken.write_text(baseline_path("fused_add_rms_norm").read_text().replace(
        "return Y_out, S_out", "return Y_out * 1.05, S_out"))
    result = run_e2e(config, device="interpret", variants={patch.FUSED: broken})
    assert not result.passed and result.parted["liger-perf"].startswith("step 1: loss")


def test_a_best_that_fails_the_static_check_is_not_imported_outside_the_sandbox(tmp_path, monkeypatch):
    """The history's best may be a proposer's code, which ran only in the sandbox; `patch` and `e2e` import it into
    the model's process, with its environment. A best the static check refuses (here one that names the notebook
    kernel's `get_ipython`, which runs any code) is not imported; named by the caller, it is."""
    import sys

    hostile = tmp_path / "0042-hostile-best.py"
    hostile.write_text(baseline_path("fused_add_rms_norm").read_text()
                       + "\n\ndef _escape():\n    return get_ipython()\n")
    monkeypatch.setattr(patch, "best_variant_file", lambda kernel, device="auto": hostile)
    with pytest.raises(UserError, match="fails the static check .*get_ipython.* not imported outside the sandbox"):
        patch.load_kernel(patch.FUSED)
    assert not any("0042-hostile-best" in name for name in sys.modules)
    module, path = patch.load_kernel(patch.FUSED, variant=hostile)
    assert path == hostile and callable(module.fused_add_rms_norm)


def _counting_fused():
    calls, fused = [], _fused_baseline()

    def counting(X, R, W, **options):
        calls.append(X.shape)
        return fused(X, R, W, **options)

    return calls, counting


def _loss_and_grads(model, ids):
    model.zero_grad()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_a_deep_copy_of_a_patched_model_runs_its_own_modules(interpret_device):
    # The fused forward held the patched layer's norm and its bound forward: a copy computed with the original's
    # norm weights, and their gradients went to the original.
    import copy

    calls, counting = _counting_fused()
    model = _tiny("llama")
    patch.apply(model, functions={patch.FUSED: counting})
    copied, reference = copy.deepcopy(model), copy.deepcopy(_tiny("llama"))
    for m in (copied, reference):
        m.model.layers[0].post_attention_layernorm.weight.data.fill_(3.0)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
    ours, theirs = _loss_and_grads(copied, ids), _loss_and_grads(reference, ids)
    assert calls and ours[0] == pytest.approx(theirs[0], rel=1e-5)
    assert ours[1].keys() == theirs[1].keys()
    for name, grad in theirs[1].items():
        torch.testing.assert_close(ours[1][name], grad, rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for p in model.parameters())


def test_a_saved_patched_model_loads_as_the_plain_model_and_patches_again(interpret_device, tmp_path):
    # torch.save pickled the instance forward as getattr(layer, "forward"): the loaded model ran the class's
    # forward, unfused, yet was marked patched (apply refused it, and its report named kernels it did not run).
    import copy

    calls, counting = _counting_fused()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))
    for model_type, functions in (("llama", {patch.FUSED: counting}), ("nemotron", None)):
        model = _tiny(model_type)
        patch.apply(model, functions=functions, device="interpret")
        saved = tmp_path / f"{model_type}.pt"
        torch.save(model, saved)
        loaded = torch.load(saved, weights_only=False)
        for module in loaded.modules():
            assert not {"forward", "__getstate__", "__deepcopy__", "_liger_perf_patched_forward"} & set(vars(module)), (
                model_type, type(module).__name__)
        assert getattr(loaded, "_liger_perf_patched") is None  # the report loads as None: not patched
        del calls[:]
        assert _loss_and_grads(loaded, ids)[0] == pytest.approx(_loss_and_grads(_tiny(model_type), ids)[0], rel=1e-5)
        assert calls == []
        # The model saved is patched still, its deep copies too; the loaded one patches like any other.
        assert getattr(model, "_liger_perf_patched") is not None
        report = patch.apply(loaded, functions=functions, device="interpret")
        assert report.fused_layers or report.relu_squared
        copied = copy.deepcopy(loaded)
        assert getattr(copied, "_liger_perf_patched").model_type == model_type
        if model_type == "llama":
            _loss_and_grads(loaded, ids), _loss_and_grads(copied, ids)
            assert len(calls) == 2 * 2
        patch.unpatch(loaded)
        torch.save(loaded, saved)  # unpatched: the class's pickling again
        assert not {"__getstate__", "__deepcopy__"} & set(vars(torch.load(saved, weights_only=False)))


def test_a_patched_model_is_freed_when_its_last_name_goes(interpret_device):
    # The patch must not put the model in a reference cycle: its weights (on the GPU) would wait for the collector.
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        for model_type in ("llama", "nemotron"):
            model = _tiny(model_type)
            patch.apply(model, functions={patch.FUSED: _fused_baseline(), patch.RELU2: torch.relu})
            assert model._liger_perf_patched.fused_layers or model._liger_perf_patched.relu_squared
            embedding = weakref.ref(model.model.embed_tokens.weight)
            del model
            assert embedding() is None, model_type
    finally:
        gc.enable()


def test_only_transformers_own_classes_are_fused(interpret_device):
    # Same names, other code: a norm with a bias, a layer that doubles its attention, a relu2 that cubes.
    from transformers.activations import ReLUSquaredActivation
    from transformers.models.llama import modeling_llama

    class LlamaRMSNorm(modeling_llama.LlamaRMSNorm):
        def forward(self, x):
            return super().forward(x) + 0.5

    class LlamaDecoderLayer(modeling_llama.LlamaDecoderLayer):
        def forward(self, hidden_states, **kwargs):
            return super().forward(hidden_states, **kwargs) * 2

    class Cubed(ReLUSquaredActivation):
        def forward(self, x):
            return torch.relu(x) ** 3

    calls, counting = _counting_fused()
    unpatched = _tiny("llama")
    layers = unpatched.model.layers
    layers[0].post_attention_layernorm.__class__ = LlamaRMSNorm
    layers[1].__class__ = LlamaDecoderLayer
    layers[0].mlp.act_fn = Cubed()
    patched = _tiny("llama")
    patched.load_state_dict(unpatched.state_dict())
    patched.model.layers[0].post_attention_layernorm.__class__ = LlamaRMSNorm
    patched.model.layers[1].__class__ = LlamaDecoderLayer
    patched.model.layers[0].mlp.act_fn = Cubed()
    report = patch.apply(patched, functions={patch.FUSED: counting, patch.RELU2: lambda x: torch.relu(x) ** 2})
    assert report.fused_layers == [] and report.relu_squared == []
    assert [why.split(":")[0] for why in report.left_alone] == ["model.layers.0", "model.layers.1"]
    assert "not transformers' LlamaRMSNorm" in report.left_alone[0]
    assert "not transformers' LlamaDecoderLayer" in report.left_alone[1]
    assert _losses(patched) == _losses(unpatched) and calls == []


def test_each_call_reads_the_norm_as_it_is_then(interpret_device):
    calls, counting = _counting_fused()
    unpatched, patched = _tiny("llama"), _tiny("llama")
    patch.apply(patched, functions={patch.FUSED: counting})
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))
    for m in (unpatched, patched):  # an epsilon changed after the patch
        m.model.layers[0].post_attention_layernorm.variance_epsilon = 0.5
    assert _loss_and_grads(patched, ids)[0] == pytest.approx(_loss_and_grads(unpatched, ids)[0], rel=1e-5)
    assert len(calls) == 2
    seen = []  # a hook on the norm: a fused call would skip it, so the layer runs its own forward
    patched.model.layers[0].post_attention_layernorm.register_forward_hook(lambda *_: seen.append(1))
    unpatched.model.layers[0].post_attention_layernorm.register_forward_hook(lambda *_: None)
    assert _loss_and_grads(patched, ids)[0] == pytest.approx(_loss_and_grads(unpatched, ids)[0], rel=1e-5)
    assert seen == [1] and len(calls) == 3  # layer 1 fused, layer 0 not
    for m in (unpatched, patched):  # a norm replaced after the patch
        m.model.layers[1].post_attention_layernorm = torch.nn.Identity()
    assert _loss_and_grads(patched, ids)[0] == pytest.approx(_loss_and_grads(unpatched, ids)[0], rel=1e-5)
    assert len(calls) == 3


def test_hooks_on_a_patched_relu2_still_fire(interpret_device):
    model = _tiny("nemotron")
    seen = []
    model.model.layers[0].mlp.act_fn.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    kernel_calls = []
    report = patch.apply(model, functions={patch.RELU2: lambda x: kernel_calls.append(1) or torch.relu(x) ** 2})
    assert report.relu_squared == ["model.layers.0.mlp.act_fn", "model.layers.1.mlp.act_fn"]
    _losses(model, 1)
    assert len(seen) == 1 and len(kernel_calls) == 2


def test_a_kernel_that_fails_to_load_leaves_the_model_untouched(tmp_path, interpret_device):
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, head_dim=16, hidden_act="relu2")
    model = transformers.LlamaForCausalLM(config)
    with pytest.raises(UserError):
        patch.apply(model, device="interpret", variants={patch.RELU2: tmp_path / "missing.py"})
    assert not any("forward" in vars(m) for m in model.modules())
    patch.apply(model, device="interpret")  # not marked as patched: a second try is taken
    patch.unpatch(model)


def test_a_norm_without_weight_or_epsilon_is_left_alone_and_named(interpret_device):
    model = _tiny("llama")
    model.model.layers[0].post_attention_layernorm.weight = None
    model.model.layers[1].post_attention_layernorm.variance_epsilon = True  # a bool is no epsilon
    report = patch.apply(model, functions={patch.FUSED: _fused_baseline()})
    assert report.fused_layers == []
    assert report.left_alone == [f"model.layers.{i}: its post-attention norm has no weight or epsilon" for i in (0, 1)]
