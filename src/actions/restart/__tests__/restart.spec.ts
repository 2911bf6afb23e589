/**
 * @jest-environment node
 *
 * Restart-and-free as a pure flow: what is noted, when the old kernel counts as gone, the report for each
 * outcome, and only same-process children offered to end.
 */
import type { IHello, IProcessState, ISample } from '../../../wire/protocol';
import {
  childRefs,
  isNewKernel,
  leftoversOf,
  oldPidGone,
  recordBefore,
  restartAndFree,
  type IRestartDeps,
  restartReport
} from '../restart';
import { GIB, MIB } from '../../../__tests__/fixtures';
import * as fx from '../../../__tests__/fixtures';

const newHello: IHello = { ...fx.hello, pid: 5678 };

function after(mutate: (s: ISample) => void = () => undefined): ISample {
  const s = fx.sample(1);
  s.kernel.pid = 5678;
  s.gpu.devices[0].processes = s.gpu.devices[0].processes.filter(p => p.pid !== 1234);
  mutate(s);
  return s;
}

describe('recordBefore', () => {
  it('notes the PID, create_time, NVML figure per device and the children', () => {
    const before = recordBefore(fx.hello, fx.sample(), fx.childrenResult().children);
    expect(before).toMatchObject({
      pid: 1234,
      createTime: 1763854990.12,
      gpuAvailable: true,
      gpuReason: null
    });
    expect(before.devices.map(d => [d.label, d.used, d.deviceUsed])).toEqual([
      ['cuda:0', 6 * GIB + 512 * MIB, 12 * GIB],
      ['NVML 1', null, 300 * MIB]
    ]);
    expect(childRefs(before.children)).toEqual([
      { pid: 4321, create_time: 1763855000.25 },
      { pid: 4322, create_time: 1763855000.31 }
    ]);
  });

  it('copes with no connection and no GPU', () => {
    expect(recordBefore(null, null, [])).toMatchObject({ pid: null, gpuAvailable: null, devices: [] });
    expect(recordBefore(fx.hello, fx.noGpuSample(), [])).toMatchObject({ gpuAvailable: false, devices: [] });
  });
});

describe('when the old kernel is gone', () => {
  const before = recordBefore(fx.hello, fx.sample(), []);

  it('needs a sample of the new kernel', () => {
    expect(isNewKernel(before, fx.hello, fx.sample())).toBe(false); // the old hello
    expect(isNewKernel(before, newHello, fx.sample())).toBe(false); // new hello, old sample
    expect(isNewKernel(before, newHello, after())).toBe(true);
    expect(isNewKernel(before, newHello, null)).toBe(false);
  });

  it('and no device listing the old PID', () => {
    expect(oldPidGone(before, after())).toBe(true);
    const stuck = after(s =>
      s.gpu.devices[1].processes.push({ ...fx.device0().processes[0], this_kernel: false })
    );
    expect(oldPidGone(before, stuck)).toBe(false);
  });
});

describe('restartReport', () => {
  const options = { timedOut: false, waitedMs: 2300, timeoutMs: 30000, clearedOutputs: false };

  it('freed: the old figure against now, per device that held memory', () => {
    const report = restartReport(recordBefore(fx.hello, fx.sample(), []), after(), options);
    expect(report.outcome).toBe('freed');
    expect(report.devices).toHaveLength(1);
    expect(report.devices[0]).toMatchObject({ label: 'cuda:0', before: 6 * GIB + 512 * MIB, after: 0 });
    expect(report.totalFreed).toBe(6 * GIB + 512 * MIB);
  });

  it('nothing held: NVML never listed the kernel', () => {
    const idle = fx.sample();
    idle.gpu.devices[0].processes = idle.gpu.devices[0].processes.filter(p => p.pid !== 1234);
    expect(restartReport(recordBefore(fx.hello, idle, []), after(), options).outcome).toBe('nothing-held');
  });

  it('no GPU, even when the new kernel never reported', () => {
    const report = restartReport(recordBefore(fx.hello, fx.noGpuSample(), []), null, {
      ...options,
      timedOut: true
    });
    expect(report).toMatchObject({
      outcome: 'no-gpu',
      newPid: null,
      noGpuReason: expect.stringContaining('libnvidia-ml')
    });
  });

  it('unknown when the panel was not connected', () => {
    expect(restartReport(recordBefore(null, null, []), after(), options).outcome).toBe('unknown');
  });

  it('timeout without any new sample: figures unknown', () => {
    const report = restartReport(recordBefore(fx.hello, fx.sample(), []), null, {
      ...options,
      timedOut: true
    });
    expect(report.outcome).toBe('timeout');
    expect(report.devices[0]).toMatchObject({ before: 6 * GIB + 512 * MIB, after: null, freed: null });
    expect(report.totalFreed).toBeNull();
  });
});

describe('leftoversOf', () => {
  it('keeps only children that are still the same process', () => {
    const states: IProcessState[] = fx.processesResult().processes;
    expect(leftoversOf(states).map(l => l.pid)).toEqual([4321]);
  });
});

describe('restartAndFree', () => {
  function deps(over: Partial<IRestartDeps> = {}): IRestartDeps & { calls: string[] } {
    const calls: string[] = [];
    let now = 1000;
    return {
      calls,
      confirm: async () => (calls.push('confirm'), true),
      record: async () => (
        calls.push('record'),
        recordBefore(fx.hello, fx.sample(), fx.childrenResult().children)
      ),
      restart: async () => void calls.push('restart'),
      clearOutputs: null,
      waitFor: async (done, timeoutMs) => {
        calls.push(`wait ${timeoutMs}`);
        now += 1500;
        return done(newHello, after()) ? after() : null;
      },
      latest: () => after(),
      processes: async refs => (calls.push(`processes ${refs.length}`), fx.processesResult().processes),
      now: () => now,
      timeoutMs: 30000,
      onPhase: phase => calls.push(`phase ${phase}`),
      ...over
    };
  }

  it('runs the steps in order', async () => {
    const d = deps({ clearOutputs: () => d.calls.push('clear outputs') });
    const report = await restartAndFree(d);
    expect(d.calls).toEqual([
      'phase confirming',
      'confirm',
      'phase recording',
      'record',
      'phase restarting',
      'restart',
      'clear outputs',
      'phase waiting',
      'wait 30000',
      'phase checking',
      'processes 2',
      'phase done'
    ]);
    expect(report).toMatchObject({ outcome: 'freed', waitedMs: 1500, clearedOutputs: true });
    expect(report?.leftovers.map(l => l.pid)).toEqual([4321]);
  });

  it('stops when not confirmed', async () => {
    const d = deps({ confirm: async () => false });
    expect(await restartAndFree(d)).toBeNull();
    expect(d.calls).toEqual(['phase confirming']);
  });

  it('reports a timeout with what the new kernel still shows, and whether the old kernel still runs', async () => {
    const stuck = after(s =>
      s.gpu.devices[0].processes.push({ ...fx.device0().processes[0], this_kernel: false })
    );
    const asked: number[][] = [];
    const d = deps({
      waitFor: async () => null,
      latest: () => stuck,
      processes: async refs => {
        asked.push(refs.map(r => r.pid));
        return [
          ...fx.processesResult().processes,
          {
            pid: 1234,
            create_time: 1763854990.12,
            alive: true,
            same_process: true,
            name: 'python',
            gpu_used: 1
          }
        ];
      }
    });
    const report = await restartAndFree(d);
    expect(report).toMatchObject({ outcome: 'timeout', newPid: 5678, oldKernelAlive: true });
    expect(report?.devices[0]).toMatchObject({ after: 6 * GIB + 512 * MIB, freed: 0 });
    expect(asked).toEqual([[4321, 4322, 1234]]);
    // The old kernel is never offered to end: only its children are.
    expect(report?.leftovers.map(l => l.pid)).toEqual([4321]);
  });

  it('keeps the report when the children cannot be checked', async () => {
    const d = deps({
      processes: async () => {
        throw new Error('not connected');
      }
    });
    expect(await restartAndFree(d)).toMatchObject({
      outcome: 'freed',
      childrenProblem: 'not connected',
      leftovers: []
    });
  });

  it('does not ask about children the kernel did not have', async () => {
    const d = deps({ record: async () => recordBefore(fx.hello, fx.sample(), []) });
    await restartAndFree(d);
    expect(d.calls.some(c => c.startsWith('processes'))).toBe(false);
  });
});
