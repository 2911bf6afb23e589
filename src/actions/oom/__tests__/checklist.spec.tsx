/**
 * The checklist, the clear and restart reports, the panel's action part and the inline output view, rendered
 * with React in jsdom: kernel strings (even hostile ones) stay text, buttons do what they say and are
 * disabled while a clear or restart runs.
 */
import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { ActionsSection } from '../../view';
import { OomChecklistView } from '../checklist';
import { ClearReport } from '../../clear/report';
import { untranslated } from '../../../ui/i18n';
import type { IInlineHost } from '../../../tokens';
import { GpuMemOutputView } from '../../../outputs/outputview';
import { CLEAR_MIME, type IOomPayload, type IOomStep, OOM_MIME } from '../../../wire/protocol';
import { RestartReport } from '../../restart/report';
import type { IGpuMemActions, IRestartRun, ISessionActions } from '../../../tokens';
import { occurrenceKey, TickStore } from '../../ticks';
import { oomPayload } from '../../../wire/generated/validators';

import { GIB, MIB, OTHER_KERNEL_ID } from '../../../__tests__/fixtures';
import { clearCpu, clearGpu, clearHoldersCpu, oom2x, oomWithOtherKernel } from '../../../__tests__/payloads';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const HOSTILE = '<img src=x onerror="window.__gpumemXss=1"><script>window.__gpumemXss=2</script><b>bold</b>';

let container: HTMLDivElement;
let root: Root;

function render(element: JSX.Element): HTMLDivElement {
  act(() => root.render(element));
  return container;
}

function button(node: ParentNode, text: string): HTMLButtonElement {
  const found = [...node.querySelectorAll('button')].find(b => b.textContent === text);
  if (!found) {
    throw new Error(`no button "${text}"`);
  }
  return found;
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

function hostile(): IOomPayload {
  const p = oomWithOtherKernel();
  p.summary = [HOSTILE, 'PyTorch: <i>13.90 GiB</i> allocated'];
  p.diagnosis.notes = [HOSTILE];
  p.steps[0].title = HOSTILE;
  p.steps[0].detail = `</p>${HOSTILE}`;
  p.steps[5].code = `print("${HOSTILE}")\n</code></pre><b>x</b>`;
  return p;
}

describe('OomChecklistView', () => {
  it('renders every kernel string as text', () => {
    const node = render(
      <OomChecklistView
        payload={hostile()}
        trans={untranslated}
        ticks={new Set()}
        onAction={() => undefined}
      />
    );
    expect(node.querySelector('img, script, b, i')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-oomHeadline')?.textContent).toBe(HOSTILE);
    expect(
      node.querySelector('.jp-GpuMem-oomStep[data-step-id="clear"] .jp-GpuMem-oomStepTitle')?.textContent
    ).toBe(HOSTILE);
    expect(node.querySelector('.jp-GpuMem-oomDiagnosis')?.textContent).toContain(HOSTILE);
    expect(
      node.querySelector('.jp-GpuMem-oomStep[data-step-id="grad-accumulation"] code')?.textContent
    ).toContain('</code></pre><b>x</b>');
    expect((window as { __gpumemXss?: number }).__gpumemXss).toBeUndefined();
  });

  it('lists the steps in the payload’s order, each with its button', () => {
    const steps: IOomStep[] = [];
    const node = render(
      <OomChecklistView
        payload={oomWithOtherKernel()}
        trans={untranslated}
        ticks={new Set(['restart'])}
        onAction={step => steps.push(step)}
        kernelLabel={id => (id === OTHER_KERNEL_ID ? 'notebook: experiments/big.ipynb' : null)}
      />
    );
    const items = [...node.querySelectorAll('.jp-GpuMem-oomStep')];
    expect(items.map(i => i.getAttribute('data-step-id'))).toEqual(oomWithOtherKernel().steps.map(s => s.id));
    expect(items[1].classList.contains('jp-mod-ticked')).toBe(true);
    expect((items[1].querySelector('.jp-GpuMem-oomTick') as HTMLInputElement).checked).toBe(true);
    expect(items[2].querySelector('.jp-GpuMem-oomStepWhere')?.textContent).toBe(
      'notebook: experiments/big.ipynb'
    );
    act(() => button(items[2], 'Shut down kernel').click());
    act(() => button(node, 'Insert at top and restart').click());
    expect(steps.map(s => s.action)).toEqual(['shutdown-kernel', 'insert-env-cell-and-restart']);
    // Advice-only steps have no button.
    expect(node.querySelector('.jp-GpuMem-oomStep[data-step-id="batch-size"] button')).toBeNull();
  });

  it('disables clear and restart while one runs, and a kernel of another server', () => {
    const node = render(
      <OomChecklistView
        payload={oomWithOtherKernel()}
        trans={untranslated}
        ticks={null}
        onAction={() => undefined}
        busy={true}
        kernelLabel={() => null}
      />
    );
    expect(button(node, 'Clear GPU memory').disabled).toBe(true);
    expect(button(node, 'Restart and free').disabled).toBe(true);
    expect(button(node, 'Shut down kernel').disabled).toBe(true);
    expect(button(node, 'Insert at top and restart').disabled).toBe(true);
    expect(
      [...node.querySelectorAll('button')].filter(b => b.textContent === 'Insert cell below' && !b.disabled)
    ).toHaveLength(3);
    expect(node.querySelector('.jp-GpuMem-oomTick')).toBeNull();
  });

  it('shows a step’s fit-advice figure as text, and the step that computes it as a button', () => {
    const payload = oom2x();
    const amp = payload.steps.find(s => s.id === 'mixed-precision');
    if (amp === undefined) {
      throw new Error('no mixed-precision step');
    }
    amp.figure = {
      key: 'amp-bf16',
      flags: '--amp bf16',
      batch: 8,
      peak_bytes: 12 * GIB,
      peak_allocated_bytes: 11 * GIB,
      maximum: 12,
      status: 'fits',
      fits: true,
      source: 'computed',
      text: `AMP bf16: peak 12.00 GiB → fits at batch 8 (up to 12) ${HOSTILE}`
    };
    payload.steps.unshift({
      id: 'fit-advice',
      title: 'Compute what makes it fit',
      detail: 'Traces `model` at batch 32 with each lever.',
      action: 'insert-cell',
      kernel_id: null,
      code: '%gpumem analyze model -b 32 --advise',
      not_applicable: null,
      figure: null
    });
    const steps: IOomStep[] = [];
    const node = render(
      <OomChecklistView payload={payload} trans={untranslated} ticks={null} onAction={s => steps.push(s)} />
    );
    const figure = node.querySelector(
      '.jp-GpuMem-oomStep[data-step-id="mixed-precision"] .jp-GpuMem-oomStepFigure'
    );
    expect(figure?.textContent).toBe(`AMP bf16: peak 12.00 GiB → fits at batch 8 (up to 12) ${HOSTILE}`);
    expect(figure?.getAttribute('data-fits')).toBe('yes');
    expect(node.querySelector('img, script, b')).toBeNull();
    expect(node.querySelectorAll('.jp-GpuMem-oomStepFigure')).toHaveLength(1);
    const first = node.querySelector('.jp-GpuMem-oomStep');
    expect(first?.getAttribute('data-step-id')).toBe('fit-advice');
    act(() => button(first as HTMLElement, 'Insert cell below').click());
    expect(steps.map(s => s.code)).toEqual(['%gpumem analyze model -b 32 --advise']);
    // The browser's check of the payload (generated from oom.schema.json) takes the figure, and only as written.
    expect(oomPayload(payload, 'oom')).toBeNull();
    amp.figure = { ...amp.figure, status: 'maybe' as 'fits' };
    expect(oomPayload(payload, 'oom')).not.toBeNull();
  });

  it('shows no action buttons without a way to run them', () => {
    const node = render(
      <OomChecklistView payload={oom2x()} trans={untranslated} ticks={null} onAction={null} />
    );
    expect(node.querySelector('.jp-GpuMem-oomAction')).toBeNull();
    expect(node.querySelectorAll('.jp-GpuMem-oomCode')).toHaveLength(4);
  });

  it('ticks, copies and resets', () => {
    const ticks: Array<[string, boolean]> = [];
    let copied = 0;
    let reset = 0;
    const node = render(
      <OomChecklistView
        payload={oom2x()}
        trans={untranslated}
        ticks={new Set(['clear'])}
        onTick={(id, on) => ticks.push([id, on])}
        onAction={() => undefined}
        onCopyMarkdown={() => copied++}
        onResetTicks={() => reset++}
      />
    );
    act(() =>
      (node.querySelector('[data-step-id="batch-size"] .jp-GpuMem-oomTick') as HTMLInputElement).click()
    );
    act(() => (node.querySelector('[data-step-id="clear"] .jp-GpuMem-oomTick') as HTMLInputElement).click());
    act(() => button(node, 'Copy as Markdown').click());
    act(() => button(node, 'Untick all').click());
    expect(ticks).toEqual([
      ['batch-size', true],
      ['clear', false]
    ]);
    expect([copied, reset]).toEqual([1, 1]);
  });
});

describe('ClearReport', () => {
  it('shows what was reclaimed per device, what was dropped and what still holds memory', () => {
    const node = render(<ClearReport report={clearGpu()} unit="GiB" trans={untranslated} />);
    const row = node.querySelector('.jp-GpuMem-clearDevices tbody tr');
    expect([...(row?.querySelectorAll('td') ?? [])].map(td => td.textContent)).toEqual([
      'cuda:0',
      '8.00 GiB → 4.00 GiB',
      '8.50 GiB → 4.50 GiB',
      '4.00 GiB'
    ]);
    expect(node.querySelector('.jp-GpuMem-clearDropped')?.textContent).toBe(
      'Dropped: the last error’s traceback (7 frames), which kept 2.00 GiB alive; 1 output-cache entry. ' +
        'gc.collect() freed 31 objects. PyTorch’s cache was returned to the driver.'
    );
    const holders = [...node.querySelectorAll('.jp-GpuMem-stillHolding tbody tr')].map(tr => tr.textContent);
    expect(holders).toEqual([
      'modelResNet (161 tensors)3.00 GiB',
      'batchTensor [64, 3, 224, 224] float32512 MiB'
    ]);
    expect(node.textContent).toContain('Still holding GPU memory');
    expect(node.textContent).toContain('and 2 more');
    expect(node.querySelector('.jp-GpuMem-outputCache')?.textContent).toContain('Out[3]');
  });

  it('says there was no GPU memory to free on a CPU-only kernel, with the host-side list', () => {
    const node = render(<ClearReport report={clearHoldersCpu()} unit="GiB" trans={untranslated} />);
    expect(node.querySelector('.jp-GpuMem-clearNoGpu')?.textContent).toBe(
      'There was no GPU memory to free: CUDA is not initialised in this kernel.'
    );
    expect(node.textContent).toContain('Still holding memory (host)');
    expect(node.querySelector('.jp-GpuMem-stillHolding tbody tr')?.textContent).toBe(
      'xTensor [10] float3240 B'
    );
    expect(node.querySelector('.jp-GpuMem-notes')?.textContent).toContain('CUDA is not initialised');
    const dropped = render(<ClearReport report={clearCpu()} unit="GiB" trans={untranslated} />);
    expect(dropped.querySelector('.jp-GpuMem-clearDropped')?.textContent).toContain(
      'Dropped: the last error’s traceback (2 frames).'
    );
  });

  it("says the kernel's RSS once when only one side of the clear measured it, with no arrow to n/a", () => {
    const report = clearGpu();
    report.host_rss_after = null;
    const node = render(<ClearReport report={report} unit="GiB" trans={untranslated} />);
    expect(node.querySelector('.jp-GpuMem-clearHost')?.textContent).toBe('Kernel RSS 3.00 GiB');
  });

  it('renders hostile names as text', () => {
    const report = clearGpu();
    report.holders[0].name = HOSTILE;
    report.notes = [HOSTILE];
    const node = render(<ClearReport report={report} unit="GiB" trans={untranslated} />);
    expect(node.querySelector('img, script, b')).toBeNull();
    expect(node.textContent).toContain(HOSTILE);
  });
});

describe('RestartReport', () => {
  const base: IRestartRun = {
    phase: 'waiting',
    clearOutputs: false,
    report: null,
    error: null,
    note: null,
    origin: null,
    kernelRun: 0
  };

  it('shows progress, then the report with leftovers to end', () => {
    let node = render(<RestartReport run={base} unit="GiB" trans={untranslated} onEnd={() => undefined} />);
    expect(node.textContent).toBe('Waiting for the GPU driver to release the old kernel…');
    const ended: number[] = [];
    const run: IRestartRun = {
      ...base,
      phase: 'done',
      report: {
        outcome: 'freed',
        oldPid: 1234,
        newPid: 5678,
        devices: [
          {
            label: 'cuda:0',
            name: 'RTX',
            before: 6 * GIB + 512 * MIB,
            after: 0,
            freed: 6 * GIB + 512 * MIB,
            deviceUsedBefore: 12 * GIB,
            deviceUsedAfter: 5 * GIB
          }
        ],
        totalFreed: 6 * GIB + 512 * MIB,
        noGpuReason: null,
        waitedMs: 2400,
        timeoutMs: 30000,
        clearedOutputs: true,
        leftovers: [
          { pid: 4321, createTime: 1, name: HOSTILE, gpuUsed: 512 * MIB },
          { pid: 4322, createTime: 2, name: 'python', gpuUsed: 0, ended: true },
          {
            pid: 4323,
            createTime: 3,
            name: 'python',
            gpuUsed: null,
            refused: 'permission denied (another user’s process)'
          }
        ],
        childrenBefore: 3,
        childrenProblem: null,
        oldKernelAlive: null
      }
    };
    node = render(<RestartReport run={run} unit="GiB" trans={untranslated} onEnd={pid => ended.push(pid)} />);
    expect(node.querySelector('.jp-GpuMem-restartHeadline')?.textContent).toBe(
      'Restarted: freed 6.50 GiB of GPU memory.'
    );
    expect([...node.querySelectorAll('.jp-GpuMem-restartDevices td')].map(td => td.textContent)).toEqual([
      'cuda:0',
      '6.50 GiB',
      '0.00 GiB',
      '6.50 GiB'
    ]);
    expect(node.textContent).toContain(
      'Old kernel: PID 1234. New kernel: PID 5678. Took 2 s. Outputs cleared.'
    );
    expect(node.querySelector('img, script, b')).toBeNull();
    const ends = node.querySelectorAll('.jp-GpuMem-end');
    expect(ends).toHaveLength(2);
    act(() => (ends[0] as HTMLButtonElement).click());
    expect(ended).toEqual([4321]);
    expect(node.querySelector('[data-pid="4322"]')?.textContent).toContain('ended');
    expect(node.querySelector('[data-pid="4323"]')?.textContent).toContain('permission denied');
  });

  it('after a timeout, says whether the old kernel still runs, and what to do next', () => {
    const run: IRestartRun = {
      ...base,
      phase: 'done',
      note: 'Run the cell inserted at the top of the notebook first.',
      report: {
        outcome: 'timeout',
        oldPid: 1234,
        newPid: 5678,
        devices: [],
        totalFreed: null,
        noGpuReason: null,
        waitedMs: 30000,
        timeoutMs: 30000,
        clearedOutputs: false,
        leftovers: [],
        childrenBefore: 0,
        childrenProblem: null,
        oldKernelAlive: true
      }
    };
    const node = render(<RestartReport run={run} unit="GiB" trans={untranslated} onEnd={() => undefined} />);
    expect(node.querySelector('.jp-GpuMem-restartHeadline')?.textContent).toBe(
      'Restarted, but after 30 s the GPU driver still lists the old kernel (PID 1234).'
    );
    expect(node.querySelector('.jp-GpuMem-restartOldKernel')?.textContent).toBe(
      'The old kernel process (PID 1234) is still running.'
    );
    expect(node.querySelector('.jp-GpuMem-restartNote')?.textContent).toBe(
      'Run the cell inserted at the top of the notebook first.'
    );
  });

  it('reports a machine without GPU cleanly, and failures', () => {
    const run: IRestartRun = {
      ...base,
      phase: 'done',
      report: {
        outcome: 'no-gpu',
        oldPid: 1234,
        newPid: 5678,
        devices: [],
        totalFreed: null,
        noGpuReason: 'NVIDIA driver library (libnvidia-ml.so.1) not found',
        waitedMs: 1200,
        timeoutMs: 30000,
        clearedOutputs: false,
        leftovers: [],
        childrenBefore: 0,
        childrenProblem: null,
        oldKernelAlive: null
      }
    };
    let node = render(<RestartReport run={run} unit="GiB" trans={untranslated} onEnd={() => undefined} />);
    expect(node.querySelector('.jp-GpuMem-restartHeadline')?.textContent).toBe(
      'Restarted: no GPU memory to free (no NVIDIA GPU visible).'
    );
    expect(node.querySelector('table')).toBeNull();
    node = render(
      <RestartReport
        run={{ ...base, phase: 'failed', error: 'Kernel is dead' }}
        unit="GiB"
        trans={untranslated}
        onEnd={() => undefined}
      />
    );
    expect(node.textContent).toBe('Restart and free failed: Kernel is dead');
  });
});

/** The actions of one notebook with fixed state. */
function stubActions(over: Partial<ISessionActions> = {}): ISessionActions & { calls: string[] } {
  const calls: string[] = [];
  const stub = {
    calls,
    clearRun: null,
    restartRun: null,
    oomRun: null,
    busy: false,
    clearing: false,
    restarting: false,
    kernelBusy: false,
    kernelRun: 0,
    oomKey: null,
    ticks: new Set<string>(),
    clear: async () => void calls.push('clear'),
    restartAndFree: async () => void calls.push('restart'),
    runStep: async (step: IOomStep) => void calls.push(`step ${step.id}`),
    setTick: (id: string, on: boolean) => void calls.push(`tick ${id} ${on}`),
    resetTicks: () => void calls.push('reset'),
    dismissOom: () => void calls.push('dismiss oom'),
    dismissReport: (which: string) => void calls.push(`dismiss ${which}`),
    endLeftover: async (pid: number) => void calls.push(`end ${pid}`),
    ...over
  };
  return stub as unknown as ISessionActions & { calls: string[] };
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

describe('ActionsSection', () => {
  it('runs clear and restart', () => {
    const actions = stubActions();
    const node = render(
      <ActionsSection
        actions={actions}
        manager={manager}
        unit="GiB"
        trans={untranslated}
        onCopy={() => undefined}
      />
    );
    act(() => button(node, 'Clear GPU memory').click());
    act(() => button(node, 'Restart and free').click());
    expect(actions.calls).toEqual(['clear', 'restart']);
    expect(node.querySelector('.jp-GpuMem-oom')).toBeNull();
  });

  it('says "queued: kernel busy" and cannot be pressed twice while the kernel runs a cell', () => {
    const actions = stubActions({
      clearRun: { phase: 'running', report: null, error: null, origin: null, kernelRun: 0 },
      busy: true,
      clearing: true,
      kernelBusy: true
    });
    const node = render(
      <ActionsSection
        actions={actions}
        manager={manager}
        unit="GiB"
        trans={untranslated}
        onCopy={() => undefined}
      />
    );
    expect(node.querySelector('.jp-GpuMem-actionStatus')?.textContent).toBe('queued: kernel busy');
    expect(node.querySelector<HTMLButtonElement>('.jp-GpuMem-clearButton')?.disabled).toBe(true);
    expect(node.querySelector<HTMLButtonElement>('.jp-GpuMem-restartButton')?.disabled).toBe(true);
  });

  it('shows the checklist and copies it as Markdown with the ticks', () => {
    const copied: string[] = [];
    const actions = stubActions({
      ticks: new Set(['clear']),
      oomRun: {
        phase: 'ready',
        error: { ename: 'OutOfMemoryError', evalue: 'CUDA out of memory.', parentId: 'c' },
        payload: oom2x(),
        problem: null,
        kernelRun: 0
      }
    });
    const node = render(
      <ActionsSection
        actions={actions}
        manager={manager}
        unit="GiB"
        trans={untranslated}
        onCopy={t => copied.push(t)}
      />
    );
    const oom = node.querySelector('.jp-GpuMem-oom[data-phase="ready"]');
    // The family is said once: the heading names it, the summary's first line goes on from it.
    expect(oom?.querySelector('h3')?.textContent).toBe("CUDA out of memory (PyTorch's allocator)");
    expect(oom?.querySelector('.jp-GpuMem-oomFamily')).toBeNull();
    expect(oom?.querySelector('.jp-GpuMem-oomHeadline')?.textContent).toMatch(/^On GPU 0: tried to allocate/);
    expect(oom?.textContent?.match(/out of memory/gi)).toHaveLength(1);
    act(() => button(oom!, 'Copy as Markdown').click());
    expect(copied[0]).toContain('1. [x] **Clear GPU memory**');
    act(() => button(oom!, 'Insert cell below').click());
    act(() => (oom!.querySelector('.jp-GpuMem-dismiss') as HTMLButtonElement).click());
    expect(actions.calls).toEqual(['step grad-accumulation', 'dismiss oom']);
  });

  it('says why there is no checklist', () => {
    const actions = stubActions({
      oomRun: {
        phase: 'failed',
        error: { ename: 'RuntimeError', evalue: 'CUDA out of memory.', parentId: 'c' },
        payload: null,
        problem: "jupyterlab-gpumem is not installed (or too old) in this kernel's environment",
        kernelRun: 0
      }
    });
    const node = render(
      <ActionsSection
        actions={actions}
        manager={manager}
        unit="GiB"
        trans={untranslated}
        onCopy={() => undefined}
      />
    );
    expect(node.querySelector('.jp-GpuMem-oom')?.textContent).toContain('RuntimeError: CUDA out of memory.');
    expect(node.querySelector('.jp-GpuMem-oom .jp-GpuMem-bad')?.textContent).toContain('not installed');
  });
});

describe('GpuMemOutputView (the MIME renderer’s content)', () => {
  const node = document.createElement('div');

  it('shows one line for a payload that does not fit, not a crash', () => {
    const bad = { ...oom2x(), steps: 'all of them' };
    let view = render(
      <GpuMemOutputView mimeType={OOM_MIME} data={bad} trans={untranslated} host={null} node={node} />
    );
    expect(view.querySelectorAll('.jp-GpuMem-invalid')).toHaveLength(1);
    expect(view.textContent).toBe(
      'This gpumem output cannot be shown by this version of the extension (oom.steps: expected an array, got the string "all of them").'
    );
    view = render(
      <GpuMemOutputView mimeType={CLEAR_MIME} data={HOSTILE} trans={untranslated} host={null} node={node} />
    );
    expect(view.querySelector('.jp-GpuMem-invalid')).not.toBeNull();
    expect(view.querySelector('img, script, b')).toBeNull();
  });

  it('renders the clear report and, without the actions plugin, the checklist without buttons', () => {
    let view = render(
      <GpuMemOutputView
        mimeType={CLEAR_MIME}
        data={clearGpu()}
        trans={untranslated}
        host={null}
        node={node}
      />
    );
    expect(view.querySelector('.jp-GpuMem-clearReport')).not.toBeNull();
    view = render(
      <GpuMemOutputView mimeType={OOM_MIME} data={oom2x()} trans={untranslated} host={null} node={node} />
    );
    expect(view.querySelector('.jp-GpuMem-oomChecklist')).not.toBeNull();
    expect(view.querySelector('.jp-GpuMem-oomAction, .jp-GpuMem-oomTick, .jp-GpuMem-oomCopy')).toBeNull();
  });

  it('acts on the notebook that holds the output, with its ticks', () => {
    const ticks = new TickStore(null);
    const key = occurrenceKey(oom2x());
    ticks.set(key, 'restart', true);
    const ran: string[] = [];
    const copied: string[] = [];
    const host: IInlineHost = {
      ticks,
      changed: new Signal<unknown, void>({}),
      pathOf: n => (n === node ? 'train.ipynb' : null),
      run: (n, step, k) => ran.push(`${n === node} ${step.id} ${k === key}`),
      busy: () => false,
      feedback: () => null,
      kernelOf: () => null,
      labelKernel: () => null,
      copy: text => copied.push(text),
      insertCode: () => undefined
    };
    const view = render(
      <GpuMemOutputView mimeType={OOM_MIME} data={oom2x()} trans={untranslated} host={host} node={node} />
    );
    expect(
      (view.querySelector('[data-step-id="restart"] .jp-GpuMem-oomTick') as HTMLInputElement).checked
    ).toBe(true);
    act(() => button(view, 'Clear GPU memory').click());
    act(() => (view.querySelector('[data-step-id="clear"] .jp-GpuMem-oomTick') as HTMLInputElement).click());
    act(() => button(view, 'Copy as Markdown').click());
    expect(ran).toEqual(['true clear true']);
    expect([...ticks.ticks(key)].sort()).toEqual(['clear', 'restart']);
    expect(copied[0]).toContain('2. [x] **Restart the kernel and free its memory**');
  });
});

describe('an out-of-memory error in evaluation', () => {
  it('shows the evidence as text and the evaluation batch first, in the kernel’s order', () => {
    const p = oom2x();
    p.diagnosis.evaluation = `\`${HOSTILE}\` is decorated with \`@torch.no_grad()\` (In [3], line 2)`;
    const first = p.steps.find(s => s.id === 'eval-batch-size') as IOomStep;
    p.steps = [first, ...p.steps.filter(s => s !== first)];
    const node = render(<OomChecklistView payload={p} trans={untranslated} ticks={null} onAction={null} />);
    expect(node.querySelector('img, script, b')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-oomDiagnosis')?.textContent).toContain(
      `In evaluation (gradients off): \`${HOSTILE}\` is decorated with`
    );
    expect(node.querySelector('.jp-GpuMem-oomStep')?.getAttribute('data-step-id')).toBe('eval-batch-size');
    expect(node.querySelector('.jp-GpuMem-oomStepsTitle')?.textContent).toBe(
      'Checklist (likely cause first, then cheapest)'
    );
    expect((window as { __gpumemXss?: number }).__gpumemXss).toBeUndefined();
  });
});

describe('the checklist header', () => {
  it('names the family of the out-of-memory error', () => {
    const p = oomWithOtherKernel();
    p.info.family = 'cudnn';
    const node = render(<OomChecklistView payload={p} trans={untranslated} ticks={null} onAction={null} />);
    const header = node.querySelector('.jp-GpuMem-oomSummary > .jp-GpuMem-oomFamily');
    expect(header?.textContent).toBe('cuDNN could not allocate its workspace (GPU full)');
    expect(node.querySelector('.jp-GpuMem-oomChecklist')?.getAttribute('data-family')).toBe('cudnn');
  });
});
