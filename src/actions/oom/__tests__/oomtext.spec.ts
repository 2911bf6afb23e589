/**
 * @jest-environment node
 *
 * The checklist as text: diagnosis lines and the "Copy as Markdown" export.
 */
import { untranslated } from '../../../ui/i18n';
import { OOM_FAMILIES } from '../detect';
import {
  checklistMarkdown,
  diagnosisLines,
  familyLabel,
  familyTitle,
  fenceFor,
  stepActionLabel,
  withoutFamily,
  stepsHeading
} from '../text';
import { OTHER_KERNEL_ID } from '../../../__tests__/fixtures';
import { oom1x, oom2x, oomWithOtherKernel } from '../../../__tests__/payloads';

describe('diagnosisLines', () => {
  it('names fragmentation, other processes, the traceback pin and the batch size', () => {
    const p = oomWithOtherKernel();
    p.diagnosis.traceback = { frames: 3, tensors: 2, bytes: 1073741824, by_device: { 'cuda:0': 1073741824 } };
    p.diagnosis.batch_size = 32;
    p.diagnosis.batch_size_source = 'train_loader.batch_size';
    p.diagnosis.notes = ['The request alone is larger than the GPU.'];
    expect(diagnosisLines(p, untranslated)).toEqual([
      'The request alone is larger than the GPU.',
      'Other processes: PID 2345 (4.00 GiB)',
      "The failed call's traceback keeps 2 tensors (1.00 GiB) alive",
      'Batch size in use: 32 (train_loader.batch_size)'
    ]);
    expect(diagnosisLines(oom1x(), untranslated)).toEqual([
      'Fragmentation: 102 MiB reserved but unallocated'
    ]);
  });
});

describe('an out-of-memory error in evaluation', () => {
  const EVIDENCE = 'the failing line runs inside `with torch.no_grad():` (In [4], line 7)';

  it('says so after the notes, and the heading puts the likely cause first', () => {
    const p = oom2x();
    p.diagnosis.notes = ['A note.'];
    p.diagnosis.causes = [];
    expect(stepsHeading(p, untranslated)).toBe('Checklist (cheapest first)');
    p.diagnosis.evaluation = EVIDENCE;
    expect(diagnosisLines(p, untranslated).slice(0, 2)).toEqual([
      'A note.',
      `In evaluation (gradients off): ${EVIDENCE}`
    ]);
    expect(stepsHeading(p, untranslated)).toBe('Checklist (likely cause first, then cheapest)');
    expect(checklistMarkdown(p, new Set(), untranslated)).toContain(
      `- In evaluation (gradients off): ${EVIDENCE}\n`
    );
  });

  it('adds nothing for training, nor for an output saved by an older kernel', () => {
    const training = oom2x();
    training.diagnosis.evaluation = null;
    const old = oom2x();
    delete old.diagnosis.evaluation;
    const lines = diagnosisLines(oom2x(), untranslated);
    expect(diagnosisLines(training, untranslated)).toEqual(lines);
    expect(diagnosisLines(old, untranslated)).toEqual(lines);
    expect(lines.some(line => line.startsWith('In evaluation'))).toBe(false);
  });
});

describe('familyLabel', () => {
  it('names each family in the header, and derives it from the format for older kernels', () => {
    const p = oom2x();
    expect(familyLabel(p, untranslated)).toBe("CUDA out of memory (PyTorch's allocator)");
    const host = oom2x();
    host.info.family = 'host';
    host.info.format = 'cuda-error';
    expect(familyLabel(host, untranslated)).toBe('Host memory (RAM) out of memory, not the GPU');
    expect(checklistMarkdown(host, new Set(), untranslated).split('\n')[0]).toBe(
      '### Host memory (RAM) out of memory, not the GPU — checklist'
    );
    const labels = new Set(
      OOM_FAMILIES.map(family => {
        const q = oom2x();
        q.info.family = family;
        return familyLabel(q, untranslated);
      })
    );
    expect(labels.size).toBe(10);
    const old = oom2x();
    delete old.info.family;
    old.info.format = 'cuda-error';
    expect(familyLabel(old, untranslated)).toBe('CUDA error: out of memory');
  });

  it('gives the panel and the notification a short title per family', () => {
    expect(familyTitle('host', untranslated)).toBe('Host RAM out of memory');
    expect(familyTitle('cuda_allocator', untranslated)).toBe('CUDA out of memory');
    expect(familyTitle(null, untranslated)).toBe('CUDA out of memory');
    expect(new Set(OOM_FAMILIES.map(family => familyTitle(family, untranslated))).size).toBe(9);
  });
});

describe('checklistMarkdown', () => {
  it('exports summary, diagnosis and the ordered task list with ticks and code', () => {
    const payload = oom1x();
    const md = checklistMarkdown(payload, new Set(['clear', 'batch-size']), untranslated);
    const lines = md.split('\n');
    expect(lines.slice(0, 4)).toEqual([
      "### CUDA out of memory (PyTorch's allocator) — checklist",
      '',
      'CUDA out of memory on GPU 0: tried to allocate 20.00 MiB; 10.00 MiB free of 5.80 GiB  ',
      'PyTorch: 4.10 GiB allocated, 102.40 MiB reserved but unallocated  '
    ]);
    expect(md).toContain('**Diagnosis**\n\n- Fragmentation: 102 MiB reserved but unallocated\n');
    expect(md).toContain(
      '**Checklist (cheapest first)**\n\n1. [x] **Clear GPU memory** — Drops the last traceback'
    );
    expect(md).toContain('2. [ ] **Restart the kernel and free its memory** — ');
    expect(md).toContain('4. [x] **Halve the batch size** — ');
    // Step numbers follow the payload's order (cheapest first), code indented under its item.
    const accum = payload.steps.findIndex(s => s.id === 'grad-accumulation') + 1;
    expect(md).toContain(`${accum}. [ ] **Accumulate gradients over 2 batches**`);
    expect(md).toContain('\n\n   ```python\n   # Gradient accumulation: make each batch smaller');
    expect(md).toContain('\n   ACCUM_STEPS = 2\n');
    expect(md.endsWith('\n')).toBe(true);
    expect(md).not.toMatch(/\n{3}/);
    const numbered = lines.filter(l => /^\d+\. \[[ x]\] /.test(l));
    expect(numbered).toHaveLength(payload.steps.length);
  });

  it('puts a step’s fit-advice figure before its detail', () => {
    const payload = oom2x();
    const step = payload.steps.find(s => s.id === 'grad-checkpointing');
    if (step === undefined) {
      throw new Error('no checkpointing step');
    }
    step.figure = {
      key: 'checkpointing',
      flags: '--checkpointing',
      batch: 8,
      peak_bytes: 33500744908,
      peak_allocated_bytes: 30000000000,
      maximum: 24,
      status: 'fits',
      fits: true,
      source: 'last-analysis',
      text: 'gradient checkpointing: peak 31.20 GiB → fits at batch 8 (up to 24)'
    };
    const md = checklistMarkdown(payload, new Set(), untranslated);
    const at = payload.steps.indexOf(step) + 1;
    expect(md).toContain(
      `${at}. [ ] **${step.title}** — gradient checkpointing: peak 31.20 GiB → fits at batch 8 (up to 24). — ${step.detail.split('\n')[0]}`
    );
  });

  it('names the notebook of a kernel to shut down', () => {
    const md = checklistMarkdown(oomWithOtherKernel(), new Set(), untranslated, id =>
      id === OTHER_KERNEL_ID ? 'notebook: experiments/big.ipynb' : null
    );
    expect(md).toContain('(notebook: experiments/big.ipynb)');
  });

  it('keeps hostile strings from breaking the list or the fences', () => {
    const p = oom2x();
    p.steps[0].title = 'two\nlines';
    p.steps[5].code = 'x = "```"\nprint("````")\n';
    const md = checklistMarkdown(p, new Set(), untranslated);
    expect(md).toContain('1. [ ] **two lines**');
    expect(md).toContain('   `````python\n   x = "```"\n   print("````")\n   `````');
    expect(fenceFor('no ticks')).toBe('```');
  });
});

describe('stepActionLabel', () => {
  it('names each action', () => {
    const labels = oomWithOtherKernel().steps.map(s => stepActionLabel(s, untranslated));
    expect(labels.filter(Boolean)).toEqual([
      'Clear GPU memory',
      'Restart and free',
      'Shut down kernel',
      'Insert cell below',
      'Insert cell below',
      'Insert cell below',
      'Insert at top and restart'
    ]);
  });
});

describe('withoutFamily', () => {
  it('drops the family the heading above already names, and keeps any other line', () => {
    expect(withoutFamily('CUDA out of memory on GPU 0: tried to allocate 2.00 GiB', 'CUDA')).toBe(
      'On GPU 0: tried to allocate 2.00 GiB'
    );
    expect(withoutFamily('HIP out of memory: tried to allocate 1.00 GiB', 'HIP')).toBe(
      'Tried to allocate 1.00 GiB'
    );
    expect(withoutFamily('Host memory is nearly exhausted', 'CUDA')).toBe('Host memory is nearly exhausted');
    expect(withoutFamily('CUDA out of memory', 'CUDA')).toBe('CUDA out of memory');
  });
});
