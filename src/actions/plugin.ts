/**
 * The `jupyterlab-gpumem:actions` plugin: clear GPU memory, restart and free, the OOM checklist and "shut
 * down kernel" — the commands, the notebook toolbar button, the IOPub watcher of every open notebook and
 * console. Beside it, `jupyterlab-gpumem:inline-host` provides what the cell outputs may do (`IInlineHost`,
 * over the actions) and `jupyterlab-gpumem:oom-outputs` where the full OOM checklists are (`IOomOutputs`,
 * which the panel's brief checklist links to).
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker, type NotebookPanel } from '@jupyterlab/notebook';
import { IStateDB } from '@jupyterlab/statedb';
import { ITranslator } from '@jupyterlab/translation';
import { ToolbarButton } from '@jupyterlab/ui-components';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { GpuMemActions } from './actions';
import {
  CLEAR_COMMAND,
  OPEN_OOM_COMMAND,
  PANEL_ID,
  RESTART_CLEAR_COMMAND,
  RESTART_COMMAND
} from '../commandids';
import { TRANSLATION_DOMAIN } from '../ui/i18n';
import { gpuIcon } from '../ui/icons';
import { activateSidePanel } from '../ui/shell';
import { notebookOomOutputs } from './oom/reveal';
import { LabActionHost } from './labhost';
import { restartHeadline } from './restart/report';
import { TickStore } from './ticks';
import { IGpuMemActions, IGpuMemModel, IInlineHost, IOomOutputs, type ISessionActions } from '../tokens';

/** The toolbar item's name (the notebook toolbar settings can move or hide it under this name). */
export const TOOLBAR_ITEM = 'gpumem-restart-and-free';

export const actionsPlugin: JupyterFrontEndPlugin<IGpuMemActions> = {
  id: 'jupyterlab-gpumem:actions',
  description: 'Clear GPU memory, restart and free, and the CUDA out-of-memory checklist.',
  autoStart: true,
  provides: IGpuMemActions,
  // No ILabShell: `app.shell` is JupyterLab's or Notebook 7's (both activate a widget by id).
  requires: [IGpuMemModel, INotebookTracker, ITranslator],
  optional: [IConsoleTracker, IStateDB, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    model: IGpuMemModel,
    notebooks: INotebookTracker,
    translator: ITranslator,
    consoles: IConsoleTracker | null,
    state: IStateDB | null,
    palette: ICommandPalette | null
  ): IGpuMemActions => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const shell = app.shell;
    const host = new LabActionHost({ app, shell, notebooks, model, trans });
    const ticks = new TickStore(
      state === null
        ? null
        : {
            fetch: id => state.fetch(id),
            save: (id, value) => state.save(id, value),
            remove: id => state.remove(id)
          }
    );
    const manager = new GpuMemActions({
      model,
      host,
      ticks,
      shutDownKernel: kernelId => host.shutDownKernel(kernelId)
    });
    host.manager = manager;

    const addNotebook = (panel: NotebookPanel): void => {
      manager.add(panel.sessionContext, panel.id);
      const button = new ToolbarButton({
        icon: gpuIcon,
        className: 'jp-GpuMem-toolbarRestart',
        tooltip: trans.__('Restart the kernel and free its GPU memory'),
        onClick: () => {
          void app.commands.execute(RESTART_COMMAND, { widgetId: panel.id });
        }
      });
      if (!panel.toolbar.insertAfter('restart-and-run', TOOLBAR_ITEM, button)) {
        panel.toolbar.insertItem(10, TOOLBAR_ITEM, button);
      }
    };
    notebooks.forEach(addNotebook);
    notebooks.widgetAdded.connect((_, panel) => addNotebook(panel));
    consoles?.forEach(panel => manager.add(panel.sessionContext, panel.id));
    consoles?.widgetAdded.connect((_, panel) => manager.add(panel.sessionContext, panel.id));

    /** The notebook a command acts on: the one named by `widgetId`, else the one the panel follows. */
    const target = (args: ReadonlyPartialJSONObject): ISessionActions | null => {
      const id = typeof args.widgetId === 'string' ? args.widgetId : '';
      return (id !== '' ? manager.forWidget(id) : null) ?? manager.current;
    };
    const openPanel = (): void => activateSidePanel(shell, PANEL_ID);
    const hasTarget = (args: ReadonlyPartialJSONObject): boolean => {
      const actions = target(args);
      return actions !== null && !actions.busy;
    };
    /** The commands' one optional argument, as a JSON Schema (what `commands.describedBy()` answers). */
    const describedBy = {
      args: {
        type: 'object',
        properties: {
          widgetId: {
            type: 'string',
            description: trans.__('The id of the notebook or console to act on (default: the panel’s)')
          }
        }
      }
    };

    app.commands.addCommand(CLEAR_COMMAND, {
      label: trans.__('Clear GPU Memory'),
      caption: trans.__(
        'Drop what pins GPU memory (the last traceback, cached outputs), collect garbage and empty PyTorch’s cache; your variables stay'
      ),
      icon: gpuIcon,
      describedBy,
      isEnabled: hasTarget,
      execute: async args => {
        const actions = target(args);
        if (actions !== null) {
          openPanel();
          await actions.clear();
        }
      }
    });

    const restart = async (
      args: ReadonlyPartialJSONObject,
      clearOutputs: boolean | undefined
    ): Promise<void> => {
      const actions = target(args);
      if (actions === null) {
        return;
      }
      openPanel();
      const report = await actions.restartAndFree(clearOutputs);
      if (report !== null) {
        Notification.info(restartHeadline(report, model.settings.units, trans), { autoClose: 8000 });
      }
    };
    app.commands.addCommand(RESTART_COMMAND, {
      label: trans.__('Restart Kernel and Free GPU Memory'),
      caption: trans.__(
        'Restart the kernel, wait until the GPU driver releases it, and report what was freed'
      ),
      icon: gpuIcon,
      describedBy,
      isEnabled: hasTarget,
      execute: args => restart(args, undefined)
    });
    app.commands.addCommand(RESTART_CLEAR_COMMAND, {
      label: trans.__('Restart Kernel, Clear Outputs and Free GPU Memory'),
      caption: trans.__('Like "Restart Kernel and Clear Outputs", then report the GPU memory freed'),
      describedBy,
      isEnabled: hasTarget,
      execute: args => restart(args, true)
    });
    app.commands.addCommand(OPEN_OOM_COMMAND, {
      label: trans.__('Show the CUDA Out-of-Memory Checklist'),
      caption: trans.__('The checklist of the last CUDA out-of-memory error of this notebook'),
      describedBy,
      execute: async args => {
        const id = typeof args.widgetId === 'string' ? args.widgetId : '';
        if (id !== '') {
          shell.activateById(id); // the panel follows the notebook that failed
        }
        openPanel();
        await target(args)?.loadLastOom();
        document
          .querySelector(`#${PANEL_ID} .jp-GpuMem-oom`)
          ?.scrollIntoView({ block: 'start', behavior: 'smooth' });
      }
    });
    const category = trans.__('GPU Memory');
    for (const command of [CLEAR_COMMAND, RESTART_COMMAND, RESTART_CLEAR_COMMAND, OPEN_OOM_COMMAND]) {
      palette?.addItem({ command, category });
    }
    return manager;
  }
};

export const inlineHostPlugin: JupyterFrontEndPlugin<IInlineHost> = {
  id: 'jupyterlab-gpumem:inline-host',
  description:
    "What the gpumem cell outputs may do: the OOM checklist's buttons and ticks, insert code, export.",
  autoStart: true,
  provides: IInlineHost,
  requires: [IGpuMemActions, IGpuMemModel, INotebookTracker, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    actions: IGpuMemActions,
    model: IGpuMemModel,
    notebooks: INotebookTracker,
    translator: ITranslator
  ): IInlineHost => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    const host = new LabActionHost({ app, shell: app.shell, notebooks, model, trans });
    host.manager = actions;
    return host.inlineHost();
  }
};

export const oomOutputsPlugin: JupyterFrontEndPlugin<IOomOutputs> = {
  id: 'jupyterlab-gpumem:oom-outputs',
  description:
    "The OOM checklists in the open notebooks' cell outputs, for the panel's link to the full one.",
  autoStart: true,
  provides: IOomOutputs,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, notebooks: INotebookTracker): IOomOutputs =>
    // The panel's brief OOM checklist links to the full one in the notebook's cell output.
    notebookOomOutputs(
      id => notebooks.find(panel => panel.id === id) ?? null,
      id => app.shell.activateById(id)
    )
};
