"""`%gpumem analyze|recommend`: analyze() with the line's options (magics.options), its report displayed.

The last `recommended` batch of `analyze`/`recommend` is remembered by the loaded Kernel for the OOM checklist.
"""

from __future__ import annotations

import functools
import json
import shlex
from typing import Any, Dict, Optional

from IPython.display import display

from gpumem_kernel import current
from gpumem_kernel.analysis import import_repair
from gpumem_kernel.analysis import is_model_source
from gpumem_kernel.analysis import ADVICE_SECONDS
from gpumem_kernel.analysis import AnalysisRequest
from gpumem_kernel.magics.options import analyze_arguments, recommend_arguments
from gpumem_kernel.magics.parsing import debug_enabled, usage_error, engine_message_line, parse
from gpumem_kernel.magics.progress import ProgressLine
from gpumem_kernel.magics.shared_options import MAGIC, request_fields
from gpumem_kernel.magics.resolve import (
    resolve_amp,
    resolve_input,
    resolve_loss,
    resolve_memory,
    resolve_module,
    resolve_optimizer,
    resolve_step,
    resolve_target,
)
from gpumem_kernel.render.text import shown

# --- the last recommendation (for the OOM checklist) ---------------------------------------------------------


def last_recommendation(shell: Any) -> Optional[int]:
    """The `recommended` batch of this kernel's last `%gpumem analyze` / `recommend`, or None."""
    kernel = current.kernel()
    analyzed = kernel.analyzed if kernel is not None else None
    return analyzed.recommended if analyzed is not None else None


def remember(shell: Any, report: Any, model: Any = None, advice: Any = None) -> None:
    """Kept by the loaded Kernel (extension.Kernel.analyzed) with the model it is for (`model`, held weakly; None
    for a model by name), which hands it to the OOM handler: the checklist offers it for that model only, with
    the fit advice computed with it (`advice`: its levers' figures go on the checklist's steps)."""
    from gpumem_kernel.oom.analyzed import AnalyzedModel

    kernel = current.kernel()
    if kernel is not None:
        kernel.analyzed = AnalyzedModel.of(model, report, advice)


def fit_advice(model: Any, **options: Any) -> Any:
    """What makes it fit (analysis.advise) of `model` with these AnalysisRequest fields: the OOM checklist's
    figures for a small model that failed (the extension hands it to the OOM handler)."""
    return _with_advice(model, **options)[1]


# --- analyze and recommend -----------------------------------------------------------------------------------


def browser_settings() -> Dict[str, Any]:
    """The JupyterLab settings the loaded channel holds (channel.comm.BrowserSettings), as the request's fields:
    the defaults of --round and --seq-multiple. None of them without a loaded extension."""
    settings = getattr(getattr(current.kernel(), "channel", None), "settings", None)
    if settings is None:
        return {}
    return {"rounding_setting": settings.rounding, "seq_multiple_setting": settings.seq_multiple}


@import_repair()  # a model by name imports its library (transformers) before analyze() begins
def run_analysis(
    shell: Any,
    args: Any,
    command: str,
    progress: ProgressLine,
    timeline: bool = False,
    advise: Optional[bool] = False,
    line: Optional[str] = None,
) -> Any:
    """analyze() with the line's options; the report, remembered for the OOM checklist. With `timeline`:
    (report, the History of its traced step); with `advise` True or None: (report, what makes it fit:
    analysis.advise, or None), True always advising, None where the step will not fit (analysis.wants_advice);
    `line` the analysed command the advice's rows add their flags to. `progress` draws the analysis' progress line;
    Ctrl-C ends the cell with its one line."""
    by_name = is_model_source(args.model, shell.user_ns)  # hf:ORG/NAME, a config.json or a model directory
    model = None if by_name else resolve_module(shell, args.model, command)
    options = request_fields(args, MAGIC)
    options.update(  # the options that name the user's objects, looked up in the namespace in this order
        input=resolve_input(shell, args.input, command),
        loss=resolve_loss(shell, args.loss, command),
        optimizer=resolve_optimizer(shell, args.optimizer, command, several=args.step is not None),
        step=resolve_step(shell, args.step, command),
        amp=resolve_amp(args.amp),
        target=resolve_target(args.target, command),
        memory=resolve_memory(args.memory, "--memory", command),
        **browser_settings(),
        on_progress=progress.update,
    )
    try:
        request = AnalysisRequest(**options)
        if by_name:
            report, history = _by_name(args, request, timeline, advise, line)
        elif timeline:
            from gpumem_kernel.timeline.predicted import predict

            report, history = predict(model, on_progress=request.on_progress, **request.options())
        else:
            report, history = analysed_with_advice(model, request, advise, line)
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        raise progress.interrupted() from None
    except ValueError as exc:
        progress.clear()
        if debug_enabled():
            raise
        raise usage_error(command, engine_message_line(exc)) from None
    except Exception:
        progress.clear()
        raise
    remember(shell, report, model, None if timeline else history)
    return (report, history) if timeline or advise is not False else report


def analysed_with_advice(model: Any, request: AnalysisRequest, when: Optional[bool], line: Optional[str]) -> Any:
    """(analyze()'s report, what makes it fit or None): analysis.analyzed_with_advice within ADVICE_SECONDS."""
    from gpumem_kernel.analysis import analyzed_with_advice

    return analyzed_with_advice(model, request, when, line, ADVICE_SECONDS)


def _by_name(
    args: Any, request: AnalysisRequest, timeline: bool, advise: Optional[bool], line: Optional[str] = None
) -> Any:
    """(report, the history or the advice or None) of a model built on the meta device from its config
    (analysis.model_source)."""
    from gpumem_kernel.analysis import analyze_named

    run: Any = None
    if timeline:
        from gpumem_kernel.timeline.predicted import predict as run
    elif advise is not False:
        run = functools.partial(_with_advice, when=advise, line=line)
    result = analyze_named(args.model, request, task=args.task, trust_remote_code=args.trust_remote_code, run=run)
    return result if run is not None else (result, None)


def _with_advice(model: Any, when: Optional[bool] = True, line: Optional[str] = None, **options: Any) -> Any:
    """(report, what makes it fit or None: `when` as analysed_with_advice reads it) of the model analyze_named
    built."""
    return analysed_with_advice(model, AnalysisRequest(**options), when, line)


def analysed_line(rest: str) -> str:
    """The %gpumem analyze line as written, without --advise and --json: what each advice row adds its flags to."""
    try:
        tokens = shlex.split(rest)
    except ValueError:  # unbalanced quotes: the line as it was written
        tokens = rest.split()
    kept = [shlex.quote(t) for t in tokens if t not in ("--advise", "--json")]
    return " ".join(["%gpumem analyze"] + kept)


def analyze(shell: Any, rest: str) -> None:
    from gpumem_kernel.analysis import analysis_bundle
    from gpumem_kernel.timeline.predicted import option_problem

    args = parse(analyze_arguments, "analyze", rest)
    if args.generate or args.prompt is not None or args.new is not None:
        generate(shell, args, rest)
        return
    problem = option_problem(
        timeline=args.timeline,
        save=args.save,
        world_size=args.world_size,
        strategy=args.strategy,
        json=args.json,
        advise=args.advise,
    )
    if problem is not None:
        raise usage_error("analyze", problem)
    progress = ProgressLine(f"gpumem analyze {args.model}")
    history = None
    if args.timeline:
        report, history = run_analysis(shell, args, "analyze", progress, timeline=True)
    else:
        # With --advise always; else where the step will not fit and the levers' analyses are quick (ADVICE_SECONDS):
        # each lever is an analysis of its own, minutes for a large model on a few cores, and a step left without
        # it says how to ask (the report's hint)
        when = True if args.advise else None
        # the advice rides in the report's payload: the browser's view and the text report show it
        report, _ = run_analysis(shell, args, "analyze", progress, advise=when, line=analysed_line(rest))
    if args.json:
        progress.clear()
        print(json.dumps(report.to_payload(), indent=2))
    else:
        progress.show(analysis_bundle(report))
    if history is not None:
        _show_timeline(history, args.save, show=not args.json)


# --- generate: model.generate()'s memory (analysis.plan_generation) ---------------------------------------------

# options of a training step a generation plan has no use for: (dest, its flag, the value that means "not given")
_TRAINING_ONLY = (
    ("lora", "--lora", None),
    ("peft", "--peft", None),
    ("padded", "--padded", False),
    ("optimizer", "--optimizer", "adamw"),
    ("step", "--step", None),
    ("eval_batch", "--eval-batch", None),
    ("timeline", "--timeline", False),
    ("advise", "--advise", False),
    ("save", "--save", None),
    ("checkpointing", "--checkpointing", False),
    ("keep_grads", "--keep-grads", False),
    ("loss", "--loss", None),
    ("amp", "--amp (generation runs in the weights' dtype)", "off"),
    ("seq", "--seq (use --prompt)", None),
    ("input", "--input (use --prompt)", None),
    ("accum", "--accum", 1),
    ("world_size", "--world-size", 1),
    ("strategy", "--strategy", None),
    ("effective_batch", "--effective-batch", None),
    ("device", "--device (generation plans are traced)", None),
)


def generation_problem(args: Any) -> Optional[str]:
    """The one line a --generate line gets for a missing count or an option of a training step."""
    if not args.generate:
        return "--prompt and --new go with --generate"
    if args.prompt is None or args.new is None:
        return "--generate needs --prompt N and --new M (prompt tokens, new tokens)"
    if args.search != "batch":
        return f"--generate plans generation, not a training step: drop --search {args.search}"
    for dest, flag, unset in _TRAINING_ONLY:
        if getattr(args, dest, unset) != unset:
            return f"--generate plans generation, not a training step: drop {flag}"
    return None


def _batch_given(rest: str) -> bool:
    """Whether the line names the batch: -b's default (32) is a training batch; generation defaults to 1."""
    return any(t in ("-b", "--batch") or t.startswith(("--batch=", "-b=")) for t in rest.split())


@import_repair()  # a model by name imports its library (transformers) before the plan begins
def generate(shell: Any, args: Any, rest: str) -> None:
    """`%gpumem analyze MODEL --generate --prompt N --new M`: the plan's table, or its payload with --json."""
    from gpumem_kernel.analysis import generation_bundle, plan_generation

    problem = generation_problem(args)
    if problem is not None:
        raise usage_error("analyze", problem)
    try:
        model, name = _generation_model(shell, args)
        plan = plan_generation(
            model,
            prompt=args.prompt,
            new=args.new,
            batch_size=args.batch if _batch_given(rest) else 1,
            cache=args.cache,
            quantize=args.quantize,
            target=resolve_target(args.target, "analyze"),
            memory=resolve_memory(args.memory, "--memory", "analyze"),
            torch_version=args.torch,
            model_name=name,
        )
    except ValueError as exc:
        if debug_enabled():
            raise
        raise usage_error("analyze", engine_message_line(exc)) from None
    if args.json:
        print(json.dumps(plan.to_payload(), indent=2))
    else:
        display(generation_bundle(plan.to_payload()), raw=True)


def _generation_model(shell: Any, args: Any) -> Any:
    """(model, its name in the output): the kernel's variable, or a model by name built on the meta device."""
    if is_model_source(args.model, shell.user_ns):
        from gpumem_kernel.analysis import build_named_model

        built = build_named_model(args.model, args.task, args.trust_remote_code)
        return built.model, args.model
    return resolve_module(shell, args.model, "analyze"), args.model


def _show_timeline(history: Any, save: Optional[str], show: bool = True) -> None:
    """The timeline output after the analysis, and the file --save names."""
    from gpumem_kernel.timeline.export import save as save_history
    from gpumem_kernel.timeline.payload import build_payload, timeline_bundle

    if show:
        display(timeline_bundle(build_payload(history)), raw=True)
    if save is not None:
        try:
            kind = save_history(history, save)
        except OSError as exc:
            raise usage_error("analyze", f"--save {shown(save)}: {exc.strerror or exc}") from None
        what = (
            "PyTorch memory snapshot (pytorch.org/memory_viz)" if kind == "snapshot" else "CSV, one row per allocation"
        )
        print(f"timeline saved to {save}: {what}")


def recommend_bundle(payload: Dict[str, Any]) -> Dict[str, str]:
    """The picks of an analysis payload: text/plain (the analysis guide's recommendation block) and text/html,
    both as a page without the labextension shows them: labels, notes left-aligned, no emoji."""
    from gpumem_kernel.analysis import BANNER, recommendation_block, title_of, pick_rows
    from gpumem_kernel.render.fallback import PICK_LABELS, Column, esc, html_table, label, plain

    recs = payload["recommendations"]
    bound = payload["error_bound"]["statement"]
    title = plain(title_of(payload))
    text = [BANNER, title, BANNER] + recommendation_block(payload)
    text += ["", f"Engine: {payload['engine']}; error bound: {bound}", BANNER]
    rows = [(label(pick, PICK_LABELS), batch, plain(str(note))) for pick, batch, note in pick_rows(payload)]
    columns = (Column("Pick"), Column("Batch", numeric=True), Column("Note"))
    html = (
        f"<div class='gpumem-recommend'><p><b>{esc(title)}</b> — engine <b>{esc(payload['engine'])}"
        f"</b>; model {esc(payload['model']['name'])}</p>"
        + html_table("Batch sizes", columns, rows, "gpumem-analysis")
        + f"<p>{esc(recs['lr']['hint'])}</p><p><i>{esc(bound)}</i></p></div>"
    )
    return {"text/plain": plain("\n".join(text)), "text/html": html}


def recommend(shell: Any, rest: str) -> None:
    args = parse(recommend_arguments, "recommend", rest)
    progress = ProgressLine(f"gpumem recommend {args.model}")
    report = run_analysis(shell, args, "recommend", progress)
    payload = report.to_payload()
    if args.json:
        progress.clear()
        recs = payload["recommendations"]
        print(
            json.dumps(
                {
                    "maximum": recs["maximum"],
                    "recommended": recs["recommended"],
                    "safe": recs["safe"],
                    "current": recs["current"],
                    "engine": payload["engine"],
                },
                indent=2,
            )
        )
    else:
        progress.show(recommend_bundle(payload))
