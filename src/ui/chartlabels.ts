/**
 * Where the chart's labels go: text widths estimated from the font size, label boxes, and greedy placement at
 * the first free candidate spot (around a marker, along a rule), so that no two labels overlap.
 */
import { MARKER_SIZE } from './chartshapes';
import type { IBox } from './charttypes';

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
