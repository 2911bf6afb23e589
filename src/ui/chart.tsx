/**
 * A small hand-drawn SVG line chart shared by the analysis and benchmark outputs: lines on a left axis and an
 * optional right axis, horizontal rules (a device limit), and markers (batch-size picks, OOM rows).
 *
 * Like the panel's timeline, no chart library: every colour comes from JupyterLab's theme variables through
 * CSS classes (style/analysis.css), and every label is React text.
 */
import * as React from 'react';

import { formatInScale, scaleFor } from './format';

export interface IChartPoint {
  readonly x: number;
  readonly y: number;
}

export type ChartAxisSide = 'left' | 'right';

export interface IChartSeries {
  readonly id: string;
  readonly label: string;
  /** Colour class, e.g. "jp-GpuMem-chartColor-0". */
  readonly colorClass: string;
  readonly axis: ChartAxisSide;
  readonly points: ReadonlyArray<IChartPoint>;
  readonly dashed?: boolean;
  /** Points from this x on are drawn dashed (extrapolated). */
  readonly dashedFrom?: number;
  /**
   * The values are linear in x between points (a fitted peak against batch size): on a log x axis the segments
   * are drawn through intermediate points, so that the line passes where the markers say it does.
   */
  readonly linearBetweenPoints?: boolean;
}

export type MarkerShape = 'circle' | 'diamond' | 'square' | 'cross';

export interface IChartMarker {
  readonly id: string;
  /** What the marker stands for ("maximum", "oom", …): its `data-kind`. */
  readonly kind: string;
  readonly x: number;
  /** null: at the top of the plot (a row with no value, e.g. out of memory). */
  readonly y: number | null;
  readonly axis: ChartAxisSide;
  readonly shape: MarkerShape;
  /** The tooltip. */
  readonly label: string;
  /** A short text drawn next to the marker ("max"); none when empty. */
  readonly short?: string;
  readonly className?: string;
  /** Drawn hollow and dashed: a value beyond what was run. */
  readonly extrapolated?: boolean;
}

export interface IChartRule {
  readonly id: string;
  readonly y: number;
  readonly axis: ChartAxisSide;
  readonly label: string;
  readonly className: string;
}

export interface IChartAxis {
  readonly label: string;
  readonly format: (value: number) => string;
  /** Ticks from 0 to `max` (default: about four round decimal steps, labelled with `format`). */
  readonly ticks?: (max: number) => ReadonlyArray<IChartTick>;
}

export interface IChartProps {
  readonly className?: string;
  readonly caption: string;
  readonly ariaLabel: string;
  readonly x: IChartAxis & { readonly log?: boolean };
  readonly left: IChartAxis;
  readonly right?: IChartAxis;
  readonly series: ReadonlyArray<IChartSeries>;
  readonly markers?: ReadonlyArray<IChartMarker>;
  readonly rules?: ReadonlyArray<IChartRule>;
  /** Extra legend entries for the markers (shape + label), e.g. one per pick kind. */
  readonly markerLegend?: ReadonlyArray<{
    readonly shape: MarkerShape;
    readonly className?: string;
    readonly label: string;
  }>;
}

const WIDTH = 480;
const HEIGHT = 220;
const TOP = 12;
const BOTTOM = 34;
const LEFT = 60;

/** Tick values for a linear axis from 0 to `max`: about four round steps. */
export function linearTicks(max: number, count = 4): number[] {
  if (!(max > 0)) {
    return [0];
  }
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(m => m * magnitude).find(s => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let t = 0; t <= max * 1.0001; t += step) {
    ticks.push(t);
  }
  return ticks;
}

/** Powers of two between lo and hi, thinned to at most `count`. */
export function log2Ticks(lo: number, hi: number, count = 6): number[] {
  const first = Math.ceil(Math.log2(Math.max(lo, 1e-9)));
  const last = Math.floor(Math.log2(hi));
  if (last < first) {
    return [lo];
  }
  const stride = Math.max(1, Math.ceil((last - first + 1) / count));
  const ticks: number[] = [];
  for (let e = first; e <= last; e += stride) {
    ticks.push(2 ** e);
  }
  return ticks;
}

/** A tick: its value and its label. */
export interface IChartTick {
  readonly value: number;
  readonly label: string;
}

/**
 * An axis of byte sizes: round steps in the binary unit of the largest value ("0, 4 GiB, 8 GiB, …"), every
 * tick in that one unit.
 */
export function byteAxis(label: string): IChartAxis {
  return {
    label,
    format: v => {
      const scale = scaleFor(v, 'auto');
      return `${formatInScale(v, scale, 1)} ${scale.label}`;
    },
    ticks: (max: number): IChartTick[] => {
      const scale = scaleFor(max, 'auto');
      const values = linearTicks(max / scale.factor);
      const step = values.length > 1 ? values[1] - values[0] : 1;
      const digits = scale.factor === 1 || Number.isInteger(step) ? 0 : Number.isInteger(step * 10) ? 1 : 2;
      return values.map(v => ({
        value: v * scale.factor,
        label: v === 0 ? '0' : `${v.toFixed(digits)} ${scale.label}`
      }));
    }
  };
}

function shapeElement(shape: MarkerShape, cx: number, cy: number, size: number): JSX.Element {
  switch (shape) {
    case 'circle':
      return <circle cx={cx} cy={cy} r={size} />;
    case 'square':
      return <rect x={cx - size} y={cy - size} width={2 * size} height={2 * size} />;
    case 'diamond':
      return (
        <polygon
          points={`${cx},${cy - size * 1.3} ${cx + size * 1.3},${cy} ${cx},${cy + size * 1.3} ${cx - size * 1.3},${cy}`}
        />
      );
    case 'cross':
      return (
        <path
          d={`M${cx - size},${cy - size}L${cx + size},${cy + size}M${cx - size},${cy + size}L${cx + size},${cy - size}`}
        />
      );
  }
}

function fmt(n: number): string {
  return n.toFixed(1);
}

/** `<figure class="jp-GpuMem-chart">`. */
export function Chart(props: IChartProps): JSX.Element {
  const markers = props.markers ?? [];
  const rules = props.rules ?? [];
  const right = props.right;
  const RIGHT = right ? 60 : 14;
  const plotW = WIDTH - LEFT - RIGHT;
  const plotH = HEIGHT - TOP - BOTTOM;

  const xs = [...props.series.flatMap(s => s.points.map(p => p.x)), ...markers.map(m => m.x)].filter(
    x => Number.isFinite(x) && (!props.x.log || x > 0)
  );
  const yMax = (side: ChartAxisSide): number => {
    const values = [
      ...props.series.filter(s => s.axis === side).flatMap(s => s.points.map(p => p.y)),
      ...markers.filter(m => m.axis === side && m.y !== null).map(m => m.y as number),
      ...rules.filter(r => r.axis === side).map(r => r.y)
    ].filter(v => Number.isFinite(v));
    const top = values.length > 0 ? Math.max(...values) : 0;
    return top > 0 ? top * 1.08 : 1;
  };
  const leftMax = yMax('left');
  const rightMax = yMax('right');

  let xOf: (x: number) => number;
  let xTicks: number[];
  if (xs.length === 0) {
    xOf = () => LEFT;
    xTicks = [];
  } else if (props.x.log) {
    let lo = Math.log2(Math.min(...xs));
    let hi = Math.log2(Math.max(...xs));
    if (hi - lo < 1e-9) {
      lo -= 1;
      hi += 1;
    }
    const pad = (hi - lo) * 0.04;
    const [a, b] = [lo - pad, hi + pad];
    xOf = x => LEFT + ((Math.log2(Math.max(x, 2 ** a)) - a) / (b - a)) * plotW;
    xTicks = log2Ticks(2 ** a, 2 ** b);
  } else {
    const max = Math.max(...xs) * 1.04 || 1;
    xOf = x => LEFT + (x / max) * plotW;
    xTicks = linearTicks(max);
  }
  const yOf = (side: ChartAxisSide, y: number): number => {
    const max = side === 'left' ? leftMax : rightMax;
    return TOP + plotH - (Math.max(0, Math.min(y, max)) / max) * plotH;
  };

  const line = (s: IChartSeries): JSX.Element[] => {
    const pts = [...s.points]
      .filter(p => Number.isFinite(p.x) && Number.isFinite(p.y))
      .sort((a, b) => a.x - b.x);
    if (pts.length === 0) {
      return [];
    }
    const cut = s.dashedFrom;
    const solid = cut === undefined ? pts : pts.filter(p => p.x <= cut);
    const dashed = cut === undefined ? [] : pts.filter(p => p.x >= cut || p === solid[solid.length - 1]);
    const densify = (ps: ReadonlyArray<IChartPoint>): ReadonlyArray<IChartPoint> => {
      if (!props.x.log || !s.linearBetweenPoints || ps.length < 2) {
        return ps;
      }
      const out: IChartPoint[] = [ps[0]];
      for (let i = 1; i < ps.length; i++) {
        const [a, b] = [ps[i - 1], ps[i]];
        const n = Math.min(48, Math.max(1, Math.ceil(Math.log2(b.x / a.x) * 8)));
        for (let k = 1; k <= n; k++) {
          // evenly spaced on the (log) axis, values linear in x
          const x = a.x * (b.x / a.x) ** (k / n);
          out.push({ x, y: a.y + ((x - a.x) / (b.x - a.x)) * (b.y - a.y) });
        }
      }
      return out;
    };
    const toPoints = (ps: ReadonlyArray<IChartPoint>): string =>
      (ps.length === 1 ? [ps[0], ps[0]] : densify(ps))
        .map(p => `${fmt(xOf(p.x))},${fmt(yOf(s.axis, p.y))}`)
        .join(' ');
    const out: JSX.Element[] = [];
    const base = `jp-GpuMem-chartLine ${s.colorClass}${s.dashed ? ' jp-GpuMem-chartLine-dashed' : ''}`;
    if (solid.length > 0) {
      out.push(
        <polyline key={`${s.id}-solid`} className={base} points={toPoints(solid)} data-series={s.id}>
          <title>{s.label}</title>
        </polyline>
      );
    }
    if (dashed.length > 1) {
      out.push(
        <polyline
          key={`${s.id}-dashed`}
          className={`${base} jp-GpuMem-chartLine-extrapolated`}
          points={toPoints(dashed)}
          data-series={s.id}
        >
          <title>{s.label}</title>
        </polyline>
      );
    }
    // Single measured points are shown as dots so a one-row series is visible.
    for (const p of pts) {
      out.push(
        <circle
          key={`${s.id}-pt-${p.x}`}
          className={`jp-GpuMem-chartDot ${s.colorClass}${s.dashed ? ' jp-GpuMem-chartDot-hollow' : ''}`}
          data-series={s.id}
          cx={fmt(xOf(p.x))}
          cy={fmt(yOf(s.axis, p.y))}
          r={2}
        />
      );
    }
    return out;
  };

  const axisTicks = (axis: IChartAxis, max: number): ReadonlyArray<IChartTick> =>
    axis.ticks ? axis.ticks(max) : linearTicks(max).map(value => ({ value, label: axis.format(value) }));
  const leftTicks = axisTicks(props.left, leftMax / 1.08);
  const rightTicks = right ? axisTicks(right, rightMax / 1.08) : [];

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
        {leftTicks.map(t => (
          <g key={`yl${t.value}`}>
            <line
              className="jp-GpuMem-chartGrid"
              x1={LEFT}
              x2={WIDTH - RIGHT}
              y1={yOf('left', t.value)}
              y2={yOf('left', t.value)}
            />
            <text className="jp-GpuMem-chartAxis" x={LEFT - 4} y={yOf('left', t.value) + 3} textAnchor="end">
              {t.label}
            </text>
          </g>
        ))}
        {right &&
          rightTicks.map(t => (
            <text
              key={`yr${t.value}`}
              className="jp-GpuMem-chartAxis jp-GpuMem-chartAxis-right"
              x={WIDTH - RIGHT + 4}
              y={yOf('right', t.value) + 3}
              textAnchor="start"
            >
              {t.label}
            </text>
          ))}
        {xTicks.map(t => (
          <g key={`x${t}`}>
            <line
              className="jp-GpuMem-chartTick"
              x1={xOf(t)}
              x2={xOf(t)}
              y1={TOP + plotH}
              y2={TOP + plotH + 3}
            />
            <text className="jp-GpuMem-chartAxis" x={xOf(t)} y={TOP + plotH + 13} textAnchor="middle">
              {props.x.format(t)}
            </text>
          </g>
        ))}
        <line
          className="jp-GpuMem-chartFrame"
          x1={LEFT}
          x2={WIDTH - RIGHT}
          y1={TOP + plotH}
          y2={TOP + plotH}
        />
        <text className="jp-GpuMem-chartAxisLabel" x={LEFT + plotW / 2} y={HEIGHT - 4} textAnchor="middle">
          {props.x.label}
        </text>
        <text
          className="jp-GpuMem-chartAxisLabel"
          transform={`translate(10 ${TOP + plotH / 2}) rotate(-90)`}
          textAnchor="middle"
        >
          {props.left.label}
        </text>
        {right && (
          <text
            className="jp-GpuMem-chartAxisLabel"
            transform={`translate(${WIDTH - 6} ${TOP + plotH / 2}) rotate(90)`}
            textAnchor="middle"
          >
            {right.label}
          </text>
        )}
        {rules.map(r => (
          <g key={r.id} className={`jp-GpuMem-chartRule ${r.className}`} data-rule={r.id}>
            <line x1={LEFT} x2={WIDTH - RIGHT} y1={yOf(r.axis, r.y)} y2={yOf(r.axis, r.y)} />
            <text
              className="jp-GpuMem-chartRuleLabel"
              x={LEFT + 3}
              y={yOf(r.axis, r.y) - 3}
              textAnchor="start"
            >
              {r.label}
            </text>
            <title>{r.label}</title>
          </g>
        ))}
        {props.series.map(s => line(s))}
        {markers.map(m => {
          const cx = xOf(m.x);
          const cy = m.y === null ? TOP + 4 : yOf(m.axis, m.y);
          return (
            <g
              key={m.id}
              className={`jp-GpuMem-chartMarker jp-GpuMem-chartMarker-${m.shape}${m.className ? ` ${m.className}` : ''}${
                m.extrapolated ? ' jp-GpuMem-chartMarker-extrapolated' : ''
              }`}
              data-kind={m.kind}
            >
              {shapeElement(m.shape, cx, cy, 4.5)}
              {m.short ? (
                <text className="jp-GpuMem-chartMarkerLabel" x={cx} y={cy - 8} textAnchor="middle">
                  {m.short}
                </text>
              ) : null}
              <title>{m.label}</title>
            </g>
          );
        })}
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
        {rules.map(r => (
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
