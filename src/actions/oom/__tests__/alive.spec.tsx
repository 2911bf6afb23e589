/**
 * The OOM checklist's "What was alive" section (the kernel's OOM capture, `alive` in oom.schema.json) and the
 * step "Re-run this cell with the timeline on" offered without it, rendered with React in jsdom. The `alive`
 * below has the shape and figures gpumem_kernel/timeline/capture.py builds from the allocator snapshot
 * fixture of tests/timeline (a stand-in for a GPU).
 */
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { aliveSourceText, OomAlive, type IOomAlive } from '../alive';
import { OomChecklistView } from '../checklist';
import { untranslated } from '../../../ui/i18n';
import { type IOomPayload, type IOomStep, isOomPayload, oomPayloadProblem } from '../../../wire/protocol';

import { MIB } from '../../../__tests__/fixtures';
import { oom2x } from '../../../__tests__/payloads';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const HOSTILE = '<img src=x onerror="window.__gpumemXss=1"><b>bold</b>';
const CELL = '/tmp/ipykernel_4242/2871635221.py';

function alive(): IOomAlive {
  return {
    timeline_id: 'tl-0123456789abcdef',
    device: 0,
    allocated: 18 * MIB + 1024,
    blocks: 5,
    holders: [
      {
        size: 6 * MIB,
        count: 1,
        category: 'activation',
        source: { file: CELL, line: 7, name: 'train_step', cell: 12, user: true }
      },
      {
        size: 4 * MIB,
        count: 1,
        category: 'optimizer_state',
        source: { file: '/home/me/train.py', line: 42, name: 'step', cell: null, user: true }
      },
      {
        size: 4 * MIB,
        count: 1,
        category: 'parameter',
        source: {
          file: '/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py',
          line: 1355,
          name: 'convert',
          cell: null,
          user: false
        }
      },
      { size: 4 * MIB, count: 2, category: 'gradient', source: null }
    ],
    rest: { size: 1024, count: 1 },
    failed: {
      size: 8 * 1024 * MIB,
      device_free: 300 * MIB,
      source: { file: CELL, line: 7, name: 'train_step', cell: 12, user: true }
    },
    notes: ['categories are a heuristic (PyTorch records none)']
  };
}

function withAlive(): IOomPayload {
  return { ...oom2x(), alive: alive() };
}

function rerunStep(): IOomStep {
  return {
    id: 'timeline-rerun',
    title: 'Re-run this cell with the timeline on',
    detail:
      'Inserts a copy of the failed cell below with %%gpumem --timeline as its first line; it is not run.',
    action: 'insert-cell',
    kernel_id: null,
    code: '%%gpumem --timeline\nloss = model(x).sum()\nloss.backward()',
    not_applicable: null
  };
}

let container: HTMLDivElement;
let root: Root;

function render(element: JSX.Element): HTMLDivElement {
  act(() => root.render(element));
  return container;
}

beforeEach(() => {
  container = document.createElement('div');
  document.body.appendChild(container);
  root = createRoot(container);
});

afterEach(() => {
  act(() => root.unmount());
  container.remove();
});

describe('What was alive', () => {
  it('is a valid optional field of the OOM payload', () => {
    expect(oomPayloadProblem(withAlive())).toBeNull();
    expect(isOomPayload(oom2x())).toBe(true); // absent: older kernels and the setting off
    const bad = withAlive() as unknown as { alive: { holders: { size: unknown }[] } };
    bad.alive.holders[0].size = 'big';
    expect(oomPayloadProblem(bad)).not.toBeNull();
  });

  it('lists size, category and the allocating line, then the rest and the failed allocation', () => {
    const node = render(
      <OomChecklistView payload={withAlive()} trans={untranslated} ticks={null} onAction={() => undefined} />
    );
    const section = node.querySelector('.jp-GpuMem-oomAlive');
    expect(section).not.toBeNull();
    expect(section?.querySelector('h4')?.textContent).toBe('What was alive');
    expect(section?.querySelector('.jp-GpuMem-oomAliveTotal')?.textContent).toBe(
      '18.0 MiB in 5 blocks on cuda:0 when the allocation failed'
    );
    const rows = [...(section?.querySelectorAll('tbody tr') ?? [])].map(row =>
      [...row.querySelectorAll('td')].map(cell => cell.textContent)
    );
    expect(rows).toEqual([
      ['6.00 MiB', 'activations', 'In [12], line 7, in train_step'],
      ['4.00 MiB', 'optimizer state', '/home/me/train.py:42, in step'],
      [
        '4.00 MiB',
        'parameters',
        '/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py:1355, in convert (no line of yours)'
      ],
      ['4.00 MiB ×2', 'gradients', 'no line recorded'],
      ['1.00 KiB', 'the rest (1 block)']
    ]);
    expect(section?.querySelector('.jp-GpuMem-oomAliveFailed')?.textContent).toBe(
      'Failed: 8.00 GiB at In [12], line 7, in train_step'
    );
    // It comes between what failed (and the diagnosis) and the steps.
    const order = [
      ...node.querySelectorAll('.jp-GpuMem-oomSummary, .jp-GpuMem-oomAlive, .jp-GpuMem-oomSteps')
    ];
    expect(order.map(n => n.className.split(' ')[0])).toEqual([
      'jp-GpuMem-oomSummary',
      'jp-GpuMem-oomAlive',
      'jp-GpuMem-oomSteps'
    ]);
  });

  it('renders the kernel strings as text', () => {
    const payload = withAlive();
    payload.alive!.holders[0].source = { file: HOSTILE, line: 1, name: HOSTILE, cell: null, user: true };
    payload.alive!.notes = [HOSTILE];
    const node = render(
      <OomChecklistView payload={payload} trans={untranslated} ticks={null} onAction={null} />
    );
    expect(node.querySelector('.jp-GpuMem-oomAlive img, .jp-GpuMem-oomAlive b')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-oomAliveNotes')?.textContent).toBe(HOSTILE);
    expect((window as { __gpumemXss?: number }).__gpumemXss).toBeUndefined();
  });

  it('is left out of the brief checklist and of payloads without it', () => {
    const brief = render(
      <OomChecklistView
        payload={withAlive()}
        trans={untranslated}
        ticks={null}
        onAction={null}
        brief={2}
        onOpenFull={() => undefined}
      />
    );
    expect(brief.querySelector('.jp-GpuMem-oomAlive')).toBeNull();
    const none = render(
      <OomChecklistView payload={oom2x()} trans={untranslated} ticks={null} onAction={null} />
    );
    expect(none.querySelector('.jp-GpuMem-oomAlive')).toBeNull();
  });

  it('downloads the full timeline the kernel keeps, and says why it could not', async () => {
    const asked: string[] = [];
    let fail = false;
    const onExport = (id: string, format: string): Promise<unknown> => {
      asked.push(`${id}:${format}`);
      return fail
        ? Promise.reject(new Error('this kernel no longer holds timeline ' + id))
        : Promise.resolve();
    };
    const node = render(<OomAlive alive={alive()} trans={untranslated} onExport={onExport} />);
    const snapshot = node.querySelector('.jp-GpuMem-oomAliveSnapshot') as HTMLButtonElement;
    act(() => snapshot.click());
    act(() => (node.querySelector('.jp-GpuMem-oomAliveCsv') as HTMLButtonElement).click());
    expect(asked).toEqual(['tl-0123456789abcdef:snapshot', 'tl-0123456789abcdef:csv']);
    fail = true;
    await act(async () => snapshot.click());
    expect(node.querySelector('.jp-GpuMem-bad')?.textContent).toBe(
      'this kernel no longer holds timeline tl-0123456789abcdef'
    );
    const without = render(
      <OomAlive alive={{ ...alive(), timeline_id: null }} trans={untranslated} onExport={onExport} />
    );
    expect(without.querySelector('.jp-GpuMem-oomAliveSnapshot')).toBeNull();
  });

  it('words a source line', () => {
    expect(aliveSourceText(null, untranslated)).toBe('no line recorded');
    expect(
      aliveSourceText({ file: 'C:\\work\\m.py', line: 3, name: 'f', cell: null, user: true }, untranslated)
    ).toBe('C:\\work\\m.py:3, in f');
  });
});

describe('Re-run this cell with the timeline on', () => {
  it('is a button that inserts the copy of the failed cell (the kernel wrote it), not run', () => {
    const payload = oom2x();
    payload.steps.splice(1, 0, rerunStep());
    const chosen: IOomStep[] = [];
    const node = render(
      <OomChecklistView
        payload={payload}
        trans={untranslated}
        ticks={new Set()}
        onAction={s => chosen.push(s)}
      />
    );
    const item = node.querySelector('.jp-GpuMem-oomStep[data-step-id="timeline-rerun"]');
    expect(item?.querySelector('.jp-GpuMem-oomStepTitle')?.textContent).toBe(
      'Re-run this cell with the timeline on'
    );
    expect(item?.getAttribute('data-action')).toBe('insert-cell');
    expect(item?.querySelector('code')?.textContent?.split('\n')[0]).toBe('%%gpumem --timeline');
    const insert = [...(item?.querySelectorAll('button') ?? [])].find(
      b => b.textContent === 'Insert cell below'
    );
    act(() => insert?.click());
    expect(chosen).toEqual([rerunStep()]);
    expect(node.querySelector('.jp-GpuMem-oomAlive')).toBeNull();
  });
});
