/**
 * The panel and the checklists tell the truth after errors, restarts and kernel death: one notebook's
 * actions against a fake kernel, rendered with React in jsdom.
 *
 * - ticks belong to one OOM occurrence: a new error (after a restart, or a second one in the same run)
 *   starts unticked;
 * - the OOM card and the clear report of an earlier kernel run are marked as history, without buttons;
 * - a clear or restart started from a checklist step answers under that step (inline and in the panel);
 * - "Copy as Markdown" says "Copied".
 */
import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { CLEAR_CALL, LAST_OOM_CALL } from '../../channel/frontend';
import { stepFeedback } from '../feedback';
import { OomChecklistView } from '../oom/checklist';
import { fromEarlierKernel, InlineOomChecklist } from '../oom/inlinechecklist';
import { SessionActions } from '../sessionactions';
import { occurrenceKey, TickStore } from '../ticks';
import { ActionsSection } from '../view';
import { untranslated } from '../../ui/i18n';
import { COPIED_MS } from '../../ui/copybutton';
import type { IGpuMemActions, IInlineHost, ISessionActions } from '../../tokens';
import type { IOomPayload } from '../../wire/protocol';
import { ActionSessionContext, FakeBridge, FakeHost, flush } from '../../__tests__/actionfakes';
import { answerReply, FakeKernel } from '../../__tests__/fakes';
import * as fx from '../../__tests__/fixtures';
import { clearCpu, oom2x } from '../../__tests__/payloads';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const EVALUE = 'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB.';

/** The 2.x checklist of occurrence `id`, built in kernel process 1234 (started at 1763855000.5). */
function oomOf(id: string): IOomPayload {
  return { ...oom2x(), occurrence: { id, kernel_pid: 1234, kernel_start: 1763855000.5, time: 1763855100 } };
}

/** A kernel like ipykernel: aborts what is queued behind a failing cell until that cell's idle. */
class Kernel extends FakeKernel {
  constructor() {
    super('k1', 'python', expression => {
      if (this.aborting) {
        return { status: 'aborted' };
      }
      if (expression === LAST_OOM_CALL) {
        return answerReply({ ok: true, oom: this.oom });
      }
      if (expression === CLEAR_CALL) {
        return this.clearAnswer;
      }
      return answerReply({ ok: true, oom: null });
    });
  }

  aborting = false;
  oom: IOomPayload | null = null;
  clearAnswer: unknown = answerReply({ ok: true, report: clearCpu() });
}

interface ISetup {
  ctx: ActionSessionContext;
  kernel: Kernel;
  actions: SessionActions;
  ticks: TickStore;
  bridge: FakeBridge;
}

const made: SessionActions[] = [];

function setup(): ISetup {
  const kernel = new Kernel();
  const ctx = new ActionSessionContext(kernel);
  const ticks = new TickStore(null);
  const bridge = new FakeBridge(fx.hello, fx.sample());
  const actions = new SessionActions({
    sessionContext: ctx.asContext,
    bridge: () => bridge,
    host: new FakeHost(),
    ticks,
    widgetId: 'notebook-1',
    retryDelayMs: 1
  });
  made.push(actions);
  ctx.setStatus('idle');
  return { ctx, kernel, actions, ticks, bridge };
}

/** Cell `cell` raises an OOM whose checklist is `payload`, and ends. */
async function oomInCell(t: ISetup, cell: string, payload: IOomPayload): Promise<void> {
  t.kernel.oom = payload;
  t.ctx.emitIopub('status', cell, { execution_state: 'busy' });
  t.kernel.aborting = true;
  t.ctx.emitIopub('error', cell, { ename: 'OutOfMemoryError', evalue: EVALUE, traceback: [] });
  t.kernel.aborting = false;
  t.ctx.emitIopub('status', cell, { execution_state: 'idle' });
  await flush();
  expect(t.actions.oomRun?.phase).toBe('ready');
}

let container: HTMLDivElement;
let root: Root;

beforeEach(() => {
  container = document.createElement('div');
  document.body.appendChild(container);
  root = createRoot(container);
});

afterEach(() => {
  act(() => root.unmount());
  container.remove();
  while (made.length) {
    made.pop()?.dispose();
  }
  jest.useRealTimers();
});

const manager: IGpuMemActions = {
  changed: new Signal<IGpuMemActions, void>({} as IGpuMemActions),
  sessionChanged: new Signal<IGpuMemActions, ISessionActions>({} as IGpuMemActions),
  current: null,
  ticks: new TickStore(null),
  forWidget: () => null,
  labelKernel: () => null,
  canShutDownKernel: () => false,
  shutDownKernel: async () => false
};

function renderPanel(
  actions: SessionActions,
  copy: (text: string) => void = () => undefined
): HTMLDivElement {
  act(() =>
    root.render(
      <ActionsSection actions={actions} manager={manager} unit="GiB" trans={untranslated} onCopy={copy} />
    )
  );
  return container;
}

function button(node: ParentNode, text: string): HTMLButtonElement {
  const found = [...node.querySelectorAll('button')].find(b => b.textContent === text);
  if (!found) {
    throw new Error(`no button "${text}"`);
  }
  return found;
}

describe('ticks belong to one OOM occurrence', () => {
  it('a new OOM after a restart starts with no ticks; the old one keeps its own', async () => {
    const t = setup();
    await oomInCell(t, 'cell-1', oomOf('first'));
    const clearStep = t.actions.oomRun!.payload!.steps.find(s => s.id === 'clear')!;
    await t.actions.runStep(clearStep); // the panel's "Clear GPU memory" step: ticked once it reported
    t.actions.setTick('batch-size', true);
    expect([...t.actions.ticks].sort()).toEqual(['batch-size', 'clear']);

    t.ctx.setStatus('restarting');
    t.ctx.setStatus('idle');
    await oomInCell(t, 'cell-2', oomOf('second'));
    expect(t.actions.oomRun?.payload?.occurrence?.id).toBe('second');
    expect([...t.actions.ticks]).toEqual([]);
    const node = renderPanel(t.actions);
    expect(node.querySelectorAll('.jp-GpuMem-oomStep.jp-mod-ticked')).toHaveLength(0);
    expect(node.querySelector<HTMLInputElement>('[data-step-id="clear"] .jp-GpuMem-oomTick')?.checked).toBe(
      false
    );
    // The first error's ticks are still its own (its cell output still shows them).
    expect([...t.ticks.ticks(occurrenceKey(oomOf('first')))].sort()).toEqual(['batch-size', 'clear']);
  });

  it('a second, different OOM in the same kernel run starts unticked too', async () => {
    const t = setup();
    await oomInCell(t, 'cell-1', oomOf('one'));
    t.actions.setTick('restart', true);
    await oomInCell(t, 'cell-2', oomOf('two'));
    expect([...t.actions.ticks]).toEqual([]);
    expect(t.actions.kernelRun).toBe(0);
  });
});

describe('kernel runs', () => {
  it('counts one new run per restart or death, however many statuses JupyterLab reports', () => {
    const t = setup();
    const runs: number[] = [];
    const status = (s: Parameters<ActionSessionContext['setStatus']>[0]): void => {
      t.ctx.setStatus(s);
      runs.push(t.actions.kernelRun);
    };
    status('busy');
    status('idle');
    // kill -9, as JupyterLab 4.4 reports the server's restart of the process (seen in a real browser): the
    // new process's own 'starting' comes after our reconnect began, before its hello.
    for (const s of [
      'restarting',
      'autorestarting',
      'unknown',
      'busy',
      'starting',
      'busy',
      'idle'
    ] as const) {
      status(s);
    }
    t.bridge.set({ ...fx.hello, pid: 5678, create_time: 1763856000.5 }, fx.sample()); // the new process's hello
    // SessionContext.restartKernel() ends by announcing a "change" to the same kernel: no new run.
    t.ctx.kernelChanged.emit({ name: 'kernel', oldValue: t.kernel, newValue: t.kernel });
    runs.push(t.actions.kernelRun);
    // Another client restarted it: JupyterLab only sees 'starting'.
    status('starting');
    status('idle');
    status('dead');
    expect(runs).toEqual([0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3]);
    // Another kernel for the notebook is another run too.
    t.ctx.changeKernel(new FakeKernel('k2'));
    expect(t.actions.kernelRun).toBe(4);
  });

  it('the start-up of the first kernel is no restart', () => {
    const kernel = new Kernel();
    const ctx = new ActionSessionContext(kernel);
    const actions = new SessionActions({
      sessionContext: ctx.asContext,
      bridge: () => null,
      host: new FakeHost(),
      ticks: new TickStore(null),
      widgetId: null
    });
    made.push(actions);
    ctx.setStatus('starting');
    ctx.setStatus('idle');
    expect(actions.kernelRun).toBe(0);
  });
});

describe('cards of an earlier kernel run', () => {
  it('marks the OOM card and the clear report as history, without buttons, after a restart', async () => {
    const t = setup();
    await oomInCell(t, 'cell-1', oomOf('first'));
    await t.actions.clear();
    let node = renderPanel(t.actions);
    expect(node.querySelector('.jp-GpuMem-oom .jp-GpuMem-oomChecklist')).not.toBeNull();
    expect(node.querySelector('.jp-mod-history')).toBeNull();

    t.ctx.setStatus('restarting');
    node = renderPanel(t.actions);
    const oom = node.querySelector('.jp-GpuMem-oom')!;
    expect(oom.classList.contains('jp-mod-history')).toBe(true);
    expect(oom.getAttribute('data-history')).toBe('previous-run');
    expect(oom.querySelector('h3')?.textContent).toBe('CUDA out of memory from an earlier kernel run');
    expect(oom.textContent).toContain('in a kernel process that has ended since');
    // Its figures and buttons described the old process: no checklist, no "Clear GPU memory … frees …".
    expect(oom.querySelector('.jp-GpuMem-oomChecklist, .jp-GpuMem-oomAction, .jp-GpuMem-oomTick')).toBeNull();
    const clear = node.querySelector('.jp-GpuMem-clear')!;
    expect(clear.classList.contains('jp-mod-history')).toBe(true);
    expect(clear.querySelector('.jp-GpuMem-historyLine')?.textContent).toBe(
      'There was no GPU memory to free: CUDA is not initialised in this kernel.'
    );
    expect(clear.querySelector('details .jp-GpuMem-clearReport')).not.toBeNull(); // what it said, folded

    // Dismissed, they are gone; the next OOM of the new run is current again.
    act(() => (oom.querySelector('.jp-GpuMem-dismiss') as HTMLButtonElement).click());
    act(() => (clear.querySelector('.jp-GpuMem-dismiss') as HTMLButtonElement).click());
    node = renderPanel(t.actions);
    expect(node.querySelector('.jp-GpuMem-oom, .jp-GpuMem-clear')).toBeNull();
    t.ctx.setStatus('idle');
    await oomInCell(t, 'cell-2', oomOf('second'));
    node = renderPanel(t.actions);
    expect(node.querySelector('.jp-GpuMem-oom:not(.jp-mod-history) .jp-GpuMem-oomChecklist')).not.toBeNull();
  });

  it('marks a checklist that was still waiting for its cell when the kernel died', async () => {
    const t = setup();
    t.ctx.emitIopub('status', 'cell-1', { execution_state: 'busy' });
    t.ctx.emitIopub('error', 'cell-1', { ename: 'OutOfMemoryError', evalue: EVALUE, traceback: [] });
    await flush();
    t.ctx.setStatus('autorestarting');
    await flush();
    const node = renderPanel(t.actions);
    expect(node.querySelector('.jp-GpuMem-oom.jp-mod-history .jp-GpuMem-historyLine')?.textContent).toBe(
      `OutOfMemoryError: ${EVALUE}`
    );
  });

  it('keeps a restart under way current, and its report after it', async () => {
    const t = setup();
    const host = new FakeHost();
    host.settingsValue = { ...host.settingsValue, confirmRestart: false, restartTimeoutSeconds: 0.01 };
    const actions = new SessionActions({
      sessionContext: t.ctx.asContext,
      bridge: () => null,
      host,
      ticks: t.ticks,
      widgetId: null
    });
    made.push(actions);
    await actions.restartAndFree();
    expect(actions.kernelRun).toBe(1);
    const node = renderPanel(actions);
    expect(node.querySelector('.jp-GpuMem-restart')?.classList.contains('jp-mod-history')).toBe(false);
  });
});

describe('actions answer where the user clicked', () => {
  it('shows the clear started from a step under that step, inline and in the panel', async () => {
    const t = setup();
    await oomInCell(t, 'cell-1', oomOf('first'));
    const key = t.actions.oomKey!;
    const clearStep = t.actions.oomRun!.payload!.steps.find(s => s.id === 'clear')!;
    let release: (value: unknown) => void = () => undefined;
    t.kernel.clearAnswer = new Promise(resolve => (release = resolve));
    t.ctx.setStatus('busy'); // a cell runs: the clear waits behind it

    const running = t.actions.runStep(clearStep, key); // from the inline checklist of this error
    await flush(2);
    expect(stepFeedback(t.actions, key, 'clear', 'GiB', untranslated)).toEqual({
      phase: 'running',
      text: 'Queued: the kernel is busy running a cell; clearing starts when it ends…'
    });
    // Another error's step, and the other steps, say nothing.
    expect(stepFeedback(t.actions, occurrenceKey(oomOf('other')), 'clear', 'GiB', untranslated)).toBeNull();
    expect(stepFeedback(t.actions, key, 'restart', 'GiB', untranslated)).toBeNull();

    t.ctx.setStatus('idle');
    release(answerReply({ ok: true, report: clearCpu() }));
    await running;
    const done = 'There was no GPU memory to free: CUDA is not initialised in this kernel.';
    expect(stepFeedback(t.actions, key, 'clear', 'GiB', untranslated)).toEqual({
      phase: 'done',
      text: `${done} The full report is in the GPU Memory panel.`
    });

    // In the panel: under the step.
    let node = renderPanel(t.actions);
    const line = node.querySelector('.jp-GpuMem-oomStep[data-step-id="clear"] .jp-GpuMem-stepFeedback');
    expect(line?.getAttribute('role')).toBe('status');
    expect(line?.textContent).toContain(done);

    // Inline: the cell output's checklist of the same error, through the inline host.
    const output = document.createElement('div');
    const host: IInlineHost = {
      ticks: t.ticks,
      changed: new Signal<unknown, void>({}),
      pathOf: () => 'train.ipynb',
      run: (_, step, k) => void t.actions.runStep(step, k),
      busy: () => t.actions.busy,
      feedback: (_, k, stepId) => stepFeedback(t.actions, k, stepId, 'GiB', untranslated),
      kernelOf: () => ({ pid: 1234, createTime: 1763855000.5 }),
      labelKernel: () => null,
      copy: () => undefined,
      insertCode: () => undefined
    };
    act(() =>
      root.render(
        <InlineOomChecklist payload={oomOf('first')} trans={untranslated} host={host} node={output} />
      )
    );
    node = container;
    expect(node.querySelector('[data-step-id="clear"] .jp-GpuMem-stepFeedback')?.textContent).toContain(done);
    expect(node.querySelector('[data-step-id="clear"] .jp-GpuMem-oomTick')).toHaveProperty('checked', true);
    // After a restart, it says it was about the earlier kernel run.
    t.ctx.setStatus('restarting');
    t.ctx.setStatus('idle');
    expect(stepFeedback(t.actions, key, 'clear', 'GiB', untranslated)).toEqual({
      phase: 'history',
      text: `In an earlier kernel run: ${done}`
    });
    // A clear from the panel's own button is no step's.
    await t.actions.clear();
    expect(stepFeedback(t.actions, key, 'clear', 'GiB', untranslated)).toBeNull();
  });

  it('says when a clear failed, under the step', async () => {
    const t = setup();
    await oomInCell(t, 'cell-1', oomOf('first'));
    t.kernel.clearAnswer = answerReply({ ok: false, error: 'RuntimeError: boom' });
    await t.actions.runStep(t.actions.oomRun!.payload!.steps[0]);
    expect(stepFeedback(t.actions, t.actions.oomKey!, 'clear', 'GiB', untranslated)).toEqual({
      phase: 'failed',
      text: 'Clearing failed: RuntimeError: boom'
    });
    expect([...t.actions.ticks]).toEqual([]); // it did not do what it says: no tick
  });
});

describe('an inline checklist of an earlier kernel process', () => {
  it('says so above its steps', () => {
    const payload = oomOf('old');
    expect(fromEarlierKernel(payload, { pid: 1234, createTime: 1763855000.5 })).toBe(false);
    expect(fromEarlierKernel(payload, { pid: 5678, createTime: 1763856000 })).toBe(true);
    expect(fromEarlierKernel(payload, { pid: 1234, createTime: 1763859999 })).toBe(true); // PID reused
    expect(fromEarlierKernel(payload, null)).toBe(false); // not connected: cannot tell
    expect(fromEarlierKernel(oom2x(), { pid: 5678, createTime: 1 })).toBe(false); // saved by an older kernel

    const host: IInlineHost = {
      ticks: new TickStore(null),
      changed: new Signal<unknown, void>({}),
      pathOf: () => 'train.ipynb',
      run: () => undefined,
      busy: () => false,
      feedback: () => null,
      kernelOf: () => ({ pid: 5678, createTime: 1763856000 }),
      labelKernel: () => null,
      copy: () => undefined,
      insertCode: () => undefined
    };
    act(() =>
      root.render(
        <InlineOomChecklist
          payload={payload}
          trans={untranslated}
          host={host}
          node={document.createElement('div')}
        />
      )
    );
    const note = container.querySelector('.jp-GpuMem-inlineOom.jp-mod-history .jp-GpuMem-historyNote');
    expect(note?.textContent).toContain('from an earlier kernel run');
    expect(note?.textContent).toContain('(PID 1234)');
    expect(container.querySelector('.jp-GpuMem-oomChecklist')).not.toBeNull(); // ticks and code stay usable
  });
});

describe('copy buttons confirm', () => {
  it('"Copy as Markdown" says "Copied" for a moment, and announces it', async () => {
    jest.useFakeTimers();
    let copied = 0;
    act(() =>
      root.render(
        <OomChecklistView
          payload={oom2x()}
          trans={untranslated}
          ticks={null}
          onAction={null}
          onCopyMarkdown={() => void copied++}
        />
      )
    );
    const copy = container.querySelector<HTMLButtonElement>('.jp-GpuMem-oomCopy')!;
    const status = container.querySelector('.jp-GpuMem-oomFooter [role="status"]')!;
    expect(copy.textContent).toBe('Copy as Markdown');
    expect(status.textContent).toBe('');
    await act(async () => copy.click());
    expect(copied).toBe(1);
    expect(copy.textContent).toBe('Copied');
    expect(status.getAttribute('aria-live')).toBe('polite');
    expect(status.textContent).toBe('Copied to the clipboard');
    act(() => jest.advanceTimersByTime(COPIED_MS));
    expect(copy.textContent).toBe('Copy as Markdown');
    expect(status.textContent).toBe('');
  });

  it('says when copying failed', async () => {
    act(() =>
      root.render(
        <OomChecklistView
          payload={oom2x()}
          trans={untranslated}
          ticks={null}
          onAction={null}
          onCopyMarkdown={() => Promise.reject(new Error('denied'))}
        />
      )
    );
    const copy = container.querySelector<HTMLButtonElement>('.jp-GpuMem-oomCopy')!;
    await act(async () => copy.click());
    expect(copy.textContent).toBe('Copy failed');
    expect(container.querySelector('[role="status"]')?.textContent).toBe('Could not copy to the clipboard');
  });

  it('the panel copies the checklist it shows, with its ticks', async () => {
    const t = setup();
    await oomInCell(t, 'cell-1', oomOf('first'));
    t.actions.setTick('clear', true);
    const copied: string[] = [];
    const node = renderPanel(t.actions, text => copied.push(text));
    await act(async () => button(node, 'Copy as Markdown').click());
    expect(copied[0]).toContain('[x] **Clear GPU memory**');
    expect(button(node, 'Copied')).toBeTruthy();
  });
});
