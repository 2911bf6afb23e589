/**
 * The `jupyterlab-gpumem:sample-chart` plugin: the command that opens the panel's chart of recent samples full
 * size in the main area (samplechartwidget.tsx), or brings it to front when it is open. The sidebar chart's
 * "Open full size" button runs it through JupyterLab's command linker; the palette lists it.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, type MainAreaWidget } from '@jupyterlab/apputils';
import { ITranslator } from '@jupyterlab/translation';

import { OPEN_SAMPLE_CHART_COMMAND } from '../commandids';
import { TRANSLATION_DOMAIN } from '../ui/i18n';
import { gpuIcon } from '../ui/icons';
import { IGpuMemModel } from '../tokens';

export const sampleChartPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-gpumem:sample-chart',
  description: "The panel's chart of recent GPU memory samples, full size in the main area.",
  autoStart: true,
  requires: [IGpuMemModel, ITranslator],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    model: IGpuMemModel,
    translator: ITranslator,
    palette: ICommandPalette | null
  ): void => {
    const trans = translator.load(TRANSLATION_DOMAIN);
    let tab: MainAreaWidget | null = null;
    app.commands.addCommand(OPEN_SAMPLE_CHART_COMMAND, {
      label: trans.__('Open the GPU Memory Chart'),
      caption: trans.__("The panel's chart of the last minutes, full size in the main area"),
      icon: gpuIcon,
      describedBy: { args: { type: 'object', properties: {} } },
      execute: async () => {
        if (tab === null || tab.isDisposed) {
          const { sampleChartTab } = await import('./samplechartwidget');
          tab = sampleChartTab(model, trans);
        }
        if (!tab.isAttached) {
          app.shell.add(tab, 'main');
        }
        app.shell.activateById(tab.id);
      }
    });
    palette?.addItem({ command: OPEN_SAMPLE_CHART_COMMAND, category: trans.__('GPU Memory') });
  }
};
