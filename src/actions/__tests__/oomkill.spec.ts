/**
 * @jest-environment node
 *
 * A kernel the out-of-memory killer ended: when the kernel dies unasked ('autorestarting' or 'dead'), the session
 * asks the server why (sending the last host reading the panel holds), and an OOM kill becomes the session's
 * host checklist, live in the new kernel run, with a notification. Other deaths and user restarts change nothing.
 * The server's answer is a real one: written by gpumem_kernel/oom/killed.py (tests/server/test_kernel_exits.py).
 */
import answerData from '../../__tests__/data/oom_killer_answer.json';
import { ActionSessionContext, FakeBridge, FakeHost, flush } from '../../__tests__/actionfakes';
import { FakeKernel } from '../../__tests__/fakes';
import * as fx from '../../__tests__/fixtures';
import { parseKernelExit } from '../../wire/protocol';
import { SessionActions } from '../sessionactions';
import { TickStore } from '../ticks';

const parsed = parseKernelExit({ kernel_id: 'k1', ...answerData });

function setup(): { ctx: ActionSessionContext; host: FakeHost; actions: SessionActions; bridge: FakeBridge } {
  const ctx = new ActionSessionContext(new FakeKernel('k1'));
  const host = new FakeHost();
  const bridge = new FakeBridge(fx.hello, fx.sample());
  const actions = new SessionActions({
    sessionContext: ctx.asContext,
    bridge: () => bridge,
    host,
    ticks: new TickStore(null),
    widgetId: 'notebook-1',
    retryDelayMs: 1,
    deathPollMs: 1
  });
  ctx.setStatus('idle');
  return { ctx, host, actions, bridge };
}

describe('a kernel the OOM killer ended', () => {
  it('parses the server answer and its checklist against the schemas', () => {
    expect(parsed).not.toBeNull();
    expect(parsed?.exit?.oom_killed).toBe(true);
    expect(parsed?.checklist?.info.family).toBe('host');
    expect(parseKernelExit({ kernel_id: 'k1', exit: null, checklist: { version: 1 } })).toBeNull();
    expect(parseKernelExit({ kernel_id: 'k1', exit: { pid: 'x' }, checklist: null })).toBeNull();
  });

  it('becomes the live host checklist with a notification, asked about the dead process', async () => {
    const { ctx, host, actions } = setup();
    host.deathAnswers = [{ exit: null, checklist: null }, parsed];
    ctx.setStatus('autorestarting');
    await flush(40);
    expect(host.deathAsks.length).toBe(2); // the server had not judged it at the first ask
    expect(host.deathAsks[0].kernelId).toBe('k1');
    expect(host.deathAsks[0].pid).toBe(fx.hello.pid);
    expect(host.deathAsks[0].host?.rss).toBe(fx.sample().host.rss);
    const run = actions.oomRun;
    expect(run?.phase).toBe('ready');
    expect(run?.kernelRun).toBe(actions.kernelRun); // live: its steps are for the new run
    expect(run?.payload?.summary[0]).toContain('out-of-memory killer ended the kernel');
    expect(run?.payload?.steps[0].id).toBe('fewer-workers');
    expect(host.oomKills.length).toBe(1);
    expect(host.oomKills[0].death.limit).toBe(2 * 1024 ** 3);
  });

  it('asks once per dead process, however many statuses follow', async () => {
    const { ctx, host } = setup();
    host.deathAnswers = [parsed];
    ctx.setStatus('autorestarting');
    ctx.setStatus('dead');
    await flush(40);
    expect(host.deathAsks.length).toBe(1);
    expect(host.oomKills.length).toBe(1);
  });

  it('leaves other deaths, user restarts and servers without the extension alone', async () => {
    const killed = setup();
    killed.host.deathAnswers = [
      { exit: { ...parsed!.exit!, oom_killed: false, evidence: null }, checklist: null }
    ];
    killed.ctx.setStatus('dead');
    await flush(40);
    expect(killed.actions.oomRun).toBeNull();
    expect(killed.host.oomKills.length).toBe(0);

    const restarted = setup();
    restarted.host.deathAnswers = [parsed];
    restarted.ctx.setStatus('restarting'); // Kernel > Restart: asked for
    await flush(40);
    expect(restarted.host.deathAsks.length).toBe(0);

    const plain = setup();
    plain.host.deathAnswers = [null]; // 404: no server extension
    plain.ctx.setStatus('autorestarting');
    await flush(40);
    expect(plain.host.deathAsks.length).toBe(1);
    expect(plain.actions.oomRun).toBeNull();
  });

  it('stops asking after a few tries when the server never sees the death', async () => {
    const { ctx, host, actions } = setup();
    host.deathAnswers = [{ exit: null, checklist: null }];
    ctx.setStatus('autorestarting');
    await flush(80);
    expect(host.deathAsks.length).toBe(8);
    expect(actions.oomRun).toBeNull();
  });
});
