/**
 * The right-sidebar "GPU Memory" panel: a ReactWidget that re-renders the view on every model change.
 */
import { Clipboard } from '@jupyterlab/apputils';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { GpuMemView } from './view';
import type { Trans } from './i18n';
import { gpuIcon } from './icons';
import type { IGpuMemModel } from './tokens';

/** The panel's DOM id (the layout restorer, the open command and the UI tests use it). */
export const PANEL_ID = 'jp-GpuMem-panel';

export class GpuMemPanel extends ReactWidget {
  constructor(model: IGpuMemModel, trans: Trans) {
    super();
    this._model = model;
    this._trans = trans;
    this.id = PANEL_ID;
    this.addClass('jp-GpuMem-panel');
    this.title.icon = gpuIcon;
    this.title.caption = trans.__('GPU Memory');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('GPU Memory'));
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed} initialSender={this._model}>
        {() => (
          <GpuMemView
            model={this._model}
            trans={this._trans}
            onCopy={text => Clipboard.copyToSystem(text)}
          />
        )}
      </UseSignal>
    );
  }

  private readonly _model: IGpuMemModel;
  private readonly _trans: Trans;
}
