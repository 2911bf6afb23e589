/**
 * The kernel runs of one session: one more each time the kernel restarts (ours, Kernel > Restart, another
 * client's), dies (with or without the server restarting it) or is replaced by another kernel, however many
 * statuses report it. When the kernel dies without being asked to, the server is asked why; an OOM-killer death
 * comes back with the host checklist the server built.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import type { IActionHost, IDeathAnswer } from './actionhost';
import type { IHello, IHostMemory, IKernelExit, IOomPayload } from '../wire/protocol';
import type { IBridgeView } from '../tokens';

/** How many times the server is asked why the kernel died before giving up (once per `deathPollMs`). */
const DEATH_ASKS = 8;

/** A kernel process as its hello names it (PID and start time), or null before a hello. */
function processOf(hello: IHello | null): string | null {
  return hello === null ? null : `${hello.pid}@${hello.create_time ?? '?'}`;
}

export namespace KernelRuns {
  export interface IOptions {
    sessionContext: ISessionContext;
    /** The session's bridge (what the panel last knew of the kernel process). */
    bridge: () => IBridgeView | null;
    host: IActionHost;
    /** Delay between asks of the server why the kernel died. */
    deathPollMs: number;
    /** The kernel process is going: end what waits on it (called before the run is counted as ended). */
    ending: () => void;
    /** A run ended (the count changed). */
    changed: () => void;
    /** The out-of-memory killer ended the kernel of run `kernelRun - 1`: its host checklist, for `kernelRun`. */
    oomKilled: (death: IKernelExit, checklist: IOomPayload, kernelRun: number) => void;
  }
}

export class KernelRuns {
  constructor(options: KernelRuns.IOptions) {
    this._options = options;
    options.sessionContext.statusChanged.connect(this._onStatus, this);
    options.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
  }

  /** The current kernel run. */
  get current(): number {
    return this._kernelRun;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._options.sessionContext.kernelChanged.disconnect(this._onKernelChanged, this);
    Signal.clearData(this);
  }

  private _onStatus(_: unknown, status: Kernel.Status): void {
    switch (status) {
      case 'restarting':
      case 'autorestarting':
      case 'dead': {
        this._options.ending();
        this._endRun();
        const kernelId = this._options.sessionContext.session?.kernel?.id ?? null;
        // 'autorestarting' and 'dead' come only from a death nobody asked for ('restarting' also from a restart).
        if (status !== 'restarting' && kernelId !== null) {
          void this._explainDeath(kernelId, this._endedHello, this._endedHost);
        }
        break;
      }
      case 'starting':
        // Outside our own start-up: another client restarted the kernel (JupyterLab reports only this) —
        // unless it is the new process of the restart counted last, still before its hello (a server restart
        // after kill -9 reports 'restarting', 'autorestarting', 'busy', then the new process's 'starting').
        if (this._sawRunning && !this._sameProcessAsEnded()) {
          this._endRun();
        }
        break;
      case 'idle':
      case 'busy':
        this._runEnded = false;
        this._sawRunning = true;
        break;
    }
  }

  private _onKernelChanged(_: unknown, change: { oldValue: unknown; newValue: unknown }): void {
    // SessionContext.restartKernel() announces its restart as a change to the same kernel connection: that
    // restart was counted by its statuses already.
    if (change.oldValue !== null && change.oldValue !== undefined && change.oldValue !== change.newValue) {
      this._options.ending();
      this._runEnded = false; // another kernel: always a new run
      this._endRun();
    }
  }

  /**
   * The kernel died without being asked to: ask the server why, once per process. When the out-of-memory killer
   * ended it, the host checklist the server built (with the kernel's last host reading from the panel's
   * samples) becomes this session's checklist, tagged with the new run (its steps are for what runs next), and
   * a notification says so. The server judges a death within a second: ask a few times.
   */
  private async _explainDeath(
    kernelId: string,
    hello: IHello | null,
    host: IHostMemory | null
  ): Promise<void> {
    const process = processOf(hello);
    if (process !== null && process === this._explainedProcess) {
      return;
    }
    this._explainedProcess = process;
    const kernelRun = this._kernelRun;
    let answer: IDeathAnswer | null = null;
    for (let attempt = 0; attempt < DEATH_ASKS; attempt++) {
      if (attempt > 0) {
        await new Promise(resolve => setTimeout(resolve, this._options.deathPollMs));
      }
      if (this._isDisposed || kernelRun !== this._kernelRun) {
        return; // another restart meanwhile: this death is history
      }
      answer = await this._options.host.kernelExit(kernelId, hello?.pid ?? null, host).catch(() => null);
      if (answer === null || answer.exit !== null) {
        break;
      }
    }
    const death = answer?.exit ?? null;
    if (this._isDisposed || kernelRun !== this._kernelRun || death === null || !death.oom_killed) {
      return;
    }
    const payload = answer?.checklist ?? null;
    if (payload === null) {
      return;
    }
    this._options.oomKilled(death, payload, kernelRun);
  }

  /** The kernel process of this run is gone: count a new run (once per restart, however many statuses). */
  private _endRun(): void {
    if (this._runEnded) {
      return;
    }
    this._runEnded = true;
    this._sawRunning = false;
    // What the panel last knew of the process, before the new one's hello replaces it.
    this._endedHello = this._options.bridge()?.hello ?? null;
    this._endedHost = this._options.bridge()?.latest?.host ?? null;
    this._endedProcess = processOf(this._endedHello);
    this._kernelRun++;
    this._options.changed();
  }

  /** The bridge still knows only the process that the last counted end ended (no hello since). */
  private _sameProcessAsEnded(): boolean {
    const now = processOf(this._options.bridge()?.hello ?? null);
    return now !== null && now === this._endedProcess;
  }

  private readonly _options: KernelRuns.IOptions;
  /** The kernel process (`processOf` its hello) whose death was asked about last. */
  private _explainedProcess: string | null = null;
  private _kernelRun = 0;
  /** The run was counted as ended and no new one has been seen running yet. */
  private _runEnded = false;
  /** The kernel of this run reported idle or busy (a later 'starting' is a restart, not the start-up). */
  private _sawRunning = false;
  /** The kernel process (`processOf` its hello) whose end was counted last. */
  private _endedProcess: string | null = null;
  private _endedHello: IHello | null = null;
  private _endedHost: IHostMemory | null = null;
  private _isDisposed = false;
}
