/**
 * The OOM checklist as words: the diagnosis lines the panel shows under the summary, the label of each
 * step's button, and the "Copy as Markdown" export (for an issue, a chat with a colleague, a lab notebook).
 *
 * Pure, so the export is tested as text. Kernel strings pass through unchanged (the kernel writes them as
 * Markdown-friendly prose with `names` in backticks); only line breaks are folded so a list item stays one.
 */
import { formatBytes } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { IOomPayload, IOomStep } from '../../wire/protocol';
import type { OomFamily } from './detect';

/**
 * What the diagnosis says beyond the summary, one finding a line (mirrors the kernel's text output).
 * `tracebackDropped`: a clear has dropped the failed call's traceback since, so what it kept alive is gone.
 */
export function diagnosisLines(payload: IOomPayload, trans: Trans, tracebackDropped = false): string[] {
  const d = payload.diagnosis;
  const lines = [...d.notes];
  // Why the kernel found the failed call ran with gradients off (evaluation): its evidence, shown as data.
  if (typeof d.evaluation === 'string') {
    lines.push(trans.__('In evaluation (gradients off): %1', d.evaluation));
  }
  const f = d.fragmentation;
  // The kernel's "Likely cause: fragmentation, …" note (in `notes`) already gives the figure.
  const named = d.causes?.[0]?.kind === 'fragmentation';
  if (f !== null && f.suggest && !named) {
    lines.push(
      trans.__('Fragmentation: %1 reserved but unallocated', formatBytes(f.reserved_unallocated, 'auto'))
    );
  } else if (f !== null && f.expandable_segments_set) {
    lines.push(trans.__('Expandable segments are already on (%1)', d.alloc_conf_var));
  }
  const holders = d.other_processes.filter(p => p.used !== null && p.used > 0);
  if (holders.length > 0) {
    const shown = holders
      .slice(0, 6)
      .map(p => trans.__('PID %1 (%2)', p.pid, formatBytes(p.used, 'auto')))
      .join(', ');
    lines.push(trans.__('Other processes: %1', shown));
  }
  if (d.traceback !== null && d.traceback.tensors > 0 && tracebackDropped) {
    lines.push(
      trans._n(
        "The failed call's traceback kept %1 tensor (%2) alive; a clear has dropped it since",
        "The failed call's traceback kept %1 tensors (%2) alive; a clear has dropped it since",
        d.traceback.tensors,
        formatBytes(d.traceback.bytes, 'auto')
      )
    );
  } else if (d.traceback !== null && d.traceback.tensors > 0) {
    lines.push(
      trans._n(
        "The failed call's traceback keeps %1 tensor (%2) alive",
        "The failed call's traceback keeps %1 tensors (%2) alive",
        d.traceback.tensors,
        formatBytes(d.traceback.bytes, 'auto')
      )
    );
  }
  if (d.batch_size !== null) {
    lines.push(
      d.batch_size_source
        ? trans.__('Batch size in use: %1 (%2)', d.batch_size, d.batch_size_source)
        : trans.__('Batch size in use: %1', d.batch_size)
    );
  }
  if (d.host !== null && d.host.low) {
    lines.push(trans.__('Host memory is nearly exhausted'));
  }
  return lines;
}

/**
 * The payload's steps split where the kernel split them: those that may help (in the kernel's order: the
 * diagnosis's cause first, then by cost) and those it found cannot help here (`not_applicable`: shown folded,
 * with why). Both keep the payload's order; the browser adds no ordering rule of its own. An output saved by an
 * older kernel has no `not_applicable`: every step may help.
 */
export function splitSteps(payload: IOomPayload): { apply: IOomStep[]; folded: IOomStep[] } {
  const apply: IOomStep[] = [];
  const folded: IOomStep[] = [];
  for (const step of payload.steps) {
    ((step.not_applicable ?? null) === null ? apply : folded).push(step);
  }
  return { apply, folded };
}

/**
 * The family's name for the checklist's header: which kind of out-of-memory error this is (the kernel's
 * `info.family`, gpumem_kernel/oom/patterns.json). An output saved by an older kernel has no family: its format
 * tells the caching allocator's message (1.x, 2.x, unknown) from a CUDA error without figures.
 */
export function familyLabel(payload: IOomPayload, trans: Trans): string {
  const info = payload.info;
  switch (info.family ?? (info.format === 'cuda-error' ? null : 'cuda_allocator')) {
    case 'cuda_allocator':
      return trans.__("%1 out of memory (PyTorch's allocator)", info.backend);
    case 'xpu':
      return trans.__("XPU out of memory (PyTorch's allocator, Intel GPU)");
    case 'mps':
      return trans.__('MPS out of memory (Apple GPU, memory shared with the Mac)');
    case 'driver':
      return trans.__("%1 out of memory outside PyTorch's allocator (driver)", info.backend);
    case 'cublas':
      return trans.__('cuBLAS could not allocate its workspace (GPU full)');
    case 'cudnn':
      return trans.__('cuDNN could not allocate its workspace (GPU full)');
    case 'nccl':
      return trans.__('NCCL out of GPU memory');
    case 'xla':
      return trans.__('XLA out of memory (JAX, TensorFlow, PyTorch/XLA)');
    case 'wrapper':
      return trans.__('A library gave up for lack of GPU memory (accelerate, vLLM)');
    case 'host':
      return trans.__('Host memory (RAM) out of memory, not the GPU');
    default:
      return trans.__('%1 error: out of memory', info.backend);
  }
}

/**
 * The summary's first line without the family the card's heading already names: "CUDA out of memory on GPU
 * 0: tried to allocate 2.00 GiB" → "On GPU 0: tried to allocate 2.00 GiB" (under a heading "CUDA out of
 * memory (PyTorch's allocator)"). A line that does not start with it is kept as it is.
 */
export function withoutFamily(line: string, backend: string | null): string {
  const prefix = `${backend ?? 'CUDA'} out of memory`;
  if (!line.toLowerCase().startsWith(prefix.toLowerCase())) {
    return line;
  }
  const rest = line.slice(prefix.length).replace(/^[\s:;,.]+/, '');
  return rest === '' ? line : rest.charAt(0).toUpperCase() + rest.slice(1);
}

/**
 * A short title for the family: the panel card's heading and the notification ("… in train.ipynb"). CUDA's
 * caching allocator and driver (and an unknown family: an error the browser saw before the checklist came)
 * keep "CUDA out of memory".
 */
export function familyTitle(family: OomFamily | null | undefined, trans: Trans): string {
  switch (family) {
    case 'xpu':
      return trans.__('XPU out of memory');
    case 'mps':
      return trans.__('MPS out of memory');
    case 'cublas':
      return trans.__('cuBLAS out of memory');
    case 'cudnn':
      return trans.__('cuDNN out of memory');
    case 'nccl':
      return trans.__('NCCL out of memory');
    case 'xla':
      return trans.__('XLA out of memory');
    case 'wrapper':
      return trans.__('Out of GPU memory');
    case 'host':
      return trans.__('Host RAM out of memory');
    default:
      return trans.__('CUDA out of memory');
  }
}

/**
 * The heading over the steps: whether the kernel's diagnosis named a cause whose steps come first (an OOM in
 * evaluation puts the evaluation batch first).
 */
export function stepsHeading(payload: IOomPayload, trans: Trans): string {
  const d = payload.diagnosis;
  return (d.causes ?? []).length > 0 || typeof d.evaluation === 'string'
    ? trans.__('Checklist (likely cause first, then cheapest)')
    : trans.__('Checklist (cheapest first)');
}

/** The words on a step's button; null for advice-only steps. */
export function stepActionLabel(step: IOomStep, trans: Trans): string | null {
  switch (step.action) {
    case 'clear':
      return trans.__('Clear GPU memory');
    case 'restart':
      return trans.__('Restart and free');
    case 'shutdown-kernel':
      return trans.__('Shut down kernel');
    case 'insert-cell':
      return trans.__('Insert cell below');
    case 'insert-env-cell-and-restart':
      return trans.__('Insert at top and restart');
    case null:
      return null;
  }
}

function oneLine(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, ' ').trim();
}

/** A code fence longer than any run of backticks in `code`, so the code cannot close it. */
export function fenceFor(code: string): string {
  const longest = Math.max(0, ...(code.match(/`+/g) ?? []).map(run => run.length));
  return '`'.repeat(Math.max(3, longest + 1));
}

/**
 * The checklist with its diagnosis as Markdown: the summary, the findings, then the steps in order as a
 * task list (ticked ones `[x]`), each step's code in a fenced block; the steps that cannot help here last,
 * under "Not applicable here (N)", each with why.
 *
 * @param kernelLabel - names the notebook of a `shutdown-kernel` step's kernel ("notebook: a.ipynb").
 */
export function checklistMarkdown(
  payload: IOomPayload,
  ticks: ReadonlySet<string>,
  trans: Trans,
  kernelLabel: (kernelId: string) => string | null = () => null
): string {
  const out: string[] = [];
  out.push(`### ${trans.__('%1 — checklist', familyLabel(payload, trans))}`, '');
  for (const line of payload.summary) {
    out.push(`${oneLine(line)}  `);
  }
  out.push('');
  const findings = diagnosisLines(payload, trans);
  if (findings.length > 0) {
    out.push(`**${trans.__('Diagnosis')}**`, '');
    for (const line of findings) {
      out.push(`- ${oneLine(line)}`);
    }
    out.push('');
  }
  out.push(`**${stepsHeading(payload, trans)}**`, '');
  const { apply, folded } = splitSteps(payload);
  [...apply, ...folded].forEach((step, i) => {
    if (i === apply.length) {
      out.push('', `**${trans.__('Not applicable here (%1)', folded.length)}**`, '');
    }
    const box = ticks.has(step.id) ? '[x]' : '[ ]';
    const number = `${i + 1}.`;
    const indent = ' '.repeat(number.length + 1);
    let text = `${number} ${box} **${oneLine(step.title)}**`;
    if (step.not_applicable) {
      text += ` (${trans.__('not applicable: %1', oneLine(step.not_applicable))})`;
    }
    if (step.figure) {
      text += ` — ${oneLine(step.figure.text)}.`;
    }
    if (step.detail) {
      text += ` — ${oneLine(step.detail)}`;
    }
    if (step.action === 'shutdown-kernel' && step.kernel_id !== null) {
      const where = kernelLabel(step.kernel_id);
      if (where !== null) {
        text += ` (${oneLine(where)})`;
      }
    }
    out.push(text);
    if (step.code) {
      const fence = fenceFor(step.code);
      out.push('', `${indent}${fence}python`);
      for (const line of step.code.replace(/\n$/, '').split('\n')) {
        out.push(line === '' ? '' : `${indent}${line}`);
      }
      out.push(`${indent}${fence}`, '');
    }
  });
  return `${out
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim()}\n`;
}
