/**
 * The last N minutes of samples of one kernel, for the panel's sample chart.
 *
 * A sample arrives every second (or faster) for as long as the notebook is open, so the buffer drops samples
 * older than the window and caps its length; it accepts a sample only if it is newer than the newest one it
 * holds, which merges the kernel's `history` message with live samples (they overlap) and keeps samples from
 * before a kernel restart (the new kernel's `seq` starts again, its `time` does not).
 */
import type { ISample } from '../wire/protocol';

/** Upper bound on the number of samples kept, whatever the window (60 min at 0.1 s). */
export const MAX_SAMPLES = 36000;

export class SampleBuffer {
  /**
   * @param windowSeconds - how far back to keep samples, measured from the newest sample.
   * @param maxLength - hard cap on the number of samples.
   */
  constructor(windowSeconds: number, maxLength: number = MAX_SAMPLES) {
    this._window = windowSeconds;
    this._maxLength = maxLength;
  }

  /** How far back samples are kept, in seconds. */
  get windowSeconds(): number {
    return this._window;
  }

  set windowSeconds(seconds: number) {
    this._window = seconds;
    this._prune();
  }

  /** Number of samples held. */
  get length(): number {
    return this._items.length - this._head;
  }

  /** The newest sample, or null. */
  get latest(): ISample | null {
    return this.length > 0 ? this._items[this._items.length - 1] : null;
  }

  /** Add one sample; returns false (and ignores it) when it is not newer than the newest held. */
  push(sample: ISample): boolean {
    const latest = this.latest;
    if (latest !== null && sample.time <= latest.time) {
      return false;
    }
    this._items.push(sample);
    this._snapshot = null;
    this._prune();
    return true;
  }

  /** Add samples (oldest first); returns how many were new. */
  merge(samples: ReadonlyArray<ISample>): number {
    let added = 0;
    for (const sample of samples) {
      if (this.push(sample)) {
        added++;
      }
    }
    return added;
  }

  /** Forget everything (another kernel). */
  clear(): void {
    this._items = [];
    this._head = 0;
    this._snapshot = null;
  }

  /** The samples, oldest first. The array is shared until the next change: do not modify it. */
  toArray(): ReadonlyArray<ISample> {
    if (this._snapshot === null) {
      this._snapshot = this._items.slice(this._head);
    }
    return this._snapshot;
  }

  private _prune(): void {
    const latest = this.latest;
    if (latest === null) {
      return;
    }
    const oldest = latest.time - this._window;
    const before = this._head;
    while (
      this._head < this._items.length &&
      (this._items[this._head].time < oldest || this.length > this._maxLength)
    ) {
      this._head++;
    }
    if (this._head !== before) {
      this._snapshot = null;
    }
    // Compact now and then instead of shifting on every sample.
    if (this._head > 1024 && this._head * 2 > this._items.length) {
      this._items = this._items.slice(this._head);
      this._head = 0;
    }
  }

  private _items: ISample[] = [];
  private _head = 0;
  private _window: number;
  private _maxLength: number;
  private _snapshot: ReadonlyArray<ISample> | null = null;
}
