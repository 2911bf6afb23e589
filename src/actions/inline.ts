/**
 * What the inline renderers (cell outputs) may do, set by the actions plugin: the OOM checklist's buttons and
 * ticks, and the analysis output's "Insert code".
 *
 * MIME renderers are created by the rendermime registry, which hands them no application: the actions
 * plugin registers itself here instead. Both are modules of the same package (one webpack container), so
 * they share this module. Without a host (the plugin is disabled) the inline checklist shows advice and code
 * only, and the analysis output no "Insert code" button — no buttons that would do nothing.
 */
import type { IOomStep } from '../wire/protocol';
import type { ITickStore } from '../tokens';

/** The actions plugin, as the inline checklist sees it. */
export interface IInlineHost {
  readonly ticks: ITickStore;
  /** The path of the notebook whose output contains `node`, or null (not in a notebook). */
  pathOf(node: HTMLElement): string | null;
  /** Run a step's action for the notebook whose output contains `node`. */
  run(node: HTMLElement, step: IOomStep): void;
  /** True while a clear or restart of that notebook runs. */
  busy(node: HTMLElement): boolean;
  /** "notebook: a.ipynb" for a kernel of this server. */
  labelKernel(kernelId: string): string | null;
  copy(text: string): void;
  /** Insert `code` as a new cell below the output that contains `node`. */
  insertCode(node: HTMLElement, code: string): void;
}

let current: IInlineHost | null = null;

/** Register the host (null: unregister). */
export function setInlineHost(host: IInlineHost | null): void {
  current = host;
}

/** The registered host, if any. */
export function inlineHost(): IInlineHost | null {
  return current;
}
