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
 */
import * as React from 'react';

import { formatBytes, scaleFor } from './format';

export interface IChartPoint {
  readonly x: number;
  /** null: not measured here (the line has a gap). */
  readonly y: number | null;
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
  /** A dot on every point (default), so that a one-row series is visible; off for dense series. */
  readonly dots?: boolean;
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
  /**
   * The id of the series this marker marks: it is drawn on that series' line at `x` (interpolated as the
   * line is drawn, or along its end segment beyond it), whatever `y` says.
   */
  readonly series?: string;
}

/** A horizontal line across the plot: a device limit, a memory target, a warning threshold. */
export interface IChartRule {
  readonly id: string;
  readonly y: number;
  readonly axis: ChartAxisSide;
  readonly label: string;
  readonly className: string;
  /** Only a tooltip: no text on the plot and no legend entry. */
  readonly quiet?: boolean;
}

/** A tick: its value and its label. */
export interface IChartTick {
  readonly value: number;
  readonly label: string;
  /** Where the label sits against the tick on the x axis (default: centred). */
  readonly anchor?: 'start' | 'middle' | 'end';
}

export interface IChartAxis {
  /** The axis title; none when absent. */
  readonly label?: string;
  readonly format: (value: number) => string;
  /**
   * Ticks between `lo` and `hi`, the smallest and largest value to label (default: about four round decimal
   * steps from 0, labelled with `format`).
   */
  readonly ticks?: (lo: number, hi: number) => ReadonlyArray<IChartTick>;
  /** A fixed range (values outside are drawn at its edge); by default it follows the data, from 0. */
  readonly domain?: readonly [number, number];
}

/** The size of the drawing and its margins, in SVG user units (the SVG scales to its container's width). */
export interface IChartFrame {
  readonly width: number;
  readonly height: number;
  readonly top: number;
  readonly bottom: number;
  readonly left: number;
  /** The right margin; null: wide with a right axis, narrow without. */
  readonly right: number | null;
}

/** The outputs' charts (analysis, benchmark). */
export const OUTPUT_FRAME: IChartFrame = {
  width: 480,
  height: 220,
  top: 12,
  bottom: 34,
  left: 60,
  right: null
};

/** The panel's sidebar timeline: small, tick labels only. */
export const SIDEBAR_FRAME: IChartFrame = { width: 300, height: 130, top: 6, bottom: 18, left: 46, right: 6 };

export interface IChartProps {
  readonly className?: string;
  readonly caption: string;
  readonly ariaLabel: string;
  readonly frame?: IChartFrame;
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

/**
 * An axis of byte sizes: round steps in the binary unit of the largest value ("0, 4 GiB, 8 GiB, …"), every
 * tick in that one unit.
 */
export function byteAxis(label: string): IChartAxis {
  return {
    label,
    format: v => formatBytes(v, 'auto', 1),
    ticks: (_lo: number, max: number): IChartTick[] => {
      const scale = scaleFor(max, 'auto');
      const values = linearTicks(max / scale.factor);
      const step = values.length > 1 ? values[1] - values[0] : 1;
      const digits = Number.isInteger(step) ? 0 : Number.isInteger(step * 10) ? 1 : 2;
      return values.map(v => ({
        value: v * scale.factor,
        label: v === 0 ? '0' : formatBytes(v * scale.factor, scale, digits)
      }));
    }
  };
}

/** A rectangle in SVG user units. */
export interface IBox {
  readonly x0: number;
  readonly y0: number;
  readonly x1: number;
  readonly y1: number;
}

export type TextAnchor = 'start' | 'middle' | 'end';

/** Where a label may go: its text position and anchor. */
export interface ILabelSpot {
  readonly x: number;
  readonly y: number;
  readonly anchor: TextAnchor;
}

/** A label to place: its text and the spots it may take, best first. */
export interface ILabelRequest {
  readonly text: string;
  readonly spots: ReadonlyArray<ILabelSpot>;
}

/** The font size of every label drawn in the plot (chart.css: .jp-GpuMem-chartAxis, -RuleLabel, -MarkerLabel). */
export const LABEL_FONT_SIZE = 9;

/** The half-size of a marker shape (the diamond reaches 1.3 times it). */
const MARKER_SIZE = 4.5;

/**
 * The width of `text` in the UI font, estimated generously (no DOM measure: the chart renders in tests and
 * before layout), for wide fonts such as DejaVu Sans (digits 0.64 em): narrow punctuation 0.34 em, capitals
 * 0.78 em, wide letters 0.95 em, everything else 0.66 em.
 */
export function textWidth(text: string, fontSize = LABEL_FONT_SIZE): number {
  let em = 0;
  for (const ch of text) {
    em += /[\s.,:;'!|()[\]]/.test(ch) ? 0.34 : /[mwMW%@—]/.test(ch) ? 0.95 : /[A-Z]/.test(ch) ? 0.78 : 0.66;
  }
  return em * fontSize;
}

/** The box a label covers: from its baseline `y` up by the font's ascent and down by its descent. */
export function labelBox(spot: ILabelSpot, text: string, fontSize = LABEL_FONT_SIZE): IBox {
  const width = textWidth(text, fontSize);
  const x0 = spot.anchor === 'start' ? spot.x : spot.anchor === 'end' ? spot.x - width : spot.x - width / 2;
  return { x0, x1: x0 + width, y0: spot.y - 0.95 * fontSize, y1: spot.y + 0.25 * fontSize };
}

/** True when two boxes share some area. */
export function intersects(a: IBox, b: IBox): boolean {
  return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
}

function within(box: IBox, bounds: IBox): boolean {
  return box.x0 >= bounds.x0 && box.x1 <= bounds.x1 && box.y0 >= bounds.y0 && box.y1 <= bounds.y1;
}

/**
 * Greedy label placement: each label, in order, takes its first spot that lies within `bounds` and meets
 * neither a label placed before (in `taken` or in this call) nor an obstacle (the marker shapes); failing
 * that, its first spot that meets no label; failing that, it is left out (null). `taken` grows with the
 * labels placed, so that several calls share one plot.
 */
export function placeLabels(
  requests: ReadonlyArray<ILabelRequest>,
  bounds: IBox,
  taken: IBox[],
  obstacles: ReadonlyArray<IBox> = []
): Array<ILabelSpot | null> {
  return requests.map(request => {
    const fits = (spot: ILabelSpot, avoid: ReadonlyArray<IBox>): boolean => {
      const box = labelBox(spot, request.text);
      return within(box, bounds) && !avoid.some(other => intersects(box, other));
    };
    const spot =
      request.spots.find(s => fits(s, [...taken, ...obstacles])) ?? request.spots.find(s => fits(s, taken));
    if (spot === undefined) {
      return null;
    }
    taken.push(labelBox(spot, request.text));
    return spot;
  });
}

/** The spots around a marker for its label: above, below, right, left, then the diagonals. */
export function markerLabelSpots(cx: number, cy: number): ILabelSpot[] {
  const gap = MARKER_SIZE * 1.3 + 2;
  return [
    { x: cx, y: cy - gap - 1, anchor: 'middle' },
    { x: cx, y: cy + gap + 0.95 * LABEL_FONT_SIZE, anchor: 'middle' },
    { x: cx + gap, y: cy + 3, anchor: 'start' },
    { x: cx - gap, y: cy + 3, anchor: 'end' },
    { x: cx + gap - 2, y: cy - gap, anchor: 'start' },
    { x: cx - gap + 2, y: cy - gap, anchor: 'end' },
    { x: cx + gap - 2, y: cy + gap + 6, anchor: 'start' },
    { x: cx - gap + 2, y: cy + gap + 6, anchor: 'end' }
  ];
}

/** The spots along a horizontal rule for its label: above it at the left, right and middle, then below. */
export function ruleLabelSpots(y: number, x0: number, x1: number): ILabelSpot[] {
  const above = y - 3;
  const below = y + 3 + 0.95 * LABEL_FONT_SIZE;
  const middle = (x0 + x1) / 2;
  return [above, below].flatMap(at => [
    { x: x0 + 3, y: at, anchor: 'start' as const },
    { x: x1 - 3, y: at, anchor: 'end' as const },
    { x: middle, y: at, anchor: 'middle' as const }
  ]);
}

/** The box of a marker shape centred at (cx, cy). */
function markerBox(cx: number, cy: number): IBox {
  const r = MARKER_SIZE * 1.3;
  return { x0: cx - r, y0: cy - r, x1: cx + r, y1: cy + r };
}

/**
 * The value of a series at `x`, as its line is drawn between its measured points (ignoring gaps): linear in
 * x, or linear in log2 x where the axis is logarithmic and the series is not `linearBetweenPoints`; beyond
 * its ends, along its first or last segment. Null without a measured point.
 */
export function valueOnSeries(series: IChartSeries, x: number, logAxis: boolean): number | null {
  const points = runsOf(series.points).flat();
  if (points.length === 0) {
    return null;
  }
  if (points.length === 1) {
    return points[0].y;
  }
  const next = points.findIndex(p => p.x >= x);
  const i = next === -1 ? points.length - 1 : Math.max(next, 1);
  return between(points[i - 1], points[i], x, logAxis && !series.linearBetweenPoints);
}

/** The value at `x` on the straight line through a and b (in log2 x when `logX`). */
function between(a: IMeasured, b: IMeasured, x: number, logX: boolean): number {
  if (b.x === a.x) {
    return b.y;
  }
  const f = logX && a.x > 0 && b.x > 0 && x > 0 ? Math.log2 : (n: number): number => n;
  return a.y + ((f(x) - f(a.x)) / (f(b.x) - f(a.x))) * (b.y - a.y);
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

function clamp(v: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(v, hi));
}

/** A point whose value is known. */
interface IMeasured {
  readonly x: number;
  readonly y: number;
}

/** Consecutive measured points, in x order: a point without a value ends a run. */
function runsOf(points: ReadonlyArray<IChartPoint>): IMeasured[][] {
  const runs: IMeasured[][] = [[]];
  for (const p of points.filter(p => Number.isFinite(p.x)).sort((a, b) => a.x - b.x)) {
    if (p.y === null || !Number.isFinite(p.y)) {
      runs.push([]);
    } else {
      runs[runs.length - 1].push({ x: p.x, y: p.y });
    }
  }
  return runs.filter(run => run.length > 0);
}

/** The range an axis spans, on a linear or a log2 scale. */
interface IRange {
  readonly lo: number;
  readonly hi: number;
  readonly log?: boolean;
}

/** Where `v` lies in the range, from 0 to 1 (values outside are drawn at its edge). */
function position(range: IRange, v: number): number {
  const f = range.log ? Math.log2 : (n: number): number => n;
  const [lo, hi] = [f(range.lo), f(range.hi)];
  return hi > lo ? (f(clamp(v, range.lo, range.hi)) - lo) / (hi - lo) : 0;
}

/**
 * The x range: fixed; on a log axis, the data's powers of two with 4% to spare on each side; else from 0 to 4%
 * beyond the largest value. Null without data.
 */
function xRange(props: IChartProps): IRange | null {
  if (props.x.domain !== undefined) {
    return { lo: props.x.domain[0], hi: props.x.domain[1] };
  }
  const log = props.x.log === true;
  const xs = [
    ...props.series.flatMap(s => s.points.map(p => p.x)),
    ...(props.markers ?? []).map(m => m.x)
  ].filter(x => Number.isFinite(x) && (!log || x > 0));
  if (xs.length === 0) {
    return null;
  }
  if (!log) {
    return { lo: 0, hi: Math.max(...xs) * 1.04 || 1 };
  }
  let [lo, hi] = [Math.log2(Math.min(...xs)), Math.log2(Math.max(...xs))];
  if (hi - lo < 1e-9) {
    [lo, hi] = [lo - 1, hi + 1];
  }
  const pad = (hi - lo) * 0.04;
  return { lo: 2 ** (lo - pad), hi: 2 ** (hi + pad), log };
}

/** The y range of one side: fixed, or from 0 to 8% above the largest value of its series, markers and rules. */
function yRange(
  side: ChartAxisSide,
  axis: IChartAxis | undefined,
  props: IChartProps
): IRange & { labelTop: number } {
  if (axis?.domain !== undefined) {
    const [lo, hi] = axis.domain;
    return { lo, hi, labelTop: hi };
  }
  const values = [
    ...props.series.filter(s => s.axis === side).flatMap(s => s.points.map(p => p.y)),
    ...(props.markers ?? []).filter(m => m.axis === side).map(m => m.y),
    ...(props.rules ?? []).filter(r => r.axis === side).map(r => r.y)
  ].filter((v): v is number => v !== null && Number.isFinite(v));
  const top = values.length > 0 ? Math.max(...values) : 0;
  return top > 0 ? { lo: 0, hi: top * 1.08, labelTop: top } : { lo: 0, hi: 1, labelTop: 1 / 1.08 };
}

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
  const placed = markers.map(m => {
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

  const line = (s: IChartSeries): JSX.Element[] => {
    const runs = runsOf(s.points);
    const base = `jp-GpuMem-chartLine ${s.colorClass}${s.dashed ? ' jp-GpuMem-chartLine-dashed' : ''}`;
    const densify = (ps: ReadonlyArray<IMeasured>): ReadonlyArray<IMeasured> => {
      if (!logAxis || !s.linearBetweenPoints || ps.length < 2) {
        return ps;
      }
      const out: IMeasured[] = [ps[0]];
      for (let i = 1; i < ps.length; i++) {
        const [a, b] = [ps[i - 1], ps[i]];
        const n = Math.min(48, Math.max(1, Math.ceil(Math.log2(b.x / a.x) * 8)));
        for (let k = 1; k <= n; k++) {
          // evenly spaced on the (log) axis, values linear in x
          const x = a.x * (b.x / a.x) ** (k / n);
          out.push({ x, y: between(a, b, x, false) });
        }
      }
      return out;
    };
    // A single point would be invisible as a polyline: it is drawn as a zero-length one.
    const toPoints = (ps: ReadonlyArray<IMeasured>): string =>
      (ps.length === 1 ? [ps[0], ps[0]] : densify(ps))
        .map(p => `${fmt(xOf(p.x))},${fmt(yOf(s.axis, p.y))}`)
        .join(' ');
    // The markers on this series become points of its line, so that the line passes exactly through them.
    const marks = placed
      .filter(p => p.series === s && p.value !== null)
      .map(p => ({ x: p.marker.x, y: p.value as number }));
    const withMarks = (run: IMeasured[]): IMeasured[] => {
      const inside = marks.filter(
        m => m.x > run[0].x && m.x < run[run.length - 1].x && !run.some(p => p.x === m.x)
      );
      return inside.length === 0 ? run : [...run, ...inside].sort((a, b) => a.x - b.x);
    };
    const out: JSX.Element[] = [];
    runs.forEach((measured, r) => {
      const pts = withMarks(measured);
      const cut = s.dashedFrom;
      const solid = cut === undefined ? pts : pts.filter(p => p.x <= cut);
      const dashed = cut === undefined ? [] : pts.filter(p => p.x >= cut || p === solid[solid.length - 1]);
      if (solid.length > 0) {
        out.push(
          <polyline key={`${s.id}-${r}-solid`} className={base} points={toPoints(solid)} data-series={s.id}>
            <title>{s.label}</title>
          </polyline>
        );
      }
      if (dashed.length > 1) {
        out.push(
          <polyline
            key={`${s.id}-${r}-dashed`}
            className={`${base} jp-GpuMem-chartLine-extrapolated`}
            points={toPoints(dashed)}
            data-series={s.id}
          >
            <title>{s.label}</title>
          </polyline>
        );
      }
      if (s.dots ?? true) {
        for (const p of measured) {
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
      }
    });
    // A marker beyond the line's ends (or in a gap) gets a dotted extension of the line to it.
    const all = runs.flat();
    for (const m of marks.filter(m => !runs.some(run => m.x >= run[0].x && m.x <= run[run.length - 1].x))) {
      const before = all.filter(p => p.x < m.x);
      const after = all.filter(p => p.x > m.x);
      const ext = [...before.slice(-1), m, ...after.slice(0, 1)];
      out.push(
        <polyline
          key={`${s.id}-to-${m.x}`}
          className={`${base} jp-GpuMem-chartLine-extrapolated`}
          points={toPoints(ext)}
          data-series={s.id}
          data-extension=""
        >
          <title>{s.label}</title>
        </polyline>
      );
    }
    return out;
  };

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
        {props.series.map(s => line(s))}
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
