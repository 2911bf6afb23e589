/** The chart's marker shapes: their size, their SVG element and the box they cover. */
import * as React from 'react';

import type { IBox, MarkerShape } from './charttypes';

/** The half-size of a marker shape (the diamond reaches 1.3 times it). */
export const MARKER_SIZE = 4.5;

/** The box of a marker shape centred at (cx, cy). */
export function markerBox(cx: number, cy: number): IBox {
  const r = MARKER_SIZE * 1.3;
  return { x0: cx - r, y0: cy - r, x1: cx + r, y1: cy + r };
}

/** The SVG element of a marker shape of half-size `size` centred at (cx, cy). */
export function shapeElement(shape: MarkerShape, cx: number, cy: number, size: number): JSX.Element {
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
