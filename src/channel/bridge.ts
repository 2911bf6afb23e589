/**
 * The connection between one notebook's (or console's) session and the kernel side of jupyterlab-gpumem.
 *
 * One bridge per session context: the plugin creates a bridge the first time a notebook becomes current and
 * keeps it while the notebook is open, so switching back to a notebook whose kernel is busy training shows its
 * data at once (re-opening the comm would queue behind the running cell). The model shows the current
 * notebook's bridge.
 *
 * A bridge follows its session's kernel (changes, restarts, death), checks the kernel's language, runs the
 * silent bootstrap, opens the `gpumem` comm, validates every message, keeps the sample history, notices when
 * samples stop (stale), and matches requests to replies. All state changes go through the pure `next()`.
 *
 * This file holds the connection's lifecycle (following the kernel, bootstrap, comm, stale checks, pings);
 * requests.ts matches requests to replies, routing.ts routes the kernel's messages and keeps what they said.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, KernelMessage as JupyterMessage } from '@jupyterlab/services';
import type { JSONObject } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { runBootstrap } from './bootstrap';
import { messageOf, PendingRequests, RequestError } from './requests';
import { MessageRouter } from './routing';
import {
  COMM_TARGET,
  type IConfigureArgs,
  type IHello,
  type IHoldersMessage,
  type IRequestArgs,
  type IRequestResults,
  type ISample,
  makeOpen,
  type RequestAction
} from '../wire/protocol';
import { type IGpuMemSettings, historySeconds } from '../settings';
import { type BridgeEvent, type IBridgeState, INITIAL_STATE, isPythonLanguage, next } from './state';
import { isRecord } from '../wire/keywords';
import type { IGrowthState, IKernelProblem } from '../tokens';

export namespace KernelBridge {
  export interface IOptions {
    /** The notebook's or console's session context. */
    sessionContext: ISessionContext;
    settings: IGpuMemSettings;
    /** Sent in the `open` message, e.g. "jupyterlab-gpumem 0.1.0". */
    client: string;
    /** Milliseconds between stale checks (default 1000). */
    tickMs?: number;
    /** Default request timeout in milliseconds (default 30 s: requests queue behind a busy kernel). */
    requestTimeoutMs?: number;
    /** Delay before retrying a bootstrap the kernel aborted (default 1000 ms). */
    retryDelayMs?: number;
    /** Milliseconds between pings that tell the kernel this comm is still wanted (default 15 s). */
    pingMs?: number;
  }
}

/** How long a restarted kernel may stay silent before the bridge asks it for kernel info (and how often). */
const RESTART_POKE_MS = 5000;

/** Statuses a restarted kernel's connection is left in when the status messages after the reconnect were lost. */
const QUIET_AFTER_RESTART: ReadonlySet<Kernel.Status> = new Set<Kernel.Status>([
  'unknown',
  'starting',
  'restarting',
  'autorestarting'
]);

/** The `reason` of a kernel's comm_close (`{"reason": "quiet"}`), or null. */
function closeReason(data: unknown): string | null {
  return isRecord(data) && typeof data.reason === 'string' ? data.reason : null;
}

export class KernelBridge implements IDisposable {
  constructor(options: KernelBridge.IOptions) {
    this.sessionContext = options.sessionContext;
    this._settings = options.settings;
    this._client = options.client;
    this._requestTimeoutMs = options.requestTimeoutMs ?? 30000;
    this._retryDelayMs = options.retryDelayMs ?? 1000;
    this._pingMs = options.pingMs ?? 15000;
    this._requests = new PendingRequests({
      changed: () => this._dataChanged.emit(),
      configured: interval => this._apply({ type: 'interval', interval })
    });
    this._router = new MessageRouter({
      historySeconds: options.settings.historyMinutes * 60,
      requests: this._requests,
      apply: event => this._apply(event),
      interval: () => this._state.interval,
      greeted: () => {
        this._sendRounding(); // a new kernel (or a restarted one) starts from pow2
        this._sendOomTimeline(); // and with the OOM capture off
        this._sendSeqMultiple(); // and from sequences in multiples of 64
      },
      sampled: () => {
        this._autoRetried = false;
      },
      stop: reason => {
        this._cancel(reason, true);
      },
      changed: () => this._dataChanged.emit()
    });

    const ctx = this.sessionContext;
    ctx.kernelChanged.connect(this._onKernelChanged, this);
    ctx.statusChanged.connect(this._onStatus, this);
    ctx.iopubMessage.connect(this._onIopub, this);
    this._timer = setInterval(() => this._onTick(), options.tickMs ?? 1000);
    void this._start({ restart: false, force: false });
  }

  /** The session this bridge follows. */
  readonly sessionContext: ISessionContext;

  /** Emitted when the state changes. */
  get stateChanged(): ISignal<this, IBridgeState> {
    return this._stateChanged;
  }

  /** Emitted when data changes: hello, samples, history, problems, pending requests, kernel status. */
  get dataChanged(): ISignal<this, void> {
    return this._dataChanged;
  }

  get state(): IBridgeState {
    return this._state;
  }

  /** The kernel's `hello`, once the comm is open. */
  get hello(): IHello | null {
    return this._router.hello;
  }

  /** The newest sample (even one older than the history's newest, after a clock step). */
  get latest(): ISample | null {
    return this._router.latest;
  }

  /** The samples of the last `historyMinutes`, oldest first. */
  get samples(): ReadonlyArray<ISample> {
    return this._router.samples.toArray();
  }

  /** Recent problems the kernel side reported, oldest first. */
  get problems(): ReadonlyArray<IKernelProblem> {
    return this._router.problems;
  }

  /** Memory that keeps growing in this kernel (its `growth` messages). */
  get growth(): IGrowthState {
    return this._router.growth;
  }

  /** Which variables hold GPU memory after the kernel's last cell, or null. */
  get holders(): IHoldersMessage | null {
    return this._router.holders;
  }

  /** The kernel's execution status as last reported. */
  get kernelStatus(): Kernel.Status {
    return this._kernelStatus;
  }

  /** Requests sent and not yet answered (they wait in the kernel's queue while a cell runs). */
  get pendingRequests(): number {
    return this._requests.size;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Apply new settings: the history window at once, the sampler's interval via a `configure` request. */
  updateSettings(settings: IGpuMemSettings): void {
    const old = this._settings;
    this._settings = settings;
    this._router.samples.windowSeconds = settings.historyMinutes * 60;
    const samplerChanged =
      old.interval !== settings.interval || historySeconds(old) !== historySeconds(settings);
    if (samplerChanged && this._comm !== null && this._isConnectedState()) {
      this.request('configure', {
        interval: settings.interval,
        history_seconds: historySeconds(settings)
      }).catch((error: unknown) => {
        console.warn(`jupyterlab-gpumem: could not reconfigure the sampler: ${messageOf(error)}`);
      });
    }
    if (old.batchRounding !== settings.batchRounding) {
      this._sendRounding();
    }
    if (old.oomTimeline !== settings.oomTimeline) {
      this._sendOomTimeline();
    }
    if (old.seqMultiple !== settings.seqMultiple) {
      this._sendSeqMultiple();
    }
    if (!old.autoLoad && settings.autoLoad && this._state.name === 'autoload-off') {
      void this._start({ restart: true, force: false });
    }
  }

  /**
   * The "Batch-size rounding" setting, to a kernel whose hello lists the capability "rounding": the default of
   * its `%gpumem analyze`/`autobatch` picks when a command gives no `--round` (older kernels are not asked).
   */
  private _sendRounding(): void {
    this._sendSetting('rounding', { rounding: this._settings.batchRounding }, 'the batch-size rounding');
  }

  /**
   * The "Capture the timeline at an out-of-memory error" setting, to a kernel whose hello lists the capability
   * "oom_timeline": while on, the kernel records a bounded allocator history while cells run (older kernels are
   * not asked). Sent after every hello, so a restarted kernel (off by default) gets it again.
   */
  private _sendOomTimeline(): void {
    this._sendSetting(
      'oom_timeline',
      { oom_timeline: this._settings.oomTimeline },
      'the OOM timeline setting'
    );
  }

  /**
   * The "Sequence-length multiple" setting, to a kernel whose hello lists the capability "seq_multiple": the
   * multiple of tokens `%gpumem analyze --search seq` searches in when a command gives no `--seq-multiple`.
   */
  private _sendSeqMultiple(): void {
    this._sendSetting(
      'seq_multiple',
      { seq_multiple: this._settings.seqMultiple },
      'the sequence-length multiple'
    );
  }

  /** One setting in a `configure` request, to a connected kernel whose hello lists `capability` (older are not asked). */
  private _sendSetting(capability: string, args: IConfigureArgs, what: string): void {
    if (
      this._comm === null ||
      !this._isConnectedState() ||
      !this._router.hello?.capabilities.includes(capability)
    ) {
      return;
    }
    this.request('configure', args).catch((error: unknown) => {
      if (!this._isDisposed) {
        console.warn(`jupyterlab-gpumem: could not send ${what}: ${messageOf(error)}`);
      }
    });
  }

  /** Start over with the current kernel (the Retry button). */
  retry(): void {
    void this._start({ restart: true, force: false });
  }

  /** Load the shim even though autoload is off (the user clicked "Load now"). */
  loadNow(): void {
    void this._start({ restart: true, force: true });
  }

  /**
   * Send a request over the comm and wait for its reply.
   *
   * Rejects with a `RequestError`: the kernel's error code, 'timeout', 'disconnected' (no open comm, or the
   * kernel restarted meanwhile) or 'invalid-reply' (the result does not match the wire format).
   */
  request<A extends RequestAction>(
    action: A,
    args?: IRequestArgs[A],
    timeoutMs: number = this._requestTimeoutMs
  ): Promise<IRequestResults[A]> {
    const comm = this._comm;
    if (comm === null || comm.isDisposed || !this._isConnectedState()) {
      return Promise.reject(new RequestError('disconnected', 'not connected to the kernel'));
    }
    return this._requests.send(comm, action, args, timeoutMs);
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    clearInterval(this._timer);
    this._cancel('the notebook was closed', true);
    Signal.clearData(this);
  }

  // -------------------------------------------------------------------------------------------------------

  private _isConnectedState(): boolean {
    const name = this._state.name;
    return name === 'live' || name === 'stale' || name === 'error';
  }

  private _apply(event: BridgeEvent): void {
    const previous = this._state;
    const state = next(previous, event);
    if (state === previous) {
      return;
    }
    this._state = state;
    // Every sample moves `lastSampleAt`; that alone is not a state change worth a signal.
    const keys = Object.keys(state) as Array<keyof IBridgeState>;
    if (keys.some(key => key !== 'lastSampleAt' && state[key] !== previous[key])) {
      this._stateChanged.emit(state);
    }
  }

  /** Invalidate everything in flight: newer generation, no comm, failed requests. */
  private _cancel(reason: string, closeComm: boolean): number {
    this._generation++;
    const comm = this._comm;
    this._comm = null;
    if (closeComm && comm !== null && !comm.isDisposed) {
      try {
        // Tell the kernel to stop sampling for us (it may be shared by other clients).
        comm.close().done.catch(() => undefined);
      } catch {
        // The kernel connection is gone already.
      }
    }
    this._requests.failAll(reason);
    return this._generation;
  }

  private _isCurrent(generation: number, kernel: Kernel.IKernelConnection): boolean {
    return (
      generation === this._generation &&
      !this._isDisposed &&
      !kernel.isDisposed &&
      this.sessionContext.session?.kernel === kernel
    );
  }

  private _onTick(): void {
    this._apply({ type: 'tick', now: Date.now() });
    this._ping();
    this._pokeRestartedKernel();
    // No samples although the kernel is idle: the sampler is gone (say, the kernel was restarted in a way
    // JupyterLab did not report). Reconnect once per episode; a busy kernel may just be holding the GIL.
    if (this._state.name === 'stale' && this._kernelStatus === 'idle' && !this._autoRetried) {
      this._autoRetried = true;
      void this._start({ restart: true, force: false });
    }
  }

  /**
   * Tell the kernel this comm is still wanted: it drops comms it has not heard from (a crashed or reloaded
   * tab never closes its comm). Sent without waiting for the reply: on a busy kernel without subshells it
   * waits behind the cell, and the kernel does not count that time.
   */
  private _ping(): void {
    const comm = this._comm;
    const now = Date.now();
    if (
      comm === null ||
      comm.isDisposed ||
      !this._isConnectedState() ||
      now - this._lastPing < this._pingMs
    ) {
      return;
    }
    this._lastPing = now;
    try {
      this._requests.sendPing(comm);
    } catch {
      // The kernel connection is gone: the state machine reports that.
    }
  }

  /**
   * After the server restarts a dead kernel, JupyterLab reconnects and asks for kernel info once; sent before
   * the server's ZMQ subscriptions are up, that request and its status messages can be lost (JupyterLab's own
   * FIXME in KernelConnection), and the status then stays 'unknown' until the user runs a cell. We start on the
   * new process's first idle or busy: ask again, every few seconds, so it comes without the user.
   */
  private _pokeRestartedKernel(): void {
    const kernel = this.sessionContext.session?.kernel ?? null;
    const now = Date.now();
    if (
      !this._needsStart ||
      kernel === null ||
      kernel.isDisposed ||
      kernel.connectionStatus !== 'connected' ||
      !QUIET_AFTER_RESTART.has(kernel.status) ||
      now - this._needsStartAt < RESTART_POKE_MS ||
      now - this._lastPoke < RESTART_POKE_MS
    ) {
      return;
    }
    this._lastPoke = now;
    kernel.requestKernelInfo().catch(() => undefined);
  }

  private _onKernelChanged(_: ISessionContext, change: { oldValue: unknown; newValue: unknown }): void {
    if (change.oldValue !== null && change.oldValue === change.newValue) {
      // SessionContext.restartKernel() ends by announcing a "change" to the same kernel connection. Its
      // statuses already said that it restarted (and the reconnect follows them); starting over as for
      // another kernel would forget how the old process ended.
      if (
        this._needsStart &&
        this._kernelStatus !== 'restarting' &&
        this._kernelStatus !== 'autorestarting'
      ) {
        this._needsStart = false;
        void this._start({ restart: true, force: false });
      }
      return;
    }
    this._needsStart = false;
    void this._start({ restart: false, force: false });
  }

  private _onStatus(_: ISessionContext, status: Kernel.Status): void {
    if (status === this._kernelStatus) {
      return;
    }
    this._kernelStatus = status;
    const before = this._state;
    this._apply({ type: 'kernel-status', status, now: Date.now() });
    const after = this._state;
    const restarted = after.name === 'waiting' && after.phase === 'restarting' && before !== after;
    if (restarted || (status === 'dead' && before.name !== 'dead')) {
      // The kernel process is gone: its comm is dead, its requests will never be answered. JupyterLab
      // disposes comms on a restart it started itself, not on one it only hears about ('starting').
      const comm = this._comm;
      this._cancel(status === 'dead' ? 'the kernel died' : 'the kernel restarted', false);
      comm?.dispose();
      this._needsStart = true;
      this._needsStartAt = Date.now();
    }
    switch (status) {
      case 'idle':
      case 'busy':
        if (this._needsStart) {
          this._needsStart = false;
          void this._start({ restart: true, force: false });
        } else if (status === 'idle' && this._userRanCode) {
          this._userRanCode = false;
          const name = this._state.name;
          // The user may just have run `%load_ext gpumem_kernel` or `%pip install jupyterlab-gpumem`.
          if (name === 'autoload-off' || name === 'not-installed') {
            void this._start({ restart: true, force: false });
          }
        }
        break;
    }
    this._dataChanged.emit();
  }

  private _onIopub(_: ISessionContext, msg: JupyterMessage.IMessage): void {
    // Only non-silent executions (the user's cells) broadcast `execute_input`; our bootstrap does not.
    if (msg.header.msg_type === 'execute_input') {
      this._userRanCode = true;
    }
  }

  /** (Re)connect to the session's current kernel, from the language check on. */
  private async _start(options: { restart: boolean; force: boolean }): Promise<void> {
    if (this._isDisposed) {
      return;
    }
    // A comm that JupyterLab disposed (restart) is skipped; a live one (Retry, kernel change) is closed.
    const generation = this._cancel('reconnecting', true);
    const ctx = this.sessionContext;
    let kernel = ctx.session?.kernel ?? null;
    if (kernel === null && !ctx.isReady && !ctx.isDisposed) {
      // The session is still being created (a notebook that just opened).
      this._apply({ type: 'kernel-changed', kernelName: ctx.kernelDisplayName || '…', hasSession: true });
      try {
        await ctx.ready;
      } catch {
        // Reported through the session's own signals.
      }
      if (generation !== this._generation || this._isDisposed) {
        return;
      }
      kernel = ctx.session?.kernel ?? null;
    }
    if (kernel?.id !== this._kernelId) {
      // Another kernel process: the old samples describe something else.
      this._kernelId = kernel?.id ?? null;
      this._router.forget();
      this._dataChanged.emit();
    }
    if (!options.restart || kernel === null) {
      this._apply({
        type: 'kernel-changed',
        kernelName: kernel === null ? null : ctx.kernelDisplayName,
        hasSession: true
      });
    }
    if (kernel === null) {
      return;
    }
    this._kernelStatus = kernel.status;
    if (kernel.status === 'dead') {
      this._apply({ type: 'kernel-status', status: 'dead', now: Date.now() });
      this._needsStart = true;
      this._needsStartAt = Date.now();
      return;
    }
    let language: string;
    try {
      const info = await kernel.info;
      language = info.language_info?.name ?? '';
    } catch (error) {
      if (this._isCurrent(generation, kernel)) {
        this._apply({ type: 'bootstrap-failed', message: `no kernel info: ${messageOf(error)}` });
      }
      return;
    }
    if (!this._isCurrent(generation, kernel)) {
      return;
    }
    this._apply({ type: 'language', name: language });
    if (!isPythonLanguage(language)) {
      return;
    }
    await this._bootstrap(generation, kernel, options.force);
  }

  private async _bootstrap(
    generation: number,
    kernel: Kernel.IKernelConnection,
    force: boolean
  ): Promise<void> {
    await runBootstrap(kernel, {
      checkOnly: !this._settings.autoLoad && !force,
      retryDelayMs: this._retryDelayMs,
      isCurrent: () => this._isCurrent(generation, kernel),
      apply: event => this._apply(event),
      loaded: () => {
        if (this._state.name === 'waiting') {
          this._openComm(generation, kernel);
        }
      }
    });
  }

  private _openComm(generation: number, kernel: Kernel.IKernelConnection): void {
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (error) {
      this._apply({ type: 'bootstrap-failed', message: `could not create the comm: ${messageOf(error)}` });
      return;
    }
    this._comm = comm;
    this._lastPing = Date.now();
    comm.onMsg = msg => {
      // Drop anything from a comm that is no longer ours (a restart or reconnect replaced it).
      if (this._comm === comm && generation === this._generation) {
        this._router.route(msg.content.data);
      }
    };
    comm.onClose = msg => {
      if (this._comm !== comm) {
        return;
      }
      this._comm = null;
      this._requests.failAll('the kernel closed the channel');
      this._apply({ type: 'comm-closed' });
      // The kernel had not heard from us for long (a throttled background tab): we are here, reconnect.
      if (closeReason(msg?.content?.data) === 'quiet' && !this._isDisposed) {
        void this._start({ restart: true, force: false });
      }
    };
    const settings = this._settings;
    try {
      const open = makeOpen(settings.interval, historySeconds(settings), this._client);
      comm.open(open as unknown as JSONObject).done.catch(() => undefined);
    } catch (error) {
      this._comm = null;
      this._apply({ type: 'bootstrap-failed', message: `could not open the comm: ${messageOf(error)}` });
    }
  }

  private _state: IBridgeState = INITIAL_STATE;
  private _settings: IGpuMemSettings;
  private readonly _client: string;
  private readonly _requestTimeoutMs: number;
  private readonly _retryDelayMs: number;
  private readonly _pingMs: number;
  private _lastPing = 0;
  private readonly _requests: PendingRequests;
  private readonly _router: MessageRouter;
  private readonly _timer: ReturnType<typeof setInterval>;
  private _comm: Kernel.IComm | null = null;
  private _kernelId: string | null = null;
  private _kernelStatus: Kernel.Status = 'unknown';
  private _generation = 0;
  private _needsStart = false;
  private _needsStartAt = 0;
  private _lastPoke = 0;
  private _userRanCode = false;
  private _autoRetried = false;
  private _isDisposed = false;
  private readonly _stateChanged = new Signal<this, IBridgeState>(this);
  private readonly _dataChanged = new Signal<this, void>(this);
}
