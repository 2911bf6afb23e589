/**
 * The panel's cards have a lifecycle: one notebook's actions against a fake kernel, rendered with React in
 * jsdom.
 *
 * - an OOM card is marked resolved when a later run of the failing cell (the same cell id) ends without error,
 *   and folds;
 * - any clear (the panel's button, `%gpumem clear` in a cell) ticks the checklist's clear step with what it freed;
 * - older cards fold into one "Earlier (N)" list, the newest open (and an OOM checklist still open);
 * - "Restart and free" is red only when there is something to free; without a GPU nothing names a GPU driver.
 */
import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { CLEAR_CALL, LAST_OOM_CALL } from '../../channel/frontend';
import { stepFeedback } from '../feedback';
import { RestartReport } from '../restart/report';
import { SessionActions } from '../sessionactions';
import { TickStore } from '../ticks';
import { ActionBar, ActionsSection, cardLayout } from '../view';
import { untranslated } from '../../ui/i18n';
import type { IGpuMemActions, ISessionActions } from '../../tokens';
import { CLEAR_MIME, type IClearPayload, type IOomPayload } from '../../wire/protocol';
import { ActionSessionContext, FakeBridge, FakeHost, flush } from '../../__tests__/actionfakes';
import { answerReply, FakeKernel } from '../../__tests__/fakes';
import { MIB } from '../../__tests__/fixtures';
import * as fx from '../../__tests__/fixtures';
import { clearCpu, oom2x } from '../../__tests__/payloads';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const EVALUE = 'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB.';

/** A clear on a CPU kernel right after the error: the traceback alone kept a 128 MiB tensor alive. */
function clearFreeing128(): IClearPayload {
  const report = clearCpu();
  report.traceback_freed = {
    name: 'traceback',
    kind: 'traceback',
    type_name: 'traceback',
    bytes: 128 * MIB,
    by_device: { cpu: 128 * MIB },
    tensors: 1,
    shape: null,
    dtype: null
  };
  return report;
}

/** The 2.x checklist of an error whose traceback keeps one 128 MiB tensor alive. */
function oomKeeping128(): IOomPayload {
  const payload = oom2x();
  payload.diagnosis.traceback = { frames: 2, tensors: 1, bytes: 128 * MIB, by_device: { cpu: 128 * MIB } };
  return payload;
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
        return answerReply({ ok: true, report: this.clearReport });
      }
      return answerReply({ ok: true, oom: null });
    });
  }

  aborting = false;
  oom: IOomPayload | null = null;
  clearReport: IClearPayload = clearFreeing128();
}

interface ISetup {
  ctx: ActionSessionContext;
  kernel: Kernel;
  actions: SessionActions;
  host: FakeHost;
}

const made: SessionActions[] = [];
let msgs = 0;

function setup(): ISetup {
  const kernel = new Kernel();
  const ctx = new ActionSessionContext(kernel);
  const host = new FakeHost();
  host.settingsValue = { ...host.settingsValue, confirmRestart: false, restartTimeoutSeconds: 0.01 };
  const bridge = new FakeBridge(fx.hello, fx.sample());
  const actions = new SessionActions({
    sessionContext: ctx.asContext,
    bridge: () => bridge,
    host,
    ticks: new TickStore(null),
    widgetId: 'notebook-1',
    retryDelayMs: 1
  });
  made.push(actions);
  ctx.setStatus('idle');
  return { ctx, kernel, actions, host };
}

/**
 * The user runs cell `cellId` (In [`count`]): JupyterLab sends the request naming the cell, the kernel
 * broadcasts its input, then an OOM (`outcome` 'oom'), another error, or nothing, and its end.
 */
async function runCell(
  t: ISetup,
  cellId: string,
  count: number,
  outcome: 'ok' | 'oom' | 'error'
): Promise<void> {
  const msgId = `msg-${++msgs}`;
  t.kernel.anyMessage.emit({
    direction: 'send',
    msg: {
      header: { msg_type: 'execute_request', msg_id: msgId },
      metadata: { cellId },
      content: { code: `# ${cellId}`, silent: false }
    }
  });
  t.ctx.emitIopub('status', msgId, { execution_state: 'busy' });
  t.ctx.emitIopub('execute_input', msgId, { code: `# ${cellId}`, execution_count: count });
  if (outcome === 'oom') {
    t.kernel.oom = oomKeeping128();
    t.kernel.aborting = true;
    t.ctx.emitIopub('error', msgId, { ename: 'OutOfMemoryError', evalue: EVALUE, traceback: [] });
    t.kernel.aborting = false;
  } else if (outcome === 'error') {
    t.ctx.emitIopub('error', msgId, { ename: 'NameError', evalue: "name 'x' is not defined", traceback: [] });
  }
  t.ctx.emitIopub('status', msgId, { execution_state: 'idle' });
  await flush();
}

/** `%gpumem clear` in a cell: its report comes as a display_data output. */
function clearInCell(t: ISetup, report: IClearPayload): void {
  t.ctx.emitIopub('display_data', `msg-${++msgs}`, {
    data: { [CLEAR_MIME]: report, 'text/plain': 'Cleared.' },
    metadata: {}
  });
}

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
});

function renderPanel(
  actions: ISessionActions,
  extra: { gpu?: boolean; holdsGpu?: boolean } = {}
): HTMLDivElement {
  act(() =>
    root.render(
      <ActionsSection
        actions={actions}
        manager={manager}
        unit="GiB"
        trans={untranslated}
        onCopy={() => undefined}
        {...extra}
      />
    )
  );
  return container;
}

const RESTART_LOUD = '.jp-GpuMem-restartButton.jp-mod-warn';

describe('an OOM card is resolved by a later run of its cell', () => {
  it('marks the card resolved with the run’s In [N], folds it, and calms "Restart and free"', async () => {
    const t = setup();
    await runCell(t, 'c0', 1, 'oom');
    expect(t.actions.oomRun?.phase).toBe('ready');
    let node = renderPanel(t.actions);
    const card = (): Element => node.querySelector('.jp-GpuMem-oom')!;
    expect(card().getAttribute('data-resolved')).toBe('no');
    expect(node.querySelector(RESTART_LOUD)).not.toBeNull(); // an open checklist: a restart may come to it

    // Another cell ran fine, the failing cell raised something else: not resolved.
    await runCell(t, 'c1', 2, 'ok');
    await runCell(t, 'c0', 3, 'error');
    expect(t.actions.oomRun?.resolved ?? null).toBeNull();

    // The failing cell, fixed, runs without error.
    await runCell(t, 'c0', 4, 'ok');
    expect(t.actions.oomRun?.resolved).toMatchObject({ executionCount: 4 });
    node = renderPanel(t.actions);
    expect(card().getAttribute('data-resolved')).toBe('yes');
    expect(card().querySelector('.jp-GpuMem-oomResolved')?.textContent).toMatch(
      /^Resolved: In \[4\] ran without error at \d{2}:\d{2}(:\d{2})?\.$/
    );
    // Folded, still there to open.
    const fold = card().querySelector('details.jp-GpuMem-cardFold') as HTMLDetailsElement;
    expect(fold.open).toBe(false);
    expect(fold.querySelector('.jp-GpuMem-oomChecklist')).not.toBeNull();
    expect(node.querySelector(RESTART_LOUD)).toBeNull();
  });

  it('a new OOM starts unresolved', async () => {
    const t = setup();
    await runCell(t, 'c0', 1, 'oom');
    await runCell(t, 'c0', 2, 'ok');
    expect(t.actions.oomRun?.resolved).not.toBeNull();
    await runCell(t, 'c1', 3, 'oom');
    expect(t.actions.oomRun?.resolved ?? null).toBeNull();
    await runCell(t, 'c0', 4, 'ok'); // the first error's cell: not this error's
    expect(t.actions.oomRun?.resolved ?? null).toBeNull();
  });
});

describe('a clear ticks the checklist’s clear step with what it freed', () => {
  it('from `%gpumem clear` in a cell, and the resolved line says what was tried', async () => {
    const t = setup();
    await runCell(t, 'c0', 1, 'oom');
    const key = t.actions.oomKey!;
    const diagnosis = (): string =>
      renderPanel(t.actions).querySelector('.jp-GpuMem-oom .jp-GpuMem-oomDiagnosis')?.textContent ?? '';
    expect(diagnosis()).toContain("The failed call's traceback keeps 1 tensor (128 MiB) alive");
    const dryRun = { ...clearFreeing128(), dry_run: true };
    clearInCell(t, dryRun);
    expect(t.actions.ticks.has('clear')).toBe(false); // a dry run changes nothing

    clearInCell(t, clearFreeing128());
    expect(t.actions.ticks.has('clear')).toBe(true);
    expect(stepFeedback(t.actions, key, 'clear', 'GiB', untranslated)).toEqual({
      phase: 'done',
      text: expect.stringMatching(/^Done by the clear at [\d:]+: freed 128 MiB\.$/)
    });
    const node = renderPanel(t.actions);
    const step = node.querySelector('.jp-GpuMem-oom [data-step-id="clear"]')!;
    expect(step.querySelector<HTMLInputElement>('.jp-GpuMem-oomTick')?.checked).toBe(true);
    expect(step.querySelector('.jp-GpuMem-stepFeedback')?.textContent).toContain('freed 128 MiB');
    // What the traceback kept alive is gone: the diagnosis no longer says it keeps it.
    expect(diagnosis()).toContain(
      "The failed call's traceback kept 1 tensor (128 MiB) alive; a clear has dropped it since"
    );

    await runCell(t, 'c0', 2, 'ok');
    renderPanel(t.actions);
    expect(node.querySelector('.jp-GpuMem-oomResolved')?.textContent).toBe(
      'Resolved: In [2] ran without error after Clear GPU memory (freed 128 MiB).'
    );
  });

  it('from the panel’s own button', async () => {
    const t = setup();
    await runCell(t, 'c0', 1, 'oom');
    await t.actions.clear();
    expect(t.actions.ticks.has('clear')).toBe(true);
    expect(t.actions.clearTick?.report.traceback_freed?.bytes).toBe(128 * MIB);
  });

  it('not for the checklist of an earlier kernel run', async () => {
    const t = setup();
    await runCell(t, 'c0', 1, 'oom');
    t.ctx.setStatus('restarting');
    t.ctx.setStatus('idle');
    clearInCell(t, clearFreeing128());
    expect(t.actions.ticks.has('clear')).toBe(false);
  });
});

describe('older cards fold into one "Earlier" list', () => {
  it('after an OOM, a clear and a restart only the restart report is open', async () => {
    const t = setup();
    await runCell(t, 'c0', 1, 'oom');
    await t.actions.clear();
    // The clear is newest, the OOM checklist still open: both open, nothing folded.
    expect(cardLayout(t.actions)).toEqual({ open: ['clear', 'oom'], earlier: [] });
    let node = renderPanel(t.actions);
    expect(node.querySelector('.jp-GpuMem-earlier')).toBeNull();

    await t.actions.restartAndFree();
    expect(t.actions.restartRun?.phase).toBe('done');
    expect(cardLayout(t.actions)).toEqual({ open: ['restart'], earlier: ['clear', 'oom'] });
    node = renderPanel(t.actions);
    const earlier = node.querySelector('details.jp-GpuMem-earlier') as HTMLDetailsElement;
    expect(earlier.open).toBe(false);
    expect(earlier.querySelector(':scope > summary')?.textContent).toBe('Earlier (2)');
    expect(earlier.querySelector('.jp-GpuMem-oom.jp-mod-history')).not.toBeNull();
    expect(earlier.querySelector('.jp-GpuMem-clear.jp-mod-history')).not.toBeNull();
    const restart = node.querySelector('.jp-GpuMem-restart')!;
    expect(earlier.contains(restart)).toBe(false);
    // The OOM is history now: nothing to free on this CPU kernel.
    expect(node.querySelector(RESTART_LOUD)).toBeNull();
  });

  it('a restart the user cancels leaves the cards where they were', async () => {
    const t = setup();
    await t.actions.restartAndFree();
    await runCell(t, 'c0', 1, 'oom');
    await t.actions.clear();
    const before = { open: ['clear', 'oom'], earlier: ['restart'] };
    expect(cardLayout(t.actions)).toEqual(before);
    t.host.settingsValue = { ...t.host.settingsValue, confirmRestart: true };
    t.host.confirmAnswer = false;
    await t.actions.restartAndFree();
    expect(cardLayout(t.actions)).toEqual(before);
  });
});

describe('"Restart and free" says what it does', () => {
  const stub = (): ISessionActions =>
    ({
      busy: false,
      oomRun: null,
      kernelRun: 0,
      clear: async () => true,
      restartAndFree: async () => null
    }) as unknown as ISessionActions;

  it('is red only when this kernel holds GPU memory', () => {
    const render = (holdsGpu: boolean): HTMLDivElement => {
      act(() =>
        root.render(
          <ActionBar
            actions={stub()}
            manager={manager}
            unit="GiB"
            trans={untranslated}
            onCopy={() => undefined}
            holdsGpu={holdsGpu}
          />
        )
      );
      return container;
    };
    expect(render(false).querySelector(RESTART_LOUD)).toBeNull();
    expect(render(true).querySelector(RESTART_LOUD)).not.toBeNull();
  });

  it('names no GPU driver when the kernel sees no GPU', () => {
    act(() =>
      root.render(
        <ActionBar
          actions={stub()}
          manager={manager}
          unit="GiB"
          trans={untranslated}
          onCopy={() => undefined}
          gpu={false}
        />
      )
    );
    expect(container.querySelector('.jp-GpuMem-restartButton')?.getAttribute('title')).not.toContain('GPU');
    const run = {
      phase: 'waiting' as const,
      origin: null,
      clearOutputs: false,
      report: null,
      error: null,
      note: null,
      kernelRun: 0
    };
    act(() =>
      root.render(
        <RestartReport run={run} unit="GiB" trans={untranslated} gpu={false} onEnd={() => undefined} />
      )
    );
    expect(container.textContent).toBe('Waiting for the new kernel…');
    act(() =>
      root.render(<RestartReport run={run} unit="GiB" trans={untranslated} onEnd={() => undefined} />)
    );
    expect(container.textContent).toBe('Waiting for the GPU driver to release the old kernel…');
  });
});
