/**
 * Which session the panel follows: the notebook or console the user is working in.
 *
 * Follows the shell's `currentChanged` (as jupyter-resource-usage does; JupyterLab's and Notebook 7's shells both
 * have one; without one, the notebook tracker's). When the user moves to a widget
 * without a kernel (a text editor, the launcher), the panel keeps showing the last notebook or console while
 * it is open: a user editing `train.py` next to a training notebook still wants that notebook's GPU.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { ConsolePanel, IConsoleTracker } from '@jupyterlab/console';
import type { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { type ISignal, Signal } from '@lumino/signaling';
import type { Widget } from '@lumino/widgets';

export namespace CurrentSession {
  export interface IOptions {
    shell: JupyterFrontEnd.IShell;
    notebooks: INotebookTracker;
    consoles: IConsoleTracker | null;
  }
}

export class CurrentSession {
  constructor(options: CurrentSession.IOptions) {
    this._shell = options.shell;
    this._notebooks = options.notebooks;
    this._consoles = options.consoles;
    // Optional on JupyterFrontEnd.IShell; the tracker's signal stands in for a shell without one.
    if (this._shell.currentChanged !== undefined) {
      this._shell.currentChanged.connect(this._update, this);
    } else {
      this._notebooks.currentChanged.connect(this._update, this);
    }
    this._notebooks.widgetAdded.connect(this._update, this);
    this._consoles?.widgetAdded.connect(this._update, this);
    this._update();
  }

  /** Emitted with the new session context (or null) when the followed widget changes. */
  get changed(): ISignal<this, ISessionContext | null> {
    return this._changed;
  }

  /** The followed widget's session context, or null when no notebook or console is open. */
  get sessionContext(): ISessionContext | null {
    return this._widget?.sessionContext ?? null;
  }

  private _kernelWidget(widget: Widget | null): NotebookPanel | ConsolePanel | null {
    if (widget === null || widget.isDisposed) {
      return null;
    }
    const notebook = this._notebooks.find(panel => panel === widget);
    if (notebook !== undefined) {
      return notebook;
    }
    return this._consoles?.find(panel => panel === widget) ?? null;
  }

  private _update(): void {
    let widget = this._kernelWidget(this._shell.currentWidget);
    if (widget === null && this._widget !== null && !this._widget.isDisposed) {
      widget = this._widget; // keep following the last notebook/console
    }
    if (widget === null) {
      const candidates = [this._notebooks.currentWidget, this._consoles?.currentWidget ?? null];
      widget = candidates.find(w => w !== null && !w.isDisposed) ?? null;
    }
    if (widget === this._widget) {
      return;
    }
    this._widget?.disposed.disconnect(this._update, this);
    this._widget = widget;
    this._widget?.disposed.connect(this._update, this);
    this._changed.emit(this.sessionContext);
  }

  private readonly _shell: JupyterFrontEnd.IShell;
  private readonly _notebooks: INotebookTracker;
  private readonly _consoles: IConsoleTracker | null;
  private _widget: NotebookPanel | ConsolePanel | null = null;
  private readonly _changed = new Signal<this, ISessionContext | null>(this);
}
