/**
 * The OOM checklist of one session: a CUDA out-of-memory error seen on the session's IOPub raises the
 * notification, waits for the failing cell's end (ipykernel aborts requests queued behind it), then asks the
 * kernel for the checklist (or has it parse the error's text); "show the last OOM" loads it on demand; the
 * server's checklist of an OOM-killer death replaces it. A newer OOM or request wins over a late answer.
 *
 * The error's cell is remembered (see oom/cellruns.ts): when a later run of that cell ends without error, the
 * checklist is marked resolved — the user fixed it, whatever they tried.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { type ISignal, Signal } from '@lumino/signaling';

import type { IActionHost } from './actionhost';
import { afterIdle } from './followup';
import {
  callFrontend,
  type IExecutingKernel,
  LAST_OOM_CALL,
  oomFromTextCall,
  oomPayloadOf
} from '../channel/frontend';
import { CellRuns, type ICellRun, sameCell } from './oom/cellruns';
import {
  checklistErrorOf,
  type IIopubLike,
  type IOomError,
  oomErrorOf,
  oomText,
  parentIdOf
} from './oom/detect';
import { type IOomPayload, OOM_MIME } from '../wire/protocol';
import { occurrenceKey } from './ticks';
import type { IOomResolution, IOomRun, ISessionActions } from '../tokens';

/** How many cells with an unrecognised error are remembered while their outputs may still come. */
const UNRECOGNISED_KEPT = 16;

export namespace OomChecklistModel {
  export interface IOptions {
    sessionContext: ISessionContext;
    /** The session's actions, as the host's notification names them. */
    actions: ISessionActions;
    host: IActionHost;
    /** The session's kernel, or null when it has none. */
    kernel: () => (Kernel.IKernelConnection & IExecutingKernel) | null;
    /** The current kernel run (the checklist is tagged with it). */
    kernelRun: () => number;
    /** Longest wait for the failing cell's end before asking for the checklist anyway. */
    followUpTimeoutMs: number;
    /** Delay before re-sending an aborted request. */
    retryDelayMs: number;
    /** The checklist changed. */
    changed: () => void;
  }
}

export class OomChecklistModel {
  constructor(options: OomChecklistModel.IOptions) {
    this._options = options;
    this._cells = new CellRuns((run, ok) => this._onCellEnd(run, ok));
    options.sessionContext.iopubMessage.connect(this._onIopub, this);
    options.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    this._watchKernel(options.sessionContext.session?.kernel ?? null);
  }

  /** The checklist shown, or what keeps it from being shown; null when none. */
  get run(): IOomRun | null {
    if (this._oom === null || this._resolution === null) {
      return this._oom;
    }
    if (this._resolved?.run !== this._oom || this._resolved.resolution !== this._resolution) {
      this._resolved = {
        run: this._oom,
        resolution: this._resolution,
        shown: { ...this._oom, resolved: this._resolution }
      };
    }
    return this._resolved.shown;
  }

  /** The ticks key of the checklist shown, or null while none is ready. */
  get key(): string | null {
    const payload = this._oom?.payload ?? null;
    return payload === null ? null : occurrenceKey(payload);
  }

  /**
   * Show the checklist of the kernel's last OOM (the command and the notification's action use this when
   * no OOM was seen here, e.g. it happened before the page loaded).
   */
  async loadLast(): Promise<void> {
    const options = this._options;
    if (this._oom !== null && this._oom.phase !== 'failed' && this._oom.kernelRun === options.kernelRun()) {
      return;
    }
    const kernel = options.kernel();
    if (kernel === null) {
      return;
    }
    const seq = ++this._oomSeq;
    const kernelRun = options.kernelRun();
    const error: IOomError = { ename: 'OutOfMemoryError', evalue: '', parentId: null };
    this._failing = null; // loaded on demand: which cell raised it is not known here
    this._resolution = null;
    this._setOom({ phase: 'loading', error, payload: null, problem: null, kernelRun });
    const callOptions = { retryDelayMs: options.retryDelayMs };
    const result = oomPayloadOf(await callFrontend(kernel, LAST_OOM_CALL, callOptions));
    this._settleOom(
      seq,
      error,
      result,
      options.host.trans.__('No CUDA out-of-memory error in this kernel yet.'),
      kernelRun
    );
  }

  /** Hide the checklist (its ticks stay remembered). */
  dismiss(): void {
    this._oomSeq++;
    this._stopWaiting?.();
    this._failing = null;
    this._resolution = null;
    this._setOom(null);
  }

  /** End the wait for a failing cell's end (the kernel restarted or was replaced). */
  stopWaiting(): void {
    this._stopWaiting?.();
  }

  /**
   * Show the host checklist the server built for an OOM-killer death, tagged with `kernelRun`; a checklist
   * still loading for the dead process's own error loses to it.
   */
  showKill(payload: IOomPayload, kernelRun: number): void {
    this._oomSeq++;
    this._stopWaiting?.();
    const error: IOomError = { ename: 'OOM killer', evalue: payload.summary[0], parentId: null };
    this._failing = null;
    this._resolution = null;
    this._setOom({ phase: 'ready', error, payload, problem: null, kernelRun });
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._oomSeq++;
    this._stopWaiting?.();
    this._watchKernel(null);
    this._options.sessionContext.kernelChanged.disconnect(this._onKernelChanged, this);
    Signal.clearData(this);
  }

  private _onIopub(_: unknown, msg: IIopubLike): void {
    this._cells.iopub(msg);
    if (this._isDisposed) {
      return;
    }
    const error = oomErrorOf(msg) ?? this._checklistAfterError(msg);
    if (error !== null) {
      void this._onOom(error);
    }
  }

  /**
   * An error this watcher did not recognise, then the kernel's checklist in the same cell: the kernel knew it was
   * an out-of-memory error (a DataLoader worker's death whose cause the traceback does not name). Only after such
   * an error, so that a checklist shown again later (`%gpumem oom`) raises no new notification.
   */
  private _checklistAfterError(msg: IIopubLike): IOomError | null {
    const parentId = parentIdOf(msg);
    if (parentId === null) {
      return null;
    }
    if (msg.header.msg_type === 'error') {
      this._unrecognised.add(parentId);
      if (this._unrecognised.size > UNRECOGNISED_KEPT) {
        this._unrecognised.delete(this._unrecognised.values().next().value as string);
      }
      return null;
    }
    const error = this._unrecognised.has(parentId) ? checklistErrorOf(msg, OOM_MIME) : null;
    if (error !== null) {
      this._unrecognised.delete(parentId);
    }
    return error;
  }

  private async _onOom(error: IOomError): Promise<void> {
    const options = this._options;
    this._stopWaiting?.(); // a newer OOM replaces the one still waiting
    const seq = ++this._oomSeq;
    const kernelRun = options.kernelRun();
    this._failing = this._cells.run(error.parentId);
    this._resolution = null;
    this._setOom({ phase: 'waiting', error, payload: null, problem: null, kernelRun });
    options.host.notifyOom(options.actions, error);
    // ipykernel aborts requests queued behind the failing cell: ask only once that cell has ended.
    if (error.parentId !== null) {
      let stop: () => void = () => undefined;
      const stopped = new Promise<void>(resolve => {
        stop = resolve;
      });
      this._stopWaiting = stop;
      const outcome = await afterIdle(
        options.sessionContext.iopubMessage as unknown as ISignal<unknown, IIopubLike>,
        error.parentId,
        options.followUpTimeoutMs,
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
          problem: options.host.trans.__('The kernel restarted before the checklist could be built.'),
          kernelRun
        });
        return;
      }
    }
    const kernel = options.kernel();
    if (kernel === null) {
      return;
    }
    this._setOom({ phase: 'loading', error, payload: null, problem: null, kernelRun });
    const callOptions = { retryDelayMs: options.retryDelayMs };
    let result = oomPayloadOf(await callFrontend(kernel, LAST_OOM_CALL, callOptions));
    if (result.ok && result.value === null && seq === this._oomSeq) {
      // The handler did not see it (the shim was loaded later, or another library raised it): parse the text.
      result = oomPayloadOf(await callFrontend(kernel, oomFromTextCall(oomText(error)), callOptions));
    }
    this._settleOom(
      seq,
      error,
      result,
      options.host.trans.__('The kernel could not read this error message.'),
      kernelRun
    );
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

  /** The kernel JupyterLab talks to changed: its execute requests name their cells. */
  private _onKernelChanged(): void {
    this._watchKernel(this._options.sessionContext.session?.kernel ?? null);
  }

  private _watchKernel(kernel: Kernel.IKernelConnection | null): void {
    if (this._watched === kernel) {
      return;
    }
    this._watched?.anyMessage.disconnect(this._onAnyMessage, this);
    this._watched = kernel;
    kernel?.anyMessage.connect(this._onAnyMessage, this);
  }

  private _onAnyMessage(_: unknown, args: Kernel.IAnyMessageArgs): void {
    this._cells.sent(args);
  }

  /** A run of the user's code ended: a later run of the failing cell without error resolves the checklist. */
  private _onCellEnd(run: ICellRun, ok: boolean): void {
    const failing = this._failing;
    if (
      !ok ||
      this._isDisposed ||
      this._oom === null ||
      this._resolution !== null ||
      failing === null ||
      run.msgId === failing.msgId ||
      !sameCell(failing, run)
    ) {
      return;
    }
    this._resolution = { executionCount: run.executionCount, time: Date.now() };
    this._options.changed();
  }

  private _setOom(run: IOomRun | null): void {
    this._oom = run;
    this._options.changed();
  }

  private readonly _options: OomChecklistModel.IOptions;
  private readonly _cells: CellRuns;
  private _watched: Kernel.IKernelConnection | null = null;
  /** The run that raised the OOM shown (null: not known, e.g. loaded on demand). */
  private _failing: ICellRun | null = null;
  private _resolution: IOomResolution | null = null;
  /** The run shown with its resolution (one object while neither changes). */
  private _resolved: { run: IOomRun; resolution: IOomResolution; shown: IOomRun } | null = null;
  private _oom: IOomRun | null = null;
  private _oomSeq = 0;
  /** Ends the wait for a failing cell's end (restart, a newer OOM, dismiss, dispose). */
  private _stopWaiting: (() => void) | null = null;
  private _isDisposed = false;
  /** Cells (their requests' msg_id) whose error was not recognised as an out-of-memory error, latest last. */
  private readonly _unrecognised = new Set<string>();
}
