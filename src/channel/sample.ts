/**
 * What the views compute from a sample, kept apart from the model so that pure code (the restart report, the
 * panel, the status bar) needs no bridge: who holds a GPU process, the parts of a device's memory bar, the
 * identity of a device across samples, and the device the kernel uses most. Exported for tests and for other
 * extensions.
 */
import { type Trans, untranslated } from '../ui/i18n';
import type { IKernelSession } from '../types';
import type { IDevice, IGpuProcess, ISample } from '../wire/protocol';

// Declared with the public interfaces' types (tokens.ts names the sessions).
export type { IKernelSession } from '../types';

/** Who holds a GPU process, as the kernel matched it (kernels too old to say are read from the older fields). */
export type ProcessRelation = NonNullable<IGpuProcess['relation']>;

/**
 * The process's relation: the kernel's `relation` (which in a container matches NVML's host PIDs to this kernel
 * and to the processes started from its notebook), else `this_kernel` and `kernel_id` as older kernels send them.
 */
export function processRelation(process: IGpuProcess): ProcessRelation {
  if (process.relation !== undefined) {
    return process.relation;
  }
  if (process.this_kernel) {
    return 'this_kernel';
  }
  return process.kernel_id !== null ? 'other_kernel' : 'external';
}

/** This kernel, probably this kernel, or one of several host PIDs one of which is it: never "other processes". */
export function isSelf(process: IGpuProcess): boolean {
  const relation = processRelation(process);
  return relation === 'this_kernel' || relation === 'probably_this_kernel' || relation === 'ambiguous';
}

/**
 * A process started from this notebook that the kernel may end (`terminate`, by its PID in the kernel's namespace
 * and its start time; the kernel checks that it is its own descendant), or null.
 */
export function endableProcess(process: IGpuProcess): { pid: number; create_time: number } | null {
  if (processRelation(process) !== 'notebook') {
    return null;
  }
  const pid = process.local_pid ?? null;
  const created = process.create_time ?? null;
  return pid !== null && created !== null ? { pid, create_time: created } : null;
}

/**
 * Who holds a GPU process: "this kernel" (in a container: "probably this kernel (host PID N)" until the kernel
 * confirmed it, "this kernel or another (ambiguous)" when it cannot tell), "started from this notebook",
 * "notebook: <path>" / "console: <path>" for another kernel of this server, "kernel <id8>" for a kernel the
 * server does not list (another server, or already shut down), or "external" for everything else (a training
 * script, another user's job, the desktop).
 */
export function labelProcess(
  process: IGpuProcess,
  sessionsByKernelId: ReadonlyMap<string, IKernelSession>,
  trans: Trans = untranslated
): string {
  switch (processRelation(process)) {
    case 'this_kernel':
      return trans.__('this kernel');
    case 'probably_this_kernel':
      return trans.__('probably this kernel (host PID %1)', process.pid);
    case 'ambiguous':
      return trans.__('this kernel or another (ambiguous)');
    case 'notebook':
      return trans.__('started from this notebook');
    default:
      break;
  }
  if (process.kernel_id !== null) {
    const session = sessionsByKernelId.get(process.kernel_id);
    if (session !== undefined) {
      return session.type === 'console'
        ? trans.__('console: %1', session.path)
        : trans.__('notebook: %1', session.path);
    }
    return trans.__('kernel %1', process.kernel_id.slice(0, 8));
  }
  return trans.__('external');
}

/**
 * The host PIDs of a device one of which is this kernel ("this kernel is one of host PIDs A, B"), sorted; empty
 * when the kernel knows which it is.
 */
export function ambiguousPids(device: IDevice): number[] {
  return device.processes
    .filter(p => processRelation(p) === 'ambiguous')
    .map(p => p.pid)
    .sort((a, b) => a - b);
}

/** The parts of a device's memory bar. */
export type SegmentKey =
  'allocated' | 'cached' | 'context' | 'kernel' | 'notebook' | 'uncertain' | 'others' | 'free';

/** The legend's words for each bar segment. */
export function segmentLabel(key: SegmentKey, trans: Trans): string {
  switch (key) {
    case 'allocated':
      return trans.__('allocated (tensors)');
    case 'cached':
      return trans.__('cached by PyTorch');
    case 'context':
      return trans.__('CUDA context & libraries');
    case 'kernel':
      return trans.__('this kernel');
    case 'notebook':
      return trans.__('started from this notebook');
    case 'uncertain':
      return trans.__('this kernel or another (ambiguous)');
    case 'others':
      return trans.__('other processes');
    case 'free':
      return trans.__('free');
  }
}

/** One part of the bar, in bytes. */
export interface ISegment {
  readonly key: SegmentKey;
  readonly bytes: number;
}

/**
 * This kernel's total on a device: NVML's figure for its PID when listed, otherwise what its allocator
 * reserves (NVML cannot see PIDs in some containers), otherwise 0.
 */
export function kernelTotal(device: IDevice): number {
  const reserved = device.allocator?.reserved ?? 0;
  return Math.max(device.this_kernel ?? 0, reserved);
}

/**
 * The stacked bar of a device, left to right, summing to the device's total:
 * - with torch's allocator: `allocated` (live tensors), `cached` (reserved − allocated), `context` (NVML's
 *   figure for this kernel − reserved: CUDA context, cuBLAS/cuDNN workspaces and libraries);
 * - without (torch has not initialised CUDA on it): one `kernel` segment, NVML's figure for this kernel;
 * - `notebook`: the processes started from this notebook (`!python train.py`, torchrun, workers), when any;
 * - `uncertain`: host PIDs one of which is this kernel (a container; the kernel cannot tell which yet), when any:
 *   never counted as other processes;
 * - then `others` (device used − all of the above) and `free`.
 * Differences that come out negative (the numbers are read at slightly different moments) count as 0.
 * When NVML could not read the device's used or total bytes (null), `others` or `free` is left out.
 */
export function deviceSegments(device: IDevice): ISegment[] {
  const mine = kernelTotal(device);
  const segments: ISegment[] = [];
  const allocator = device.allocator;
  if (allocator !== null) {
    const allocated = allocator.allocated;
    const reserved = Math.max(allocator.reserved, allocated);
    segments.push(
      { key: 'allocated', bytes: allocated },
      { key: 'cached', bytes: reserved - allocated },
      { key: 'context', bytes: Math.max(0, mine - reserved) }
    );
  } else {
    segments.push({ key: 'kernel', bytes: mine });
  }
  const notebook = device.notebook_processes ?? 0;
  const uncertain = device.uncertain ?? 0;
  if (notebook > 0) {
    segments.push({ key: 'notebook', bytes: notebook });
  }
  if (uncertain > 0) {
    segments.push({ key: 'uncertain', bytes: uncertain });
  }
  if (device.used !== null) {
    segments.push({ key: 'others', bytes: Math.max(0, device.used - mine - notebook - uncertain) });
  }
  if (device.total !== null) {
    segments.push({
      key: 'free',
      bytes: Math.max(0, device.total - Math.max(device.used ?? mine, mine))
    });
  }
  return segments;
}

/** What the bar's full width stands for: the device's total, or the sum of what is known. */
export function barTotal(device: IDevice, segments: ReadonlyArray<ISegment>): number {
  return device.total ?? segments.reduce((sum, s) => sum + s.bytes, 0);
}

/**
 * A device's identity across samples. `nvml_index` alone is not unique (a MIG slice shares its GPU's
 * index); the UUID is, when NVML could read it.
 */
export function deviceKey(device: IDevice): string {
  return (
    device.uuid ?? `nvml${device.nvml_index}${device.mig ? '-mig' : ''}-cuda${device.cuda_index ?? 'none'}`
  );
}

/**
 * The device the status bar shows: the one this kernel uses most; when it uses none, `cuda:0`; when CUDA sees
 * none, the first device NVML lists; null when there is no device at all.
 */
export function primaryDevice(sample: ISample | null): IDevice | null {
  const devices = sample?.gpu.devices ?? [];
  let best: IDevice | null = null;
  for (const device of devices) {
    const used = kernelTotal(device);
    if (used > 0 && (best === null || used > kernelTotal(best))) {
      best = device;
    }
  }
  return best ?? devices.find(d => d.cuda_index === 0) ?? devices[0] ?? null;
}
