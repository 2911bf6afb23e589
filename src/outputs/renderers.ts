/**
 * MIME renderers for the kernel's analysis outputs:
 *
 * - `application/vnd.gpumem.analysis.v1+json` (`%gpumem analyze`),
 * - `application/vnd.gpumem.autobatch.v1+json` (`%gpumem autobatch`),
 * - `application/vnd.gpumem.benchmark.v1+json` (`%gpumem benchmark`),
 * - `application/vnd.gpumem.timeline.v1+json` (`%gpumem analyze … --timeline`, `%%gpumem --timeline`).
 *
 * `safe: true`: everything from the kernel is rendered as React text (escaped), nothing as HTML; rank 40, ahead
 * of the bundle's static text/html fallback. A payload that does not fit its schema (an output written by
 * another version) renders as one line, never a crash. The benchmark output is updated in place while rows
 * finish: every `renderModel` re-renders the same React root with the new payload.
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import type { ITranslator } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';
import * as React from 'react';
import { flushSync } from 'react-dom';
import { createRoot, type Root } from 'react-dom/client';

import type { IInlineHost, ITimelineFile, TimelineExportFormat } from '../tokens';
import { type CopyText, copyToClipboard } from './kit';
import {
  ANALYSIS_MIME,
  analysisPayloadProblem,
  AUTOBATCH_MIME,
  autobatchPayloadProblem,
  BENCHMARK_MIME,
  benchmarkPayloadProblem,
  type IAnalysisPayload,
  type IAutobatchPayload,
  type IBenchmarkPayload,
  type ITimelinePayload,
  TIMELINE_MIME,
  timelinePayloadProblem
} from '../wire/analysispayload';
import { AnalysisView } from './analysis/view';
import { AutobatchView } from './autobatch/view';
import { BenchmarkView } from './benchmark/view';
import { downloadBlob, type SaveFile, TimelineView } from './timeline/view';
import { TRANSLATION_DOMAIN, type Trans, untranslated } from '../ui/i18n';

export { ANALYSIS_MIME, AUTOBATCH_MIME, BENCHMARK_MIME, TIMELINE_MIME };

/** Asks the kernel of the notebook that holds `origin` for a file of the full timeline `id`. */
export type ExportTimelineFile = (
  id: string,
  format: TimelineExportFormat,
  origin: HTMLElement
) => Promise<ITimelineFile>;

/** Inserts `code` as a new cell below the output that `origin` (the renderer's node) belongs to. */
export type InsertCell = (code: string, origin: HTMLElement) => void;

export interface IGpumemRendererOptions {
  /** UI strings; defaults to the renderer options' translator, else no translation. */
  readonly translator?: ITranslator;
  /**
   * What the cell outputs may do in JupyterLab (the `IInlineHost` token, which the renderers' plugin hands
   * here): "Insert code" and the timeline's downloads when not given below.
   */
  readonly host?: IInlineHost | null;
  /**
   * "Insert code" (gradient accumulation). Absent: the inline host's; without either the button is hidden.
   */
  readonly insertCell?: InsertCell;
  /** Clipboard; defaults to the browser's. */
  readonly copy?: CopyText;
  /** The timeline's downloads from the kernel; defaults to the inline host's `exportTimeline`. */
  readonly exportTimeline?: ExportTimelineFile;
  /** Saves a downloaded file; defaults to the browser's download. */
  readonly save?: SaveFile;
}

type Kind = 'analysis' | 'autobatch' | 'benchmark' | 'timeline';

const PROBLEMS: Readonly<Record<Kind, (value: unknown) => string | null>> = {
  analysis: analysisPayloadProblem,
  autobatch: autobatchPayloadProblem,
  benchmark: benchmarkPayloadProblem,
  timeline: timelinePayloadProblem
};

const MIME_TYPES: Readonly<Record<Kind, string>> = {
  analysis: ANALYSIS_MIME,
  autobatch: AUTOBATCH_MIME,
  benchmark: BENCHMARK_MIME,
  timeline: TIMELINE_MIME
};

/** The one line shown for data that does not fit the schema. */
export function invalidMessage(problem: string, trans: Trans = untranslated): string {
  return trans.__("gpumem: this output's data does not match its schema (%1)", problem);
}

/** Renders one analysis, autobatch, benchmark or timeline output. */
export class GpumemAnalysisRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(
    kind: Kind,
    rendererOptions: IRenderMime.IRendererOptions,
    options: IGpumemRendererOptions = {}
  ) {
    super();
    this._kind = kind;
    this._mimeType = rendererOptions.mimeType;
    const translator = options.translator ?? rendererOptions.translator;
    this._trans = translator ? translator.load(TRANSLATION_DOMAIN) : untranslated;
    this._host = options.host ?? null;
    this._insertCell = options.insertCell ?? null;
    this._copy = options.copy ?? copyToClipboard;
    this._exportTimeline = options.exportTimeline ?? null;
    this._save = options.save ?? downloadBlob;
    this.addClass('jp-GpuMem-richOutput');
    this.addClass(`jp-GpuMem-richOutput-${kind}`);
  }

  /** The problem with the last payload, or null when it rendered. */
  get problem(): string | null {
    return this._problem;
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._mimeType] ?? model.data[MIME_TYPES[this._kind]];
    let element: JSX.Element;
    try {
      element = this._element(data);
    } catch (error) {
      // A bug in a view must not take the notebook down with it.
      element = this._invalid(error instanceof Error ? error.message : String(error));
    }
    if (this._root === null) {
      this._root = createRoot(this.node);
    }
    const root = this._root;
    try {
      flushSync(() => root.render(element));
    } catch {
      // flushSync refuses inside a React render or effect: render asynchronously instead.
      root.render(element);
    }
    return Promise.resolve();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    const root = this._root;
    this._root = null;
    root?.unmount();
    super.dispose();
  }

  private _element(data: unknown): JSX.Element {
    const problem = PROBLEMS[this._kind](data);
    this._problem = problem;
    if (problem !== null) {
      return this._invalid(problem);
    }
    const trans = this._trans;
    const copy = this._copy;
    switch (this._kind) {
      case 'analysis': {
        const host = this._host;
        const handler: InsertCell | null =
          this._insertCell ?? (host === null ? null : (code, origin) => host.insertCode(origin, code));
        const node = this.node;
        return React.createElement(AnalysisView, {
          payload: data as IAnalysisPayload,
          trans,
          copy,
          insertCell: handler === null ? null : (code: string) => handler(code, node)
        });
      }
      case 'autobatch':
        return React.createElement(AutobatchView, { payload: data as IAutobatchPayload, trans, copy });
      case 'benchmark':
        return React.createElement(BenchmarkView, { payload: data as IBenchmarkPayload, trans, copy });
      case 'timeline': {
        const payload = data as ITimelinePayload;
        const node = this.node;
        const injected = this._exportTimeline;
        const exportFile = (format: TimelineExportFormat): Promise<ITimelineFile> => {
          if (injected !== null) {
            return injected(payload.id, format, node);
          }
          const host = this._host;
          return host?.exportTimeline
            ? host.exportTimeline(node, payload.id, format)
            : Promise.reject(
                new Error(trans.__('No kernel connection here: open the notebook in JupyterLab'))
              );
        };
        return React.createElement(TimelineView, { payload, trans, exportFile, save: this._save });
      }
    }
  }

  private _invalid(problem: string): JSX.Element {
    this._problem = problem;
    return React.createElement(
      'div',
      { className: 'jp-GpuMem-invalid jp-GpuMem-richInvalid', title: problem },
      invalidMessage(problem, this._trans)
    );
  }

  private readonly _kind: Kind;
  private readonly _mimeType: string;
  private readonly _trans: Trans;
  private readonly _host: IInlineHost | null;
  private readonly _insertCell: InsertCell | null;
  private readonly _copy: CopyText;
  private readonly _exportTimeline: ExportTimelineFile | null;
  private readonly _save: SaveFile;
  private _root: Root | null = null;
  private _problem: string | null = null;
}

/** Below the text/html fallback's 50, like the other gpumem outputs. */
export const RENDERER_RANK = 40;

/** The four renderer factories, with options (translator, "Insert code", clipboard, downloads). */
export function createGpumemRendererFactories(
  options: IGpumemRendererOptions = {}
): IRenderMime.IRendererFactory[] {
  return (['analysis', 'autobatch', 'benchmark', 'timeline'] as const).map(kind => ({
    safe: true,
    mimeTypes: [MIME_TYPES[kind]],
    defaultRank: RENDERER_RANK,
    createRenderer: (rendererOptions: IRenderMime.IRendererOptions) =>
      new GpumemAnalysisRenderer(kind, rendererOptions, options)
  }));
}

/** The factories with default options (no inline host: outside JupyterLab's plugins, e.g. in tests). */
export const gpumemRendererFactories: IRenderMime.IRendererFactory[] = createGpumemRendererFactories();
