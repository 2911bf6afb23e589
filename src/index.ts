/**
 * jupyterlab-gpumem: live GPU memory of the current notebook's kernel.
 *
 * - `jupyterlab-gpumem:plugin` provides the model: it follows the current notebook/console, connects to its
 *   kernel (one bridge per session) and keeps the settings and the server's sessions up to date.
 * - `jupyterlab-gpumem:panel` adds the "GPU Memory" panel to the right sidebar and the open command.
 * - `jupyterlab-gpumem:status` adds the status-bar item. Notebook 7 has no status bar: there the same item sits in
 *   the header (the shell's `top` area), next to the notebook's name; a JupyterLab without a status bar gets none.
 * - `jupyterlab-gpumem:actions` (actions/plugin.ts): clear, restart and free, the OOM checklist and its
 *   notification, "shut down kernel", the notebook toolbar button. Beside it `jupyterlab-gpumem:inline-host`
 *   provides `IInlineHost` (what the cell outputs' buttons do) and `jupyterlab-gpumem:oom-outputs`
 *   `IOomOutputs` (the full OOM checklists in the notebooks, which the panel links to).
 * - `jupyterlab-gpumem:mime` (outputs/plugin.ts) registers the renderers of the inline outputs, giving them
 *   the inline host.
 *
 * No plugin requires `ILabShell`: they use `app.shell`, so they also start in Jupyter Notebook 7 (≥ 7.4), whose
 * shell has a right sidebar too (its View menu lists the panel under "Right Sidebar").
 *
 * The model token is exported so that later extensions (OOM checklist, analysis renderer) share the comm.
 */
import {
  ILabShell,
  ILayoutRestorer,
  type JupyterFrontEnd,
  type JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { ITranslator } from '@jupyterlab/translation';
import { Signal } from '@lumino/signaling';

import { actionsPlugin, inlineHostPlugin, oomOutputsPlugin } from './actions/plugin';
import { OPEN_PANEL_COMMAND } from './commandids';
import { statusSummary } from './panel/statussummary';
import { CurrentSession } from './channel/current';
import { TRANSLATION_DOMAIN } from './ui/i18n';
import { gpuIcon } from './ui/icons';
import { activateSidePanel } from './ui/shell';
import { GpuMemModel } from './channel/model';
import { GpuMemPanel } from './panel/panel';
import { sampleChartPlugin } from './panel/samplechartplugin';
import { IdleHoldersModel } from './panel/idleholders';
import { fetchServerKernels } from './panel/idlefetch';
import { readSettings } from './settings';
import { GpuMemStatusItem } from './panel/statusitem';
import { IGpuMemActions, IGpuMemModel, IOomOutputs } from './tokens';
import { outputsPlugin } from './outputs/plugin';
import { CLIENT } from './version';

export { IGpuMemActions, IGpuMemModel, IInlineHost, IOomOutputs } from './tokens';
export type {
  IBridgeView,
  IClearRun,
  IKernelProblem,
  IOomRun,
  IRestartRun,
  ISessionActions,
  ITickStore
} from './tokens';
export * from './commandids';
export { RequestError } from './channel/requests';
export { labelProcess, deviceSegments, primaryDevice, kernelTotal } from './channel/sample';
export type { IKernelSession } from './channel/sample';
export * from './wire/protocol';
export type { IGpuMemSettings } from './settings';
export type { IBridgeState, StateName } from './channel/state';
export { formatBytes, formatBytesPair, formatPercent } from './ui/format';

const modelPlugin: JupyterFrontEndPlugin<IGpuMemModel> = {
  id: 'jupyterlab-gpumem:plugin',
  description: "Follows the current notebook's kernel and keeps its GPU memory samples.",
  autoStart: true,
  provides: IGpuMemModel,
  requires: [INotebookTracker, ISettingRegistry, ITranslator],
  optional: [IConsoleTracker],
  activate: async (
    app: JupyterFrontEnd,
    notebooks: INotebookTracker,
    registry: ISettingRegistry,
    translator: ITranslator,
    consoles: IConsoleTracker | null
  ): Promise<IGpuMemModel> => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const model = new GpuMemModel({ client: CLIENT, trans });

    // Settings first: whether to load the shim automatically must be known before the first bridge starts.
    try {
      const settings = await registry.load(modelPlugin.id);
      model.settings = readSettings(settings.composite);
      settings.changed.connect(() => {
        model.settings = readSettings(settings.composite);
      });
    } catch (reason) {
      console.error('jupyterlab-gpumem: could not load the settings, using the defaults.', reason);
    }

    const sessions = app.serviceManager.sessions;
    model.setSessions(sessions.running());
    sessions.runningChanged.connect((_, models) => model.setSessions(models));

    const current = new CurrentSession({ shell: app.shell, notebooks, consoles });
    model.setSessionContext(current.sessionContext);
    current.changed.connect((_, sessionContext) => model.setSessionContext(sessionContext));
    return model;
  }
};

const panelPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-gpumem:panel',
  description: 'The GPU Memory panel in the right sidebar.',
  autoStart: true,
  requires: [IGpuMemModel, ITranslator],
  optional: [ILayoutRestorer, ICommandPalette, IGpuMemActions, IOomOutputs],
  activate: (
    app: JupyterFrontEnd,
    model: IGpuMemModel,
    translator: ITranslator,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    actions: IGpuMemActions | null,
    oomOutputs: IOomOutputs | null
  ): void => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const shell = app.shell; // JupyterLab's or Notebook 7's: both have a right sidebar
    const panel = new GpuMemPanel(
      model,
      trans,
      actions,
      new IdleHoldersModel({ fetch: () => fetchServerKernels() }),
      oomOutputs
    );
    shell.add(panel, 'right', { rank: 500 });
    restorer?.add(panel, panelPlugin.id);

    app.commands.addCommand(OPEN_PANEL_COMMAND, {
      label: trans.__('Open the GPU Memory Panel'),
      caption: trans.__("Show the current kernel's GPU memory in the right sidebar"),
      icon: gpuIcon,
      describedBy: { args: { type: 'object', properties: {} } },
      execute: () => {
        activateSidePanel(shell, panel.id);
      }
    });
    palette?.addItem({ command: OPEN_PANEL_COMMAND, category: trans.__('GPU Memory') });
  }
};

const statusPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-gpumem:status',
  description: "The current kernel's GPU memory in the status bar.",
  autoStart: true,
  requires: [IGpuMemModel, ITranslator],
  optional: [IStatusBar, ILabShell],
  activate: (
    app: JupyterFrontEnd,
    model: IGpuMemModel,
    translator: ITranslator,
    statusBar: IStatusBar | null,
    labShell: ILabShell | null
  ): void => {
    if (statusBar === null && labShell !== null) {
      return; // JupyterLab with its status bar disabled: no item, as before
    }
    const trans = translator.load(TRANSLATION_DOMAIN);
    const item = new GpuMemStatusItem(model, trans, app.commands);
    if (statusBar === null) {
      // Notebook 7: no status bar. The item goes into the header, shown and hidden as the status bar would.
      item.addClass('jp-GpuMem-topItem');
      const show = (): void => item.setHidden(!statusSummary(model, trans).visible);
      show();
      model.changed.connect(show);
      app.shell.add(item, 'top', { rank: 900 });
      return;
    }
    // The status bar asks `isActive` only when told to: tell it when visibility flips, not on every sample.
    const visibilityChanged = new Signal<IGpuMemModel, void>(model);
    let visible = statusSummary(model, trans).visible;
    model.changed.connect(() => {
      const now = statusSummary(model, trans).visible;
      if (now !== visible) {
        visible = now;
        visibilityChanged.emit();
      }
    });
    statusBar.registerStatusItem(statusPlugin.id, {
      item,
      align: 'left',
      rank: 4,
      isActive: () => visible,
      activeStateChanged: visibilityChanged
    });
  }
};

export default [
  modelPlugin,
  actionsPlugin,
  inlineHostPlugin,
  oomOutputsPlugin,
  outputsPlugin,
  panelPlugin,
  sampleChartPlugin,
  statusPlugin
];
