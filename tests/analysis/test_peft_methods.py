"""PEFT adapter configs (`peft=`, `--peft`): each method applied to the planning copy with peft's get_peft_model
takes, in the traced step, the memory the same PEFT model built by peft on real CPU tensors takes when it is stepped
for real; the report names the method; the config is read from a file, a directory, inline JSON, a dict or a
PeftConfig, and every bad one is one line. The user's model is never touched."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.peft_config import parse_peft  # noqa: E402
from gpumem_kernel.analysis.model.quantize import parse_quantize  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
FIGURES = ("peak_live", "parameters", "gradients", "optimizer_state", "activations")


def _llama() -> Any:
    """The shipped tiny Llama config (hidden 64, 4 heads, 2 KV heads, 2 layers, RMSNorm), in fp32."""
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(
        transformers.LlamaConfig.from_json_file(str(CONFIGS / "llama" / "config.json"))
    )


def _gpt2() -> Any:
    """The shipped tiny GPT-2 config: its projections are transformers' Conv1D, its norms LayerNorm; dropout off, so
    that the real step's masks are the fake step's."""
    torch.manual_seed(0)
    config = transformers.GPT2Config.from_json_file(str(CONFIGS / "gpt2" / "config.json"))
    config.attn_pdrop = config.resid_pdrop = config.embd_pdrop = 0.0
    return transformers.GPT2LMHeadModel(config)


def _tokens(batch: int, fake: bool) -> Dict[str, Any]:
    ids = torch.randint(0, 128, (batch, 32))
    return {"input_ids": ids, "labels": ids.clone()}


def _trace(model: Any, fake: bool) -> TraceResult:
    return run_trace(TracePlan(model, "adamw", _tokens, default_loss), 4, fake=fake)


def _real_peft_model(make: Callable[[], Any], config: Dict[str, Any]) -> Any:
    """The PEFT model as a user builds it: peft's config class and get_peft_model on real CPU tensors."""
    return peft.get_peft_model(make(), peft.get_peft_config(dict(config)))


LLAMA_METHODS = {
    "dora": (
        {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "use_dora": True},
        "DoRA r=8, alpha=16, dropout=0 on q_proj,v_proj",
    ),
    "rslora-modules-to-save": (
        {
            "peft_type": "LORA",
            "r": 4,
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            "use_rslora": True,
            "lora_dropout": 0.05,
            "modules_to_save": ["lm_head"],
        },
        "LoRA r=4, alpha=8, dropout=0.05 (rsLoRA scaling) on k_proj,o_proj,q_proj,v_proj; trained in full: lm_head",
    ),
    "ia3": (
        {"peft_type": "IA3", "target_modules": ["k_proj", "v_proj", "down_proj"], "feedforward_modules": ["down_proj"]},
        "IA3 on down_proj,k_proj,v_proj (feed-forward: down_proj)",
    ),
    "loha": ({"peft_type": "LOHA", "r": 8, "target_modules": ["q_proj", "v_proj"]}, "LoHa r=8, alpha=8 on q_proj"),
    "lokr": ({"peft_type": "LOKR", "r": 8, "target_modules": ["q_proj", "v_proj"]}, "LoKr r=8, alpha=8 on q_proj"),
    "ln-tuning": (
        {"peft_type": "LN_TUNING", "target_modules": ["input_layernorm", "post_attention_layernorm"]},
        "LN tuning on input_layernorm,post_attention_layernorm",
    ),
    "prompt-tuning": (
        {"peft_type": "PROMPT_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": 20},
        "prompt tuning, 20 virtual tokens",
    ),
    "prefix-tuning": (
        {"peft_type": "PREFIX_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": 20},
        "prefix tuning, 20 virtual tokens",
    ),
    "p-tuning": (
        {"peft_type": "P_TUNING", "task_type": "CAUSAL_LM", "num_virtual_tokens": 20, "encoder_hidden_size": 64},
        "P-tuning, 20 virtual tokens",
    ),
}
# the methods on other layer types: transformers' Conv1D (GPT-2's c_attn, c_fc, c_proj) and LayerNorm
GPT2_METHODS = {
    "dora-conv1d": (
        {"peft_type": "LORA", "r": 8, "target_modules": ["c_attn"], "use_dora": True, "fan_in_fan_out": True},
        "DoRA r=8, alpha=8, dropout=0 on c_attn",
    ),
    "ia3-conv1d": (
        {"peft_type": "IA3", "target_modules": ["c_attn", "mlp.c_proj"], "feedforward_modules": ["mlp.c_proj"]},
        "IA3 on c_attn,mlp.c_proj (feed-forward: mlp.c_proj)",
    ),
    "ln-tuning-layernorm": ({"peft_type": "LN_TUNING", "target_modules": ["ln_1", "ln_2"]}, "LN tuning on ln_1,ln_2"),
}
CASES = [(name, _llama, *LLAMA_METHODS[name]) for name in LLAMA_METHODS] + [
    (name, _gpt2, *GPT2_METHODS[name]) for name in GPT2_METHODS
]


@pytest.mark.parametrize("name, make, config, text", CASES, ids=[case[0] for case in CASES])
def test_the_planned_copy_takes_what_peft_takes_stepped_for_real(
    name: str, make: Callable[[], Any], config: Dict[str, Any], text: str
) -> None:
    plan = planned_model(make(), None, None, peft=parse_peft(config))
    fake = _trace(plan.model, True)
    real_model = _real_peft_model(make, config)
    real = _trace(real_model, False)
    for figure in FIGURES:
        assert getattr(fake, figure) == getattr(real, figure), figure
    trainable = [p for p in real_model.parameters() if p.requires_grad]
    assert plan.peft.trainable == sum(p.numel() for p in trainable) > 0
    # gradients and AdamW's two fp32 moments: the trainable parameters (the adapters, and a module_to_save's copy)
    assert fake.gradients == sum(p.numel() * 4 for p in trainable) and fake.optimizer_state == 2 * fake.gradients
    assert text in plan.peft.text and text in plan.notes[0]


@pytest.mark.parametrize("method", ["dora", "ia3", "prompt-tuning"])
def test_qlora_with_another_method_traces_as_it_runs(method: str) -> None:
    """--peft with --quantize nf4: the fake step of the planned copy equals its real step on the CPU (the stand-ins
    hold zeros); DoRA reads each base weight dequantised, as peft does through bitsandbytes."""
    config = LLAMA_METHODS[method][0]
    fake_plan = planned_model(_llama(), None, parse_quantize("nf4"), peft=parse_peft(config))
    real_plan = planned_model(_llama(), None, parse_quantize("nf4"), on_meta=False, peft=parse_peft(config))
    fake, real = _trace(fake_plan.model, True), _trace(real_plan.model, False)
    for figure in FIGURES:
        assert getattr(fake, figure) == getattr(real, figure), figure
    assert fake_plan.quantised.layers == 14 and fake_plan.peft.trainable == real_plan.peft.trainable


def test_the_adapters_line_names_the_method() -> None:
    report = analyze(_llama(), batch_size=2, input=32, peft=LLAMA_METHODS["dora"][0], quantize="nf4")
    adapters = next(f for f in report.figures if f.name == "adapters")
    assert adapters.note.startswith("DoRA: ")
    assert any(note.startswith("DoRA r=8, alpha=16, dropout=0 on q_proj,v_proj on 4 layers") for note in report.notes)


def test_dora_holds_more_than_lora_of_the_same_rank() -> None:
    lora = {"peft_type": "LORA", "r": 8, "target_modules": ["q_proj", "v_proj"]}
    plain = _trace(planned_model(_llama(), None, None, peft=parse_peft(lora)).model, True)
    dora = _trace(planned_model(_llama(), None, None, peft=parse_peft({**lora, "use_dora": True})).model, True)
    # the magnitude vector per adapted layer ([out]: 64 on q_proj, 32 on v_proj, 2 layers), fp32, with its
    # gradient and two moments; and the weight norms DoRA computes in forward
    assert dora.parameters - plain.parameters == 2 * (64 + 32) * 4
    assert dora.peak_live > plain.peak_live


def test_analyze_reports_the_method_and_leaves_the_model_alone(tmp_path: Path) -> None:
    model = _llama()
    before = [(n, p.requires_grad, p.data_ptr(), p.dtype) for n, p in model.named_parameters()]
    config = dict(LLAMA_METHODS["ia3"][0], inference_mode=True, base_model_name_or_path="meta-llama/x")
    report = analyze(model, batch_size=2, input=32, peft=config)
    assert [(n, p.requires_grad, p.data_ptr(), p.dtype) for n, p in model.named_parameters()] == before
    assert not hasattr(model, "peft_config") and type(model).__name__ == "LlamaForCausalLM"
    assert not any("ia3" in name for name, _ in model.named_modules())
    # IA3: a vector per adapted layer: k_proj and v_proj [32] (their outputs), down_proj [1, 128] (its input)
    assert report.trainable_parameter_count == 2 * (32 + 32 + 128)
    names = {f.name: f for f in report.figures}
    assert names["adapters"].note.startswith("IA3: ")
    assert names["adapters"].bytes == report.trainable_parameter_count * 4 * 4  # params, grads, two moments
    assert any("IA3 on down_proj,k_proj,v_proj (feed-forward: down_proj) on 6 layers" in n for n in report.notes)
    assert any("inference_mode: true (as peft saves it); the plan trains the adapters" in n for n in report.notes)


def test_prompt_learning_reads_the_task_from_the_model() -> None:
    plan = planned_model(_llama(), None, None, peft=parse_peft({"peft_type": "PROMPT_TUNING", "num_virtual_tokens": 8}))
    assert type(plan.model).__name__ == "PeftModelForCausalLM"
    assert "prompt tuning: task_type CAUSAL_LM read from LlamaForCausalLM" in plan.notes


@pytest.mark.parametrize(
    "config",
    [
        {"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "init_lora_weights": "pissa"},
        {
            "peft_type": "PROMPT_TUNING",
            "num_virtual_tokens": 4,
            "prompt_tuning_init": "TEXT",
            "prompt_tuning_init_text": "Hi",
        },
    ],
)
def test_initialisations_that_read_weights_or_a_tokenizer_are_not_run(config: Dict[str, Any]) -> None:
    plan = planned_model(_llama(), None, None, peft=parse_peft(config))
    assert any("not run on the copy (the adapters' memory does not depend on it)" in note for note in plan.notes)
    assert plan.peft.trainable > 0


def test_lycoris_module_dropout_plans_the_step_that_applies_the_adapters() -> None:
    """LoHa and LoKr skip their adapters at random (module_dropout): the plan counts the step that applies them."""
    config = {"peft_type": "LOHA", "r": 8, "target_modules": ["q_proj", "v_proj"], "module_dropout": 0.5}
    dropped = _trace(planned_model(_llama(), None, None, peft=parse_peft(config)).model, True)
    always = _trace(planned_model(_llama(), None, None, peft=parse_peft(LLAMA_METHODS["loha"][0])).model, True)
    assert dropped.peak_live == always.peak_live


# --- reading the config ----------------------------------------------------------------------------------------


def test_the_config_is_read_from_a_file_a_directory_json_a_dict_or_a_peft_config(tmp_path: Path) -> None:
    config = LLAMA_METHODS["dora"][0]
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    read = [
        parse_peft(str(tmp_path / "adapter_config.json")),
        parse_peft(tmp_path),
        parse_peft(json.dumps(config)),
        parse_peft(config),
        parse_peft(peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], use_dora=True)),
    ]
    assert {spec.peft_type for spec in read} == {"LORA"}
    assert all(spec.settings["use_dora"] is True and spec.settings["r"] == 8 for spec in read)
    assert read[0].source == read[1].source == str(tmp_path / "adapter_config.json")


@pytest.mark.parametrize("example", ["dora", "ia3"])
def test_the_example_adapters_plan(example: str) -> None:
    path = ROOT / "examples" / "adapters" / example
    plan = planned_model(_llama(), None, None, peft=parse_peft(path))
    assert plan.peft.layers > 0 and plan.peft.trainable > 0


def _bad(tmp_path: Path) -> Dict[str, Any]:
    """case -> (the option's words as the shell hands them on, the message). The files are named relative to
    tmp_path, the test's working directory, as a user names a file next to the notebook: a message echoes the name
    as given, and a long absolute path (pytest's temporary folders differ in length between machines) would be cut."""
    (tmp_path / "bad.json").write_text('{"peft_type": "LORA", "r": 8,}')
    (tmp_path / "vera.json").write_text('{"peft_type": "NOPE", "r": 8}')
    (tmp_path / "empty").mkdir()
    targets = '{"peft_type": "LORA", "r": 8, "target_modules": ["nothing_here"]}'
    return {
        "bad json": (["--peft", "bad.json"], "peft: bad.json is not valid JSON"),
        "missing": (["--peft", "nothing.json"], "peft: no such file or directory: nothing.json"),
        "no config in dir": (["--peft", "empty"], "peft: no adapter_config.json in "),
        "unknown method": (["--peft", "vera.json"], "has peft_type 'NOPE', not one planned; use one"),
        "inline bad json": (["--peft", "{peft_type:"], "peft: the inline JSON is not valid JSON"),
        "no peft_type": (["--peft", '{"r": 8}'], "peft: the inline JSON has no peft_type"),
        "with lora": (["--peft", '{"peft_type": "IA3"}', "--lora", "r=8"], "--peft and --lora both add adapters"),
        "bad value": (
            ["--peft", targets],
            "to LlamaForCausalLM (NoMatchingPeftModuleError: Target modules {'nothing_here'} not found",
        ),
    }


BAD = ["bad json", "missing", "no config in dir", "unknown method", "inline bad json", "no peft_type", "with lora"]


@pytest.mark.parametrize("case", BAD + ["bad value"])
def test_the_cli_says_a_bad_peft_in_one_line(case: str, tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    from gpumem_kernel import cli

    monkeypatch.chdir(tmp_path)
    words, message = _bad(tmp_path)[case]
    code = cli.main(["analyze", "--model", str(CONFIGS / "llama"), "-b", "2", "--input", "16", *words])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") <= 1, err


@pytest.mark.parametrize("case", BAD)
def test_the_magic_says_a_bad_peft_in_one_line(case: str, tmp_path: Path, monkeypatch: Any) -> None:
    from IPython.utils.capture import capture_output

    from conftest import gpumem_shell

    monkeypatch.chdir(tmp_path)
    words, message = _bad(tmp_path)[case]
    with gpumem_shell({"model": _llama()}) as shell:
        with capture_output() as captured:
            shell.run_cell(f"%gpumem analyze model -b 2 --input 16 {shlex.join(words)}")
    assert captured.stderr.startswith("UsageError: gpumem analyze: "), captured.stderr
    assert message in captured.stderr and captured.stderr.count("\n") <= 1, captured.stderr


def test_the_magic_and_the_cli_plan_a_peft_file(tmp_path: Path, capsys: Any) -> None:
    from IPython.utils.capture import capture_output

    from conftest import gpumem_shell
    from gpumem_kernel import cli
    from gpumem_kernel.analysis.report.render import MIME

    adapters = ROOT / "examples" / "adapters" / "dora"
    with gpumem_shell({"model": _llama()}) as shell:
        with capture_output() as captured:
            shell.run_cell(f"%gpumem analyze model -b 2 --input 16 --peft {adapters}")
    assert captured.stderr == "", captured.stderr
    payload = captured.outputs[0].data[MIME]
    assert any("DoRA r=" in note for note in payload["notes"]), payload["notes"]
    code = cli.main(["analyze", "--model", str(CONFIGS / "llama"), "-b", "2", "--input", "16", "--peft", str(adapters)])
    assert code == 0 and "DoRA r=" in capsys.readouterr().out


def test_without_peft_a_plain_lora_config_uses_our_adapters_and_any_other_says_so(monkeypatch: Any) -> None:
    import gpumem_kernel.analysis.model.fine_tune as fine_tune

    monkeypatch.setattr(fine_tune, "load_peft", lambda: None)  # a kernel without peft
    lora = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    plan = planned_model(_llama(), None, None, peft=parse_peft(lora))
    assert plan.lora.with_peft is None and plan.lora.spec.r == 8 and plan.lora.spec.alpha == 16
    for config in (LLAMA_METHODS["ia3"][0], LLAMA_METHODS["dora"][0], LLAMA_METHODS["prompt-tuning"][0]):
        with pytest.raises(ValueError) as info:
            analyze(_llama(), batch_size=2, input=32, peft=config)
        assert str(info.value) == "--peft needs peft installed (pip install peft)"


def test_a_peft_model_is_not_given_a_second_adapter() -> None:
    model = _real_peft_model(_llama, LLAMA_METHODS["ia3"][0])
    with pytest.raises(ValueError) as info:
        analyze(model, batch_size=2, input=32, peft=LLAMA_METHODS["dora"][0])
    said = f"peft: {type(model).__name__} already has adapters: drop peft= to analyse it as it is"
    assert str(info.value) == said


def test_loha_and_lokr_on_quantised_layers_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as info:
        analyze(_llama(), batch_size=2, input=32, peft=LLAMA_METHODS["loha"][0], quantize="nf4")
    assert "peft: LoHa does not wrap bitsandbytes' quantised layers" in str(info.value)
    assert "\n" not in str(info.value)
