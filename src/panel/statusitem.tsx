/**
 * The status-bar item: "GPU 11.4 / 16.0 GiB" for the current kernel ("GPU: none · RAM 1.2 / 8.0 GiB" without
 * a GPU), coloured by the thresholds; a click opens the panel.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { OPEN_PANEL_COMMAND } from '../commandids';
import { statusSummary } from './statussummary';
import type { Trans } from '../ui/i18n';
import type { IGpuMemModel } from '../tokens';

export class GpuMemStatusItem extends ReactWidget {
  constructor(model: IGpuMemModel, trans: Trans, commands: JupyterFrontEnd['commands']) {
    super();
    this._model = model;
    this._trans = trans;
    this._commands = commands;
    this.addClass('jp-GpuMem-statusWidget');
  }

  protected render(): JSX.Element {
    const open = (): void => {
      void this._commands.execute(OPEN_PANEL_COMMAND);
    };
    return (
      <UseSignal signal={this._model.changed} initialSender={this._model}>
        {() => {
          const summary = statusSummary(this._model, this._trans);
          // jp-StatusBar-TextItem: JupyterLab's own text items' font and 24px line, so that our text sits
          // on the same baseline as theirs (without it, it rode 4 px above them).
          const classes = [
            'jp-StatusBar-TextItem',
            'jp-GpuMem-statusItem',
            `jp-GpuMem-level-${summary.level}`,
            summary.stale ? 'jp-mod-stale' : ''
          ].filter(Boolean);
          return (
            <span
              className={classes.join(' ')}
              title={summary.title}
              role="button"
              tabIndex={0}
              onClick={open}
              onKeyDown={event => {
                if (event.key === 'Enter' || event.key === ' ') {
                  event.preventDefault();
                  open();
                }
              }}
            >
              {summary.text}
            </span>
          );
        }}
      </UseSignal>
    );
  }

  private readonly _model: IGpuMemModel;
  private readonly _trans: Trans;
  private readonly _commands: JupyterFrontEnd['commands'];
}
