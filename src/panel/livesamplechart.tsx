/**
 * The full-size chart's content (samplechartwidget.tsx re-renders it on every change of the model): the chart
 * of the model's samples for the device the panel shows, with the panel's settings, or why there is none.
 */
import * as React from 'react';

import { deviceKey, primaryDevice } from '../channel/sample';
import { describeState } from '../channel/state';
import { SampleChart } from './samplechart';
import type { Trans } from '../ui/i18n';
import type { IGpuMemModel } from '../tokens';

/** The chart of the model's samples, or why there is none (no kernel, no GPU, not loaded). */
export function LiveSampleChart(props: { model: IGpuMemModel; trans: Trans }): JSX.Element {
  const { model, trans } = props;
  const sample = model.latest;
  const device = sample !== null && sample.gpu.available ? primaryDevice(sample) : null;
  if (device === null) {
    const why =
      sample !== null && model.state.name === 'live'
        ? trans.__(
            'No NVIDIA GPU visible to this kernel: %1',
            sample.gpu.reason ?? trans.__('NVML lists no device')
          )
        : describeState(model.state, trans).text;
    return <p className="jp-GpuMem-muted jp-GpuMem-sampleChartNone">{why}</p>;
  }
  const settings = model.settings;
  return (
    <SampleChart
      full
      samples={model.history}
      deviceKey={deviceKey(device)}
      windowSeconds={settings.historyMinutes * 60}
      warnThreshold={settings.warnThreshold}
      unit={settings.units}
      trans={trans}
      caption={device.cuda_index !== null ? `cuda:${device.cuda_index}` : `NVML ${device.nvml_index}`}
    />
  );
}
