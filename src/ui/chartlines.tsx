/**
 * The chart's lines: a series drawn as polylines with gaps where it has no value, a dashed (extrapolated)
 * part, dots on its points and dotted extensions to the markers beyond its ends; and the value of a series
 * at any x, read off its line as drawn, so that a marker that marks a series sits on it.
 */
import * as React from 'react';

import type { ChartAxisSide, IChartMarker, IChartPoint, IChartSeries } from './charttypes';

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

/** An SVG coordinate, to a tenth of a user unit. */
export function fmt(n: number): string {
  return n.toFixed(1);
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

/** Where the chart draws a value: x and y in SVG user units, and whether the x axis is logarithmic. */
export interface IPlotScales {
  readonly logAxis: boolean;
  readonly xOf: (v: number) => number;
  readonly yOf: (side: ChartAxisSide, y: number) => number;
}

/** A marker as the chart draws it: on the series it marks (its value read off the line), or at its own y. */
export interface IPlacedMarker {
  readonly marker: IChartMarker;
  readonly series: IChartSeries | undefined;
  readonly value: number | null;
  readonly cx: number;
  readonly cy: number;
}

/** The SVG elements of series `s`: its lines, dots and extensions to the markers placed on it. */
export function seriesLine(
  s: IChartSeries,
  placed: ReadonlyArray<IPlacedMarker>,
  scales: IPlotScales
): JSX.Element[] {
  const { logAxis, xOf, yOf } = scales;
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
}
