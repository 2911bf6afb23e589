/**
 * The shapes of the memory timeline, computed once per payload (pure, no DOM): one polygon per band, stacked
 * as PyTorch's memory_viz stacks them, the `small` series as areas on top of the bands, the baseline under
 * them and `reserved` as a step line.
 *
 * Stacking: a band is allocated on top of everything alive at its start (the baseline, then the bands alive,
 * in allocation order); when a band below it is freed, it shifts down by that band's size. So a band's bottom
 * edge is a step function of the event index, changing only where a band under it is freed.
 *
 * Coordinates: x is the event index (the view scales it with one SVG transform, so panning and zooming never
 * recompute a polygon); y is already in SVG units of a plot `height` high (0 at the top), from a byte domain
 * fixed per payload.
 */
import type {
  ITimelineBand,
  ITimelineCategory,
  ITimelinePayload,
  ITimelineSmallPoint
} from '../../wire/analysispayload';

/** Every category, bottom to top in the stacked `small` areas and in the legend. */
export const CATEGORIES: ReadonlyArray<ITimelineCategory> = [
  'parameter',
  'gradient',
  'optimizer_state',
  'activation',
  'input',
  'other'
];

/** A band's bottom edge: from `x` on (event index) it lies at `bottom` bytes. */
export interface IStep {
  readonly x: number;
  readonly bottom: number;
}

export interface IBandShape {
  readonly index: number;
  readonly band: ITimelineBand;
  /** Its bottom edge, first step at `band.start`; it ends at `end`. */
  readonly steps: ReadonlyArray<IStep>;
  /** Where it ends on the x axis: its free, or the timeline's end. */
  readonly end: number;
  /** SVG polygon points (x: event index, y: plot units). */
  readonly points: string;
}

export interface ISmallArea {
  readonly category: ITimelineCategory;
  readonly points: string;
}

export interface ITimelineGeometry {
  /** The x axis runs 0..end (at least 1). */
  readonly end: number;
  /** The plot height the y coordinates are in. */
  readonly height: number;
  /** The largest value drawn (bytes): the y axis labels run to here. */
  readonly top: number;
  /** The byte value at the top of the plot (`top` with 8 % to spare). */
  readonly domain: number;
  readonly bands: ReadonlyArray<IBandShape>;
  /** Categories whose `small` series is never 0, bottom to top. */
  readonly small: ReadonlyArray<ISmallArea>;
  /** The baseline as a polygon, or null when it is 0. */
  readonly baseline: string | null;
  /** `reserved` as polyline points, or null when unknown. */
  readonly reserved: string | null;
  /** Baseline + bands + small at every change, as [x, bytes] steps (for tests and the CSV). */
  readonly totals: ReadonlyArray<readonly [number, number]>;
}

/** The y grid, in plot units: half a pixel where the plot is drawn at its own size. */
const GRID = 2;

function round(v: number): number {
  return Math.round(v * GRID) / GRID;
}

/** The small series' bytes of every category at a point. */
function smallBytes(point: ITimelineSmallPoint | undefined): number[] {
  return CATEGORIES.map(c => (point === undefined ? 0 : point.bytes[c]));
}

/**
 * The stacked geometry of a payload. O(bands × bands alive) in the worst case (every free of a low band
 * moves all above it), as memory_viz.
 */
export function timelineGeometry(payload: ITimelinePayload, height: number): ITimelineGeometry {
  const bands = payload.bands;
  const lastX = Math.max(
    1,
    payload.end,
    payload.peak.at,
    ...bands.map(b => Math.max(b.start, b.end ?? 0)),
    ...payload.small.map(p => p.at)
  );
  const endOf = (b: ITimelineBand): number => (b.end === null ? lastX : b.end);

  // Sweep the allocation and free events in order (at one index, frees first).
  interface IEvent {
    readonly x: number;
    readonly free: boolean;
    readonly index: number;
  }
  const events: IEvent[] = [];
  bands.forEach((b, index) => {
    events.push({ x: b.start, free: false, index });
    if (b.end !== null) {
      events.push({ x: b.end, free: true, index });
    }
  });
  events.sort((a, b) => a.x - b.x || (a.free === b.free ? a.index - b.index : a.free ? -1 : 1));
  const steps: IStep[][] = bands.map(() => []);
  const bottoms = new Float64Array(bands.length);
  const alive: number[] = [];
  let top = payload.baseline;
  const bandTotals: Array<[number, number]> = [[0, top]];
  for (const e of events) {
    const b = bands[e.index];
    if (e.free) {
      const at = alive.indexOf(e.index);
      if (at === -1) {
        continue;
      }
      alive.splice(at, 1);
      for (let q = at; q < alive.length; q++) {
        const j = alive[q];
        bottoms[j] -= b.size;
        steps[j].push({ x: e.x, bottom: bottoms[j] });
      }
      top -= b.size;
    } else {
      bottoms[e.index] = top;
      steps[e.index].push({ x: e.x, bottom: top });
      alive.push(e.index);
      top += b.size;
    }
    const last = bandTotals[bandTotals.length - 1];
    if (last[0] === e.x) {
      last[1] = top;
    } else {
      bandTotals.push([e.x, top]);
    }
  }

  // Baseline + bands + small, at every index where one of them changes.
  const small = [...payload.small].sort((a, b) => a.at - b.at);
  const xs = [...new Set([...bandTotals.map(t => t[0]), ...small.map(p => p.at)])].sort((a, b) => a - b);
  const levels: number[][] = []; // per x: [bands top, then the top of each category's small area]
  let ti = 0;
  let si = -1;
  for (const x of xs) {
    while (ti + 1 < bandTotals.length && bandTotals[ti + 1][0] <= x) {
      ti++;
    }
    while (si + 1 < small.length && small[si + 1].at <= x) {
      si++;
    }
    const base = bandTotals[ti][1];
    const values = smallBytes(si === -1 ? undefined : small[si]);
    const row = [base];
    values.forEach(v => row.push(row[row.length - 1] + v));
    levels.push(row);
  }
  const totals = xs.map((x, k) => [x, levels[k][CATEGORIES.length]] as const);
  const reservedMax = Math.max(0, ...(payload.reserved ?? []).map(p => p.bytes));
  const peakTotal = Math.max(0, ...totals.map(t => t[1]));
  const topBytes = Math.max(payload.peak.bytes, peakTotal, reservedMax, 1);
  const domain = topBytes * 1.08;
  const y = (bytes: number): number => round(height - (bytes / domain) * height);

  const shapes = bands.map((band, index): IBandShape => {
    const s = steps[index];
    const end = endOf(band);
    // Top edge left to right, then the bottom edge right to left: a vertical drop at every step that moves
    // an edge on the grid (a drop smaller than that is not drawn; neighbours share edges exactly).
    const xs: number[] = [];
    const tops: number[] = [];
    const bottoms: number[] = [];
    for (const step of s) {
      const yt = y(step.bottom + band.size);
      const yb = y(step.bottom);
      const last = xs.length - 1;
      if (last >= 0 && tops[last] === yt && bottoms[last] === yb) {
        continue;
      }
      xs.push(step.x);
      tops.push(yt);
      bottoms.push(yb);
    }
    const upper: string[] = [];
    const lower: string[] = [];
    for (let k = 0; k < xs.length; k++) {
      const next = k + 1 < xs.length ? xs[k + 1] : end;
      upper.push(`${xs[k]},${tops[k]} ${next},${tops[k]}`);
      lower.push(`${next},${bottoms[k]} ${xs[k]},${bottoms[k]}`);
    }
    return { index, band, steps: s, end, points: `${upper.join(' ')} ${lower.reverse().join(' ')}` };
  });

  // A step area between two level rows, over every x.
  const stepArea = (lowerRow: number, upperRow: number): string => {
    const at: number[] = [];
    const tops: number[] = [];
    const bottoms: number[] = [];
    xs.forEach((x, k) => {
      const yt = y(levels[k][upperRow]);
      const yb = y(levels[k][lowerRow]);
      const last = at.length - 1;
      if (last < 0 || tops[last] !== yt || bottoms[last] !== yb) {
        at.push(x);
        tops.push(yt);
        bottoms.push(yb);
      }
    });
    const upper: string[] = [];
    const lower: string[] = [];
    at.forEach((x, k) => {
      const next = k + 1 < at.length ? at[k + 1] : lastX;
      upper.push(`${x},${tops[k]} ${next},${tops[k]}`);
      lower.push(`${next},${bottoms[k]} ${x},${bottoms[k]}`);
    });
    return `${upper.join(' ')} ${lower.reverse().join(' ')}`;
  };
  const smallAreas: ISmallArea[] = [];
  CATEGORIES.forEach((category, c) => {
    if (small.some(p => p.bytes[category] > 0)) {
      smallAreas.push({ category, points: stepArea(c, c + 1) });
    }
  });

  let reserved: string | null = null;
  if (payload.reserved !== null && payload.reserved.length > 0) {
    const r = [...payload.reserved].sort((a, b) => a.at - b.at);
    reserved = r
      .flatMap((p, k) => {
        const next = k + 1 < r.length ? r[k + 1].at : lastX;
        return [`${p.at},${y(p.bytes)}`, `${next},${y(p.bytes)}`];
      })
      .join(' ');
  }
  const b0 = payload.baseline;
  return {
    end: lastX,
    height,
    top: topBytes,
    domain,
    bands: shapes,
    small: smallAreas,
    baseline: b0 > 0 ? `0,${y(0)} ${lastX},${y(0)} ${lastX},${y(b0)} 0,${y(b0)}` : null,
    reserved,
    totals
  };
}

/** Where a band's bottom edge lies at event index `x` (null: not alive there). */
export function bottomAt(shape: IBandShape, x: number): number | null {
  if (x < shape.band.start || x >= shape.end) {
    return null;
  }
  let bottom = shape.steps[0].bottom;
  for (const step of shape.steps) {
    if (step.x > x) {
      break;
    }
    bottom = step.bottom;
  }
  return bottom;
}

/** True when the band is alive at event index `x` (allocated at or before it, freed after it). */
export function aliveAt(band: ITimelineBand, x: number): boolean {
  return band.start <= x && (band.end === null || band.end > x);
}
