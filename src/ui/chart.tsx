/**
 * The one SVG chart of the extension: the panel's live timeline and the curves of the analysis and benchmark
 * outputs. Callers supply data (series, markers, horizontal rules) and axes (label, number format, optional
 * fixed domain and ticks); this module owns the scales, the axes and grid, the lines with their gaps and
 * dashed (extrapolated) parts, the markers and the legend.
 *
 * Two rules of geometry hold for every chart: a marker that names the series it marks sits on that series'
 * line (its y is read off the line as drawn, and the line is extended, dotted, to a marker beyond its ends),
 * and no two labels overlap (tick, rule and marker labels are placed greedily, from estimated text widths,
 * at the first of a few candidate spots that is free, or left out; their tooltips and the legend still say
 * what they are).
 *
 * No chart library: the scales are a few lines of arithmetic, the bundle stays small, and every colour comes
 * from JupyterLab's theme variables through CSS classes (style/analysis.css, the timeline's colours in
 * style/base.css), so charts follow light and dark themes. Every label is React text.
 *
 * This file holds the component that lays a chart out and draws its axes, rules, markers and legend; the
 * rest lives beside it: charttypes.ts (what a chart is drawn from), chartscales.ts (ranges and ticks),
 * chartlabels.ts (label placement), chartlines.tsx (the series' lines) and chartshapes.tsx (marker shapes).
 */
import * as React from 'react';

import { type ILabelSpot, markerLabelSpots, placeLabels, ruleLabelSpots } from './chartlabels';
import { fmt, type IPlacedMarker, type IPlotScales, seriesLine, valueOnSeries } from './chartlines';
import { linearTicks, log2Ticks, position, xRange, yRange } from './chartscales';
import { MARKER_SIZE, markerBox, shapeElement } from './chartshapes';
import {
  type ChartAxisSide,
  type IBox,
  type IChartAxis,
  type IChartProps,
  type IChartTick,
  OUTPUT_FRAME
} from './charttypes';

/** A placed label as SVG text; nothing for a label left out. */
function labelText(className: string, spot: ILabelSpot | null, text: string): JSX.Element | null {
  return spot === null || text === '' ? null : (
    <text className={className} x={fmt(spot.x)} y={fmt(spot.y)} textAnchor={spot.anchor}>
      {text}
    </text>
  );
}

/** `<figure class="jp-GpuMem-chart">`. */
export function Chart(props: IChartProps): JSX.Element {
  const markers = props.markers ?? [];
  const rules = props.rules ?? [];
  const right = props.right;
  const frame = props.frame ?? OUTPUT_FRAME;
  const { width: WIDTH, height: HEIGHT, top: TOP, left: LEFT } = frame;
  const RIGHT = frame.right ?? (right ? 60 : 14);
  const plotW = WIDTH - LEFT - RIGHT;
  const plotH = HEIGHT - TOP - frame.bottom;
  const bottom = TOP + plotH;

  const x = xRange(props);
  const xOf = (v: number): number => (x === null ? LEFT : LEFT + position(x, v) * plotW);
  const xTicks: ReadonlyArray<IChartTick> =
    x === null
      ? []
      : props.x.ticks
        ? props.x.ticks(x.lo, x.hi)
        : (x.log ? log2Ticks(x.lo, x.hi) : linearTicks(x.hi)).map(value => ({
            value,
            label: props.x.format(value)
          }));
  const ranges = { left: yRange('left', props.left, props), right: yRange('right', right, props) };
  const yOf = (side: ChartAxisSide, y: number): number => bottom - position(ranges[side], y) * plotH;
  const axisTicks = (side: ChartAxisSide, axis: IChartAxis): ReadonlyArray<IChartTick> => {
    const { lo, labelTop } = ranges[side];
    return axis.ticks
      ? axis.ticks(lo, labelTop)
      : linearTicks(labelTop).map(value => ({ value, label: axis.format(value) }));
  };
  const leftTicks = axisTicks('left', props.left);
  const rightTicks = right ? axisTicks('right', right) : [];
  const logAxis = x?.log === true;

  // Markers that mark a series sit on its line: their value is read off the line as it is drawn.
  const placed: IPlacedMarker[] = markers.map(m => {
    const on = m.series !== undefined ? props.series.find(s => s.id === m.series) : undefined;
    const value = on !== undefined ? valueOnSeries(on, m.x, logAxis) : null;
    const series = value !== null ? on : undefined;
    const side = series?.axis ?? m.axis;
    const y = value ?? m.y;
    return { marker: m, series, value: y, cx: xOf(m.x), cy: y === null ? TOP + 4 : yOf(side, y) };
  });

  // Labels, placed so that no two overlap: the axes' ticks first (in order, a tick whose label would
  // overlap an earlier one goes unlabelled), then the markers' labels, then the rules' labels.
  const taken: IBox[] = [];
  const anywhere: IBox = { x0: -Infinity, y0: -Infinity, x1: Infinity, y1: Infinity };
  const plotArea: IBox = { x0: LEFT, y0: 0, x1: WIDTH - RIGHT, y1: bottom };
  const tickSpots = (
    ticks: ReadonlyArray<IChartTick>,
    spot: (t: IChartTick) => ILabelSpot
  ): Array<ILabelSpot | null> =>
    placeLabels(
      ticks.map(t => ({ text: t.label, spots: [spot(t)] })),
      anywhere,
      taken
    );
  const leftSpots = tickSpots(leftTicks, t => ({ x: LEFT - 4, y: yOf('left', t.value) + 3, anchor: 'end' }));
  const rightSpots = tickSpots(rightTicks, t => ({
    x: WIDTH - RIGHT + 4,
    y: yOf('right', t.value) + 3,
    anchor: 'start'
  }));
  const xSpots = tickSpots(xTicks, t => ({ x: xOf(t.value), y: bottom + 13, anchor: t.anchor ?? 'middle' }));
  const obstacles = placed.map(p => markerBox(p.cx, p.cy));
  const markerSpots = placeLabels(
    placed.map(p => ({
      text: p.marker.short ?? '',
      spots: p.marker.short ? markerLabelSpots(p.cx, p.cy) : []
    })),
    plotArea,
    taken,
    obstacles
  );
  const ruleSpots = placeLabels(
    rules.map(r => ({
      text: r.label,
      spots: r.quiet ? [] : ruleLabelSpots(yOf(r.axis, r.y), LEFT, WIDTH - RIGHT)
    })),
    plotArea,
    taken,
    obstacles
  );
  const scales: IPlotScales = { logAxis, xOf, yOf };

  return (
    <figure className={`jp-GpuMem-chart${props.className ? ` ${props.className}` : ''}`}>
      <figcaption className="jp-GpuMem-chartCaption">{props.caption}</figcaption>
      <svg
        className="jp-GpuMem-chartSvg"
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width="100%"
        role="img"
        aria-label={props.ariaLabel}
      >
        {leftTicks.map((t, i) => (
          <g key={`yl${t.value}`}>
            <line
              className="jp-GpuMem-chartGrid"
              x1={LEFT}
              x2={WIDTH - RIGHT}
              y1={yOf('left', t.value)}
              y2={yOf('left', t.value)}
            />
            {labelText('jp-GpuMem-chartAxis', leftSpots[i], t.label)}
          </g>
        ))}
        {rightTicks.map((t, i) => (
          <React.Fragment key={`yr${t.value}`}>
            {labelText('jp-GpuMem-chartAxis jp-GpuMem-chartAxis-right', rightSpots[i], t.label)}
          </React.Fragment>
        ))}
        {xTicks.map((t, i) => (
          <g key={`x${t.value}`}>
            <line
              className="jp-GpuMem-chartTick"
              x1={xOf(t.value)}
              x2={xOf(t.value)}
              y1={bottom}
              y2={bottom + 3}
            />
            {labelText('jp-GpuMem-chartAxis', xSpots[i], t.label)}
          </g>
        ))}
        <line className="jp-GpuMem-chartFrame" x1={LEFT} x2={WIDTH - RIGHT} y1={bottom} y2={bottom} />
        {props.x.label && (
          <text className="jp-GpuMem-chartAxisLabel" x={LEFT + plotW / 2} y={HEIGHT - 4} textAnchor="middle">
            {props.x.label}
          </text>
        )}
        {props.left.label && (
          <text
            className="jp-GpuMem-chartAxisLabel"
            transform={`translate(10 ${TOP + plotH / 2}) rotate(-90)`}
            textAnchor="middle"
          >
            {props.left.label}
          </text>
        )}
        {right?.label && (
          <text
            className="jp-GpuMem-chartAxisLabel"
            transform={`translate(${WIDTH - 6} ${TOP + plotH / 2}) rotate(90)`}
            textAnchor="middle"
          >
            {right.label}
          </text>
        )}
        {rules.map((r, i) => (
          <g key={r.id} className={`jp-GpuMem-chartRule ${r.className}`} data-rule={r.id}>
            <line x1={LEFT} x2={WIDTH - RIGHT} y1={yOf(r.axis, r.y)} y2={yOf(r.axis, r.y)} />
            {labelText('jp-GpuMem-chartRuleLabel', ruleSpots[i], r.label)}
            <title>{r.label}</title>
          </g>
        ))}
        {props.series.map(s => seriesLine(s, placed, scales))}
        {placed.map(({ marker: m, series, cx, cy }, i) => (
          <g
            key={m.id}
            className={`jp-GpuMem-chartMarker jp-GpuMem-chartMarker-${m.shape}${m.className ? ` ${m.className}` : ''}${
              m.extrapolated ? ' jp-GpuMem-chartMarker-extrapolated' : ''
            }`}
            data-kind={m.kind}
            data-series={series?.id}
            data-x={fmt(cx)}
            data-y={fmt(cy)}
          >
            {shapeElement(m.shape, cx, cy, MARKER_SIZE)}
            {labelText('jp-GpuMem-chartMarkerLabel', markerSpots[i], m.short ?? '')}
            <title>{m.label}</title>
          </g>
        ))}
      </svg>
      <ul className="jp-GpuMem-chartLegend">
        {props.series.map(s => (
          <li key={s.id} className="jp-GpuMem-chartLegendItem">
            <span
              className={`jp-GpuMem-chartSwatch ${s.colorClass}${s.dashed ? ' jp-GpuMem-chartSwatch-dashed' : ''}`}
            />
            <span>{s.label}</span>
          </li>
        ))}
        {rules
          .filter(r => !r.quiet)
          .map(r => (
            <li key={r.id} className="jp-GpuMem-chartLegendItem">
              <span className={`jp-GpuMem-chartSwatch jp-GpuMem-chartSwatch-rule ${r.className}`} />
              <span>{r.label}</span>
            </li>
          ))}
        {(props.markerLegend ?? []).map(entry => (
          <li key={`m-${entry.label}`} className="jp-GpuMem-chartLegendItem">
            <svg
              className="jp-GpuMem-chartLegendShape"
              viewBox="0 0 12 12"
              width="12"
              height="12"
              aria-hidden="true"
            >
              <g
                className={`jp-GpuMem-chartLegendMarker jp-GpuMem-chartMarker-${entry.shape}${
                  entry.className ? ` ${entry.className}` : ''
                }`}
              >
                {shapeElement(entry.shape, 6, 6, 3.5)}
              </g>
            </svg>
            <span>{entry.label}</span>
          </li>
        ))}
      </ul>
    </figure>
  );
}
