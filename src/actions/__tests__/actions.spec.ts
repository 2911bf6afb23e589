/**
 * @jest-environment node
 *
 * The manager of every notebook's actions: which one the panel shows, kernels of this server by notebook,
 * and the follow-up that goes ahead when the failing cell's end was never seen.
 */
import { Signal } from '@lumino/signaling';

import { GpuMemActions } from '../actions';
import { LAST_OOM_CALL } from '../../channel/frontend';
import type { IKernelSession } from '../../channel/sample';
import { SessionActions } from '../sessionactions';
import { TickStore } from '../ticks';
import type { IGpuMemModel } from '../../tokens';
import { ActionSessionContext, FakeBridge, FakeHost, flush } from '../../__tests__/actionfakes';
import { answerReply, FakeKernel } from '../../__tests__/fakes';
import * as fx from '../../__tests__/fixtures';

function stubModel(): IGpuMemModel & { setCurrent(ctx: ActionSessionContext | null): void } {
  const changed = new Signal<IGpuMemModel, void>({} as IGpuMemModel);
  const sessions = new Map<string, IKernelSession>([
    [fx.OTHER_KERNEL_ID, { id: 's-2', path: 'experiments/big.ipynb', type: 'notebook', name: 'big.ipynb' }],
    [fx.KERNEL_ID, { id: 's-1', path: 'train.ipynb', type: 'notebook', name: 'train.ipynb' }],
    ['console-kernel', { id: 's-3', path: 'Console 1', type: 'console', name: 'Console 1' }]
  ]);
  const model = {
    sessionContext: null as unknown,
    sessions,
    changed,
    bridgeFor: () => new FakeBridge(fx.hello, fx.sample()),
    setCurrent(ctx: ActionSessionContext | null): void {
      model.sessionContext = ctx?.asContext ?? null;
      changed.emit();
    }
  };
  return model as unknown as IGpuMemModel & { setCurrent(ctx: ActionSessionContext | null): void };
}

describe('GpuMemActions', () => {
  it('follows the model’s session and names the kernels of this server', async () => {
    const model = stubModel();
    const manager = new GpuMemActions({
      model,
      host: new FakeHost(),
      ticks: new TickStore(null),
      shutDownKernel: async () => true
    });
    const kernel = new FakeKernel(fx.KERNEL_ID);
    const a = new ActionSessionContext(kernel, 'train.ipynb');
    const b = new ActionSessionContext(new FakeKernel('other'), 'other.ipynb');
    (a.session as { kernel: { id: string } }).kernel = kernel;
    const actionsA = manager.add(a.asContext, 'nb-a');
    const actionsB = manager.add(b.asContext, 'nb-b');
    expect(manager.add(a.asContext, 'nb-a')).toBe(actionsA);
    expect(manager.current).toBeNull();

    let changes = 0;
    manager.changed.connect(() => changes++);
    model.setCurrent(a);
    expect(manager.current).toBe(actionsA);
    expect(manager.forWidget('nb-b')).toBe(actionsB);
    expect(changes).toBe(1);

    expect(manager.labelKernel(fx.OTHER_KERNEL_ID)).toBe('notebook: experiments/big.ipynb');
    expect(manager.labelKernel('console-kernel')).toBe('console: Console 1');
    expect(manager.labelKernel('elsewhere')).toBeNull();
    expect(manager.canShutDownKernel(fx.OTHER_KERNEL_ID)).toBe(true);
    expect(manager.canShutDownKernel(fx.KERNEL_ID)).toBe(false); // the current notebook's own kernel
    expect(manager.canShutDownKernel('elsewhere')).toBe(false);

    b.dispose();
    expect(manager.forWidget('nb-b')).toBeNull();
    expect(actionsB.isDisposed).toBe(true);
    manager.dispose();
    expect(actionsA.isDisposed).toBe(true);
  });
});

describe('the OOM follow-up without the cell’s end', () => {
  it('asks anyway after the timeout', async () => {
    const kernel = new FakeKernel('k1', 'python', () => answerReply({ ok: true, oom: null }));
    const ctx = new ActionSessionContext(kernel);
    const actions = new SessionActions({
      sessionContext: ctx.asContext,
      bridge: () => null,
      host: new FakeHost(),
      ticks: new TickStore(null),
      widgetId: null,
      followUpTimeoutMs: 200,
      retryDelayMs: 1
    });
    ctx.emitIopub('error', 'cell-1', {
      ename: 'OutOfMemoryError',
      evalue: 'CUDA out of memory.',
      traceback: []
    });
    await flush();
    expect(kernel.executed).toHaveLength(0);
    await new Promise(resolve => setTimeout(resolve, 250));
    await flush();
    expect(kernel.expressions[0]).toBe(LAST_OOM_CALL);
    actions.dispose();
  });
});
