/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * `%gpumem analyze … --eval-batch N`: the evaluation step's line in the analysis view, on a
 * real payload with the kernel's `evaluation` record added (the numbers of tests/magics/test_eval_batch.py's
 * shape); absent without one, and for outputs saved before the kernel wrote it.
 */
import '../../__tests__/domshim';

import { ANALYSIS_MIME } from '../renderers';
import { fixture, harness, type IHarness, mutate } from '../../__tests__/analysisfixtures';
import { size } from '../analysis/figures';

const EVALUATION = {
  batch: 64,
  training_batch: 16,
  peak_live_bytes: 475176,
  peak_allocated_bytes: 8995328,
  peak_reserved_bytes: 23068672,
  peak_bytes: 559939584,
  activations_bytes: 5120,
  input_bytes: 65536,
  max_batch: 292765,
  rule_of_thumb_batch: 20,
  engine: 'traced',
  note: 'model.eval() under torch.no_grad(): forward only; parameters and buffers resident'
};

let h: IHarness;

afterEach(() => {
  h?.dispose();
});

async function show(data: unknown): Promise<HTMLElement> {
  h = harness(ANALYSIS_MIME);
  await h.render(data);
  return h.node;
}

describe('analysis: the evaluation step', () => {
  it('is one line: its peak at the evaluation batch, the largest evaluation batch and the rule of thumb', async () => {
    const node = await show(mutate(fixture('analysis_target'), 'evaluation', EVALUATION));
    const lines = [...node.querySelectorAll('.jp-GpuMem-evaluation')];
    expect(lines).toHaveLength(1);
    expect(lines[0].textContent).toBe(
      `Evaluation at batch 64: ${size(8995328)} allocated, ${size(559939584)} footprint; ` +
        'largest evaluation batch 292765 ' +
        "(the guides' rule of thumb: an evaluation batch at most 1.3 × the training batch (20 for 16) unless measured)"
    );
    expect(lines[0].getAttribute('title')).toBe(EVALUATION.note);
    expect(node.querySelector('.jp-GpuMem-invalid')).toBeNull();
  });

  it('says when there is no device limit to find the largest evaluation batch', async () => {
    const node = await show(
      mutate(fixture('analysis_nogpu'), 'evaluation', { ...EVALUATION, max_batch: null })
    );
    expect(node.querySelector('.jp-GpuMem-evaluation')?.textContent).toContain(
      'largest evaluation batch n/a (no device limit)'
    );
  });

  it('an evaluation record that does not fit the schema is one line', async () => {
    const node = await show(mutate(fixture('analysis_target'), 'evaluation', { ...EVALUATION, batch: 0 }));
    expect(node.querySelector('.jp-GpuMem-invalid')?.textContent).toContain('analysis.evaluation.batch');
    expect(node.querySelector('.jp-GpuMem-evaluation')).toBeNull();
  });

  it('is absent without --eval-batch and from outputs saved before it existed', async () => {
    const none = await show(mutate(fixture('analysis_target'), 'evaluation', null));
    expect(none.querySelector('.jp-GpuMem-evaluation')).toBeNull();
    expect(none.querySelector('.jp-GpuMem-analysis')).not.toBeNull();
    h.dispose();
    const old = await show(fixture('analysis_target'));
    expect(old.querySelector('.jp-GpuMem-evaluation')).toBeNull();
    expect(old.querySelector('.jp-GpuMem-analysis')).not.toBeNull();
  });
});
