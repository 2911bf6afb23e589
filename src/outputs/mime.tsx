/**
 * The MIME renderers of the kernel's inline outputs: the OOM checklist the kernel's handler adds after a CUDA
 * out-of-memory traceback (`application/vnd.gpumem.oom.v1+json`), the `%gpumem clear` report
 * (`application/vnd.gpumem.clear.v1+json`), and the analysis, autobatch, benchmark and timeline outputs
 * (renderers.ts). The `jupyterlab-gpumem:mime` plugin (outputs/plugin.ts) registers them with the rendermime
 * registry, each factory holding the inline host (`IInlineHost`) that its renderers' buttons act through.
 *
 * `safe: true` (everything renders as React text) and rank 40, ahead of the bundle's static `text/html`
 * fallback (rank 50), so the rich view shows in trusted and untrusted notebooks alike.
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { TRANSLATION_DOMAIN, type Trans, untranslated } from '../ui/i18n';
import type { IInlineHost } from '../tokens';
import { GpuMemOutputView } from './outputview';
import { CLEAR_MIME, OOM_MIME } from '../wire/protocol';
import { createGpumemRendererFactories } from './renderers';

/** The rank of both MIME types: below the `text/html` renderer's 50. */
export const RENDERER_RANK = 40;

/** Renders one gpumem output. */
export class GpuMemOutput extends ReactWidget implements IRenderMime.IRenderer {
  /** `host`: what the checklist's buttons act through (null: advice and code only). */
  constructor(options: IRenderMime.IRendererOptions, host: IInlineHost | null = null) {
    super();
    this._mimeType = options.mimeType;
    this._host = host;
    this._host?.changed.connect(this._onHostChanged, this);
    this._trans = options.translator?.load(TRANSLATION_DOMAIN) ?? untranslated;
    this.addClass('jp-GpuMem-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._data = model.data[this._mimeType];
    this.update();
    return Promise.resolve();
  }

  dispose(): void {
    this._host?.changed.disconnect(this._onHostChanged, this);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    // The notebook (and so its ticks and the buttons' target) is known once the output is in the page.
    this.update();
  }

  protected render(): JSX.Element {
    return (
      <GpuMemOutputView
        mimeType={this._mimeType}
        data={this._data}
        trans={this._trans}
        host={this._host}
        node={this.node}
      />
    );
  }

  /** Ticks, a clear or restart under way, or the notebook's kernel changed: the checklist shows them. */
  private _onHostChanged(): void {
    this.update();
  }

  private readonly _mimeType: string;
  private readonly _trans: Trans;
  private _data: unknown = null;
  private readonly _host: IInlineHost | null;
}

/** The renderer factory for both MIME types; its renderers act through `host`. */
export function createRendererFactory(host: IInlineHost | null = null): IRenderMime.IRendererFactory {
  return {
    safe: true,
    mimeTypes: [OOM_MIME, CLEAR_MIME],
    defaultRank: RENDERER_RANK,
    createRenderer: options => new GpuMemOutput(options, host)
  };
}

/** Every gpumem output's renderer factory, the OOM checklist's and the clear report's first. */
export function gpumemOutputFactories(host: IInlineHost | null): IRenderMime.IRendererFactory[] {
  return [createRendererFactory(host), ...createGpumemRendererFactories({ host })];
}
