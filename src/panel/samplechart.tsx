/**
 * The last N minutes of one device in the panel: device used, this kernel's reserved and allocated memory,
 * and the allocator's peak, against the device's total and the warning threshold. The data for the shared
 * chart (ui/chart.tsx), which draws it, in the sidebar and full size in the main area (samplechartwidget.tsx).
 *
 * The SVG scales to its box's width, so a fixed drawing in a 250 px sidebar printed its 9-unit labels at
 * about 7 px. The drawing is sized instead from the box it is in and the theme's font size, so that labels
 * come out at that size whatever the width.
 */
import * as React from 'react';

import { OPEN_SAMPLE_CHART_COMMAND } from '../commandids';
import { Chart } from '../ui/chart';
import { LABEL_FONT_SIZE } from '../ui/chartlabels';
import { type IChartFrame, type IChartPoint, type IChartSeries, SIDEBAR_FRAME } from '../ui/charttypes';
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

/** The series with at least one measured point: a kernel without torch has no allocator lines to list. */
export function seriesWithData(series: ReadonlyArray<IChartSeries>): IChartSeries[] {
  return series.filter(s => s.points.some(p => p.y !== null));
}

/** The sidebar chart's height in CSS pixels (the full-size chart fills its area). */
const SIDEBAR_HEIGHT_PX = 160;

/** What the full-size chart's caption and legend take of its area's height, in lines of its font. */
const FULL_RESERVED_LINES = 6;

/**
 * The chart's frame for a box `widthPx` wide and `heightPx` high whose labels should be `fontPx` tall: user
 * units of `fontPx / LABEL_FONT_SIZE` CSS pixels, so that the chart's labels (LABEL_FONT_SIZE units) come out
 * at `fontPx`; the margins, in the same units, grow with them.
 */
export function sampleChartFrame(widthPx: number, heightPx: number, fontPx: number): IChartFrame {
  const pxPerUnit = fontPx / LABEL_FONT_SIZE;
  return {
    ...SIDEBAR_FRAME,
    width: Math.max(120, widthPx / pxPerUnit),
    height: Math.max(80, heightPx / pxPerUnit)
  };
}

interface IMeasuredBox {
  readonly width: number;
  readonly height: number;
  readonly fontPx: number;
}

/** The size and font size of `node`, kept up to date; null before layout and where it cannot be measured. */
function useMeasuredBox(node: HTMLElement | null): IMeasuredBox | null {
  const [box, setBox] = React.useState<IMeasuredBox | null>(null);
  React.useLayoutEffect(() => {
    if (node === null || typeof ResizeObserver === 'undefined') {
      return;
    }
    const measure = (): void => {
      const fontPx = parseFloat(getComputedStyle(node).fontSize);
      const next = {
        width: node.clientWidth,
        height: node.clientHeight,
        fontPx: fontPx > 0 ? fontPx : LABEL_FONT_SIZE
      };
      setBox(old =>
        old !== null &&
        Math.abs(old.width - next.width) < 1 &&
        Math.abs(old.height - next.height) < 1 &&
        old.fontPx === next.fontPx
          ? old
          : next
      );
    };
    measure();
    const observer = new ResizeObserver(measure);
    observer.observe(node);
    return () => observer.disconnect();
  }, [node]);
  return box;
}

/** The frame for the measured box: the sidebar's fixed height, or what the full-size area leaves. */
function frameFor(box: IMeasuredBox | null, full: boolean): IChartFrame {
  if (box === null || box.width <= 0) {
    return SIDEBAR_FRAME;
  }
  const heightPx = full ? box.height - FULL_RESERVED_LINES * box.fontPx * 1.4 : SIDEBAR_HEIGHT_PX;
  return sampleChartFrame(box.width, Math.max(heightPx, SIDEBAR_HEIGHT_PX), box.fontPx);
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
  /** Drawn full size in the main area: it fills its area and has no "Open full size" button. */
  readonly full?: boolean;
}

/**
 * `<figure class="jp-GpuMem-chart jp-GpuMem-sampleChart">`: the last minutes up to now, from 0 to the device's
 * total, its legend listing the series that have data; under it, "Open full size" (in the sidebar) and
 * "Download CSV" of the samples held.
 */
export function SampleChart(props: ISampleChartProps): JSX.Element {
  const { samples, windowSeconds, unit, trans } = props;
  const full = props.full === true;
  const [boxNode, setBoxNode] = React.useState<HTMLDivElement | null>(null);
  const box = useMeasuredBox(boxNode);
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
  const series: IChartSeries[] = SERIES.map(name => ({
    id: name,
    label: seriesLabel(name, trans),
    colorClass: `jp-GpuMem-line-${name}`,
    axis: 'left',
    dashed: name === 'peak',
    dots: false,
    points: seriesPoints(samples, key, name)
  }));
  return (
    <>
      <div ref={setBoxNode} className={`jp-GpuMem-sampleChartBox${full ? ' jp-mod-full' : ''}`}>
        <Chart
          className="jp-GpuMem-sampleChart"
          caption={heading}
          ariaLabel={trans.__('GPU memory over time')}
          frame={frameFor(box, full)}
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
          series={seriesWithData(series)}
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
      </div>
      <div className="jp-GpuMem-sampleChartActions">
        {!full && (
          <button
            type="button"
            className="jp-mod-styled jp-GpuMem-openFull"
            data-commandlinker-command={OPEN_SAMPLE_CHART_COMMAND}
            title={trans.__('Open this chart full size in the main area; it stays live')}
          >
            {trans.__('Open full size')}
          </button>
        )}
        <button
          type="button"
          className="jp-mod-styled jp-GpuMem-downloadCsv"
          title={trans.__('The %1 samples the panel holds, one row per sample and device', samples.length)}
          onClick={() => download(samples)}
        >
          {trans.__('Download CSV')}
        </button>
      </div>
    </>
  );
}
