/**
 * The actions of every open notebook and console, and which of them the panel shows.
 *
 * One `SessionActions` per session context, added when the notebook opens (so an OOM in a background
 * notebook is caught) and disposed with it. The panel and the commands act on `current`, the session the
 * model follows; the notebook toolbar and the inline checklist name their own notebook.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { IDisposable } from '@lumino/disposable';
import { type ISignal, Signal } from '@lumino/signaling';

import type { IActionHost } from './actionhost';
import { SessionActions } from './sessionactions';
import type { IGpuMemActions, IGpuMemModel, ITickStore } from '../tokens';

export namespace GpuMemActions {
  export interface IOptions {
    model: IGpuMemModel;
    host: IActionHost;
    ticks: ITickStore;
    /** Shut down another kernel of this server (asks first). */
    shutDownKernel: (kernelId: string) => Promise<boolean>;
  }
}

export class GpuMemActions implements IGpuMemActions, IDisposable {
  constructor(options: GpuMemActions.IOptions) {
    this._model = options.model;
    this._host = options.host;
    this.ticks = options.ticks;
    this._shutDown = options.shutDownKernel;
    this._model.changed.connect(this._onModelChanged, this);
  }

  readonly ticks: ITickStore;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emitted with any session's actions when they change (the inline checklists of every notebook listen). */
  get sessionChanged(): ISignal<this, SessionActions> {
    return this._sessionChanged;
  }

  /** The actions of the session the panel follows. */
  get current(): SessionActions | null {
    const ctx = this._model.sessionContext;
    return ctx === null ? null : (this._actions.get(ctx) ?? null);
  }

  /** Every session's actions. */
  get all(): ReadonlyArray<SessionActions> {
    return [...this._actions.values()];
  }

  /** Start following a notebook's or console's session (idempotent). */
  add(sessionContext: ISessionContext, widgetId: string | null): SessionActions {
    const known = this._actions.get(sessionContext);
    if (known !== undefined) {
      return known;
    }
    const actions = new SessionActions({
      sessionContext,
      widgetId,
      bridge: () => this._model.bridgeFor(sessionContext),
      host: this._host,
      ticks: this.ticks
    });
    this._actions.set(sessionContext, actions);
    actions.changed.connect(this._onActionsChanged, this);
    sessionContext.disposed.connect(this._onSessionDisposed, this);
    if (sessionContext === this._model.sessionContext) {
      this._changed.emit();
    }
    return actions;
  }

  forSession(sessionContext: ISessionContext | null): SessionActions | null {
    return sessionContext === null ? null : (this._actions.get(sessionContext) ?? null);
  }

  forWidget(widgetId: string): SessionActions | null {
    return this.all.find(a => a.widgetId === widgetId) ?? null;
  }

  /** "notebook: a.ipynb" for a kernel of this server, else null. */
  labelKernel(kernelId: string): string | null {
    const session = this._model.sessions.get(kernelId);
    if (session === undefined) {
      return null;
    }
    return session.type === 'console'
      ? this._host.trans.__('console: %1', session.path)
      : this._host.trans.__('notebook: %1', session.path);
  }

  /** True for another kernel of this server (the process list offers "Shut down kernel" for those). */
  canShutDownKernel(kernelId: string): boolean {
    const mine = this._model.sessionContext?.session?.kernel?.id ?? null;
    return kernelId !== mine && this._model.sessions.has(kernelId);
  }

  shutDownKernel(kernelId: string): Promise<boolean> {
    return this._shutDown(kernelId);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    for (const actions of this._actions.values()) {
      actions.dispose();
    }
    this._actions.clear();
    Signal.clearData(this);
  }

  private _onModelChanged(): void {
    this.current?.onData();
    this._changed.emit();
  }

  private _onActionsChanged(actions: SessionActions): void {
    this._sessionChanged.emit(actions);
    if (actions === this.current) {
      this._changed.emit();
    }
  }

  private _onSessionDisposed(sessionContext: ISessionContext): void {
    const actions = this._actions.get(sessionContext);
    this._actions.delete(sessionContext);
    actions?.dispose();
  }

  private readonly _model: IGpuMemModel;
  private readonly _host: IActionHost;
  private readonly _shutDown: (kernelId: string) => Promise<boolean>;
  private readonly _actions = new Map<ISessionContext, SessionActions>();
  private _isDisposed = false;
  private readonly _changed = new Signal<this, void>(this);
  private readonly _sessionChanged = new Signal<this, SessionActions>(this);
}
