/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * `%gpumem analyze … --advise`: "what makes it fit" in the analysis view, on a real payload with the kernel's
 * `advice` object added (adviceFixture: the contract's shape); the per-rank lines' engine label. Absent without
 * them, and for outputs saved before the kernel wrote them.
 */
import '../../__tests__/domshim';

import { act } from 'react';

import { ANALYSIS_MIME } from '../renderers';
import {
  adviceFixture,
  fixture,
  harness,
  HOSTILE,
  type IHarness,
  type Json,
  mutate,
  texts
} from '../../__tests__/analysisfixtures';
import { size } from '../analysis/figures';

let h: IHarness;
let copied: string[];

beforeEach(() => {
  copied = [];
});

afterEach(() => {
  h?.dispose();
});

async function show(data: unknown, copy?: (text: string) => void): Promise<HTMLElement> {
  h = harness(ANALYSIS_MIME, {
    copy:
      copy ??
      (text => {
        copied.push(text);
      })
  });
  await h.render(data);
  return h.node;
}

function advised(advice: Json = adviceFixture()): Json {
  return mutate(fixture('analysis_target'), 'advice', advice);
}

type Row = {
  key: string;
  lever: string;
  command: string;
  cost: string;
  peak_bytes: number;
  maximum: number;
};

function rowsOf(advice: Json): Row[] {
  return advice.rows as Row[];
}

/** The cells of the lever rows, column by column. */
function cells(node: HTMLElement, column: string): string[] {
  return texts(node, `.jp-GpuMem-adviceRow [data-column="${column}"]`);
}

describe('analysis: what makes it fit', () => {
  it('is one table row per lever: its peak, largest batch, whether it fits and its cost', async () => {
    const advice = adviceFixture();
    const node = await show(advised(advice));
    expect(node.querySelector('.jp-GpuMem-invalid')).toBeNull();
    const rows = rowsOf(advice);
    expect(texts(node, '.jp-GpuMem-adviceRow').length).toBe(rows.length);
    expect([...node.querySelectorAll('.jp-GpuMem-adviceRow')].map(r => r.getAttribute('data-key'))).toEqual(
      rows.map(r => r.key)
    );
    expect(texts(node, '.jp-GpuMem-adviceLever .jp-GpuMem-adviceNote')).toEqual([
      'rank 0 traced under FSDP with a fake process group'
    ]);
    expect(cells(node, 'peak')[0]).toBe(size(rows[0].peak_bytes));
    expect(cells(node, 'maximum')).toEqual(rows.map(r => String(r.maximum)));
    expect(cells(node, 'fits')).toEqual(['will not fit', 'will not fit', 'fits', 'tight', 'fits']);
    expect(cells(node, 'cost')).toEqual(rows.map(r => r.cost));
    expect(texts(node, '.jp-GpuMem-adviceTable thead th')).toEqual([
      'Lever',
      'Peak',
      'Max batch',
      'Fits?',
      'Cost'
    ]);
    expect(node.querySelector('.jp-GpuMem-adviceTable caption')?.textContent).toBe(
      `What makes it fit (as analysed: ${size(22 * 1024 ** 3)}, will not fit; on RTX 4080 Super)`
    );
  });

  it('marks the recommended row, and only it, and says why', async () => {
    const advice = adviceFixture();
    const node = await show(advised(advice));
    const marked = [...node.querySelectorAll('.jp-GpuMem-adviceRow[data-recommended="true"]')];
    expect(marked.map(r => r.getAttribute('data-key'))).toEqual(['amp-bf16+checkpointing']);
    expect(marked[0].classList.contains('jp-GpuMem-adviceRecommended')).toBe(true);
    expect(texts(node, '.jp-GpuMem-adviceBadge')).toEqual(['recommended']);
    expect(marked[0].querySelector('.jp-GpuMem-adviceBadge')).not.toBeNull();
    expect(node.querySelector('.jp-GpuMem-adviceReason')?.textContent).toBe(
      'Recommended: AMP bf16 + gradient checkpointing. ' + String(advice.reason)
    );
  });

  it('without a recommended row marks none and gives the reason as a note', async () => {
    const advice = {
      ...adviceFixture(),
      recommended: null,
      reason: 'no lever fits batch 32 on this GPU'
    };
    const node = await show(advised(advice));
    expect(node.querySelector('[data-recommended]')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-adviceBadge')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-adviceReason')?.textContent).toBe(
      'no lever fits batch 32 on this GPU'
    );
  });

  it("shows each row's whole command as text, and Copy copies it verbatim", async () => {
    const advice = adviceFixture();
    const node = await show(advised(advice));
    const rows = rowsOf(advice);
    expect(texts(node, '.jp-GpuMem-adviceCommand')).toEqual(rows.map(r => r.command));
    const buttons = [...node.querySelectorAll('.jp-GpuMem-adviceCopy')] as HTMLButtonElement[];
    expect(buttons).toHaveLength(rows.length);
    await act(async () => {
      buttons[2].click();
    });
    expect(copied).toEqual([rows[2].command]);
    expect(buttons[2].textContent).toBe('Copied');
    expect(buttons[0].textContent).toBe('Copy');
  });

  it('says when the clipboard refused the command', async () => {
    const node = await show(advised(), () => {
      throw new Error('denied');
    });
    const button = node.querySelector('.jp-GpuMem-adviceCopy') as HTMLButtonElement;
    await act(async () => {
      button.click();
    });
    expect(button.textContent).toBe('Copy failed');
  });

  it('marks a per-rank row "per GPU", and no other', async () => {
    const node = await show(advised());
    const perGpu = [...node.querySelectorAll('.jp-GpuMem-advicePerRank')];
    expect(perGpu).toHaveLength(1);
    expect(perGpu[0].textContent?.trim()).toBe('per GPU');
    expect(perGpu[0].closest('.jp-GpuMem-adviceRow')?.getAttribute('data-key')).toBe('fsdp-2');
  });

  it('names the kind of each maximum when the rows mix batch and sequence', async () => {
    const advice = adviceFixture();
    const rows = advice.rows as Json[];
    rows[3] = { ...rows[3], key: 'shorter-sequence', maximum: 768, maximum_of: 'sequence' };
    const node = await show(advised(advice));
    expect(texts(node, '.jp-GpuMem-adviceTable thead th')[2]).toBe('Max batch / sequence');
    expect(cells(node, 'maximum')[3]).toBe('sequence 768');
    expect(cells(node, 'maximum')[0]).toBe('batch 26');
  });

  it('reads "will not fit" where the row does not fit, whatever its status word', async () => {
    const advice = adviceFixture();
    const rows = advice.rows as Json[];
    rows[3] = { ...rows[3], status: 'tight', fits: false };
    const node = await show(advised(advice));
    expect(cells(node, 'fits')[3]).toBe('will not fit');
    expect(
      node.querySelectorAll('.jp-GpuMem-adviceRow')[3].querySelector('.jp-GpuMem-status-will-not-fit')
    ).not.toBeNull();
  });

  it('shows n/a for a lever it could not trace', async () => {
    const advice = adviceFixture();
    const rows = advice.rows as Json[];
    rows[0] = { ...rows[0], peak_bytes: null, peak_allocated_bytes: null, maximum: null, status: 'unknown' };
    const node = await show(advised(advice));
    expect(cells(node, 'peak')[0]).toBe('n/a');
    expect(cells(node, 'maximum')[0]).toBe('n/a');
    expect(cells(node, 'fits')[0]).toBe('unknown (no device limit)');
  });

  it("renders the kernel's strings as text, never as markup", async () => {
    const advice = adviceFixture();
    const rows = advice.rows as Json[];
    rows[2] = {
      ...rows[2],
      lever: HOSTILE,
      command: `%gpumem analyze ${HOSTILE}`,
      cost: HOSTILE,
      note: HOSTILE
    };
    advice.reason = HOSTILE;
    advice.target = HOSTILE;
    const node = await show(advised(advice));
    expect(node.querySelector('img')).toBeNull();
    expect(texts(node, '.jp-GpuMem-adviceCommand')[2]).toBe(`%gpumem analyze ${HOSTILE}`);
    expect(cells(node, 'cost')[2]).toBe(HOSTILE);
    expect(node.querySelector('.jp-GpuMem-adviceReason')?.textContent).toContain(HOSTILE);
  });

  it('with no lever that applies says so', async () => {
    const node = await show(advised({ ...adviceFixture(), rows: [], recommended: null, reason: null }));
    expect(node.querySelector('.jp-GpuMem-adviceRow')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-adviceEmpty')?.textContent).toBe(
      'No lever the analysis can model applies to this step.'
    );
    expect(node.querySelector('.jp-GpuMem-adviceReason')).toBeNull();
  });

  it.each([
    ['a cost kind it does not know', 'rows.1.cost_kind', 'free', 'analysis.advice.rows[1].cost_kind'],
    ['a row without its command', 'rows.0.command', undefined, 'analysis.advice.rows[0].command'],
    ['a negative recommended index', 'recommended', -1, 'analysis.advice.recommended']
  ])('an advice object with %s is one line naming the field', async (_, at, value, problem) => {
    const node = await show(advised(mutate(adviceFixture(), at, value)));
    expect(node.querySelector('.jp-GpuMem-invalid')?.textContent).toContain(problem);
    expect(node.querySelector('.jp-GpuMem-advice')).toBeNull();
  });

  it('is absent without --advise and from outputs saved before it existed', async () => {
    const node = await show(fixture('analysis_target'));
    expect(node.querySelector('.jp-GpuMem-analysis')).not.toBeNull();
    expect(node.querySelector('.jp-GpuMem-advice')).toBeNull();
  });
});

const DISTRIBUTED = {
  world_size: 4,
  strategy: 'fsdp',
  parameters_bytes: 1000,
  gradients_bytes: 1000,
  optimizer_bytes: 2000,
  extra_bytes: 4000,
  extra_note: 'gathered parameters of the largest unit',
  activations_bytes: 8000,
  peak_bytes: 16000,
  note: 'rank 0 of 4'
};

describe('analysis: where the per-rank lines come from', () => {
  it.each([
    ['traced', 'traced rank 0'],
    ['formula', 'formula fallback']
  ])('%s is labelled on the per-rank table', async (engine, label) => {
    const node = await show(mutate(fixture('analysis_target'), 'distributed', { ...DISTRIBUTED, engine }));
    const tag = node.querySelector('.jp-GpuMem-distributed caption .jp-GpuMem-distributedEngine');
    expect(tag?.textContent).toBe(label);
    expect(tag?.getAttribute('data-engine')).toBe(engine);
    expect(node.querySelector('.jp-GpuMem-distributed caption')?.textContent).toBe(
      `Per rank (fsdp, world size 4) ${label}`
    );
  });

  it('has no label on outputs saved before the kernel said', async () => {
    const node = await show(mutate(fixture('analysis_target'), 'distributed', DISTRIBUTED));
    expect(node.querySelector('.jp-GpuMem-distributed caption')?.textContent).toBe(
      'Per rank (fsdp, world size 4)'
    );
    expect(node.querySelector('.jp-GpuMem-distributedEngine')).toBeNull();
  });
});
