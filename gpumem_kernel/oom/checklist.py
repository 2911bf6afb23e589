"""The OOM checklist: the memory-management and host-memory guides' OOM checklists turned into steps that are
buttons, inserted cells or computed suggestions (steps_free.py, steps_training.py, steps_host.py), folded where
they cannot help (not_applicable.py) and put in order (order.py)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.figures import EIGHT_BIT_STEP as EIGHT_BIT
from gpumem_kernel.oom.figures import FitAdvice, cheapest_fitting, eight_bit_step, step_figures
from gpumem_kernel.oom.not_applicable import not_applicable
from gpumem_kernel.oom.order import family_steps, order_steps
from gpumem_kernel.oom.parse import OomInfo
from gpumem_kernel.oom.step import Step
from gpumem_kernel.oom.steps_free import clear_step, expandable_step, process_steps, restart_step
from gpumem_kernel.oom.steps_host import host_step, workers_step
from gpumem_kernel.oom.steps_training import (
    accumulation_code,
    amp_step,
    batch_steps,
    checkpoint_step,
    inputs_step,
    model_step,
    suggested_batch,
)


# Every step of the troubleshooting guides' checklists this one replaces (keyed by guide number and item), and the
# step that covers it (tests check each id appears):
SEED_STEPS: Dict[str, str] = {
    "001 #1 Jupyter 커널 재시작 (restart the kernel)": "restart",
    "001 #2 clear_gpu_memory() 실행": "clear",
    "001 #3 다른 GPU 프로세스 확인 (nvidia-smi)": "other-processes",
    "001 #4 BATCH_SIZE 16 → 8": "batch-size",
    "001 #5 num_workers 2 → 0": "fewer-workers",
    "001 #6 IMG_SIZE 224 → 192": "smaller-inputs",
    "001 #7 Mixed Precision Training": "mixed-precision",
    "001 #8 더 작은 모델로 변경 (smaller model)": "smaller-model",
    "003 즉시 확인: GPU 메모리 사용량 (nvidia-smi)": "other-processes",
    "003 즉시 확인: 시스템 메모리 사용량 (free -h)": "host-memory",
    "003 즉시 확인: DataLoader 워커 프로세스 수": "host-memory",
    "003 즉시 확인: 콘테이너 메모리 제한": "host-memory",
    "003 1단계: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True": "expandable-segments",
    "003 1단계: CUDA_LAUNCH_BLOCKING=1 (explained as a debugging aid, not a memory saver)": "expandable-segments",
    "003 2단계 #1 dataloader_num_workers 50% 감소": "fewer-workers",
    "003 2단계 #2 per_device_eval_batch_size 30-50% 감소": "eval-batch-size",
    "003 2단계 #3 per_device_train_batch_size 20-30% 감소": "batch-size",
    "003 2단계 #4 gradient_accumulation_steps 증가로 유효 배치 보상": "grad-accumulation",
    "003 3단계 gradient_checkpointing: true": "grad-checkpointing",
    "003 3단계 fp16: true": "mixed-precision",
    "003 3단계 dataloader_drop_last: true": "batch-size",
}


def build_checklist(
    info: OomInfo,
    diagnosis: Diagnosis,
    last_recommendation: Optional[int] = None,
    batch_size: Optional[int] = None,
    sample: Optional[Mapping[str, Any]] = None,
    analyze_hint: Optional[str] = None,
    advice: Optional[FitAdvice] = None,
    advice_step: Optional[Step] = None,
) -> List[Step]:
    """The steps in order_steps's order: the diagnosis's causes first, then by cost, the steps that cannot
    help last (with why). `batch_size` overrides the one found in the namespace. `last_recommendation`: the
    last analysis's batch, given only when it is for the model that failed (oom.analyzed.batch_pick);
    `analyze_hint`: else, the magic that computes one. `advice`: the fit advice for the model that failed
    (oom.figures.find_advice): each lever's figure goes on its step, and the cheapest lever that fits comes
    first; `advice_step`: without it, the step that computes it."""
    d = diagnosis
    batch = batch_size or d.batch_size
    new_batch, why = suggested_batch(last_recommendation, batch)
    accum_steps, accum_code = accumulation_code(d, new_batch, batch)
    effective = f" (effective batch {new_batch * accum_steps})" if new_batch and batch and batch > new_batch else ""
    steps: List[Optional[Step]] = [
        clear_step(info, d),
        restart_step(info, d, sample),
        *process_steps(d),
        *batch_steps(d, new_batch, why, batch, analyze_hint),
        Step(
            "grad-accumulation",
            f"Accumulate gradients over {accum_steps} batches{effective}",
            "Keeps the effective batch (and the training dynamics) while each step holds fewer activations.",
            "insert-cell",
            code=accum_code,
        ),
        amp_step(d),
        inputs_step(d),
        host_step(d, info.family == "host"),
        workers_step(d, info.family == "host"),
        checkpoint_step(d),
        expandable_step(info, d),
        model_step(d),
        advice_step,
    ]
    figures = step_figures(advice) if advice is not None else []
    if any(step == EIGHT_BIT for step, _ in figures):
        steps.append(eight_bit_step(d))
    present = [s for s in steps if s is not None]
    for step in present:
        step.not_applicable = not_applicable(step, info, d, batch, sample)
    by_id = {step.id: step for step in present}
    for step_id, figure in figures:
        if step_id in by_id:
            by_id[step_id].figure = figure
    applicable = [step.id for step in present if step.not_applicable is None]
    lead = cheapest_fitting(advice, figures, applicable) if advice is not None else None
    return order_steps(present, d, family_steps(info), lead=lead)
