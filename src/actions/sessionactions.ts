/**
 * What the user can do to one notebook's (or console's) kernel, and what came of it: clear GPU memory,
 * restart and free, end orphaned children, and the OOM checklist of the last CUDA out-of-memory error.
 *
 * One instance per session context, for as long as the notebook is open, so an OOM in a notebook in the
 * background is caught too and its checklist is there when the user switches to it. Everything that needs
 * JupyterLab's UI (dialogs, notifications, cells, other kernels) goes through `IActionHost`, so this class
 * runs against fakes in the unit tests.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { afterIdle } from './followup';
import {
  callFrontend,
  CLEAR_CALL,
  clearReportOf,
  type IExecutingKernel,
  LAST_OOM_CALL,
  oomFromTextCall,
  oomPayloadOf
} from '../channel/frontend';
import type { Trans } from '../ui/i18n';
import { type IIopubLike, type IOomError, oomErrorOf, oomText } from './oom/detect';
import type {
  IChildProcess,
  IHello,
  IHostMemory,
  IKernelExit,
  IOomPayload,
  IOomStep,
  ISample
} from '../wire/protocol';
import { type ILeftover, type IRestartReport, recordBefore, restartAndFree } from './restart/restart';
import type { IGpuMemSettings } from '../settings';
import { occurrenceKey, stepOrigin } from './ticks';
import type {
  ActionOrigin,
  IBridgeView,
  IClearRun,
  IOomRun,
  IRestartRun,
  ISessionActions,
  ITickStore
} from '../tokens';

/** Where a cell goes. */
export type CellPlace = 'below-active' | 'top';

/** JupyterLab's side of the actions (dialogs, notifications, the notebook, other kernels). */
export interface IActionHost {
  readonly trans: Trans;
  settings(): IGpuMemSettings;
  /** Ask before restarting (only called when the `confirmRestart` setting is on). */
  confirmRestart(actions: ISessionActions, clearOutputs: boolean): Promise<boolean>;
  /** An OOM was seen on this session's IOPub (raise the notification). */
  notifyOom(actions: ISessionActions, error: IOomError): void;
  /** Clear every output of the session's notebook, like "Restart Kernel and Clear Outputs". */
  clearOutputs(actions: ISessionActions): void;
  /** Insert a code cell (not run). False when the session has no notebook. */
  insertCell(actions: ISessionActions, code: string, place: CellPlace): boolean;
  /** Shut down another kernel of this server (asks first); resolves true when it was shut down. */
  shutDownKernel(kernelId: string): Promise<boolean>;
  /**
   * Ask the server why kernel process `pid` of `kernelId` died (POST /gpumem/kernels/<id>/exit), sending the
   * kernel's last host reading for the checklist. `exit` null: the server has seen no death of it (yet); null:
   * no answer (the server extension is not enabled, or the answer did not fit the schema).
   */
  kernelExit(kernelId: string, pid: number | null, host: IHostMemory | null): Promise<IDeathAnswer | null>;
  /** The out-of-memory killer ended this session's kernel (raise the notification). */
  notifyOomKill(actions: ISessionActions, death: IKernelExit, summary: ReadonlyArray<string>): void;
}

/** What the server says of a kernel's death, its host checklist checked. */
export interface IDeathAnswer {
  readonly exit: IKernelExit | null;
  readonly checklist: IOomPayload | null;
}

export namespace SessionActions {
  export interface IOptions {
    sessionContext: ISessionContext;
    /** The session's bridge (created on demand by the model). */
    bridge: () => IBridgeView | null;
    host: IActionHost;
    ticks: ITickStore;
    /** The notebook's widget id (commands and the notification name it), or null for a console. */
    widgetId: string | null;
    /** Longest wait for the failing cell's end before asking for the checklist anyway (default 120 s). */
    followUpTimeoutMs?: number;
    /** Delay before re-sending an aborted request (default 1000 ms). */
    retryDelayMs?: number;
    /** Delay between asks of the server why the kernel died (default 1000 ms; it looks once a second). */
    deathPollMs?: number;
  }
}

const NO_TICKS: ReadonlySet<string> = new Set<string>();

/** How many times the server is asked why the kernel died before giving up (once per `deathPollMs`). */
const DEATH_ASKS = 8;

/** A kernel process as its hello names it (PID and start time), or null before a hello. */
function processOf(hello: IHello | null): string | null {
  return hello === null ? null : `${hello.pid}@${hello.create_time ?? '?'}`;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Resolve with the first data for which `done` holds, or null after `timeoutMs`. */
export function waitForData(
  bridge: () => IBridgeView | null,
  done: (hello: IHello | null, sample: ISample | null) => boolean,
  timeoutMs: number
): Promise<ISample | null> {
  return new Promise(resolve => {
    const source = bridge();
    if (source === null) {
      setTimeout(() => resolve(null), 0);
      return;
    }
    let finished = false;
    const check = (): void => {
      if (!finished && done(source.hello, source.latest)) {
        finish(source.latest);
      }
    };
    const finish = (sample: ISample | null): void => {
      finished = true;
      clearTimeout(timer);
      source.dataChanged.disconnect(check);
      resolve(sample);
    };
    const timer = setTimeout(() => finish(null), timeoutMs);
    source.dataChanged.connect(check);
    check();
  });
}

export class SessionActions implements ISessionActions, IDisposable {
  constructor(options: SessionActions.IOptions) {
    this.sessionContext = options.sessionContext;
    this.widgetId = options.widgetId;
    this._bridge = options.bridge;
    this._host = options.host;
    this._ticks = options.ticks;
    this._followUpTimeoutMs = options.followUpTimeoutMs ?? 120000;
    this._retryDelayMs = options.retryDelayMs ?? 1000;
    this._deathPollMs = options.deathPollMs ?? 1000;
    this.sessionContext.iopubMessage.connect(this._onIopub, this);
    this.sessionContext.statusChanged.connect(this._onStatus, this);
    this.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    this._ticks.changed.connect(this._onTicks, this);
  }

  readonly sessionContext: ISessionContext;
  readonly widgetId: string | null;

  /** Emitted on any change of the runs below or of the ticks. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The notebook's path. */
  get path(): string {
    return this.sessionContext.path;
  }

  /**
   * The current kernel run: one more each time the kernel restarts (ours, Kernel > Restart, another
   * client's), dies (with or without the server restarting it) or is replaced by another kernel. Reports
   * and checklists tagged with an earlier run describe a process that is gone: the panel shows them as
   * history.
   */
  get kernelRun(): number {
    return this._kernelRun;
  }

  /** The ticks key of the checklist shown, or null while none is ready. */
  get oomKey(): string | null {
    const payload = this._oom?.payload ?? null;
    return payload === null ? null : occurrenceKey(payload);
  }

  get clearRun(): IClearRun | null {
    return this._clear;
  }

  get restartRun(): IRestartRun | null {
    return this._restart;
  }

  get oomRun(): IOomRun | null {
    return this._oom;
  }

  /** True while a clear or a restart is under way (their buttons are disabled). */
  get busy(): boolean {
    return this.clearing || this.restarting;
  }

  get clearing(): boolean {
    return this._clear?.phase === 'running';
  }

  get restarting(): boolean {
    const phase = this._restart?.phase;
    return phase !== undefined && phase !== 'done' && phase !== 'failed';
  }

  /** The kernel is executing (a request of ours waits behind the running cell). */
  get kernelBusy(): boolean {
    return this.sessionContext.session?.kernel?.status === 'busy';
  }

  /** The step ids ticked in the checklist shown (its occurrence's ticks; empty without one). */
  get ticks(): ReadonlySet<string> {
    const key = this.oomKey;
    return key === null ? NO_TICKS : this._ticks.ticks(key);
  }

  setTick(stepId: string, ticked: boolean): void {
    const key = this.oomKey;
    if (key !== null) {
      this._ticks.set(key, stepId, ticked);
    }
  }

  resetTicks(): void {
    const key = this.oomKey;
    if (key !== null) {
      this._ticks.reset(key);
    }
  }

  /** The kernel's children as last reported (`children` action), for the kernel PID they belong to. */
  get children(): ReadonlyArray<IChildProcess> {
    return this._children?.list ?? [];
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._oomSeq++;
    this._stopWaiting?.();
    this._ticks.changed.disconnect(this._onTicks, this);
    this.sessionContext.kernelChanged.disconnect(this._onKernelChanged, this);
    Signal.clearData(this);
  }

  /**
   * The safe clear (`frontend.clear()`): queued behind a running cell; a second press while it runs does
   * nothing. Resolves true when a report came back. `origin`: the checklist step that started it (its
   * result shows under that step), null for the panel's button.
   */
  async clear(origin: ActionOrigin = null): Promise<boolean> {
    if (this.clearing) {
      return false;
    }
    const kernelRun = this._kernelRun;
    const kernel = this._kernel();
    if (kernel === null) {
      this._setClear({
        phase: 'failed',
        report: null,
        error: this._host.trans.__('No kernel to clear.'),
        origin,
        kernelRun
      });
      return false;
    }
    this._setClear({ phase: 'running', report: null, error: null, origin, kernelRun });
    const options = { retryDelayMs: this._retryDelayMs };
    const result = clearReportOf(await callFrontend(kernel, CLEAR_CALL, options));
    if (this._isDisposed) {
      return false;
    }
    // Tagged with the run it started in: a kernel that died meanwhile makes it history.
    this._setClear(
      result.ok
        ? { phase: 'done', report: result.value, error: null, origin, kernelRun }
        : { phase: 'failed', report: null, error: result.error, origin, kernelRun }
    );
    return result.ok;
  }

  /**
   * Restart the kernel and free its memory (and clear outputs when `clearOutputs`, default: the setting).
   * Resolves with the report, or null when cancelled, failed or already running.
   */
  async restartAndFree(
    clearOutputs?: boolean,
    note: string | null = null,
    origin: ActionOrigin = null
  ): Promise<IRestartReport | null> {
    if (this.restarting) {
      return null;
    }
    const settings = this._host.settings();
    const clear = clearOutputs ?? settings.clearOutputsOnRestart;
    const previous = this._restart;
    // While it runs, it belongs to the run it restarts; once done, to the new run it reports on.
    const base = { clearOutputs: clear, note, origin };
    this._setRestart({ ...base, phase: 'confirming', report: null, error: null, kernelRun: this._kernelRun });
    try {
      const report = await restartAndFree({
        confirm: () =>
          settings.confirmRestart ? this._host.confirmRestart(this, clear) : Promise.resolve(true),
        record: () => this._record(),
        restart: async () => {
          if (!this.sessionContext.session?.kernel) {
            throw new Error(this._host.trans.__('There is no kernel to restart.'));
          }
          await this.sessionContext.restartKernel();
        },
        clearOutputs: clear ? () => this._host.clearOutputs(this) : null,
        waitFor: (done, timeoutMs) => waitForData(this._bridge, done, timeoutMs),
        latest: () => this._bridge()?.latest ?? null,
        processes: async pids => {
          const bridge = this._bridge();
          if (bridge === null) {
            throw new Error(this._host.trans.__('not connected to the new kernel'));
          }
          return (await bridge.request('processes', { pids }, 15000)).processes;
        },
        now: () => Date.now(),
        timeoutMs: settings.restartTimeoutSeconds * 1000,
        onPhase: phase => {
          if (this._restart !== null && phase !== 'done') {
            this._setRestart({ ...this._restart, phase });
          }
        }
      });
      if (report === null) {
        // Cancelled: show what was there before.
        this._setRestart(previous);
        return null;
      }
      this._setRestart({ ...base, phase: 'done', report, error: null, kernelRun: this._kernelRun });
      return report;
    } catch (error) {
      this._setRestart({
        ...base,
        phase: 'failed',
        report: null,
        error: messageOf(error),
        kernelRun: this._kernelRun
      });
      return null;
    }
  }

  /** End an old child that outlived the restart (`terminate`; the kernel checks PID and start time). */
  async endLeftover(pid: number): Promise<void> {
    const run = this._restart;
    const leftover = run?.report?.leftovers.find(l => l.pid === pid);
    const bridge = this._bridge();
    if (run?.report == null || leftover === undefined || leftover.ended) {
      return;
    }
    let update: Partial<ILeftover>;
    if (bridge === null) {
      update = { refused: this._host.trans.__('not connected to the kernel') };
    } else {
      try {
        const result = await bridge.request(
          'terminate',
          { pids: [{ pid: leftover.pid, create_time: leftover.createTime }] },
          15000
        );
        const refused = result.refused.find(r => r.pid === pid);
        update = result.terminated.includes(pid)
          ? { ended: true, refused: undefined }
          : { refused: refused?.reason ?? this._host.trans.__('not ended') };
      } catch (error) {
        update = { refused: messageOf(error) };
      }
    }
    const current = this._restart;
    if (current?.report == null) {
      return;
    }
    const leftovers = current.report.leftovers.map(l => (l.pid === pid ? { ...l, ...update } : l));
    this._setRestart({ ...current, report: { ...current.report, leftovers } });
  }

  /**
   * Run a checklist step's action; ticks the step of occurrence `key` (default: the checklist shown here)
   * when it did what it says. Clear and restart remember the step as their origin, so their result shows
   * under the button that started them (inline and in the panel).
   */
  async runStep(step: IOomStep, key: string | null = this.oomKey): Promise<void> {
    const origin = key === null ? null : stepOrigin(key, step.id);
    let done = false;
    switch (step.action) {
      case 'clear':
        done = await this.clear(origin);
        break;
      case 'restart':
        done = (await this.restartAndFree(undefined, null, origin)) !== null;
        break;
      case 'shutdown-kernel':
        done = step.kernel_id !== null && (await this._host.shutDownKernel(step.kernel_id));
        break;
      case 'insert-cell':
        done = step.code !== null && this._host.insertCell(this, step.code, 'below-active');
        break;
      case 'insert-env-cell-and-restart':
        if (step.code !== null && this._host.insertCell(this, step.code, 'top')) {
          const note = this._host.trans.__(
            'Run the cell inserted at the top of the notebook first: the allocator reads its setting only before torch first uses the GPU.'
          );
          done = (await this.restartAndFree(undefined, note, origin)) !== null;
        }
        break;
      case null:
        return;
    }
    if (done && !this._isDisposed && key !== null) {
      this._ticks.set(key, step.id, true);
    }
  }

  /**
   * Show the checklist of the kernel's last OOM (the command and the notification's action use this when
   * no OOM was seen here, e.g. it happened before the page loaded).
   */
  async loadLastOom(): Promise<void> {
    if (this._oom !== null && this._oom.phase !== 'failed' && this._oom.kernelRun === this._kernelRun) {
      return;
    }
    const kernel = this._kernel();
    if (kernel === null) {
      return;
    }
    const seq = ++this._oomSeq;
    const kernelRun = this._kernelRun;
    const error: IOomError = { ename: 'OutOfMemoryError', evalue: '', parentId: null };
    this._setOom({ phase: 'loading', error, payload: null, problem: null, kernelRun });
    const options = { retryDelayMs: this._retryDelayMs };
    const result = oomPayloadOf(await callFrontend(kernel, LAST_OOM_CALL, options));
    this._settleOom(
      seq,
      error,
      result,
      this._host.trans.__('No CUDA out-of-memory error in this kernel yet.'),
      kernelRun
    );
  }

  /** Hide the checklist (its ticks stay remembered). */
  dismissOom(): void {
    this._oomSeq++;
    this._stopWaiting?.();
    this._setOom(null);
  }

  /** Hide the clear report or the restart report (a clear of an earlier kernel run even while "running"). */
  dismissReport(which: 'clear' | 'restart'): void {
    if (which === 'clear' && (!this.clearing || this._clear?.kernelRun !== this._kernelRun)) {
      this._setClear(null);
    } else if (which === 'restart' && !this.restarting) {
      this._setRestart(null);
    }
  }

  /**
   * Keep the list of the kernel's children fresh: ask again whenever the sample's child count changes (the
   * model calls this on every data change of this session).
   */
  onData(): void {
    const sample = this._bridge()?.latest ?? null;
    if (sample === null) {
      return;
    }
    const pid = sample.kernel.pid;
    const count = sample.host.children.count;
    const known = this._children;
    if (known !== null && known.pid === pid && known.count === count) {
      return;
    }
    this._children = { pid, count, list: count === 0 ? [] : known?.pid === pid ? known.list : [] };
    if (count > 0) {
      void this._fetchChildren(pid, count);
    }
  }

  // -------------------------------------------------------------------------------------------------------

  private _kernel(): (Kernel.IKernelConnection & IExecutingKernel) | null {
    const kernel = this.sessionContext.session?.kernel ?? null;
    return kernel === null || kernel.isDisposed ? null : kernel;
  }

  private async _fetchChildren(pid: number, count: number): Promise<IChildProcess[] | null> {
    const bridge = this._bridge();
    if (bridge === null) {
      return null;
    }
    try {
      const list = (await bridge.request('children', {}, 5000)).children;
      if (this._children?.pid === pid) {
        this._children = { pid, count, list };
      }
      return list;
    } catch {
      return null;
    }
  }

  /** Note the kernel right before restarting it: identity, NVML figures, and its children asked now. */
  private async _record(): Promise<ReturnType<typeof recordBefore>> {
    const bridge = this._bridge();
    const hello = bridge?.hello ?? null;
    const sample = bridge?.latest ?? null;
    let children: ReadonlyArray<IChildProcess> =
      this._children !== null && this._children.pid === hello?.pid ? this._children.list : [];
    if (bridge !== null && hello !== null) {
      const fresh = await this._fetchChildren(hello.pid, sample?.host.children.count ?? 0);
      if (fresh !== null) {
        children = fresh;
      }
    }
    return recordBefore(hello, sample, children);
  }

  private _onIopub(_: unknown, msg: IIopubLike): void {
    const error = oomErrorOf(msg);
    if (error === null || this._isDisposed) {
      return;
    }
    void this._onOom(error);
  }

  private async _onOom(error: IOomError): Promise<void> {
    this._stopWaiting?.(); // a newer OOM replaces the one still waiting
    const seq = ++this._oomSeq;
    const kernelRun = this._kernelRun;
    this._setOom({ phase: 'waiting', error, payload: null, problem: null, kernelRun });
    this._host.notifyOom(this, error);
    // ipykernel aborts requests queued behind the failing cell: ask only once that cell has ended.
    if (error.parentId !== null) {
      let stop: () => void = () => undefined;
      const stopped = new Promise<void>(resolve => {
        stop = resolve;
      });
      this._stopWaiting = stop;
      const outcome = await afterIdle(
        this.sessionContext.iopubMessage as unknown as ISignal<unknown, IIopubLike>,
        error.parentId,
        this._followUpTimeoutMs,
        stopped
      );
      if (this._stopWaiting === stop) {
        this._stopWaiting = null;
      }
      if (seq !== this._oomSeq) {
        return;
      }
      if (outcome === 'cancelled') {
        this._setOom({
          phase: 'failed',
          error,
          payload: null,
          problem: this._host.trans.__('The kernel restarted before the checklist could be built.'),
          kernelRun
        });
        return;
      }
    }
    const kernel = this._kernel();
    if (kernel === null) {
      return;
    }
    this._setOom({ phase: 'loading', error, payload: null, problem: null, kernelRun });
    const options = { retryDelayMs: this._retryDelayMs };
    let result = oomPayloadOf(await callFrontend(kernel, LAST_OOM_CALL, options));
    if (result.ok && result.value === null && seq === this._oomSeq) {
      // The handler did not see it (the shim was loaded later, or another library raised it): parse the text.
      result = oomPayloadOf(await callFrontend(kernel, oomFromTextCall(oomText(error)), options));
    }
    this._settleOom(
      seq,
      error,
      result,
      this._host.trans.__('The kernel could not read this error message.'),
      kernelRun
    );
  }

  private _onStatus(_: unknown, status: Kernel.Status): void {
    switch (status) {
      case 'restarting':
      case 'autorestarting':
      case 'dead': {
        this._stopWaiting?.();
        this._endRun();
        const kernelId = this.sessionContext.session?.kernel?.id ?? null;
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
      this._stopWaiting?.();
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
        await new Promise(resolve => setTimeout(resolve, this._deathPollMs));
      }
      if (this._isDisposed || kernelRun !== this._kernelRun) {
        return; // another restart meanwhile: this death is history
      }
      answer = await this._host.kernelExit(kernelId, hello?.pid ?? null, host).catch(() => null);
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
    this._oomSeq++; // a checklist still loading for the dead process's own error loses to this one
    this._stopWaiting?.();
    const error: IOomError = { ename: 'OOM killer', evalue: payload.summary[0], parentId: null };
    this._setOom({ phase: 'ready', error, payload, problem: null, kernelRun });
    this._host.notifyOomKill(this, death, payload.summary);
  }

  /** The kernel process of this run is gone: count a new run (once per restart, however many statuses). */
  private _endRun(): void {
    if (this._runEnded) {
      return;
    }
    this._runEnded = true;
    this._sawRunning = false;
    // What the panel last knew of the process, before the new one's hello replaces it.
    this._endedHello = this._bridge()?.hello ?? null;
    this._endedHost = this._bridge()?.latest?.host ?? null;
    this._endedProcess = processOf(this._endedHello);
    this._kernelRun++;
    this._changed.emit();
  }

  /** The bridge still knows only the process that the last counted end ended (no hello since). */
  private _sameProcessAsEnded(): boolean {
    const now = processOf(this._bridge()?.hello ?? null);
    return now !== null && now === this._endedProcess;
  }

  private _onTicks(_: ITickStore, key: string): void {
    if (key === this.oomKey) {
      this._changed.emit();
    }
  }

  private _setClear(run: IClearRun | null): void {
    this._clear = run;
    this._changed.emit();
  }

  private _setRestart(run: IRestartRun | null): void {
    this._restart = run;
    this._changed.emit();
  }

  /**
   * Show a fetched checklist, or why there is none (`whenNone`: the kernel answered but had no checklist);
   * a newer OOM or request (another `seq`) wins, so a late answer never overwrites it.
   */
  private _settleOom(
    seq: number,
    error: IOomError,
    result: ReturnType<typeof oomPayloadOf>,
    whenNone: string,
    kernelRun: number
  ): void {
    if (seq !== this._oomSeq) {
      return;
    }
    if (result.ok && result.value !== null) {
      this._setOom({ phase: 'ready', error, payload: result.value, problem: null, kernelRun });
    } else {
      this._setOom({
        phase: 'failed',
        error,
        payload: null,
        problem: result.ok ? whenNone : result.error,
        kernelRun
      });
    }
  }

  private _setOom(run: IOomRun | null): void {
    this._oom = run;
    this._changed.emit();
  }

  private readonly _bridge: () => IBridgeView | null;
  private readonly _host: IActionHost;
  private readonly _ticks: ITickStore;
  private readonly _followUpTimeoutMs: number;
  private readonly _retryDelayMs: number;
  private readonly _deathPollMs: number;
  /** The kernel process (`processOf` its hello) whose death was asked about last. */
  private _explainedProcess: string | null = null;
  private _clear: IClearRun | null = null;
  private _restart: IRestartRun | null = null;
  private _oom: IOomRun | null = null;
  private _oomSeq = 0;
  private _kernelRun = 0;
  /** The run was counted as ended and no new one has been seen running yet. */
  private _runEnded = false;
  /** The kernel of this run reported idle or busy (a later 'starting' is a restart, not the start-up). */
  private _sawRunning = false;
  /** The kernel process (`processOf` its hello) whose end was counted last. */
  private _endedProcess: string | null = null;
  private _endedHello: IHello | null = null;
  private _endedHost: IHostMemory | null = null;
  /** Ends the wait for a failing cell's end (restart, a newer OOM, dismiss, dispose). */
  private _stopWaiting: (() => void) | null = null;
  private _children: { pid: number; count: number; list: ReadonlyArray<IChildProcess> } | null = null;
  private _isDisposed = false;
  private readonly _changed = new Signal<this, void>(this);
}
