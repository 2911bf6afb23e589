/**
 * The right-sidebar "GPU Memory" panel: a ReactWidget that re-renders the view on every change of the model
 * (once per sample) and of the current notebook's actions (clear, restart, OOM checklist).
 */
import { Clipboard } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { PANEL_ID } from '../commandids';
import { GpuMemView } from './view';
import type { IdleHoldersModel } from './idleholders';
import type { Trans } from '../ui/i18n';
import { gpuIcon } from '../ui/icons';
import type { IGpuMemActions, IGpuMemModel, IOomOutputs } from '../tokens';

export class GpuMemPanel extends ReactWidget {
  constructor(
    model: IGpuMemModel,
    trans: Trans,
    actions: IGpuMemActions | null = null,
    idle: IdleHoldersModel | null = null,
    oomOutputs: IOomOutputs | null = null
  ) {
    super();
    this._oomOutputs = oomOutputs;
    this._model = model;
    this._trans = trans;
    this._actions = actions;
    this._idle = idle;
    model.changed.connect(this._onChange, this);
    actions?.changed.connect(this._onChange, this);
    idle?.changed.connect(this._onChange, this);
    this.id = PANEL_ID;
    this.addClass('jp-GpuMem-panel');
    this.title.icon = gpuIcon;
    this.title.caption = trans.__('GPU Memory');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('GPU Memory'));
  }

  protected render(): JSX.Element {
    return (
      <GpuMemView
        model={this._model}
        trans={this._trans}
        actions={this._actions}
        idle={this._idle}
        oomOutputs={this._oomOutputs}
        onCopy={text => Clipboard.copyToSystem(text)}
      />
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.changed.disconnect(this._onChange, this);
    this._actions?.changed.disconnect(this._onChange, this);
    this._idle?.dispose();
    super.dispose();
  }

  /** The server's kernels are polled only while the panel is visible. */
  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._idle?.start();
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._idle?.stop();
  }

  private _onChange(): void {
    this.update();
  }

  private readonly _model: IGpuMemModel;
  private readonly _trans: Trans;
  private readonly _actions: IGpuMemActions | null;
  private readonly _idle: IdleHoldersModel | null;
  private readonly _oomOutputs: IOomOutputs | null;
}
