/**
 * The chart's scales: tick values (linear, powers of two, byte sizes), the x and y ranges that follow the data
 * or a fixed domain, and where a value lies in a range. A few lines of arithmetic instead of a chart library.
 */
import type { ChartAxisSide, IChartAxis, IChartProps, IChartTick } from './charttypes';
import { formatBytes, scaleFor } from './format';

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

export function clamp(v: number, lo: number, hi: number): number {
  return Math.max(lo, Math.min(v, hi));
}

/** The range an axis spans, on a linear or a log2 scale. */
export interface IRange {
  readonly lo: number;
  readonly hi: number;
  readonly log?: boolean;
}

/** Where `v` lies in the range, from 0 to 1 (values outside are drawn at its edge). */
export function position(range: IRange, v: number): number {
  const f = range.log ? Math.log2 : (n: number): number => n;
  const [lo, hi] = [f(range.lo), f(range.hi)];
  return hi > lo ? (f(clamp(v, range.lo, range.hi)) - lo) / (hi - lo) : 0;
}

/**
 * The x range: fixed; on a log axis, the data's powers of two with 4% to spare on each side; else from 0 to 4%
 * beyond the largest value. Null without data.
 */
export function xRange(props: IChartProps): IRange | null {
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
export function yRange(
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
