/**
 * JupyterLab's side of the actions: the confirm dialogs, the OOM notification, inserting cells, clearing
 * outputs and shutting down other kernels — everything `SessionActions` asks of `IActionHost`, and what the
 * inline checklist asks of `IInlineHost`.
 *
 * Kept apart from the pure action logic because it needs JupyterLab at runtime (dialogs, notifications,
 * notebook actions), which the unit tests do not load.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { Clipboard, Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { NotebookActions, type INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';
import { Signal } from '@lumino/signaling';

import { OPEN_OOM_COMMAND, PANEL_ID } from '../commandids';
import { stepFeedback } from './feedback';
import type { Trans } from '../ui/i18n';
import { activateSidePanel } from '../ui/shell';
import { type IOomError, oomFamily } from './oom/detect';
import { familyTitle } from './oom/text';
import { type IHostMemory, type IKernelExit, type IOomStep, parseKernelExit } from '../wire/protocol';
import type { CellPlace, IActionHost, IDeathAnswer } from './actionhost';
import { exportTimelineFile } from './timelineexport';
import type { IGpuMemSettings } from '../settings';
import type { IGpuMemActions, IGpuMemModel, IInlineHost, IKernelIdentity, ISessionActions } from '../tokens';
import { requestAPI } from '../server/request';

export namespace LabActionHost {
  export interface IOptions {
    app: JupyterFrontEnd;
    shell: JupyterFrontEnd.IShell;
    notebooks: INotebookTracker;
    model: IGpuMemModel;
    trans: Trans;
  }
}

/** Actions whose result the panel shows: running one from a cell output opens the panel. */
const SHOWN_IN_PANEL: ReadonlyArray<IOomStep['action']> = ['clear', 'restart', 'insert-env-cell-and-restart'];

export class LabActionHost implements IActionHost {
  constructor(options: LabActionHost.IOptions) {
    this._app = options.app;
    this._shell = options.shell;
    this._notebooks = options.notebooks;
    this._model = options.model;
    this.trans = options.trans;
  }

  readonly trans: Trans;

  /** Set once the manager exists (it needs this host to be created). */
  manager: IGpuMemActions | null = null;

  settings(): IGpuMemSettings {
    return this._model.settings;
  }

  async confirmRestart(actions: ISessionActions, clearOutputs: boolean): Promise<boolean> {
    const trans = this.trans;
    const name = actions.sessionContext.name || actions.path;
    // Without a GPU there is no driver to wait for: the restart only restarts.
    const body = !this.seesGpu(actions)
      ? clearOutputs
        ? trans.__('Restart the kernel of %1 and clear all outputs? All variables will be lost.', name)
        : trans.__('Restart the kernel of %1? All variables will be lost.', name)
      : clearOutputs
        ? trans.__(
            'Restart the kernel of %1 and clear all outputs? All variables will be lost. The panel then waits until the GPU driver releases the old kernel and reports what was freed.',
            name
          )
        : trans.__(
            'Restart the kernel of %1? All variables will be lost. The panel then waits until the GPU driver releases the old kernel and reports what was freed.',
            name
          );
    const result = await showDialog({
      title: trans.__('Restart and free GPU memory?'),
      body,
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Restart') })
      ]
    });
    return result.button.accept;
  }

  /**
   * False when the panel's latest sample of this session's kernel says it sees no GPU; true when it sees one
   * or nothing is known (another notebook than the panel's: reading its kernel would start a bridge to it).
   */
  seesGpu(actions: ISessionActions): boolean {
    const gpu = actions.sessionContext === this._model.sessionContext ? this._model.latest?.gpu : undefined;
    return gpu === undefined || (gpu.available && gpu.devices.length > 0);
  }

  notifyOom(actions: ISessionActions, error: IOomError): void {
    const trans = this.trans;
    const file = actions.path.split('/').pop() || actions.path;
    const title = familyTitle(oomFamily(error.ename, error.evalue), trans);
    Notification.error(trans.__('%1 in %2', title, file), {
      autoClose: 20000,
      actions: [
        {
          label: trans.__('Open checklist'),
          caption: `${error.ename}: ${error.evalue}`.slice(0, 300),
          displayType: 'accent',
          callback: () => {
            void this._app.commands.execute(OPEN_OOM_COMMAND, { widgetId: actions.widgetId ?? '' });
          }
        }
      ]
    });
  }

  notifyOomKill(actions: ISessionActions, death: IKernelExit, summary: ReadonlyArray<string>): void {
    const trans = this.trans;
    const file = actions.path.split('/').pop() || actions.path;
    Notification.error(trans.__('The out-of-memory killer ended the kernel of %1', file), {
      autoClose: false,
      actions: [
        {
          label: trans.__('Open checklist'),
          caption: summary.join(' ').slice(0, 300),
          displayType: 'accent',
          callback: () => {
            void this._app.commands.execute(OPEN_OOM_COMMAND, { widgetId: actions.widgetId ?? '' });
          }
        }
      ]
    });
  }

  async kernelExit(
    kernelId: string,
    pid: number | null,
    host: IHostMemory | null
  ): Promise<IDeathAnswer | null> {
    const response = await requestAPI(`kernels/${encodeURIComponent(kernelId)}/exit`, {
      method: 'POST',
      body: JSON.stringify({ pid, host })
    });
    if (!response.ok) {
      return null; // 404: the server extension is not enabled
    }
    return parseKernelExit(await response.json());
  }

  clearOutputs(actions: ISessionActions): void {
    const panel = this._notebookOf(actions);
    if (panel !== null) {
      NotebookActions.clearAllOutputs(panel.content);
    }
  }

  insertCell(actions: ISessionActions, code: string, place: CellPlace): boolean {
    const panel = this._notebookOf(actions);
    const notebook = panel?.content ?? null;
    if (notebook === null || notebook.model === null) {
      return false;
    }
    const below = notebook.activeCell ? notebook.activeCellIndex + 1 : notebook.widgets.length;
    const index = place === 'top' ? 0 : below;
    // A code cell holding the checklist's snippet, not run: the user reads and adapts it first.
    notebook.model.sharedModel.insertCell(index, { cell_type: 'code', source: code, metadata: {} });
    notebook.activeCellIndex = index;
    notebook.deselectAll();
    void notebook.scrollToItem(index, 'smart').catch(() => undefined);
    return true;
  }

  async shutDownKernel(kernelId: string): Promise<boolean> {
    const trans = this.trans;
    const session = this._model.sessions.get(kernelId);
    if (session === undefined) {
      Notification.warning(
        trans.__('Kernel %1 is not a kernel of this Jupyter server.', kernelId.slice(0, 8))
      );
      return false;
    }
    const result = await showDialog({
      title: trans.__('Shut down kernel?'),
      body: trans.__(
        'Shut down the kernel of %1? Its variables are lost and its GPU memory is freed; the notebook stays open.',
        session.path
      ),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        Dialog.warnButton({ label: trans.__('Shut Down') })
      ]
    });
    if (!result.button.accept) {
      return false;
    }
    try {
      await this._app.serviceManager.sessions.shutdown(session.id);
      Notification.success(trans.__('Shut down the kernel of %1.', session.path), { autoClose: 5000 });
      return true;
    } catch (error) {
      Notification.error(
        trans.__(
          'Could not shut down the kernel of %1: %2',
          session.path,
          error instanceof Error ? error.message : String(error)
        )
      );
      return false;
    }
  }

  /** What the inline outputs (the checklist, the analysis output's "Insert code") can do. */
  inlineHost(): IInlineHost {
    const manager = this._requireManager();
    // Inline checklists re-render on ticks, on any notebook's clear or restart (the line under the step that
    // started it), and when the current kernel process changes (a checklist of an earlier one says so).
    const changed = new Signal<LabActionHost, void>(this);
    manager.ticks.changed.connect(() => changed.emit());
    manager.sessionChanged.connect(() => changed.emit());
    let identity = '';
    this._model.changed.connect(() => {
      const hello = this._model.hello;
      const now = hello === null ? '' : `${hello.pid}@${hello.create_time ?? ''}`;
      if (now !== identity) {
        identity = now;
        changed.emit();
      }
    });
    const actionsOf = (node: HTMLElement) => {
      const panel = this._notebookContaining(node);
      return panel === null ? null : manager.forWidget(panel.id);
    };
    return {
      ticks: manager.ticks,
      changed,
      pathOf: node => this._notebookContaining(node)?.context.path ?? null,
      run: (node, step, key) => {
        const actions = actionsOf(node);
        if (actions === null) {
          return;
        }
        if (SHOWN_IN_PANEL.includes(step.action)) {
          activateSidePanel(this._shell, PANEL_ID);
        }
        void actions.runStep(step, key);
      },
      busy: node => actionsOf(node)?.busy ?? false,
      feedback: (node, key, stepId) => {
        const actions = actionsOf(node);
        return actions === null
          ? null
          : stepFeedback(actions, key, stepId, this._model.settings.units, this.trans, this.seesGpu(actions));
      },
      kernelOf: (node): IKernelIdentity | null => {
        // Known for the notebook the panel follows (reading another's would start a bridge to its kernel).
        const panel = this._notebookContaining(node);
        const hello =
          panel !== null && panel.sessionContext === this._model.sessionContext ? this._model.hello : null;
        return hello === null ? null : { pid: hello.pid, createTime: hello.create_time ?? null };
      },
      labelKernel: kernelId => this._requireManager().labelKernel(kernelId),
      copy: text => Clipboard.copyToSystem(text),
      exportTimeline: (node, id, format) => {
        // The kernel of the notebook that holds the output (its bridge is made on demand).
        const panel = this._notebookContaining(node);
        const bridge = panel === null ? null : this._model.bridgeFor(panel.sessionContext);
        return exportTimelineFile(bridge, id, format, this.trans);
      },
      insertCode: (node, code) => {
        const panel = this._notebookContaining(node);
        const actions = panel === null ? null : this._requireManager().forWidget(panel.id);
        if (actions !== null) {
          this.insertCell(actions, code, 'below-active');
        }
      }
    };
  }

  private _requireManager(): IGpuMemActions {
    if (this.manager === null) {
      throw new Error('jupyterlab-gpumem: the actions are not ready');
    }
    return this.manager;
  }

  private _notebookOf(actions: ISessionActions): NotebookPanel | null {
    return this._notebooks.find(panel => panel.sessionContext === actions.sessionContext) ?? null;
  }

  private _notebookContaining(node: HTMLElement): NotebookPanel | null {
    return this._notebooks.find(panel => panel.node.contains(node)) ?? null;
  }

  private readonly _app: JupyterFrontEnd;
  private readonly _shell: JupyterFrontEnd.IShell;
  private readonly _notebooks: INotebookTracker;
  private readonly _model: IGpuMemModel;
}
