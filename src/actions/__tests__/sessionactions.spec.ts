/**
 * @jest-environment node
 *
 * One notebook's actions against fakes: the OOM follow-up waits for the failing cell's end (a kernel that,
 * like ipykernel, aborts what is queued behind a failing cell), the clear cannot run twice, and
 * restart-and-free notes the kernel, waits for NVML to drop the old PID, reports, and finds orphans.
 */
import { CLEAR_CALL, LAST_OOM_CALL, oomFromTextCall } from '../../channel/frontend';
import { GIB, MIB } from '../../__tests__/fixtures';
import { type IHello, type ISample, OOM_MIME } from '../../wire/protocol';
import { restartHeadline } from '../restart/report';
import { SessionActions } from '../sessionactions';
import { occurrenceKey, TickStore } from '../ticks';
import { ActionSessionContext, FakeBridge, FakeHost, flush } from '../../__tests__/actionfakes';
import { answerReply, FakeKernel } from '../../__tests__/fakes';
import * as fx from '../../__tests__/fixtures';
import { clearCpu, oom2x } from '../../__tests__/payloads';
import { untranslated } from '../../ui/i18n';

const KILLED = 'DataLoader worker (pid 4242) is killed by signal: Killed.';
const V2 =
  'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB is free.';

/**
 * A kernel that behaves like ipykernel after a failing cell: from the `error` until the cell's `idle`, every
 * execute request is aborted (stop_on_error). Frontend calls are answered by `answers`.
 */
class StrictKernel extends FakeKernel {
  constructor(answers: (expression: string) => unknown) {
    super('k1', 'python', expression => (this.aborting ? { status: 'aborted' } : answers(expression)));
  }

  aborting = false;
}

const actionsList: SessionActions[] = [];

function setup(options: { answers?: (expression: string) => unknown; bridge?: FakeBridge | null } = {}): {
  ctx: ActionSessionContext;
  kernel: StrictKernel;
  host: FakeHost;
  actions: SessionActions;
  bridge: FakeBridge | null;
  ticks: TickStore;
} {
  const kernel = new StrictKernel(options.answers ?? (() => answerReply({ ok: true, oom: null })));
  const ctx = new ActionSessionContext(kernel);
  const host = new FakeHost();
  const bridge = options.bridge === undefined ? new FakeBridge(fx.hello, fx.sample()) : options.bridge;
  const ticks = new TickStore(null);
  const actions = new SessionActions({
    sessionContext: ctx.asContext,
    bridge: () => bridge,
    host,
    ticks,
    widgetId: 'notebook-1',
    retryDelayMs: 1
  });
  actionsList.push(actions);
  return { ctx, kernel, host, actions, bridge, ticks };
}

afterEach(() => {
  while (actionsList.length) {
    actionsList.pop()?.dispose();
  }
});

/** The cell `cell-1` fails with an OOM: busy, the error, then (when `end`) idle. */
function failingCell(ctx: ActionSessionContext, kernel: StrictKernel, end: boolean): void {
  ctx.emitIopub('status', 'cell-1', { execution_state: 'busy' });
  ctx.emitIopub('execute_input', 'cell-1', { code: 'train()' });
  kernel.aborting = true;
  ctx.emitIopub('error', 'cell-1', { ename: 'OutOfMemoryError', evalue: V2, traceback: [] });
  if (end) {
    endCell(ctx, kernel);
  }
}

function endCell(ctx: ActionSessionContext, kernel: StrictKernel): void {
  kernel.aborting = false; // ipykernel stops aborting once the failing request is handled
  ctx.emitIopub('status', 'cell-1', { execution_state: 'idle' });
}

describe('the OOM follow-up', () => {
  it('notifies at once and asks the kernel only after the failing cell’s reply', async () => {
    const { ctx, kernel, host, actions } = setup({
      answers: expression => answerReply({ ok: true, oom: expression === LAST_OOM_CALL ? oom2x() : null })
    });
    failingCell(ctx, kernel, false);
    await flush();
    expect(host.notified).toEqual([{ ename: 'OutOfMemoryError', evalue: V2, parentId: 'cell-1' }]);
    expect(actions.oomRun?.phase).toBe('waiting');
    expect(kernel.executed).toHaveLength(0);

    // Other requests ending change nothing.
    ctx.emitIopub('status', 'other-request', { execution_state: 'idle' });
    ctx.emitIopub('status', 'cell-1', { execution_state: 'busy' });
    await flush();
    expect(kernel.executed).toHaveLength(0);

    endCell(ctx, kernel);
    await flush();
    expect(kernel.expressions).toEqual([LAST_OOM_CALL]);
    expect(actions.oomRun?.phase).toBe('ready');
    expect(actions.oomRun?.payload?.steps[0].id).toBe('clear');
  });

  it('falls back to parsing the error text when the handler did not see it', async () => {
    const { ctx, kernel, actions } = setup({
      answers: expression =>
        answerReply({ ok: true, oom: expression.includes('oom_from_text') ? oom2x() : null })
    });
    failingCell(ctx, kernel, true);
    await flush();
    expect(kernel.expressions).toEqual([LAST_OOM_CALL, oomFromTextCall(`OutOfMemoryError: ${V2}`)]);
    expect(actions.oomRun?.phase).toBe('ready');
  });

  it('says why there is no checklist', async () => {
    const { ctx, kernel, actions } = setup();
    failingCell(ctx, kernel, true);
    await flush();
    expect(actions.oomRun).toMatchObject({
      phase: 'failed',
      problem: 'The kernel could not read this error message.'
    });
  });

  it('gives up waiting when the kernel restarts', async () => {
    const { ctx, kernel, actions } = setup();
    failingCell(ctx, kernel, false);
    ctx.statusChanged.emit('restarting');
    await flush();
    expect(kernel.executed).toHaveLength(0);
    expect(actions.oomRun?.problem).toBe('The kernel restarted before the checklist could be built.');
  });

  it('a newer OOM replaces an older one', async () => {
    const { ctx, kernel, actions, host } = setup({
      answers: () => answerReply({ ok: true, oom: oom2x() })
    });
    failingCell(ctx, kernel, false);
    ctx.emitIopub('error', 'cell-2', { ename: 'RuntimeError', evalue: 'CUDA out of memory.', traceback: [] });
    kernel.aborting = false;
    ctx.emitIopub('status', 'cell-2', { execution_state: 'idle' });
    await flush();
    expect(host.notified.map(e => e.parentId)).toEqual(['cell-1', 'cell-2']);
    expect(actions.oomRun?.error.parentId).toBe('cell-2');
    expect(kernel.expressions).toEqual([LAST_OOM_CALL]);
  });

  it('takes the kernel’s checklist after an error it did not recognise, in the same cell only', async () => {
    const { ctx, kernel, host, actions } = setup({
      answers: expression => answerReply({ ok: true, oom: expression === LAST_OOM_CALL ? oom2x() : null })
    });
    // PyTorch's "exited unexpectedly" raised from a timed-out fetch: the traceback names no signal ...
    const exited = 'DataLoader worker (pid(s) 4242) exited unexpectedly';
    const checklist = (cell: string): void =>
      ctx.emitIopub('display_data', cell, {
        data: { [OOM_MIME]: { info: { exception: 'RuntimeError', message: `${exited}: ${KILLED}` } } },
        metadata: {}
      });
    checklist('cell-0'); // a checklist shown again, with no error in its cell: no notification
    ctx.emitIopub('status', 'cell-1', { execution_state: 'busy' });
    ctx.emitIopub('error', 'cell-1', { ename: 'RuntimeError', evalue: exited, traceback: [] });
    await flush();
    expect(host.notified).toEqual([]);
    // ... the kernel's handler read the worker's exit code: its checklist says what ran out
    checklist('cell-1');
    endCell(ctx, kernel);
    await flush();
    expect(host.notified).toEqual([
      { ename: 'RuntimeError', evalue: `${exited}: ${KILLED}`, parentId: 'cell-1' }
    ]);
    expect(kernel.expressions).toEqual([LAST_OOM_CALL]);
    expect(actions.oomRun?.phase).toBe('ready');
    checklist('cell-1'); // once per error
    await flush();
    expect(host.notified).toHaveLength(1);
  });

  it('ignores errors that are not OOMs', async () => {
    const { ctx, host, actions } = setup();
    ctx.emitIopub('error', 'cell-1', { ename: 'ValueError', evalue: 'bad', traceback: [] });
    await flush();
    expect(host.notified).toEqual([]);
    expect(actions.oomRun).toBeNull();
  });
});

describe('checklist steps', () => {
  it('inserts cells, restarts after the env cell, shuts down kernels, and ticks what ran', async () => {
    const { ctx, host, actions, bridge, ticks } = setup();
    host.settingsValue = { ...host.settingsValue, confirmRestart: false, restartTimeoutSeconds: 0.05 };
    bridge!.answer = action => (action === 'children' ? { children: [] } : { processes: [] });
    const steps = oom2x().steps;
    const byId = (id: string) => steps.find(s => s.id === id)!;
    const key = occurrenceKey(oom2x());

    await actions.runStep(byId('grad-accumulation'), key);
    expect(host.inserted).toEqual([{ code: byId('grad-accumulation').code, place: 'below-active' }]);

    await actions.runStep(byId('expandable-segments'), key);
    expect(host.inserted[1].place).toBe('top');
    expect(ctx.restarts).toBe(1);

    await actions.runStep(
      {
        ...byId('clear'),
        id: 'shutdown-x',
        action: 'shutdown-kernel',
        kernel_id: 'k-9'
      },
      key
    );
    expect(host.shutDown).toEqual(['k-9']);

    await actions.runStep(byId('batch-size'), key); // advice only: nothing to do, no tick
    expect([...ticks.ticks(key)].sort()).toEqual(['expandable-segments', 'grad-accumulation', 'shutdown-x']);
  });
});

describe('clear', () => {
  it('runs once at a time and keeps the report', async () => {
    let release: (value: unknown) => void = () => undefined;
    const { actions, kernel, ctx } = setup({
      answers: () => new Promise(resolve => (release = resolve))
    });
    ctx.setStatus('busy'); // a cell is running: the request queues behind it
    const first = actions.clear();
    const second = actions.clear();
    expect(actions.clearRun?.phase).toBe('running');
    expect(actions.kernelBusy).toBe(true);
    expect(actions.busy).toBe(true);
    expect(await second).toBe(false);
    expect(kernel.expressions).toEqual([CLEAR_CALL]);
    ctx.setStatus('idle');
    release(answerReply({ ok: true, report: clearCpu() }));
    expect(await first).toBe(true);
    expect(actions.clearRun).toEqual({
      phase: 'done',
      report: clearCpu(),
      error: null,
      origin: null,
      kernelRun: 0
    });
    expect(actions.busy).toBe(false);
  });

  it('reports a failure in one line', async () => {
    const { actions } = setup({ answers: () => answerReply({ ok: false, error: 'RuntimeError: boom' }) });
    expect(await actions.clear()).toBe(false);
    expect(actions.clearRun).toEqual({
      phase: 'failed',
      report: null,
      error: 'RuntimeError: boom',
      origin: null,
      kernelRun: 0
    });
  });
});

/** The restarted kernel: PID 5678. */
const newHello: IHello = { ...fx.hello, pid: 5678, create_time: 1763856000.5 };

function newSample(mutate: (s: ISample) => void = () => undefined): ISample {
  const s = fx.sample(1, 1763856001);
  s.kernel.pid = 5678;
  s.gpu.devices[0].processes = s.gpu.devices[0].processes.filter(p => p.pid !== 1234);
  s.gpu.devices[0].used = 5 * GIB + 512 * MIB;
  s.gpu.devices[0].this_kernel = null;
  s.gpu.devices[0].allocator = null;
  mutate(s);
  return s;
}

describe('restart and free', () => {
  function restartSetup(before: ISample, after: ISample, hello = fx.hello) {
    const bridge = new FakeBridge(hello, before);
    const t = setup({ bridge });
    t.host.settingsValue = { ...t.host.settingsValue, restartTimeoutSeconds: 0.2 };
    bridge.answer = action => {
      switch (action) {
        case 'children':
          return fx.childrenResult();
        case 'processes':
          return fx.processesResult();
        case 'terminate':
          return fx.terminateResult();
        default:
          throw new Error(action);
      }
    };
    t.ctx.onRestart = () => {
      // The new kernel connects: first its hello (no sample yet), then samples.
      setTimeout(() => bridge.set(newHello, before), 5);
      setTimeout(() => bridge.set(newHello, after), 20);
    };
    return { ...t, bridge };
  }

  it('confirms, notes the kernel, waits for NVML to drop the old PID and reports per device', async () => {
    const { actions, host, ctx, bridge } = restartSetup(fx.sample(), newSample());
    const phases: string[] = [];
    actions.changed.connect(() => phases.push(actions.restartRun?.phase ?? 'none'));
    const report = await actions.restartAndFree();

    expect(host.confirms).toEqual([false]);
    expect(ctx.restarts).toBe(1);
    expect(bridge.requests.map(r => r.action)).toEqual(['children', 'processes']);
    expect(bridge.requests[1].args).toEqual({
      pids: [
        { pid: 4321, create_time: 1763855000.25 },
        { pid: 4322, create_time: 1763855000.31 }
      ]
    });
    expect(report).toMatchObject({
      outcome: 'freed',
      oldPid: 1234,
      newPid: 5678,
      totalFreed: 6 * GIB + 512 * MIB,
      clearedOutputs: false,
      childrenBefore: 2,
      childrenProblem: null
    });
    expect(report?.devices).toEqual([
      {
        label: 'cuda:0',
        name: 'NVIDIA GeForce RTX 4080 SUPER',
        before: 6 * GIB + 512 * MIB,
        after: 0,
        freed: 6 * GIB + 512 * MIB,
        deviceUsedBefore: 12 * GIB,
        deviceUsedAfter: 5 * GIB + 512 * MIB
      }
    ]);
    // Only the child that is still the same process (PID and start time) is offered to end.
    expect(report?.leftovers).toEqual([
      { pid: 4321, createTime: 1763855000.25, name: 'python', gpuUsed: 536870912 }
    ]);
    expect(restartHeadline(report!, 'GiB', untranslated)).toBe('Restarted: freed 6.50 GiB of GPU memory.');
    expect(phases).toEqual(
      expect.arrayContaining(['confirming', 'recording', 'restarting', 'waiting', 'checking', 'done'])
    );
    expect(actions.restartRun?.phase).toBe('done');

    await actions.endLeftover(4321);
    expect(bridge.requests[2]).toEqual({
      action: 'terminate',
      args: { pids: [{ pid: 4321, create_time: 1763855000.25 }] }
    });
    expect(actions.restartRun?.report?.leftovers[0].ended).toBe(true);
  });

  it('says so when the old PID is still listed at the timeout', async () => {
    const stuck = newSample(s => {
      s.gpu.devices[0].processes.push({
        pid: 1234,
        name: 'python',
        used: 6 * GIB + 512 * MIB,
        kernel_id: null,
        this_kernel: false
      });
    });
    const { actions } = restartSetup(fx.sample(), stuck);
    const report = await actions.restartAndFree();
    expect(report?.outcome).toBe('timeout');
    expect(report?.devices[0]).toMatchObject({
      before: 6 * GIB + 512 * MIB,
      after: 6 * GIB + 512 * MIB,
      freed: 0
    });
    expect(restartHeadline(report!, 'GiB', untranslated)).toBe(
      'Restarted, but after 0 s the GPU driver still lists the old kernel (PID 1234).'
    );
  });

  it('reports cleanly that there is no GPU memory to free without a GPU', async () => {
    const after = fx.noGpuSample(1, 1763856001);
    after.kernel.pid = 5678;
    const { actions } = restartSetup(fx.noGpuSample(), after);
    const report = await actions.restartAndFree();
    expect(report).toMatchObject({
      outcome: 'no-gpu',
      newPid: 5678,
      devices: [],
      totalFreed: null,
      noGpuReason: 'NVIDIA driver library (libnvidia-ml.so.1) not found'
    });
    expect(restartHeadline(report!, 'GiB', untranslated)).toBe(
      'Restarted: no GPU memory to free (no NVIDIA GPU visible).'
    );
  });

  it('does nothing when the user cancels', async () => {
    const { actions, host, ctx } = restartSetup(fx.sample(), newSample());
    host.confirmAnswer = false;
    expect(await actions.restartAndFree()).toBeNull();
    expect(ctx.restarts).toBe(0);
    expect(actions.restartRun).toBeNull();
  });

  it('skips the dialog by setting and clears outputs when asked', async () => {
    const { actions, host, ctx } = restartSetup(fx.sample(), newSample());
    host.settingsValue = { ...host.settingsValue, confirmRestart: false };
    const report = await actions.restartAndFree(true);
    expect(host.confirms).toEqual([]);
    expect(ctx.restarts).toBe(1);
    expect(host.clearedOutputs).toBe(1);
    expect(report?.clearedOutputs).toBe(true);
  });

  it('clears outputs when the setting says so', async () => {
    const { actions, host } = restartSetup(fx.sample(), newSample());
    host.settingsValue = { ...host.settingsValue, clearOutputsOnRestart: true };
    await actions.restartAndFree();
    expect(host.confirms).toEqual([true]);
    expect(host.clearedOutputs).toBe(1);
  });

  it('asks for the children again whenever their count changes', async () => {
    const { actions, bridge } = restartSetup(fx.sample(), newSample());
    actions.onData();
    actions.onData();
    await flush();
    expect(bridge.requests.map(r => r.action)).toEqual(['children']);
    expect(actions.children.map(c => c.pid)).toEqual([4321, 4322]);
    const more = fx.sample(43);
    more.host.children.count = 3;
    bridge.set(fx.hello, more);
    actions.onData();
    await flush();
    expect(bridge.requests.map(r => r.action)).toEqual(['children', 'children']);
  });

  it('fails in one line when there is no kernel', async () => {
    const { actions, ctx, host } = restartSetup(fx.sample(), newSample());
    host.settingsValue = { ...host.settingsValue, confirmRestart: false };
    ctx.session = { kernel: null };
    expect(await actions.restartAndFree()).toBeNull();
    expect(actions.restartRun).toMatchObject({ phase: 'failed', error: 'There is no kernel to restart.' });
  });
});
