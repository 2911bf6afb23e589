/**
 * The last N minutes of one device in the panel: device used, this kernel's reserved and allocated memory,
 * and the allocator's peak, against the device's total and the warning threshold. The data for the shared
 * chart (ui/chart.tsx), which draws it.
 */
import * as React from 'react';

import { Chart } from '../ui/chart';
import { type IChartPoint, SIDEBAR_FRAME } from '../ui/charttypes';
import { formatBytes, formatDuration, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { deviceKey } from '../channel/sample';
import type { IDevice, ISample } from '../wire/protocol';
import { downloadSamplesCsv } from './samplescsv';

/** One line of the chart. */
export type SeriesKey = 'used' | 'reserved' | 'allocated' | 'peak';

const SERIES: ReadonlyArray<SeriesKey> = ['used', 'reserved', 'allocated', 'peak'];

/** The value of a series in a device reading; null where it was not measured (a gap in the line). */
function valueOf(key: SeriesKey, device: IDevice): number | null {
  switch (key) {
    case 'used':
      return device.used;
    case 'reserved':
      return device.allocator?.reserved ?? null;
    case 'allocated':
      return device.allocator?.allocated ?? null;
    case 'peak':
      return device.allocator?.peak_allocated ?? null;
  }
}

/** The device with this `deviceKey` in a sample. */
function findDevice(sample: ISample, key: string): IDevice | undefined {
  return sample.gpu.devices.find(d => deviceKey(d) === key);
}

/** More points than this are thinned out (one per pixel of the sidebar chart is plenty). */
const MAX_POINTS = 400;

/**
 * The chart's points of one series: one per sample (thinned to `MAX_POINTS`), with no value where it was not
 * measured or the device is missing from the sample (a gap in the line).
 */
export function seriesPoints(samples: ReadonlyArray<ISample>, key: string, series: SeriesKey): IChartPoint[] {
  const points: IChartPoint[] = [];
  const stride = Math.max(1, Math.ceil(samples.length / MAX_POINTS));
  for (let i = 0; i < samples.length; i += stride) {
    const device = findDevice(samples[i], key);
    points.push({ x: samples[i].time, y: device ? valueOf(series, device) : null });
  }
  return points;
}

function seriesLabel(key: SeriesKey, trans: Trans): string {
  switch (key) {
    case 'used':
      return trans.__('device used');
    case 'reserved':
      return trans.__('reserved');
    case 'allocated':
      return trans.__('allocated');
    case 'peak':
      return trans.__('peak allocated');
  }
}

export interface ISampleChartProps {
  readonly samples: ReadonlyArray<ISample>;
  /** Which device (its `deviceKey`). */
  readonly deviceKey: string;
  /** How many seconds the x axis spans. */
  readonly windowSeconds: number;
  readonly warnThreshold: number;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  /** The device's name for the caption ("cuda:0"). */
  readonly caption: string;
  /** "Download CSV" of the samples held (every device); default: a Blob download (samplescsv.ts). */
  readonly downloadCsv?: (samples: ReadonlyArray<ISample>) => void;
}

/**
 * `<figure class="jp-GpuMem-chart jp-GpuMem-sampleChart">`: the last minutes up to now, from 0 to the device's total;
 * under it, "Download CSV" of the samples held.
 */
export function SampleChart(props: ISampleChartProps): JSX.Element {
  const { samples, windowSeconds, unit, trans } = props;
  const key = props.deviceKey;
  const last = samples.length > 0 ? samples[samples.length - 1] : null;
  const totals = samples.map(s => findDevice(s, key)?.total ?? 0).filter(t => t > 0);
  const total = totals.length > 0 ? Math.max(...totals) : 0;
  const heading = trans.__('Last %1 · %2', formatDuration(windowSeconds), props.caption);
  if (last === null || samples.length < 2 || total <= 0) {
    return (
      <figure className="jp-GpuMem-chart jp-GpuMem-sampleChart">
        <figcaption className="jp-GpuMem-chartCaption">{heading}</figcaption>
        <p className="jp-GpuMem-muted">{trans.__('Collecting samples…')}</p>
      </figure>
    );
  }
  const start = last.time - windowSeconds;
  const download = props.downloadCsv ?? downloadSamplesCsv;
  return (
    <>
      <Chart
        className="jp-GpuMem-sampleChart"
        caption={heading}
        ariaLabel={trans.__('GPU memory over time')}
        frame={SIDEBAR_FRAME}
        x={{
          domain: [start, last.time],
          format: t => formatDuration(last.time - t),
          ticks: (lo, hi) => [
            { value: lo, label: `−${formatDuration(windowSeconds)}`, anchor: 'start' },
            { value: (lo + hi) / 2, label: `−${formatDuration(windowSeconds / 2)}` },
            { value: hi, label: trans.__('now'), anchor: 'end' }
          ]
        }}
        left={{
          domain: [0, total],
          format: bytes => formatBytes(bytes, unit, 'short'),
          ticks: (lo, hi) =>
            [lo, (lo + hi) / 2, hi].map(value => ({ value, label: formatBytes(value, unit, 'short') }))
        }}
        series={SERIES.map(series => ({
          id: series,
          label: seriesLabel(series, trans),
          colorClass: `jp-GpuMem-line-${series}`,
          axis: 'left',
          dashed: series === 'peak',
          dots: false,
          points: seriesPoints(samples, key, series)
        }))}
        rules={[
          {
            id: 'warn',
            y: (total * props.warnThreshold) / 100,
            axis: 'left',
            label: trans.__('warning threshold (%1%)', props.warnThreshold),
            className: 'jp-GpuMem-chartRule-warn',
            quiet: true
          }
        ]}
      />
      <button
        type="button"
        className="jp-mod-styled jp-GpuMem-downloadCsv"
        title={trans.__('The %1 samples the panel holds, one row per sample and device', samples.length)}
        onClick={() => download(samples)}
      >
        {trans.__('Download CSV')}
      </button>
    </>
  );
}
