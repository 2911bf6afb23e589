/**
 * Where the full OOM checklist is: the cell output under the traceback. The panel shows the diagnosis and the
 * first steps only, and links here: `has` tells whether the notebook still holds the output of that error
 * (found by its occurrence id in the notebook's model, so a cell the notebook has not drawn yet — JupyterLab
 * draws only the cells in view — counts too), `reveal` scrolls to it, selects its cell and focuses it.
 *
 * The `jupyterlab-gpumem:oom-outputs` plugin provides `notebookOomOutputs` over the notebook tracker as the
 * `IOomOutputs` token, and the panel plugin hands it to the panel; without it the panel shows the full
 * checklist itself.
 */
import type { IOomOutputs } from '../../tokens';
import { OOM_MIME } from '../../wire/protocol';

export type { IOomOutputs } from '../../tokens';

/** The parts of a JupyterLab `Notebook` this module uses (the unit tests give a fake). */
export interface INotebookLike {
  readonly model: {
    readonly cells: {
      readonly length: number;
      get(index: number): {
        readonly type: string;
        readonly outputs?: { readonly length: number; get(index: number): { readonly data: unknown } };
      };
    };
  } | null;
  readonly widgets: ReadonlyArray<{ readonly node: HTMLElement }>;
  activeCellIndex: number;
  deselectAll(): void;
  scrollToItem(index: number, align?: 'auto' | 'smart' | 'center' | 'start' | 'end'): Promise<void>;
}

/** The parts of a `NotebookPanel`. */
export interface INotebookPanelLike {
  readonly content: INotebookLike;
  readonly isVisible: boolean;
}

function occurrenceOf(data: unknown): string | null {
  if (typeof data !== 'object' || data === null) {
    return null;
  }
  const payload = (data as Record<string, unknown>)[OOM_MIME];
  const occurrence =
    typeof payload === 'object' && payload !== null ? (payload as Record<string, unknown>).occurrence : null;
  const id =
    typeof occurrence === 'object' && occurrence !== null ? (occurrence as Record<string, unknown>).id : null;
  return typeof id === 'string' ? id : null;
}

/**
 * The index of the first cell whose outputs show the checklist of `occurrenceId` (the one under the
 * traceback; `%gpumem oom` may show it again further down), or -1.
 */
export function oomOutputIndex(notebook: INotebookLike, occurrenceId: string): number {
  const cells = notebook.model?.cells;
  if (cells === undefined || occurrenceId === '') {
    return -1;
  }
  for (let i = 0; i < cells.length; i++) {
    const outputs = cells.get(i).outputs;
    if (outputs === undefined) {
      continue;
    }
    for (let j = 0; j < outputs.length; j++) {
      if (occurrenceOf(outputs.get(j).data) === occurrenceId) {
        return i;
      }
    }
  }
  return -1;
}

/** How long `reveal` waits for the cell's output to be drawn after scrolling to it. */
const DRAW_TIMEOUT_MS = 3000;

function nextFrame(): Promise<void> {
  return new Promise(resolve => requestAnimationFrame(() => resolve()));
}

/** The drawn checklist of `occurrenceId` in `cell`, waiting up to DRAW_TIMEOUT_MS for it to appear. */
async function drawnChecklist(
  cell: () => HTMLElement | null,
  occurrenceId: string
): Promise<HTMLElement | null> {
  const until = Date.now() + DRAW_TIMEOUT_MS;
  for (;;) {
    const found = [...(cell()?.querySelectorAll<HTMLElement>('.jp-GpuMem-oomChecklist') ?? [])].find(
      node => node.dataset.occurrence === occurrenceId
    );
    if (found !== undefined || Date.now() > until) {
      return found ?? null;
    }
    await nextFrame();
  }
}

/** Marks the revealed checklist for a moment (style/actions.css), so the eye finds it. */
const REVEALED_CLASS = 'jp-mod-revealed';
const REVEALED_MS = 2000;

/**
 * The outputs of the notebooks `find` knows (by widget id); `activate` brings a hidden notebook to the front.
 */
export function notebookOomOutputs(
  find: (widgetId: string) => INotebookPanelLike | null,
  activate: (widgetId: string) => void
): IOomOutputs {
  return {
    has: (widgetId, occurrenceId) => {
      const panel = find(widgetId);
      return panel !== null && oomOutputIndex(panel.content, occurrenceId) >= 0;
    },
    reveal: async (widgetId, occurrenceId) => {
      const panel = find(widgetId);
      const notebook = panel?.content ?? null;
      const index = notebook === null ? -1 : oomOutputIndex(notebook, occurrenceId);
      if (panel === null || notebook === null || index < 0) {
        return false;
      }
      if (!panel.isVisible) {
        activate(widgetId);
        await nextFrame();
      }
      notebook.deselectAll();
      notebook.activeCellIndex = index;
      await notebook.scrollToItem(index, 'start').catch(() => undefined);
      const node = await drawnChecklist(() => notebook.widgets[index]?.node ?? null, occurrenceId);
      if (node !== null) {
        node.scrollIntoView({ block: 'start' });
        node.focus({ preventScroll: true });
        node.classList.add(REVEALED_CLASS);
        window.setTimeout(() => node.classList.remove(REVEALED_CLASS), REVEALED_MS);
      }
      return true;
    }
  };
}
