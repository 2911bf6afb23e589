/**
 * @jest-environment node
 */
import { KernelBridge } from '../bridge';
import { RequestError } from '../requests';
import { BOOTSTRAP_EXPRESSION, LOADED_EXPRESSION } from '../bootstrap';
import { GpuMemModel } from '../model';
import { DEFAULT_SETTINGS, type IGpuMemSettings } from '../../settings';
import { errorReply, FakeKernel, FakeSessionContext, missingAnswer, okAnswer } from '../../__tests__/fakes';
import * as fx from '../../__tests__/fixtures';
import holdersJson from '../../__tests__/data/holders_cpu.json';
import type { IHoldersMessage } from '../../wire/protocol';

const CLIENT = 'jupyterlab-gpumem 0.1.0';

/** Let pending promise callbacks run (timers stay fake). */
async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await new Promise<void>(resolve => setImmediate(resolve));
  }
}

const bridges: KernelBridge[] = [];

function makeBridge(ctx: FakeSessionContext, settings: IGpuMemSettings = DEFAULT_SETTINGS): KernelBridge {
  const bridge = new KernelBridge({
    sessionContext: ctx.asContext,
    settings,
    client: CLIENT,
    retryDelayMs: 10
  });
  bridges.push(bridge);
  return bridge;
}

/** A bridge that has received hello and history. */
async function liveBridge(): Promise<{ ctx: FakeSessionContext; bridge: KernelBridge }> {
  const ctx = new FakeSessionContext(new FakeKernel('k1'));
  const bridge = makeBridge(ctx);
  await flush();
  ctx.kernel.comm.receive(fx.hello);
  ctx.kernel.comm.receive(fx.history());
  return { ctx, bridge };
}

beforeEach(() => {
  jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
  jest.setSystemTime(new Date(2025, 10, 22, 12, 0, 0));
  jest.spyOn(console, 'warn').mockImplementation(() => undefined);
});

afterEach(() => {
  while (bridges.length) {
    bridges.pop()?.dispose();
  }
  jest.useRealTimers();
  jest.restoreAllMocks();
});

describe('KernelBridge: connecting', () => {
  it('bootstraps silently, opens the comm and goes live on hello', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1'));
    const bridge = makeBridge(ctx);
    const states: string[] = [];
    bridge.stateChanged.connect((_, s) => states.push(s.name === 'waiting' ? `waiting:${s.phase}` : s.name));
    await flush();

    expect(ctx.kernel.executed).toEqual([
      {
        code: '',
        silent: true,
        store_history: false,
        user_expressions: { gpumem: BOOTSTRAP_EXPRESSION },
        allow_stdin: false,
        stop_on_error: false
      }
    ]);
    const comm = ctx.kernel.comm;
    expect(comm.targetName).toBe('gpumem');
    expect(comm.opened).toEqual([
      { type: 'open', protocol: 1, interval: 1, history_seconds: 600, client: CLIENT }
    ]);
    expect(bridge.state).toMatchObject({ name: 'waiting', phase: 'opening', kernelVersion: '0.1.0' });

    comm.receive(fx.hello);
    expect(bridge.state.name).toBe('live');
    expect(bridge.hello).toEqual(fx.hello);

    comm.receive(fx.history());
    comm.receive(fx.sample(42, 1763855000.12));
    expect(bridge.samples.map(s => s.seq)).toEqual([40, 41, 42]);
    expect(bridge.latest?.seq).toBe(42);
    expect(states).toEqual(['waiting:bootstrapping', 'waiting:opening', 'live']);
  });

  it('says a non-Python kernel is unsupported and runs nothing in it', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1', 'R'));
    const bridge = makeBridge(ctx);
    await flush();
    expect(bridge.state).toMatchObject({ name: 'unsupported', language: 'R' });
    expect(ctx.kernel.executed).toEqual([]);
  });

  it('shows no-kernel for a notebook without a kernel', async () => {
    const ctx = new FakeSessionContext(null);
    ctx.session = { kernel: null };
    const bridge = makeBridge(ctx);
    await flush();
    expect(bridge.state).toMatchObject({ name: 'no-kernel', hasSession: true });
  });

  it('reports the missing package, and connects once the user installed it', async () => {
    const kernel = new FakeKernel('k1', 'python', missingAnswer);
    const ctx = new FakeSessionContext(kernel);
    const bridge = makeBridge(ctx);
    await flush();
    expect(bridge.state.name).toBe('not-installed');
    expect(kernel.comms).toEqual([]);

    // Our own silent requests toggle busy/idle too: they must not trigger a retry loop.
    ctx.setStatus('busy');
    ctx.setStatus('idle');
    await flush();
    expect(kernel.executed).toHaveLength(1);

    kernel.answer = okAnswer();
    ctx.userRunsCell(); // e.g. %pip install jupyterlab-gpumem
    await flush();
    expect(kernel.executed).toHaveLength(2);
    expect(bridge.state).toMatchObject({ name: 'waiting', phase: 'opening' });
  });

  it('only checks for the shim when autoload is off, and loads it on request', async () => {
    const kernel = new FakeKernel('k1', 'python', okAnswer(1, false));
    const ctx = new FakeSessionContext(kernel);
    const bridge = makeBridge(ctx, { ...DEFAULT_SETTINGS, autoLoad: false });
    await flush();
    expect(kernel.expressions).toEqual([LOADED_EXPRESSION]);
    expect(bridge.state.name).toBe('autoload-off');

    bridge.loadNow();
    await flush();
    expect(kernel.expressions).toEqual([LOADED_EXPRESSION, BOOTSTRAP_EXPRESSION]);
    expect(kernel.comms).toHaveLength(1);
  });

  it('connects with autoload off when the user loaded the shim', async () => {
    const kernel = new FakeKernel('k1', 'python', okAnswer(1, false));
    const ctx = new FakeSessionContext(kernel);
    const bridge = makeBridge(ctx, { ...DEFAULT_SETTINGS, autoLoad: false });
    await flush();
    kernel.answer = okAnswer(1, true);
    ctx.userRunsCell(); // %load_ext gpumem_kernel
    await flush();
    expect(kernel.expressions).toEqual([LOADED_EXPRESSION, LOADED_EXPRESSION, BOOTSTRAP_EXPRESSION]);
    expect(bridge.state.phase).toBe('opening');
  });

  it('refuses another protocol from the bootstrap without opening the comm', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1', 'python', okAnswer(2)));
    const bridge = makeBridge(ctx);
    await flush();
    expect(bridge.state).toMatchObject({ name: 'version-mismatch', kernelProtocol: 2 });
    expect(ctx.kernel.comms).toEqual([]);
  });

  it('refuses a hello in another protocol and closes the comm', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1'));
    const bridge = makeBridge(ctx);
    await flush();
    ctx.kernel.comm.receive({ ...fx.hello, protocol: 2 });
    expect(bridge.state).toMatchObject({ name: 'version-mismatch', kernelProtocol: 2 });
    expect(ctx.kernel.comm.closed).toBe(true);
  });

  it('retries a bootstrap the kernel aborted', async () => {
    let calls = 0;
    const kernel = new FakeKernel('k1', 'python', expression => {
      calls++;
      return calls === 1 ? { status: 'aborted' } : okAnswer()(expression);
    });
    const ctx = new FakeSessionContext(kernel);
    const bridge = makeBridge(ctx);
    await flush();
    jest.advanceTimersByTime(20);
    await flush();
    expect(calls).toBe(2);
    expect(bridge.state.phase).toBe('opening');
  });

  it('reports a failing bootstrap in one line', async () => {
    const kernel = new FakeKernel('k1', 'python', () => errorReply('RuntimeError', 'NVML exploded'));
    const ctx = new FakeSessionContext(kernel);
    const bridge = makeBridge(ctx);
    await flush();
    expect(bridge.state).toMatchObject({
      name: 'error',
      detail: 'loading gpumem_kernel failed: RuntimeError: NVML exploded'
    });
  });
});

describe('KernelBridge: following the kernel', () => {
  it('pings the kernel every 15 s while connected, without waiting for replies', async () => {
    const { ctx, bridge } = await liveBridge();
    const pings = (): unknown[] =>
      ctx.kernel.comm.sent.filter(m => (m as { action?: string }).action === 'ping');
    let seq = 42;
    const live = (seconds: number): void => {
      for (let i = 0; i < seconds; i++) {
        ctx.kernel.comm.receive(fx.sample(++seq, 1763855000 + seq));
        jest.advanceTimersByTime(1000);
      }
    };
    live(14);
    expect(pings()).toHaveLength(0);
    live(2);
    expect(pings()).toEqual([
      { type: 'request', id: expect.stringMatching(/^p-/), action: 'ping', args: {} }
    ]);
    live(15);
    expect(pings()).toHaveLength(2);
    expect(ctx.kernel.comms).toHaveLength(1);
    expect(bridge.pendingRequests).toBe(0); // no reply awaited: none can time out behind a long cell
  });

  it('reconnects when the kernel dropped its comm as quiet, but not after an unload', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.kernel.comm.closeFromKernel({ reason: 'quiet' });
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2);
    expect(ctx.kernel.expressions).toEqual([BOOTSTRAP_EXPRESSION, BOOTSTRAP_EXPRESSION]);
    ctx.kernel.comm.receive(fx.hello);
    expect(bridge.state.name).toBe('live');

    ctx.kernel.comm.closeFromKernel({}); // %unload_ext gpumem_kernel: stay closed, say so
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2);
    expect(bridge.state).toMatchObject({ name: 'error', closedByKernel: true });
  });

  it('goes stale after 3 intervals without a sample, then live again', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.setStatus('busy'); // a long cell holding the GIL
    jest.advanceTimersByTime(2000);
    expect(bridge.state.name).toBe('live');
    jest.advanceTimersByTime(2000);
    expect(bridge.state.name).toBe('stale');
    ctx.kernel.comm.receive(fx.sample(50, 1763855010));
    expect(bridge.state.name).toBe('live');
  });

  it('re-bootstraps after a restart and ignores the old comm', async () => {
    const { ctx, bridge } = await liveBridge();
    const oldComm = ctx.kernel.comm;
    const pending = bridge.request('snapshot');

    ctx.setStatus('restarting');
    oldComm.isDisposed = true; // JupyterLab disposes comms on restart (without onClose)
    expect(bridge.state).toMatchObject({ name: 'waiting', phase: 'restarting' });
    await expect(pending).rejects.toMatchObject({ code: 'disconnected' });

    oldComm.receive(fx.sample(99, 1763855100));
    expect(bridge.latest?.seq).not.toBe(99);

    ctx.setStatus('starting');
    ctx.setStatus('idle');
    await flush();
    expect(ctx.kernel.expressions).toEqual([BOOTSTRAP_EXPRESSION, BOOTSTRAP_EXPRESSION]);
    expect(ctx.kernel.comms).toHaveLength(2);
    ctx.kernel.comm.receive(fx.hello);
    expect(bridge.state.name).toBe('live');
    // Same kernel id: the history before the restart is kept for the timeline.
    expect(bridge.samples.length).toBe(2);
  });

  it('keeps how the kernel ended through SessionContext.restartKernel()’s "change" to the same kernel', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.setStatus('restarting');
    ctx.setStatus('idle');
    // restartKernel() ends with kernelChanged(old === new): a restart, not another kernel.
    ctx.kernelChanged.emit({ name: 'kernel', oldValue: ctx.kernel, newValue: ctx.kernel });
    await flush();
    ctx.kernel.comm.receive(fx.hello);
    expect(bridge.state.name).toBe('live');
    expect(bridge.state.lastEnd).toMatchObject({ cause: 'restarted', restartedByServer: false });
    expect(ctx.kernel.expressions).toEqual([BOOTSTRAP_EXPRESSION, BOOTSTRAP_EXPRESSION]); // one re-bootstrap
  });

  it('says the kernel died when the server restarted it after kill -9', async () => {
    const { ctx, bridge } = await liveBridge();
    // JupyterLab 4.4, as seen in a real browser: the server's "restarting" status, its own 'autorestarting',
    // the reconnect, and the new process's 'starting' after our re-bootstrap began.
    ctx.setStatus('restarting');
    ctx.setStatus('autorestarting');
    expect(bridge.state).toMatchObject({ name: 'waiting', phase: 'restarting' });
    expect(bridge.state.lastEnd).toMatchObject({ cause: 'died', restartedByServer: true });
    ctx.setStatus('unknown');
    ctx.setStatus('busy');
    await flush();
    ctx.setStatus('starting');
    ctx.setStatus('idle');
    await flush();
    ctx.kernel.comm.receive(fx.hello);
    expect(bridge.state.name).toBe('live');
    expect(bridge.state.lastEnd?.cause).toBe('died');
  });

  it('asks a restarted kernel for its status when the statuses after the reconnect were lost', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.setStatus('restarting');
    ctx.setStatus('autorestarting');
    ctx.kernel.connectionStatus = 'connecting';
    ctx.setStatus('unknown');
    jest.advanceTimersByTime(10000);
    expect(ctx.kernel.kernelInfoRequests).toBe(0); // not while the websocket is down
    ctx.kernel.connectionStatus = 'connected';
    jest.advanceTimersByTime(1000);
    expect(ctx.kernel.kernelInfoRequests).toBe(1);
    jest.advanceTimersByTime(4000);
    expect(ctx.kernel.kernelInfoRequests).toBe(1); // every 5 s, not every tick
    jest.advanceTimersByTime(1000);
    expect(ctx.kernel.kernelInfoRequests).toBe(2);
    expect(bridge.state).toMatchObject({ name: 'waiting', phase: 'restarting' });
    // The kernel's answer comes with its statuses: the bridge starts on the new process.
    ctx.setStatus('busy');
    ctx.setStatus('idle');
    await flush();
    ctx.kernel.comm.receive(fx.hello);
    expect(bridge.state.name).toBe('live');
    jest.advanceTimersByTime(10000);
    expect(ctx.kernel.kernelInfoRequests).toBe(2); // nothing pending: no more requests
  });

  it('does not ask a kernel for info while nothing is pending', async () => {
    const { ctx } = await liveBridge();
    ctx.kernel.status = 'unknown';
    jest.advanceTimersByTime(20000);
    expect(ctx.kernel.kernelInfoRequests).toBe(0);
  });

  it('notices a restart by another client (only a "starting" status)', async () => {
    const { ctx, bridge } = await liveBridge();
    const oldComm = ctx.kernel.comm;
    ctx.setStatus('starting');
    expect(bridge.state).toMatchObject({ name: 'waiting', phase: 'restarting' });
    expect(oldComm.isDisposed).toBe(true);
    expect(oldComm.closed).toBe(false); // the new kernel process never knew that comm
    ctx.setStatus('busy');
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2);
  });

  it('reconnects once by itself when samples stop while the kernel is idle', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.setStatus('busy');
    jest.advanceTimersByTime(5000);
    expect(bridge.state.name).toBe('stale');
    await flush();
    expect(ctx.kernel.comms).toHaveLength(1); // busy: the sampler may just be starved
    ctx.setStatus('idle');
    jest.advanceTimersByTime(1000);
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2);
    expect(ctx.kernel.comms[0].closed).toBe(true);
    ctx.kernel.comm.receive(fx.hello);
    jest.advanceTimersByTime(5000);
    await flush();
    expect(bridge.state.name).toBe('stale');
    jest.advanceTimersByTime(5000);
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2); // once per episode, not a loop
  });

  it('switches to a new kernel: closes the old comm, clears the history', async () => {
    const { ctx, bridge } = await liveBridge();
    const oldComm = ctx.kernel.comm;
    const next = new FakeKernel('k2');
    ctx.changeKernel(next);
    await flush();
    expect(oldComm.closed).toBe(true);
    expect(bridge.state.name).toBe('waiting');
    expect(bridge.samples).toEqual([]);
    expect(bridge.hello).toBeNull();
    expect(next.comms).toHaveLength(1);
    oldComm.receive(fx.sample(7, 1763855200));
    expect(bridge.latest).toBeNull();
  });

  it('shows a dead kernel, and reconnects when it is restarted', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.setStatus('dead');
    expect(bridge.state.name).toBe('dead');
    ctx.setStatus('restarting');
    ctx.setStatus('idle');
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2);
  });

  it('shows an error when the kernel closes the comm', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.kernel.comm.closeFromKernel();
    expect(bridge.state).toMatchObject({ name: 'error', closedByKernel: true });
    bridge.retry();
    await flush();
    expect(ctx.kernel.comms).toHaveLength(2);
  });

  it('shows a malformed sample as an error until a valid one arrives', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.kernel.comm.receive({ ...fx.sample(), seq: 'x' });
    expect(bridge.state).toMatchObject({ name: 'error' });
    expect(bridge.state.detail).toContain('sample.seq: expected a non-negative integer');
    ctx.kernel.comm.receive(fx.sample(60, 1763855020));
    expect(bridge.state.name).toBe('live');
  });

  it('ignores unknown message types', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.kernel.comm.receive({ type: 'from-the-future' });
    expect(bridge.state.name).toBe('live');
  });

  it('collects the problems the kernel reports', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.kernel.comm.receive({
      ...fx.sample(61, 1763855021),
      errors: ['nvmlDeviceGetUtilizationRates(1): Not Supported']
    });
    ctx.kernel.comm.receive(fx.errorReply(null));
    expect(bridge.problems.map(p => p.text)).toEqual([
      'nvmlDeviceGetUtilizationRates(1): Not Supported',
      'unknown-action: unknown action "frobnicate"'
    ]);
  });
});

describe('KernelBridge: requests', () => {
  it('matches replies to requests by id', async () => {
    const { ctx, bridge } = await liveBridge();
    const snapshot = bridge.request('snapshot');
    expect(bridge.pendingRequests).toBe(1);
    expect(ctx.kernel.comm.sent).toEqual([{ type: 'request', id: 'r-1', action: 'snapshot', args: {} }]);
    ctx.kernel.comm.receive(fx.snapshotReply());
    await expect(snapshot).resolves.toEqual(fx.sample(0, 1763855001.12));
    expect(bridge.pendingRequests).toBe(0);
  });

  it('rejects with the kernel error code', async () => {
    const { ctx, bridge } = await liveBridge();
    const history = bridge.request('history');
    ctx.kernel.comm.receive(fx.errorReply('r-1'));
    await expect(history).rejects.toEqual(new RequestError('unknown-action', 'unknown action "frobnicate"'));
  });

  it('rejects a result that does not match the action', async () => {
    const { ctx, bridge } = await liveBridge();
    const configure = bridge.request('configure', { interval: 0.5 });
    ctx.kernel.comm.receive({ type: 'reply', id: 'r-1', action: 'configure', result: { interval: 'fast' } });
    await expect(configure).rejects.toMatchObject({ code: 'invalid-reply' });
  });

  it('times out', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.setStatus('busy');
    const snapshot = bridge.request('snapshot', {}, 5000);
    jest.advanceTimersByTime(5001);
    await expect(snapshot).rejects.toMatchObject({ code: 'timeout' });
    expect(bridge.pendingRequests).toBe(0);
  });

  it('refuses requests while not connected', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1', 'python', missingAnswer));
    const bridge = makeBridge(ctx);
    await flush();
    await expect(bridge.request('snapshot')).rejects.toMatchObject({ code: 'disconnected' });
  });

  it('reconfigures the sampler when the settings change', async () => {
    const { ctx, bridge } = await liveBridge();
    bridge.updateSettings({ ...DEFAULT_SETTINGS, interval: 0.5 });
    expect(ctx.kernel.comm.sent).toEqual([
      { type: 'request', id: 'r-1', action: 'configure', args: { interval: 0.5, history_seconds: 600 } }
    ]);
    ctx.kernel.comm.receive(fx.configureReply('r-1'));
    await flush();
    expect(bridge.state.interval).toBe(0.5);
  });

  it('sends the batch-size rounding setting to kernels that take it, on hello and on change', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1'));
    const bridge = makeBridge(ctx, { ...DEFAULT_SETTINGS, batchRounding: '8' });
    await flush();
    ctx.kernel.comm.receive({ ...fx.hello, capabilities: [...fx.hello.capabilities, 'rounding'] });
    expect(ctx.kernel.comm.sent).toEqual([
      { type: 'request', id: 'r-1', action: 'configure', args: { rounding: '8' } }
    ]);
    bridge.updateSettings({ ...DEFAULT_SETTINGS, batchRounding: 'none' });
    expect(ctx.kernel.comm.sent[1]).toEqual({
      type: 'request',
      id: 'r-2',
      action: 'configure',
      args: { rounding: 'none' }
    });
  });

  it('sends the sequence-length multiple to kernels that take it, on hello and on change', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1'));
    const bridge = makeBridge(ctx, { ...DEFAULT_SETTINGS, seqMultiple: 128 });
    await flush();
    ctx.kernel.comm.receive({ ...fx.hello, capabilities: [...fx.hello.capabilities, 'seq_multiple'] });
    bridge.updateSettings({ ...DEFAULT_SETTINGS, seqMultiple: 32 });
    expect(ctx.kernel.comm.sent.map(message => (message as { args: unknown }).args)).toEqual([
      { seq_multiple: 128 },
      { seq_multiple: 32 }
    ]);
  });

  it('sends the OOM timeline setting to kernels that take it, on hello and on change', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1'));
    const bridge = makeBridge(ctx, { ...DEFAULT_SETTINGS, oomTimeline: true });
    await flush();
    ctx.kernel.comm.receive({ ...fx.hello, capabilities: [...fx.hello.capabilities, 'oom_timeline'] });
    expect(ctx.kernel.comm.sent).toEqual([
      { type: 'request', id: 'r-1', action: 'configure', args: { oom_timeline: true } }
    ]);
    bridge.updateSettings({ ...DEFAULT_SETTINGS, oomTimeline: false });
    expect(ctx.kernel.comm.sent[1]).toEqual({
      type: 'request',
      id: 'r-2',
      action: 'configure',
      args: { oom_timeline: false }
    });
  });

  it('does not send the OOM timeline setting to an older kernel (no "oom_timeline" capability)', async () => {
    const { ctx, bridge } = await liveBridge();
    bridge.updateSettings({ ...DEFAULT_SETTINGS, oomTimeline: true });
    expect(ctx.kernel.comm.sent).toEqual([]);
  });

  it('does not send the rounding to an older kernel (no "rounding" capability)', async () => {
    const { ctx, bridge } = await liveBridge();
    bridge.updateSettings({ ...DEFAULT_SETTINGS, batchRounding: '8' });
    expect(ctx.kernel.comm.sent).toEqual([]);
  });
});

describe('KernelBridge: holders', () => {
  it('keeps the newest `holders` message for the panel, and drops it when the comm opens again', async () => {
    const { ctx, bridge } = await liveBridge();
    expect(bridge.holders).toBeNull();
    const first = JSON.parse(JSON.stringify(holdersJson)) as IHoldersMessage;
    ctx.kernel.comm.receive(first);
    expect(bridge.holders).toEqual(first);
    ctx.kernel.comm.receive({ ...first, cell: 3, devices: [] });
    expect(bridge.holders?.cell).toBe(3);
    expect(bridge.state.name).toBe('live');
    ctx.kernel.comm.receive(fx.hello); // a comm opened again: the kernel sends its own last one after the history
    expect(bridge.holders).toBeNull();
  });

  it('refuses a holders message that does not fit its schema, naming the field', async () => {
    const { ctx, bridge } = await liveBridge();
    ctx.kernel.comm.receive({ ...(holdersJson as object), devices: [{ device: 'cuda:0' }] });
    expect(bridge.holders).toBeNull();
    expect(console.warn).toHaveBeenCalledWith(
      expect.stringContaining('jupyterlab-gpumem: ignored a kernel message: holders.devices[0]')
    );
  });
});

describe('GpuMemModel', () => {
  it('switches bridges with the current notebook and drops the other comm’s messages', async () => {
    const a = new FakeSessionContext(new FakeKernel('ka'), 'a.ipynb');
    const b = new FakeSessionContext(new FakeKernel('kb'), 'b.ipynb');
    const model = new GpuMemModel({
      client: CLIENT,
      createBridge: (sessionContext, settings) => {
        const bridge = new KernelBridge({ sessionContext, settings, client: CLIENT });
        bridges.push(bridge);
        return bridge;
      }
    });
    expect(model.state.name).toBe('no-kernel');

    model.setSessionContext(a.asContext);
    await flush();
    a.kernel.comm.receive(fx.hello);
    a.kernel.comm.receive(fx.sample(1, 100));
    expect(model.latest?.seq).toBe(1);
    expect(model.kernelLabel).toBe('Python 3 (ipykernel) · a.ipynb');

    model.setSessionContext(b.asContext);
    await flush();
    let changes = 0;
    model.changed.connect(() => changes++);
    a.kernel.comm.receive(fx.sample(2, 101));
    expect(changes).toBe(0);
    expect(model.latest).toBeNull();
    expect(model.state.name).toBe('waiting');

    // Back to a: its data is there at once, no second bootstrap.
    model.setSessionContext(a.asContext);
    expect(model.latest?.seq).toBe(2);
    expect(model.state.name).toBe('live');
    expect(a.kernel.executed).toHaveLength(1);

    // Closing a notebook disposes its bridge (and closes its comm).
    a.dispose();
    expect(model.state.name).toBe('no-kernel');
    expect(a.kernel.comm.closed).toBe(true);
    model.dispose();
  });

  it('applies settings to every bridge', async () => {
    const ctx = new FakeSessionContext(new FakeKernel('k1'));
    const model = new GpuMemModel({ client: CLIENT });
    model.setSessionContext(ctx.asContext);
    await flush();
    ctx.kernel.comm.receive(fx.hello);
    model.settings = { ...DEFAULT_SETTINGS, historyMinutes: 5 };
    expect(ctx.kernel.comm.sent).toEqual([
      { type: 'request', id: 'r-1', action: 'configure', args: { interval: 1, history_seconds: 300 } }
    ]);
    model.dispose();
  });

  it('labels processes with the server sessions', () => {
    const model = new GpuMemModel({ client: CLIENT });
    model.setSessions([
      {
        id: 's1',
        name: 'big.ipynb',
        path: 'big.ipynb',
        type: 'notebook',
        kernel: { id: fx.OTHER_KERNEL_ID, name: 'python3' }
      }
    ]);
    const proc = fx.device0().processes[1];
    expect(model.labelProcess(proc)).toBe('notebook: big.ipynb');
    model.dispose();
  });
});
