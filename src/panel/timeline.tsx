/**
 * The last N minutes of one device as a small SVG chart: device used, this kernel's reserved and allocated
 * memory, and the allocator's peak.
 *
 * Drawn by hand (a few polylines) rather than with a chart library: the bundle stays small, and every colour
 * comes from JupyterLab's theme variables through CSS classes, so it follows light and dark themes.
 */
import * as React from 'react';

import { formatBytes, formatDuration, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { deviceKey } from '../channel/model';
import type { IDevice, ISample } from '../wire/protocol';

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

/** Chart geometry, in SVG user units (the SVG scales to the sidebar's width). */
const WIDTH = 300;
const HEIGHT = 130;
const LEFT = 46;
const RIGHT = 6;
const TOP = 6;
const BOTTOM = 18;
/** More points than this are thinned out (one per pixel is plenty). */
const MAX_POINTS = 400;

/**
 * Polyline point lists for one series: consecutive measured points form a run; a null value or a sample
 * where the device is missing ends it.
 */
export function seriesRuns(
  samples: ReadonlyArray<ISample>,
  key: string,
  series: SeriesKey,
  x: (time: number) => number,
  y: (bytes: number) => number
): string[] {
  const runs: string[] = [];
  let run: string[] = [];
  const stride = Math.max(1, Math.ceil(samples.length / MAX_POINTS));
  for (let i = 0; i < samples.length; i += stride) {
    const sample = samples[i];
    const device = findDevice(sample, key);
    const value = device ? valueOf(series, device) : null;
    if (value === null) {
      if (run.length > 0) {
        runs.push(run.join(' '));
        run = [];
      }
      continue;
    }
    run.push(`${x(sample.time).toFixed(1)},${y(value).toFixed(1)}`);
  }
  if (run.length > 0) {
    runs.push(run.join(' '));
  }
  // A single point would be invisible as a polyline: double it.
  return runs.map(r => (r.includes(' ') ? r : `${r} ${r}`));
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

export interface ITimelineProps {
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
}

/** `<figure class="jp-GpuMem-timeline">`. */
export function Timeline(props: ITimelineProps): JSX.Element {
  const { samples, windowSeconds, unit, trans } = props;
  const key = props.deviceKey;
  const last = samples.length > 0 ? samples[samples.length - 1] : null;
  const totals = samples.map(s => findDevice(s, key)?.total ?? 0).filter(t => t > 0);
  const total = totals.length > 0 ? Math.max(...totals) : 0;
  const heading = trans.__('Last %1 · %2', formatDuration(windowSeconds), props.caption);
  if (last === null || samples.length < 2 || total <= 0) {
    return (
      <figure className="jp-GpuMem-timeline">
        <figcaption>{heading}</figcaption>
        <p className="jp-GpuMem-muted">{trans.__('Collecting samples…')}</p>
      </figure>
    );
  }
  const plotW = WIDTH - LEFT - RIGHT;
  const plotH = HEIGHT - TOP - BOTTOM;
  const start = last.time - windowSeconds;
  const x = (time: number): number => LEFT + (Math.max(0, time - start) / windowSeconds) * plotW;
  const y = (bytes: number): number => TOP + plotH - (Math.min(bytes, total) / total) * plotH;
  const warnY = y((total * props.warnThreshold) / 100);
  const yTicks = [0, total / 2, total];
  const xTicks = [0, 0.5, 1];
  return (
    <figure className="jp-GpuMem-timeline">
      <figcaption>{heading}</figcaption>
      <svg
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width="100%"
        role="img"
        aria-label={trans.__('GPU memory over time')}
      >
        {yTicks.map(t => (
          <g key={`y${t}`}>
            <line className="jp-GpuMem-grid" x1={LEFT} x2={WIDTH - RIGHT} y1={y(t)} y2={y(t)} />
            <text className="jp-GpuMem-axis" x={LEFT - 3} y={y(t) + 3} textAnchor="end">
              {formatBytes(t, unit, unit === 'MiB' ? 0 : 1)}
            </text>
          </g>
        ))}
        {xTicks.map(f => (
          <text
            key={`x${f}`}
            className="jp-GpuMem-axis"
            x={LEFT + f * plotW}
            y={HEIGHT - 4}
            textAnchor={f === 0 ? 'start' : f === 1 ? 'end' : 'middle'}
          >
            {f === 1 ? trans.__('now') : `−${formatDuration((1 - f) * windowSeconds)}`}
          </text>
        ))}
        <line className="jp-GpuMem-threshold" x1={LEFT} x2={WIDTH - RIGHT} y1={warnY} y2={warnY}>
          <title>{trans.__('warning threshold (%1%)', props.warnThreshold)}</title>
        </line>
        {SERIES.map(series =>
          seriesRuns(samples, key, series, x, y).map((points, i) => (
            <polyline
              key={`${series}${i}`}
              className={`jp-GpuMem-line jp-GpuMem-line-${series}`}
              points={points}
            >
              <title>{seriesLabel(series, trans)}</title>
            </polyline>
          ))
        )}
      </svg>
      <ul className="jp-GpuMem-legend jp-GpuMem-timelineLegend">
        {SERIES.map(series => (
          <li key={series} className="jp-GpuMem-legendItem">
            <span className={`jp-GpuMem-lineSwatch jp-GpuMem-line-${series}`} />
            <span className="jp-GpuMem-legendLabel">{seriesLabel(series, trans)}</span>
          </li>
        ))}
      </ul>
    </figure>
  );
}
