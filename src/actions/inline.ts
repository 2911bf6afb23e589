/**
 * What the inline renderers (cell outputs) may do, set by the actions plugin: the OOM checklist's buttons and
 * ticks, the analysis output's "Insert code" and the timeline's downloads.
 *
 * MIME renderers are created by the rendermime registry, which hands them no application: the actions
 * plugin registers itself here instead. Both are modules of the same package (one webpack container), so
 * they share this module. Without a host (the plugin is disabled) the inline checklist shows advice and code
 * only, and the analysis output no "Insert code" button — no buttons that would do nothing.
 */
import type { ISignal } from '@lumino/signaling';

import type { IStepFeedback } from './feedback';
import type { IOomStep } from '../wire/protocol';
import type { ITickStore } from '../tokens';

/** The kernel process a notebook is connected to, as its `hello` names it. */
export interface IKernelIdentity {
  readonly pid: number;
  /** psutil create_time; null when the kernel could not tell. */
  readonly createTime: number | null;
}

/** The actions plugin, as the inline checklist sees it. */
export interface IInlineHost {
  /** Ticks per OOM occurrence (`occurrenceKey(payload)`). */
  readonly ticks: ITickStore;
  /**
   * Emitted when what an inline checklist shows may have changed: ticks, a clear or restart of any notebook
   * (progress and result under the step that started it), the connected kernel process.
   */
  readonly changed: ISignal<unknown, void>;
  /** The path of the notebook whose output contains `node`, or null (not in a notebook). */
  pathOf(node: HTMLElement): string | null;
  /** Run a step's action for the notebook whose output contains `node`; `key`: the checklist's occurrence. */
  run(node: HTMLElement, step: IOomStep, key: string): void;
  /** True while a clear or restart of that notebook runs. */
  busy(node: HTMLElement): boolean;
  /** What the clear or restart that step `stepId` of occurrence `key` started says (null: it started none). */
  feedback(node: HTMLElement, key: string, stepId: string): IStepFeedback | null;
  /** The kernel process of the notebook that holds `node`, once connected (null: unknown). */
  kernelOf(node: HTMLElement): IKernelIdentity | null;
  /** "notebook: a.ipynb" for a kernel of this server. */
  labelKernel(kernelId: string): string | null;
  /** Copies to the clipboard; may return a promise (the button says "Copied" once it resolved). */
  copy(text: string): unknown;
  /** Insert `code` as a new cell below the output that contains `node`. */
  insertCode(node: HTMLElement, code: string): void;
  /**
   * A file made by the kernel of the notebook that holds `node` from the full timeline `id` it keeps (the
   * `timeline_export` request). Rejects with an Error of one line: no kernel, a kernel too old to export, or
   * one that no longer holds that timeline (it restarted).
   */
  exportTimeline?(node: HTMLElement, id: string, format: TimelineExportFormat): Promise<ITimelineFile>;
}

/** What a timeline can be exported as: PyTorch's snapshot pickle (memory_viz opens it) or a CSV. */
export type TimelineExportFormat = 'snapshot' | 'csv';

/** A file the kernel made (reply.schema.json#/$defs/timeline_export_result). */
export interface ITimelineFile {
  readonly id: string;
  readonly format: TimelineExportFormat;
  readonly filename: string;
  readonly media_type: string;
  /** The bytes, base64. */
  readonly data: string;
  readonly bytes: number;
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
