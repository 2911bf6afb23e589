/**
 * Restart and free: restart the kernel, wait until NVML no longer lists the old process, and say what that
 * freed — then find the old kernel's children that outlived it (orphaned DataLoader workers holding GPU
 * memory), which a restart does not end.
 *
 * The bookkeeping is pure (what to note before, when the old process is gone, the report); `restartAndFree`
 * runs the steps against injected dependencies so the whole flow is tested with fakes. JupyterLab's own
 * restart dialog is not used: the caller confirms first, then restarts through the session context.
 */
import { deviceKey } from '../../channel/sample';
import type { IDeviceFreed, ILeftover, IRestartReport, RestartOutcome, RestartPhase } from '../../types';
import type { IChildProcess, IHello, IProcessRef, IProcessState, ISample } from '../../wire/protocol';

/** What one device said about the old kernel before the restart. */
export interface IDeviceBefore {
  /** `deviceKey()`: the same device in a later sample. */
  readonly key: string;
  /** "cuda:0" (or "NVML 1" for a device this kernel does not see). */
  readonly label: string;
  readonly name: string | null;
  /** NVML's figure for the old kernel's PID on this device; null: not listed. */
  readonly used: number | null;
  /** NVML's used bytes of the whole device. */
  readonly deviceUsed: number | null;
}

/** What is noted right before the restart. */
export interface IRestartBefore {
  /** The old kernel's `hello` (its identity: a new `hello` object means the new kernel speaks). */
  readonly hello: IHello | null;
  readonly pid: number | null;
  readonly createTime: number | null;
  /** From the latest sample: null when there was none (not connected). */
  readonly gpuAvailable: boolean | null;
  /** Why no GPU is visible, when none is. */
  readonly gpuReason: string | null;
  readonly devices: ReadonlyArray<IDeviceBefore>;
  /** The old kernel's children (from `children`), to look for after the restart. */
  readonly children: ReadonlyArray<IChildProcess>;
}

// Declared with the public interfaces' types (tokens.ts names the report and the phase).
export type { IDeviceFreed, ILeftover, IRestartReport, RestartOutcome, RestartPhase } from '../../types';

function deviceLabel(device: ISample['gpu']['devices'][number]): string {
  return device.cuda_index !== null ? `cuda:${device.cuda_index}` : `NVML ${device.nvml_index}`;
}

/** The old PID's figure on a device: null when not listed (or NVML has no number for it). */
function usedBy(device: ISample['gpu']['devices'][number], pid: number): number | null {
  const entry = device.processes.find(p => p.pid === pid);
  if (entry === undefined) {
    return null;
  }
  return entry.used ?? (entry.this_kernel ? device.this_kernel : null);
}

/** Note the kernel's identity, what NVML says it holds, and its children. */
export function recordBefore(
  hello: IHello | null,
  sample: ISample | null,
  children: ReadonlyArray<IChildProcess>
): IRestartBefore {
  const pid = hello?.pid ?? sample?.kernel.pid ?? null;
  const devices: IDeviceBefore[] = [];
  if (sample !== null && pid !== null) {
    for (const device of sample.gpu.devices) {
      devices.push({
        key: deviceKey(device),
        label: deviceLabel(device),
        name: device.name,
        used: usedBy(device, pid),
        deviceUsed: device.used
      });
    }
  }
  return {
    hello,
    pid,
    createTime: hello?.create_time ?? null,
    gpuAvailable: sample === null ? null : sample.gpu.available && sample.gpu.devices.length > 0,
    gpuReason: sample?.gpu.reason ?? null,
    devices,
    children
  };
}

/** True when `sample` comes from a kernel other than the one noted (the restarted one). */
export function isNewKernel(before: IRestartBefore, hello: IHello | null, sample: ISample | null): boolean {
  if (hello === null || sample === null || hello === before.hello || sample.kernel.pid !== hello.pid) {
    return false;
  }
  return before.pid === null || hello.pid !== before.pid;
}

/** True when `sample` (of the new kernel) lists the old PID on no device. */
export function oldPidGone(before: IRestartBefore, sample: ISample): boolean {
  const pid = before.pid;
  return pid === null || !sample.gpu.devices.some(d => d.processes.some(p => p.pid === pid));
}

/** True when there is anything on a GPU to wait for (the old PID was listed on some device). */
export function heldGpuMemory(before: IRestartBefore): boolean {
  return before.devices.some(d => d.used !== null);
}

/** The per-device comparison and the outcome. */
export function restartReport(
  before: IRestartBefore,
  after: ISample | null,
  options: { timedOut: boolean; waitedMs: number; timeoutMs: number; clearedOutputs: boolean }
): IRestartReport {
  let outcome: RestartOutcome;
  if (before.gpuAvailable === false) {
    outcome = 'no-gpu';
  } else if (before.pid === null || before.gpuAvailable === null) {
    outcome = 'unknown';
  } else if (!heldGpuMemory(before)) {
    outcome = 'nothing-held';
  } else if (options.timedOut || after === null) {
    outcome = 'timeout';
  } else {
    outcome = 'freed';
  }
  const devices: IDeviceFreed[] = [];
  if (outcome === 'freed' || outcome === 'timeout') {
    for (const d of before.devices) {
      if (d.used === null) {
        continue;
      }
      const now = after?.gpu.devices.find(x => deviceKey(x) === d.key) ?? null;
      const stillUsed = now === null || before.pid === null ? null : (usedBy(now, before.pid) ?? 0);
      devices.push({
        label: d.label,
        name: d.name,
        before: d.used,
        after: stillUsed,
        freed: stillUsed === null ? null : Math.max(0, d.used - stillUsed),
        deviceUsedBefore: d.deviceUsed,
        deviceUsedAfter: now?.used ?? null
      });
    }
  }
  const figures = devices.map(d => d.freed).filter((f): f is number => f !== null);
  return {
    outcome,
    oldPid: before.pid,
    newPid: after?.kernel.pid ?? null,
    devices,
    totalFreed: figures.length > 0 ? figures.reduce((a, b) => a + b, 0) : null,
    noGpuReason: outcome === 'no-gpu' ? before.gpuReason : null,
    waitedMs: options.waitedMs,
    timeoutMs: options.timeoutMs,
    clearedOutputs: options.clearedOutputs,
    leftovers: [],
    childrenBefore: before.children.length,
    childrenProblem: null,
    oldKernelAlive: null
  };
}

/** The children still running as the same processes (alive and started at the noted time). */
export function leftoversOf(states: ReadonlyArray<IProcessState>): ILeftover[] {
  return states
    .filter(s => s.alive && s.same_process)
    .map(s => ({ pid: s.pid, createTime: s.create_time, name: s.name, gpuUsed: s.gpu_used }));
}

/** The process references of the noted children (what `processes` and `terminate` take). */
export function childRefs(children: ReadonlyArray<IChildProcess>): IProcessRef[] {
  return children.slice(0, 1024).map(c => ({ pid: c.pid, create_time: c.create_time }));
}

/** What the flow needs from JupyterLab and the kernel. */
export interface IRestartDeps {
  /** Ask the user (or not, per the `confirmRestart` setting); false cancels. */
  confirm(): Promise<boolean>;
  /** Note the kernel (asks it for its children right now). */
  record(): Promise<IRestartBefore>;
  /** Restart through the notebook's session context; rejects when there is no kernel to restart. */
  restart(): Promise<void>;
  /** Clear the notebook's outputs (only for "restart, clear and free"). */
  clearOutputs: (() => void) | null;
  /**
   * Resolve with the first sample for which `done(hello, sample)` holds, or null after `timeoutMs`. Called
   * again with the latest data whenever it changes.
   */
  waitFor(
    done: (hello: IHello | null, sample: ISample | null) => boolean,
    timeoutMs: number
  ): Promise<ISample | null>;
  /** The newest sample (the last one seen when waiting timed out). */
  latest(): ISample | null;
  /** Ask the new kernel about processes noted before (`processes`). */
  processes(refs: IProcessRef[]): Promise<IProcessState[]>;
  now(): number;
  timeoutMs: number;
  onPhase(phase: RestartPhase): void;
}

/** Run restart-and-free. Resolves with the report, or null when the user cancelled. */
export async function restartAndFree(deps: IRestartDeps): Promise<IRestartReport | null> {
  deps.onPhase('confirming');
  if (!(await deps.confirm())) {
    return null;
  }
  deps.onPhase('recording');
  const before = await deps.record();
  deps.onPhase('restarting');
  const started = deps.now();
  await deps.restart();
  deps.clearOutputs?.();
  deps.onPhase('waiting');
  // Wait for the new kernel's samples; on a GPU, until none of its devices lists the old PID any more.
  const after = await deps.waitFor(
    (hello, sample) => sample !== null && isNewKernel(before, hello, sample) && oldPidGone(before, sample),
    deps.timeoutMs
  );
  const waitedMs = deps.now() - started;
  const latest = after ?? deps.latest();
  const newSample = latest !== null && latest.kernel.pid !== before.pid ? latest : null;
  const report = restartReport(before, after ?? newSample, {
    timedOut: after === null,
    waitedMs,
    timeoutMs: deps.timeoutMs,
    clearedOutputs: deps.clearOutputs !== null
  });
  // After a timeout, also ask about the old kernel itself (still running, or gone while the driver lags).
  const askOld = report.outcome === 'timeout' && before.pid !== null && before.createTime !== null;
  if (before.children.length === 0 && !askOld) {
    deps.onPhase('done');
    return report;
  }
  deps.onPhase('checking');
  const refs = childRefs(before.children);
  if (askOld && before.pid !== null && before.createTime !== null) {
    refs.push({ pid: before.pid, create_time: before.createTime });
  }
  let leftovers: ILeftover[] = [];
  let childrenProblem: string | null = null;
  let oldKernelAlive: boolean | null = null;
  try {
    const states = await deps.processes(refs);
    const old = askOld ? states.find(s => s.pid === before.pid) : undefined;
    oldKernelAlive = old === undefined ? null : old.alive && old.same_process;
    // Only the old kernel's children are ever offered to end, never the old kernel or anything else.
    const children = new Set(before.children.map(c => c.pid));
    leftovers = leftoversOf(states.filter(s => children.has(s.pid)));
  } catch (error) {
    childrenProblem = error instanceof Error ? error.message : String(error);
  }
  deps.onPhase('done');
  return { ...report, leftovers, childrenProblem, oldKernelAlive };
}
