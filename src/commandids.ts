/**
 * The command ids of jupyterlab-gpumem (palette, notebook toolbar, keyboard shortcuts and the UI tests use
 * them), and the panel's DOM id that they open. The actions' commands accept an optional `widgetId` argument
 * naming the notebook to act on; without it they act on the notebook the panel follows.
 */

/** The panel's DOM id (the layout restorer, the open command and the UI tests use it). */
export const PANEL_ID = 'jp-GpuMem-panel';

/** Open the GPU Memory panel in the right sidebar (the status-bar item runs it). */
export const OPEN_PANEL_COMMAND = 'gpumem:open-panel';

/** Run the safe clear in the kernel and show its report in the panel. */
export const CLEAR_COMMAND = 'gpumem:clear';

/** Restart the kernel, wait until the GPU driver releases it, report what was freed. */
export const RESTART_COMMAND = 'gpumem:restart-and-free';

/** The same, also clearing every output (like "Restart Kernel and Clear Outputs"). */
export const RESTART_CLEAR_COMMAND = 'gpumem:restart-clear-and-free';

/** Show the last CUDA out-of-memory checklist in the panel (the notification's action). */
export const OPEN_OOM_COMMAND = 'gpumem:open-oom-checklist';

/** Open the panel's chart of recent samples full size in the main area (its "Open full size" button runs it). */
export const OPEN_SAMPLE_CHART_COMMAND = 'gpumem:open-sample-chart';

/** The DOM id of that main-area chart. */
export const SAMPLE_CHART_ID = 'jp-GpuMem-sampleChart-main';
