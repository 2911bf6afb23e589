/**
 * The checklist follows its own diagnosis: the browser shows the steps in the order the kernel gives (the
 * diagnosed cause's steps first), folds the steps the kernel found cannot help under "Not applicable here
 * (N)" with why, and shows the full checklist once — inline — while the panel's brief one links to it.
 *
 * data/oom_fragmentation.json is what a real IPython shell with CPU-only torch wrote: `install_oom_handler`,
 * then `raise torch.OutOfMemoryError(<tests/oom/messages/v2_fragmentation.txt>)` with a DataLoader
 * (batch_size=64, no workers) and a small model in the namespace, then `last_oom(shell)`.
 */
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { OomChecklistView } from '../checklist';
import { LinkedOomChecklist, PANEL_STEPS } from '../linked';
import { type INotebookLike, type IOomOutputs, notebookOomOutputs, oomOutputIndex } from '../reveal';
import { checklistMarkdown, splitSteps } from '../text';
import { untranslated } from '../../../ui/i18n';
import { GpuMemOutputView } from '../../../outputs/outputview';
import { type IOomPayload, OOM_MIME } from '../../../wire/protocol';
import { oom2x } from '../../../__tests__/payloads';
import fragmentationJson from './data/oom_fragmentation.json';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

function fragmentation(): IOomPayload {
  return JSON.parse(JSON.stringify(fragmentationJson)) as IOomPayload;
}

const OCCURRENCE = fragmentation().occurrence?.id ?? '';

let container: HTMLDivElement;
let root: Root;

function render(element: JSX.Element): HTMLDivElement {
  act(() => root.render(element));
  return container;
}

function stepIds(node: ParentNode, selector = '.jp-GpuMem-oomStep'): string[] {
  return [...node.querySelectorAll(selector)].map(item => item.getAttribute('data-step-id') ?? '');
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

describe('the checklist in the kernel’s order', () => {
  it('puts expandable segments first when the diagnosis is fragmentation', () => {
    const payload = fragmentation();
    expect(payload.diagnosis.causes?.[0]?.kind).toBe('fragmentation');
    const node = render(
      <OomChecklistView payload={payload} trans={untranslated} ticks={new Set()} onAction={null} />
    );
    expect(stepIds(node, '.jp-GpuMem-oomSteps:not(details *) > .jp-GpuMem-oomStep')[0]).toBe(
      'expandable-segments'
    );
    expect(node.querySelector('.jp-GpuMem-oomStepsTitle')?.textContent).toBe(
      'Checklist (likely cause first, then cheapest)'
    );
    const findings = [...node.querySelectorAll('.jp-GpuMem-oomDiagnosis li')].map(li => li.textContent ?? '');
    expect(findings[0]).toContain('Likely cause: fragmentation, 9.35 GiB reserved but unallocated');
    // Said once: the separate "Fragmentation: …" line would repeat the figure.
    expect(findings.filter(line => line.includes('9.35 GiB'))).toHaveLength(1);
  });

  it('renders the order it is given, adding none of its own', () => {
    const payload = fragmentation();
    const { apply, folded } = splitSteps(payload);
    payload.steps = [...apply.reverse(), ...folded];
    const node = render(
      <OomChecklistView payload={payload} trans={untranslated} ticks={null} onAction={null} />
    );
    expect(stepIds(node)).toEqual(payload.steps.map(s => s.id));
  });

  it('folds the steps that cannot help, closed, with why, numbered after the others', () => {
    const node = render(
      <OomChecklistView
        payload={fragmentation()}
        trans={untranslated}
        ticks={new Set()}
        onAction={() => undefined}
      />
    );
    const fold = node.querySelector<HTMLDetailsElement>('details.jp-GpuMem-oomFolded');
    expect(fold).not.toBeNull();
    expect(fold!.open).toBe(false);
    expect(fold!.querySelector('summary')?.textContent).toBe('Not applicable here (2)');
    expect(stepIds(fold!)).toEqual(['other-processes', 'fewer-workers']);
    expect(fold!.querySelector('ol')?.getAttribute('start')).toBe('12');
    expect(
      fold!.querySelector('[data-step-id="other-processes"] .jp-GpuMem-oomStepReason')?.textContent
    ).toBe("Not applicable: PyTorch's message lists no other process on this GPU.");
    // The steps that may help stay outside the fold, without a reason line.
    const open = node.querySelector('.jp-GpuMem-oomChecklist > ol.jp-GpuMem-oomSteps')!;
    expect(stepIds(open)).toHaveLength(11);
    expect(open.querySelector('.jp-GpuMem-oomStepReason')).toBeNull();
  });

  it('shows an output saved by an older kernel (no fold, no cause) as before', () => {
    const node = render(
      <OomChecklistView payload={oom2x()} trans={untranslated} ticks={null} onAction={null} />
    );
    expect(node.querySelector('.jp-GpuMem-oomFolded')).toBeNull();
    expect(stepIds(node)).toEqual(oom2x().steps.map(s => s.id));
    expect(node.querySelector('.jp-GpuMem-oomStepsTitle')?.textContent).toBe('Checklist (cheapest first)');
  });

  it('shows the full inline checklist in the cell output, with the fold', () => {
    const node = render(
      <GpuMemOutputView
        mimeType={OOM_MIME}
        data={fragmentation()}
        trans={untranslated}
        host={null}
        node={document.createElement('div')}
      />
    );
    const checklist = node.querySelector<HTMLElement>('.jp-GpuMem-oomChecklist')!;
    expect(checklist.dataset.occurrence).toBe(OCCURRENCE);
    expect(checklist.dataset.brief).toBe('no');
    expect(stepIds(checklist)[0]).toBe('expandable-segments');
    expect(checklist.querySelector('.jp-GpuMem-oomFolded summary')?.textContent).toBe(
      'Not applicable here (2)'
    );
  });

  it('exports the fold to Markdown, numbered on', () => {
    const payload = fragmentation();
    const md = checklistMarkdown(payload, new Set(['expandable-segments']), untranslated);
    expect(md).toContain(
      '**Checklist (likely cause first, then cheapest)**\n\n1. [x] **Turn on expandable segments (restarts the kernel)**'
    );
    expect(md).toContain(
      "**Not applicable here (2)**\n\n12. [ ] **Check other processes on the GPU** (not applicable: PyTorch's message lists no other process on this GPU.) — "
    );
    expect(md.split('\n').filter(l => /^\d+\. \[[ x]\] /.test(l))).toHaveLength(payload.steps.length);
  });
});

function fakeOutputs(has: boolean, shown: boolean): IOomOutputs & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    has: (widgetId, occurrence) => {
      asked.push(`has ${widgetId} ${occurrence}`);
      return has;
    },
    reveal: async (widgetId, occurrence) => {
      asked.push(`reveal ${widgetId} ${occurrence}`);
      return shown;
    }
  };
}

describe('the panel’s brief checklist', () => {
  it('shows the first steps and opens the full one in the notebook', () => {
    const outputs = fakeOutputs(true, true);
    const node = render(
      <LinkedOomChecklist
        widgetId="notebook-1"
        outputs={outputs}
        payload={fragmentation()}
        trans={untranslated}
        ticks={new Set()}
        onAction={() => undefined}
      />
    );
    expect(stepIds(node)).toEqual(['expandable-segments', 'clear', 'restart']);
    expect(PANEL_STEPS).toBe(3);
    expect(node.querySelector('.jp-GpuMem-oomFolded')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-oomDiagnosis')).not.toBeNull();
    expect(node.querySelector('.jp-GpuMem-oomMore')?.textContent).toBe(
      'Open the full checklist 10 more steps, under the traceback'
    );
    act(() => node.querySelector<HTMLButtonElement>('.jp-GpuMem-oomOpenFull')!.click());
    expect(outputs.asked).toContain(`reveal notebook-1 ${OCCURRENCE}`);
  });

  it('shows the full checklist itself when the output has gone by the time the link is used', async () => {
    const outputs = fakeOutputs(true, false);
    const node = render(
      <LinkedOomChecklist
        widgetId="notebook-1"
        outputs={outputs}
        payload={fragmentation()}
        trans={untranslated}
        ticks={null}
        onAction={null}
      />
    );
    await act(async () => node.querySelector<HTMLButtonElement>('.jp-GpuMem-oomOpenFull')!.click());
    expect(node.querySelector('.jp-GpuMem-oomOpenFull')).toBeNull();
    expect(stepIds(node)).toHaveLength(13);
    expect(node.querySelector('.jp-GpuMem-oomFolded')).not.toBeNull();
  });

  it('is the full checklist when there is no output to link to', () => {
    for (const [widgetId, outputs, payload] of [
      ['notebook-1', fakeOutputs(false, false), fragmentation()], // outputs cleared, or built from the text
      [null, fakeOutputs(true, true), fragmentation()], // a console
      ['notebook-1', null, fragmentation()], // no actions plugin
      ['notebook-1', fakeOutputs(true, true), oom2x()] // an older kernel: no occurrence
    ] as Array<[string | null, IOomOutputs | null, IOomPayload]>) {
      const node = render(
        <LinkedOomChecklist
          widgetId={widgetId}
          outputs={outputs}
          payload={payload}
          trans={untranslated}
          ticks={null}
          onAction={null}
        />
      );
      expect(node.querySelector('.jp-GpuMem-oomOpenFull')).toBeNull();
      expect(stepIds(node)).toHaveLength(payload.steps.length);
    }
  });
});

/** A notebook of three cells; the second holds the traceback and the checklist's output. */
function fakeNotebook(occurrence: string): INotebookLike & { scrolled: number[] } {
  const outputs = (...data: unknown[]) => ({ length: data.length, get: (i: number) => ({ data: data[i] }) });
  const cells = [
    { type: 'markdown' },
    {
      type: 'code',
      outputs: outputs({ 'application/vnd.jupyter.stderr': 'Traceback' }, { [OOM_MIME]: fragmentation() })
    },
    { type: 'code', outputs: outputs({ [OOM_MIME]: { occurrence: { id: 'another' } } }) }
  ];
  const nodes = cells.map(() => document.createElement('div'));
  const checklist = document.createElement('div');
  checklist.className = 'jp-GpuMem-oomChecklist';
  checklist.dataset.occurrence = occurrence;
  checklist.tabIndex = -1;
  const scrolled: number[] = [];
  const notebook = {
    scrolled,
    model: { cells: { length: cells.length, get: (i: number) => cells[i] } },
    widgets: nodes.map(node => ({ node })),
    activeCellIndex: 0,
    deselectAll: () => undefined,
    scrollToItem: async (index: number) => {
      scrolled.push(index);
      nodes[index].appendChild(checklist); // JupyterLab draws the cell once it is scrolled into view
    }
  };
  document.body.appendChild(nodes[1]);
  return notebook;
}

describe('notebookOomOutputs', () => {
  beforeAll(() => {
    Element.prototype.scrollIntoView = function scrollIntoView(): void {
      this.setAttribute('data-scrolled', 'yes');
    };
  });

  it('finds the output of an occurrence in the notebook’s model', () => {
    const notebook = fakeNotebook(OCCURRENCE);
    expect(oomOutputIndex(notebook, OCCURRENCE)).toBe(1);
    expect(oomOutputIndex(notebook, 'another')).toBe(2);
    expect(oomOutputIndex(notebook, 'gone')).toBe(-1);
    expect(oomOutputIndex(notebook, '')).toBe(-1);
  });

  it('scrolls to the output, selects its cell and focuses the checklist', async () => {
    const notebook = fakeNotebook(OCCURRENCE);
    const activated: string[] = [];
    const outputs = notebookOomOutputs(
      id => (id === 'nb' ? { content: notebook, isVisible: true } : null),
      id => activated.push(id)
    );
    expect(outputs.has('nb', OCCURRENCE)).toBe(true);
    expect(outputs.has('nb', 'gone')).toBe(false);
    expect(outputs.has('other', OCCURRENCE)).toBe(false);
    expect(await outputs.reveal('nb', OCCURRENCE)).toBe(true);
    expect(notebook.scrolled).toEqual([1]);
    expect(notebook.activeCellIndex).toBe(1);
    const checklist = notebook.widgets[1].node.querySelector<HTMLElement>('.jp-GpuMem-oomChecklist')!;
    expect(checklist.getAttribute('data-scrolled')).toBe('yes');
    expect(document.activeElement).toBe(checklist);
    expect(checklist.classList.contains('jp-mod-revealed')).toBe(true);
    expect(activated).toEqual([]); // the notebook was in view already
    expect(await outputs.reveal('nb', 'gone')).toBe(false);
    notebook.widgets[1].node.remove();
  });
});
