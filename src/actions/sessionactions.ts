/**
 * What the user can do to one notebook's (or console's) kernel, and what came of it: clear GPU memory,
 * restart and free, end orphaned children, and the OOM checklist of the last CUDA out-of-memory error.
 *
 * One instance per session context, for as long as the notebook is open, so an OOM in a notebook in the
 * background is caught too and its checklist is there when the user switches to it. Everything that needs
 * JupyterLab's UI (dialogs, notifications, cells, other kernels) goes through `IActionHost`, so this class
 * runs against fakes in the unit tests.
 *
 * This file holds clear, restart and free, the leftover children and the checklist's steps; the OOM checklist
 * itself is in oomchecklist.ts, the counting of kernel runs (and the server's word on a death) in
 * kernelruns.ts, and the host interface in actionhost.ts.
 *
 * A clear ticks the checklist's "Clear GPU memory" step of the OOM shown, with what it freed, whoever started
 * it: the panel's button, the step's own button, or `%gpumem clear` in a cell (its report seen on IOPub).
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import type { IActionHost } from './actionhost';
import { callFrontend, CLEAR_CALL, clearReportOf, type IExecutingKernel } from '../channel/frontend';
import type { IIopubLike } from './oom/detect';
import { KernelRuns } from './kernelruns';
import { OomChecklistModel } from './oomchecklist';
import {
  CLEAR_MIME,
  type IChildProcess,
  type IClearPayload,
  type IHello,
  type IOomStep,
  isClearPayload,
  type ISample
} from '../wire/protocol';
import { type ILeftover, type IRestartReport, recordBefore, restartAndFree } from './restart/restart';
import { stepOrigin } from './ticks';
import type {
  ActionCard,
  ActionOrigin,
  IBridgeView,
  IClearRun,
  IClearTick,
  IOomRun,
  IRestartRun,
  ISessionActions,
  ITickStore
} from '../tokens';

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
    this._retryDelayMs = options.retryDelayMs ?? 1000;
    this._oom = new OomChecklistModel({
      sessionContext: this.sessionContext,
      actions: this,
      host: this._host,
      kernel: () => this._kernel(),
      kernelRun: () => this._runs.current,
      followUpTimeoutMs: options.followUpTimeoutMs ?? 120000,
      retryDelayMs: this._retryDelayMs,
      changed: () => {
        this._noteOom();
        this._changed.emit();
      }
    });
    this._runs = new KernelRuns({
      sessionContext: this.sessionContext,
      bridge: this._bridge,
      host: this._host,
      deathPollMs: options.deathPollMs ?? 1000,
      ending: () => this._oom.stopWaiting(),
      changed: () => this._changed.emit(),
      oomKilled: (death, checklist, kernelRun) => {
        this._oom.showKill(checklist, kernelRun);
        this._host.notifyOomKill(this, death, checklist.summary);
      }
    });
    this._ticks.changed.connect(this._onTicks, this);
    this.sessionContext.iopubMessage.connect(this._onIopub, this);
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
    return this._runs.current;
  }

  /** The ticks key of the checklist shown, or null while none is ready. */
  get oomKey(): string | null {
    return this._oom.key;
  }

  get clearRun(): IClearRun | null {
    return this._clear;
  }

  get restartRun(): IRestartRun | null {
    return this._restart;
  }

  get oomRun(): IOomRun | null {
    return this._oom.run;
  }

  /**
   * The last clear that ticked the clear step of the checklist shown, in this kernel run (null: none; a clear
   * of an earlier run freed memory of a process that is gone).
   */
  get clearTick(): IClearTick | null {
    const tick = this._clearTick;
    return tick !== null && tick.tick.key === this.oomKey && tick.kernelRun === this._runs.current
      ? tick.tick
      : null;
  }

  /** The cards there are (OOM checklist, clear report, restart report), newest first. */
  get cards(): ReadonlyArray<ActionCard> {
    const shown = this._order.filter(card =>
      card === 'oom' ? this.oomRun !== null : card === 'clear' ? this._clear !== null : this._restart !== null
    );
    if (shown.length !== this._cards.length || shown.some((card, i) => card !== this._cards[i])) {
      this._cards = shown;
    }
    return this._cards;
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
    this._oom.dispose();
    this._ticks.changed.disconnect(this._onTicks, this);
    this.sessionContext.iopubMessage.disconnect(this._onIopub, this);
    this._runs.dispose();
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
    const kernelRun = this._runs.current;
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
    this._toFront('clear');
    this._setClear({ phase: 'running', report: null, error: null, origin, kernelRun });
    const options = { retryDelayMs: this._retryDelayMs };
    const result = clearReportOf(await callFrontend(kernel, CLEAR_CALL, options));
    if (this._isDisposed) {
      return false;
    }
    if (result.ok) {
      this._tickClear(result.value);
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
    const order = this._order;
    // While it runs, it belongs to the run it restarts; once done, to the new run it reports on.
    const base = { clearOutputs: clear, note, origin };
    this._toFront('restart');
    this._setRestart({
      ...base,
      phase: 'confirming',
      report: null,
      error: null,
      kernelRun: this._runs.current
    });
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
        // Cancelled: show what was there before, where it was.
        this._order = order;
        this._setRestart(previous);
        return null;
      }
      this._setRestart({ ...base, phase: 'done', report, error: null, kernelRun: this._runs.current });
      return report;
    } catch (error) {
      this._setRestart({
        ...base,
        phase: 'failed',
        report: null,
        error: messageOf(error),
        kernelRun: this._runs.current
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
  loadLastOom(): Promise<void> {
    return this._oom.loadLast();
  }

  /** Hide the checklist (its ticks stay remembered). */
  dismissOom(): void {
    this._oom.dismiss();
  }

  /** Hide the clear report or the restart report (a clear of an earlier kernel run even while "running"). */
  dismissReport(which: 'clear' | 'restart'): void {
    if (which === 'clear' && (!this.clearing || this._clear?.kernelRun !== this._runs.current)) {
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

  /** `%gpumem clear` run in a cell: its report ticks the checklist's clear step like the panel's clear. */
  private _onIopub(_: unknown, msg: IIopubLike): void {
    if (msg.header.msg_type !== 'display_data' && msg.header.msg_type !== 'execute_result') {
      return;
    }
    const data = (msg.content as { data?: unknown } | null)?.data;
    const report =
      typeof data === 'object' && data !== null ? (data as Record<string, unknown>)[CLEAR_MIME] : null;
    if (isClearPayload(report)) {
      this._tickClear(report);
    }
  }

  /**
   * A clear came back: tick the "Clear GPU memory" step of the checklist shown when it is of the current kernel
   * run (a checklist of an earlier run describes memory that is already gone), with what it freed.
   */
  private _tickClear(report: IClearPayload): void {
    const run = this._oom.run;
    const key = this.oomKey;
    const step = run?.payload?.steps.find(s => s.action === 'clear') ?? null;
    if (
      report.dry_run ||
      run === null ||
      key === null ||
      step === null ||
      run.kernelRun !== this._runs.current
    ) {
      return;
    }
    this._clearTick = { tick: { key, stepId: step.id, report, time: Date.now() }, kernelRun: run.kernelRun };
    this._ticks.set(key, step.id, true);
    this._changed.emit();
  }

  /** A new OOM (a new error object: each OOM, load or kill makes one) puts its card in front. */
  private _noteOom(): void {
    const error = this._oom.run?.error ?? null;
    if (error !== null && error !== this._oomError) {
      this._toFront('oom');
    }
    this._oomError = error;
  }

  private _toFront(card: ActionCard): void {
    this._order = [card, ...this._order.filter(c => c !== card)];
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

  private readonly _bridge: () => IBridgeView | null;
  private readonly _host: IActionHost;
  private readonly _ticks: ITickStore;
  private readonly _retryDelayMs: number;
  private readonly _oom: OomChecklistModel;
  private readonly _runs: KernelRuns;
  private _clear: IClearRun | null = null;
  private _clearTick: { tick: IClearTick; kernelRun: number } | null = null;
  /** The cards newest first, shown or not; `cards` keeps those shown (one array while it does not change). */
  private _order: ActionCard[] = [];
  private _cards: ReadonlyArray<ActionCard> = [];
  private _oomError: IOomRun['error'] | null = null;
  private _restart: IRestartRun | null = null;
  private _children: { pid: number; count: number; list: ReadonlyArray<IChildProcess> } | null = null;
  private _isDisposed = false;
  private readonly _changed = new Signal<this, void>(this);
}
