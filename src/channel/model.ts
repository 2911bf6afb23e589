/**
 * The model behind the panel and the status item: the current notebook's bridge, the settings, and the
 * server's sessions (to name other kernels' GPU processes by their notebook).
 *
 * Bridges are kept per session context for as long as the notebook or console is open, so switching back to
 * a notebook shows its history at once. What the views compute from a sample (process labels, bar segments,
 * the device the kernel uses most) is in sample.ts.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, Session } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import { KernelBridge } from './bridge';
import { RequestError } from './requests';
import { type IKernelSession, labelProcess } from './sample';
import { type Trans, untranslated } from '../ui/i18n';
import type {
  IGpuProcess,
  IHello,
  IHoldersMessage,
  IRequestArgs,
  IRequestResults,
  ISample,
  RequestAction
} from '../wire/protocol';
import { DEFAULT_SETTINGS, type IGpuMemSettings } from '../settings';
import { type IBridgeState, INITIAL_STATE } from './state';
import { NO_GROWTH } from './routing';
import type { IGpuMemModel, IGrowthState, IKernelProblem } from '../tokens';

export namespace GpuMemModel {
  export interface IOptions {
    /** Sent to the kernel in the `open` message ("jupyterlab-gpumem 0.1.0"). */
    client: string;
    settings?: IGpuMemSettings;
    trans?: Trans;
    /** Creates the bridge of a session (tests pass fakes). */
    createBridge?: (sessionContext: ISessionContext, settings: IGpuMemSettings) => KernelBridge;
  }
}

export class GpuMemModel implements IGpuMemModel, IDisposable {
  constructor(options: GpuMemModel.IOptions) {
    this._client = options.client;
    this._settings = options.settings ?? DEFAULT_SETTINGS;
    this._trans = options.trans ?? untranslated;
    this._createBridge =
      options.createBridge ??
      ((sessionContext, settings) => new KernelBridge({ sessionContext, settings, client: this._client }));
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get stateChanged(): ISignal<this, IBridgeState> {
    return this._stateChanged;
  }

  /** The current session's bridge, or null. */
  get bridge(): KernelBridge | null {
    return this._bridge;
  }

  get sessionContext(): ISessionContext | null {
    return this._bridge?.sessionContext ?? null;
  }

  get state(): IBridgeState {
    return this._bridge?.state ?? INITIAL_STATE;
  }

  get hello(): IHello | null {
    return this._bridge?.hello ?? null;
  }

  get latest(): ISample | null {
    return this._bridge?.latest ?? null;
  }

  get history(): ReadonlyArray<ISample> {
    return this._bridge?.samples ?? [];
  }

  get problems(): ReadonlyArray<IKernelProblem> {
    return this._bridge?.problems ?? [];
  }

  get growth(): IGrowthState {
    return this._bridge?.growth ?? NO_GROWTH;
  }

  get holders(): IHoldersMessage | null {
    return this._bridge?.holders ?? null;
  }

  get kernelStatus(): Kernel.Status | null {
    return this._bridge?.sessionContext.session?.kernel ? this._bridge.kernelStatus : null;
  }

  get pendingRequests(): number {
    return this._bridge?.pendingRequests ?? 0;
  }

  get kernelLabel(): string | null {
    const ctx = this.sessionContext;
    if (ctx === null) {
      return null;
    }
    const file = ctx.path.split('/').pop() || ctx.name;
    const kernel = ctx.session?.kernel ? ctx.kernelDisplayName : null;
    return [kernel, file].filter(Boolean).join(' · ') || null;
  }

  get settings(): IGpuMemSettings {
    return this._settings;
  }

  /** New settings apply to every bridge at once (history window, sampler interval, autoload). */
  set settings(settings: IGpuMemSettings) {
    this._settings = settings;
    for (const bridge of this._bridges.values()) {
      bridge.updateSettings(settings);
    }
    this._changed.emit();
  }

  /** Kernel id → session, from the server (for labelling other kernels' processes). */
  get sessions(): ReadonlyMap<string, IKernelSession> {
    return this._sessions;
  }

  /** Replace the known sessions (call on the session manager's `runningChanged`). */
  setSessions(models: Iterable<Session.IModel>): void {
    const sessions = new Map<string, IKernelSession>();
    for (const model of models) {
      if (model.kernel) {
        sessions.set(model.kernel.id, {
          id: model.id,
          path: model.path,
          type: model.type,
          name: model.name
        });
      }
    }
    const same =
      sessions.size === this._sessions.size &&
      [...sessions].every(([id, s]) => {
        const old = this._sessions.get(id);
        return old !== undefined && old.id === s.id && old.path === s.path && old.type === s.type;
      });
    if (!same) {
      this._sessions = sessions;
      this._changed.emit();
    }
  }

  /** Follow another notebook or console (null: none is open). */
  setSessionContext(sessionContext: ISessionContext | null): void {
    if (this._isDisposed || sessionContext === (this._bridge?.sessionContext ?? null)) {
      return;
    }
    const previous = this._bridge;
    if (previous !== null) {
      previous.stateChanged.disconnect(this._onBridgeState, this);
      previous.dataChanged.disconnect(this._onBridgeData, this);
    }
    const bridge = sessionContext === null ? null : this.bridgeFor(sessionContext);
    if (bridge !== null) {
      bridge.stateChanged.connect(this._onBridgeState, this);
      bridge.dataChanged.connect(this._onBridgeData, this);
    }
    this._bridge = bridge;
    if ((previous?.state ?? INITIAL_STATE) !== this.state) {
      this._stateChanged.emit(this.state);
    }
    this._changed.emit();
  }

  /**
   * The bridge of a session, created when there is none yet (restart-and-free on a notebook that is not
   * current still needs its kernel's samples). Null for a disposed session.
   */
  bridgeFor(sessionContext: ISessionContext): KernelBridge | null {
    if (this._isDisposed || sessionContext.isDisposed) {
      return null;
    }
    let bridge = this._bridges.get(sessionContext) ?? null;
    if (bridge === null) {
      bridge = this._createBridge(sessionContext, this._settings);
      this._bridges.set(sessionContext, bridge);
      sessionContext.disposed.connect(this._onSessionDisposed, this);
    }
    return bridge;
  }

  labelProcess(process: IGpuProcess): string {
    return labelProcess(process, this._sessions, this._trans);
  }

  request<A extends RequestAction>(
    action: A,
    args?: IRequestArgs[A],
    timeoutMs?: number
  ): Promise<IRequestResults[A]> {
    if (this._bridge === null) {
      return Promise.reject(new RequestError('disconnected', 'no notebook or console is open'));
    }
    return this._bridge.request(action, args, timeoutMs);
  }

  retry(): void {
    this._bridge?.retry();
  }

  loadNow(): void {
    this._bridge?.loadNow();
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    for (const bridge of this._bridges.values()) {
      bridge.dispose();
    }
    this._bridges.clear();
    this._bridge = null;
    Signal.clearData(this);
  }

  private _onBridgeState(_: KernelBridge, state: IBridgeState): void {
    this._stateChanged.emit(state);
    this._changed.emit();
  }

  private _onBridgeData(): void {
    this._changed.emit();
  }

  private _onSessionDisposed(sessionContext: ISessionContext): void {
    const bridge = this._bridges.get(sessionContext);
    this._bridges.delete(sessionContext);
    if (bridge === this._bridge) {
      this.setSessionContext(null);
    }
    bridge?.dispose();
  }

  private readonly _client: string;
  private readonly _trans: Trans;
  private readonly _createBridge: (ctx: ISessionContext, settings: IGpuMemSettings) => KernelBridge;
  private readonly _bridges = new Map<ISessionContext, KernelBridge>();
  private _bridge: KernelBridge | null = null;
  private _settings: IGpuMemSettings;
  private _sessions: ReadonlyMap<string, IKernelSession> = new Map();
  private _isDisposed = false;
  private readonly _changed = new Signal<this, void>(this);
  private readonly _stateChanged = new Signal<this, IBridgeState>(this);
}
