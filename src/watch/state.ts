/**
 * What an output-area watch (`%gpumem watch`) knows: the newest sample, each device's last minutes, the peak
 * since the watch started, and the kernel's events (stopped, an out-of-memory error, a clear's report).
 *
 * Every message is checked with the panel's own validators (the same `history` and `sample` messages) before
 * it changes anything; one that does not fit is kept as a one-line problem, never drawn half.
 */
import { deviceKey, kernelTotal } from '../channel/sample';
import {
  type IClearPayload,
  type IOomPayload,
  type ISample,
  parseKernelMessage,
  ProtocolProblem,
  watchEventProblem,
  type IWatchEvent
} from '../wire/protocol';

/** The chart's span in seconds (the kernel sends this much history: gpumem_kernel/watchwidget/session.py). */
export const CHART_SECONDS = 300;

/** One point of a device's chart. */
export interface IPoint {
  readonly time: number;
  /** This kernel's total on the device (NVML's figure for its PID, or what its allocator reserves). */
  readonly kernel: number;
  /** The device's used memory, every process (null when NVML could not read it). */
  readonly used: number | null;
}

export interface IPeak {
  readonly kernel: number;
  readonly used: number | null;
}

export class WatchState {
  /** `started`: the kernel's clock when the watch was made; the peak counts samples from then on. */
  constructor(readonly started: number) {}

  sample: ISample | null = null;
  /** Samples taken in (each `seq` once): what the browser test counts as updates. */
  updates = 0;
  stopped: string | null = null;
  oom: IOomPayload | null = null;
  clear: IClearPayload | null = null;
  /** The last thing that went wrong, one line (a refused message, a request the kernel could not serve). */
  problem: string | null = null;

  private readonly _series = new Map<string, IPoint[]>();
  private readonly _peaks = new Map<string, IPeak>();
  private _lastSeq = -1;

  series(key: string): ReadonlyArray<IPoint> {
    return this._series.get(key) ?? [];
  }

  peak(key: string): IPeak | null {
    return this._peaks.get(key) ?? null;
  }

  /** Take in one message from the kernel; false when it was refused (see `problem`). */
  receive(data: unknown): boolean {
    if (typeof data === 'object' && data !== null && (data as { type?: unknown }).type === 'watch_event') {
      const problem = watchEventProblem(data);
      if (problem !== null) {
        this.problem = `gpumem watch: message refused: ${problem}`;
        return false;
      }
      this._event(data as IWatchEvent);
      return true;
    }
    const message = parseKernelMessage(data);
    if (message instanceof ProtocolProblem) {
      this.problem = `gpumem watch: message refused: ${message.message}`;
      return false;
    }
    if (message.type === 'history') {
      message.samples.forEach(s => this._take(s));
    } else if (message.type === 'sample') {
      this._take(message);
    }
    return true;
  }

  private _event(event: IWatchEvent): void {
    if (event.stopped !== null) {
      this.stopped = event.stopped;
    }
    if (event.oom !== null) {
      this.oom = event.oom;
    }
    if (event.clear !== null) {
      this.clear = event.clear;
    }
    this.problem = event.error;
  }

  private _take(sample: ISample): void {
    if (sample.seq <= this._lastSeq) {
      return; // a view that asked for the history again: samples it already has
    }
    this._lastSeq = sample.seq;
    this.sample = sample;
    this.stopped = null; // samples flow again (a reattached view)
    this.updates += 1;
    for (const device of sample.gpu.devices) {
      const key = deviceKey(device);
      const point: IPoint = { time: sample.time, kernel: kernelTotal(device), used: device.used };
      const points = [...this.series(key), point].filter(p => p.time >= sample.time - CHART_SECONDS);
      this._series.set(key, points);
      if (sample.time >= this.started) {
        const old = this._peaks.get(key);
        this._peaks.set(key, {
          kernel: Math.max(old?.kernel ?? 0, point.kernel),
          used: maxKnown(old?.used ?? null, point.used)
        });
      }
    }
  }
}

function maxKnown(a: number | null, b: number | null): number | null {
  if (a === null) {
    return b;
  }
  return b === null ? a : Math.max(a, b);
}
