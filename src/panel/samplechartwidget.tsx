/**
 * The panel's chart of recent samples, full size in the main area: the same chart as the sidebar's, for the
 * device the panel shows, re-drawn on every sample and setting change (samplechartplugin.ts opens it).
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { SAMPLE_CHART_ID } from '../commandids';
import { LiveSampleChart } from './livesamplechart';
import type { Trans } from '../ui/i18n';
import { gpuIcon } from '../ui/icons';
import type { IGpuMemModel } from '../tokens';

/** `<div class="jp-GpuMem-sampleChartFull">`: the live chart, re-rendered on every change of the model. */
export class SampleChartWidget extends ReactWidget {
  constructor(model: IGpuMemModel, trans: Trans) {
    super();
    this._model = model;
    this._trans = trans;
    this.addClass('jp-GpuMem-sampleChartFull');
  }

  protected render(): JSX.Element {
    return (
      <UseSignal signal={this._model.changed} initialSender={this._model}>
        {() => <LiveSampleChart model={this._model} trans={this._trans} />}
      </UseSignal>
    );
  }

  private readonly _model: IGpuMemModel;
  private readonly _trans: Trans;
}

/** The main-area tab: the widget in a MainAreaWidget, titled and closable. */
export function sampleChartTab(model: IGpuMemModel, trans: Trans): MainAreaWidget<SampleChartWidget> {
  const tab = new MainAreaWidget({ content: new SampleChartWidget(model, trans) });
  tab.id = SAMPLE_CHART_ID;
  tab.title.label = trans.__('GPU Memory Chart');
  tab.title.caption = trans.__("The current kernel's GPU memory over the last minutes, live");
  tab.title.icon = gpuIcon;
  tab.title.closable = true;
  return tab;
}
