/**
 * The MIME renderer extension for the kernel's inline outputs: the OOM checklist the kernel's handler adds
 * after a CUDA out-of-memory traceback (`application/vnd.gpumem.oom.v1+json`) and the `%gpumem clear` report
 * (`application/vnd.gpumem.clear.v1+json`). The package's `jupyterlab.mimeExtension` (package.json).
 *
 * `safe: true` (everything renders as React text) and rank 40, ahead of the bundle's static `text/html`
 * fallback (rank 50), so the rich view shows in trusted and untrusted notebooks alike.
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { TRANSLATION_DOMAIN, type Trans, untranslated } from '../ui/i18n';
import { type IInlineHost, inlineHost } from '../actions/inline';
import { GpuMemOutputView } from './outputview';
import { CLEAR_MIME, OOM_MIME } from '../wire/protocol';
import { gpumemRendererFactories } from './renderers';

/** The rank of both MIME types: below the `text/html` renderer's 50. */
export const RENDERER_RANK = 40;

/** Renders one gpumem output. */
export class GpuMemOutput extends ReactWidget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this._trans = options.translator?.load(TRANSLATION_DOMAIN) ?? untranslated;
    this.addClass('jp-GpuMem-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._data = model.data[this._mimeType];
    if (this._host === null) {
      this._host = inlineHost();
      this._host?.changed.connect(this._onHostChanged, this);
    }
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
  private _host: IInlineHost | null = null;
}

/** The renderer factory for both MIME types. */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [OOM_MIME, CLEAR_MIME],
  defaultRank: RENDERER_RANK,
  createRenderer: options => new GpuMemOutput(options)
};

/** The clear report and the OOM checklist. */
export const gpumemOutputExtension: IRenderMime.IExtension = {
  id: 'jupyterlab-gpumem:mime',
  description: 'Renders the OOM checklist and the clear report that gpumem_kernel writes into cell outputs.',
  rendererFactory,
  rank: RENDERER_RANK,
  dataType: 'json'
};

/**
 * The package's MIME extensions (an array: the renderers of other gpumem outputs can join this module, as a
 * package has one `mimeExtension` entry point).
 */
const extensions: IRenderMime.IExtension[] = [
  gpumemOutputExtension,
  ...gpumemRendererFactories.map((factory): IRenderMime.IExtension => ({
    // application/vnd.gpumem.<kind>.v1+json → jupyterlab-gpumem:mime-<kind>
    id: `jupyterlab-gpumem:mime-${factory.mimeTypes[0].split('.')[2]}`,
    description: 'Renders the analysis, autobatch, benchmark and timeline outputs of %gpumem.',
    rendererFactory: factory,
    rank: RENDERER_RANK,
    dataType: 'json'
  }))
];

export default extensions;
