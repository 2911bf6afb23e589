/**
 * The timeline's SVG: bands stacked by tensor, the small allocations' areas, the baseline, `reserved` as a
 * line, the peak marked with its value, the axes; hover a band for its tooltip, click it (or Enter on it) to
 * select it; wheel to zoom the x axis, drag to pan, "Reset zoom" to see it all.
 *
 * Made for the largest payload (4000 bands): the polygons come from `timelineGeometry` once per payload and are
 * rendered once (a memoised element); panning and zooming change one `transform` attribute and the axis
 * ticks. Events are delegated to the group that holds the bands. Bands take the focus in turn (one is in the
 * tab order; arrow keys move between them in allocation order).
 */
import * as React from 'react';

import { markerLabelSpots, placeLabels } from '../../ui/chartlabels';
import { byteAxis } from '../../ui/chartscales';
import { formatBytes, formatCount } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { ITimelinePayload } from '../../wire/analysispayload';
import type { ITimelineGeometry } from './geometry';
import { categoryName, sourceText } from './text';

export const WIDTH = 720;
export const HEIGHT = 250;
export const TOP = 16;
export const BOTTOM = 30;
export const LEFT = 62;
export const RIGHT = 12;
export const PLOT_W = WIDTH - LEFT - RIGHT;
export const PLOT_H = HEIGHT - TOP - BOTTOM;

/** The x range shown (event indices). */
export type XRange = readonly [number, number];

/** Ticks between lo and hi: about five round steps of whole events. */
export function eventTicks(lo: number, hi: number): number[] {
  const raw = Math.max(1, (hi - lo) / 5);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = Math.max(1, [1, 2, 2.5, 5, 10].map(m => m * magnitude).find(s => s >= raw) ?? raw);
  const ticks: number[] = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) {
    ticks.push(t);
  }
  return ticks;
}

/** The range after zooming by `factor` (< 1: in) around event index `at`, within 0..end. */
export function zoomed(range: XRange, factor: number, at: number, end: number): XRange {
  const [lo, hi] = range;
  // At most 1000× (the drawing's layer is the whole timeline at the current zoom).
  const span = Math.min(end, Math.max(Math.min(end, Math.max(8, end / 1000)), (hi - lo) * factor));
  const f = hi > lo ? (at - lo) / (hi - lo) : 0.5;
  return clampRange(at - f * span, span, end);
}

/** A range of `span` starting at `lo`, moved inside 0..end. */
export function clampRange(lo: number, span: number, end: number): XRange {
  const start = Math.min(Math.max(0, lo), Math.max(0, end - span));
  return [start, start + span];
}

export interface ITimelinePlotProps {
  readonly payload: ITimelinePayload;
  readonly geometry: ITimelineGeometry;
  readonly trans: Trans;
  readonly selected: number | null;
  /** Bands highlighted with the selection (a table row's allocations alive at the peak). */
  readonly highlighted: ReadonlyArray<number>;
  readonly onSelect: (band: number) => void;
}

interface IHover {
  readonly band: number;
  readonly x: number;
  readonly y: number;
}

function bandIndex(target: EventTarget | null): number | null {
  const value = target instanceof Element ? target.getAttribute('data-band') : null;
  return value === null ? null : Number(value);
}

export function TimelinePlot(props: ITimelinePlotProps): JSX.Element {
  const { payload, geometry, trans } = props;
  const end = geometry.end;
  const [range, setRange] = React.useState<XRange>([0, end]);
  const [hover, setHover] = React.useState<IHover | null>(null);
  const svgRef = React.useRef<SVGSVGElement>(null);
  const wrapRef = React.useRef<HTMLDivElement>(null);
  const rangeRef = React.useRef<XRange>(range);
  const frame = React.useRef<number | null>(null);
  const drag = React.useRef<{ x: number; range: XRange; moved: boolean; id: number } | null>(null);
  const onSelect = props.onSelect;

  // A new payload shows all of it.
  React.useEffect(() => {
    rangeRef.current = [0, end];
    setRange([0, end]);
  }, [geometry]);

  /** Apply a range at the next animation frame (pointer and wheel events come faster than frames). */
  const show = React.useCallback((next: XRange) => {
    rangeRef.current = next;
    if (frame.current === null) {
      const apply = (): void => {
        frame.current = null;
        setRange(rangeRef.current);
      };
      frame.current = typeof requestAnimationFrame === 'function' ? requestAnimationFrame(apply) : -1;
      if (frame.current === -1) {
        apply();
      }
    }
  }, []);
  React.useEffect(
    () => () => {
      if (frame.current !== null && frame.current !== -1) {
        cancelAnimationFrame(frame.current);
      }
    },
    []
  );

  /** SVG units per CSS pixel of the drawing (it scales to its container's width). */
  const unitsPerPixel = (): number => {
    const width = svgRef.current?.getBoundingClientRect().width ?? 0;
    return width > 0 ? WIDTH / width : 1;
  };
  const eventAt = (clientX: number): number => {
    const rect = svgRef.current?.getBoundingClientRect();
    const [lo, hi] = rangeRef.current;
    const svgX = rect === undefined ? LEFT : (clientX - rect.left) * unitsPerPixel();
    return lo + ((svgX - LEFT) / PLOT_W) * (hi - lo);
  };

  // Wheel zoom: a native listener, as React's is passive and could not keep the page from scrolling.
  React.useEffect(() => {
    const wrap = wrapRef.current;
    if (wrap === null) {
      return;
    }
    const onWheel = (event: WheelEvent): void => {
      const [lo, hi] = rangeRef.current;
      const out = event.deltaY > 0;
      if (out && lo <= 0 && hi >= end) {
        return; // all shown already: let the notebook scroll
      }
      event.preventDefault();
      const factor = Math.exp(Math.max(-1, Math.min(1, event.deltaY / 300)));
      show(zoomed(rangeRef.current, factor, eventAt(event.clientX), end));
    };
    wrap.addEventListener('wheel', onWheel, { passive: false });
    return () => wrap.removeEventListener('wheel', onWheel);
  }, [end, show]);

  const onPointerDown = (event: React.PointerEvent<HTMLDivElement>): void => {
    if (event.button !== 0) {
      return;
    }
    drag.current = { x: event.clientX, range: rangeRef.current, moved: false, id: event.pointerId };
  };
  const onPointerMove = (event: React.PointerEvent<HTMLDivElement>): void => {
    const d = drag.current;
    if (d === null) {
      return;
    }
    const dx = event.clientX - d.x;
    if (!d.moved && Math.abs(dx) < 3) {
      return;
    }
    if (!d.moved) {
      d.moved = true;
      setHover(null);
      try {
        wrapRef.current?.setPointerCapture?.(d.id);
      } catch {
        // a pointer the browser no longer knows: the drag goes on without capture
      }
    }
    const [lo, hi] = d.range;
    const shift = ((dx * unitsPerPixel()) / PLOT_W) * (hi - lo);
    show(clampRange(lo - shift, hi - lo, end));
  };
  const onPointerUp = (): void => {
    const d = drag.current;
    if (d?.moved) {
      try {
        wrapRef.current?.releasePointerCapture?.(d.id);
      } catch {
        // not captured
      }
      // The click that follows a drag selects nothing.
      setTimeout(() => {
        drag.current = null;
      }, 0);
    } else {
      drag.current = null;
    }
  };

  const onClick = (event: React.MouseEvent): void => {
    if (drag.current?.moved) {
      return;
    }
    const band = bandIndex(event.target);
    if (band !== null) {
      onSelect(band);
    }
  };
  const onOver = (event: React.PointerEvent | React.FocusEvent): void => {
    if (drag.current?.moved) {
      return;
    }
    const band = bandIndex(event.target);
    const wrap = wrapRef.current;
    if (band === null || wrap === null) {
      return;
    }
    const box = wrap.getBoundingClientRect();
    if ('clientX' in event) {
      setHover({ band, x: event.clientX - box.left, y: event.clientY - box.top });
    } else {
      const at = (event.target as Element).getBoundingClientRect();
      setHover({ band, x: at.left - box.left + at.width / 2, y: at.top - box.top });
    }
  };
  const onOut = (event: React.PointerEvent | React.FocusEvent): void => {
    if (bandIndex(event.target) !== null) {
      setHover(null);
    }
  };
  const onKeyDown = (event: React.KeyboardEvent): void => {
    const band = bandIndex(event.target);
    if (band === null) {
      return;
    }
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      onSelect(band);
    } else if (event.key === 'ArrowRight' || event.key === 'ArrowLeft') {
      event.preventDefault();
      const next = band + (event.key === 'ArrowRight' ? 1 : -1);
      const target = wrapRef.current?.querySelector<SVGElement>(`[data-band="${next}"]`);
      if (target) {
        (event.target as SVGElement).setAttribute('tabindex', '-1');
        target.setAttribute('tabindex', '0');
        target.focus();
        const b = payload.bands[next];
        const [lo, hi] = rangeRef.current;
        if (b.start > hi || (b.end ?? end) < lo) {
          show(clampRange(b.start - (hi - lo) / 2, hi - lo, end));
        }
      }
    }
  };

  // Everything drawn in event coordinates: rendered once per payload.
  const drawn = React.useMemo(
    () => (
      <>
        {geometry.baseline !== null && (
          <polygon className="jp-GpuMem-tlBaseline" points={geometry.baseline} />
        )}
        <g className="jp-GpuMem-tlBands">
          {geometry.bands.map(shape => (
            <polygon
              key={shape.index}
              className={`jp-GpuMem-tlBand jp-GpuMem-tl-${shape.band.category}`}
              points={shape.points}
              data-band={shape.index}
              tabIndex={shape.index === 0 ? 0 : -1}
              role="button"
              aria-label={trans.__(
                '%1 of %2, %3',
                formatBytes(shape.band.size, 'auto'),
                categoryName(shape.band.category, trans),
                sourceText(payload, shape.band.stack, trans)
              )}
            />
          ))}
        </g>
        {geometry.small.map(area => (
          <polygon
            key={area.category}
            className={`jp-GpuMem-tlSmall jp-GpuMem-tl-${area.category}`}
            points={area.points}
            data-small={area.category}
          />
        ))}
        {geometry.reserved !== null && (
          <polyline className="jp-GpuMem-tlReserved" points={geometry.reserved} />
        )}
      </>
    ),
    [geometry, payload, trans]
  );

  const [lo, hi] = range;
  const k = PLOT_W / Math.max(hi - lo, 1e-9);
  const xOf = (x: number): number => LEFT + (x - lo) * k;
  const yOf = (bytes: number): number => TOP + geometry.height - (bytes / geometry.domain) * geometry.height;
  const bottom = TOP + PLOT_H;
  const yTicks = byteAxis('').ticks?.(0, geometry.top) ?? [];
  const xTicks = eventTicks(lo, hi);
  const zoomedIn = lo > 0 || hi < end;

  const peak = payload.peak;
  const peakShown = peak.at >= lo && peak.at <= hi;
  const px = xOf(peak.at);
  const py = yOf(peak.bytes);
  const peakLabel = trans.__('peak %1', formatBytes(peak.bytes, 'auto'));
  const [peakSpot] = placeLabels(
    [{ text: peakLabel, spots: markerLabelSpots(px, py) }],
    { x0: LEFT, y0: 0, x1: WIDTH - RIGHT, y1: bottom },
    []
  );

  const selectedShape = props.selected === null ? null : (geometry.bands[props.selected] ?? null);
  const hoverBand = hover === null ? undefined : payload.bands[hover.band];

  const pct = (v: number): string => `${(v * 100).toFixed(4)}%`;
  const span = Math.max(hi - lo, 1e-9);

  return (
    <div
      className="jp-GpuMem-tlPlot"
      ref={wrapRef}
      onPointerDown={onPointerDown}
      onPointerMove={onPointerMove}
      onPointerUp={onPointerUp}
      onPointerCancel={onPointerUp}
    >
      <svg
        ref={svgRef}
        className="jp-GpuMem-chartSvg jp-GpuMem-tlSvg"
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        width="100%"
        role="group"
        aria-label={trans.__('Memory over events %1 to %2; %3', formatCount(lo), formatCount(hi), peakLabel)}
        data-lo={lo.toFixed(1)}
        data-hi={hi.toFixed(1)}
      >
        {yTicks.map(t => (
          <g key={`y${t.value}`}>
            <line
              className="jp-GpuMem-chartGrid"
              x1={LEFT}
              x2={WIDTH - RIGHT}
              y1={yOf(t.value)}
              y2={yOf(t.value)}
            />
            <text className="jp-GpuMem-chartAxis" x={LEFT - 4} y={yOf(t.value) + 3} textAnchor="end">
              {t.label}
            </text>
          </g>
        ))}
        {xTicks.map(t => (
          <g key={`x${t}`}>
            <line className="jp-GpuMem-chartTick" x1={xOf(t)} x2={xOf(t)} y1={bottom} y2={bottom + 3} />
            <text className="jp-GpuMem-chartAxis" x={xOf(t)} y={bottom + 13} textAnchor="middle">
              {formatCount(t)}
            </text>
          </g>
        ))}
        <line className="jp-GpuMem-chartFrame" x1={LEFT} x2={WIDTH - RIGHT} y1={bottom} y2={bottom} />
        <text className="jp-GpuMem-chartAxisLabel" x={LEFT + PLOT_W / 2} y={HEIGHT - 3} textAnchor="middle">
          {trans.__('allocation events')}
        </text>
      </svg>
      {/*
        The drawing, in its own layer over the plot area: the whole timeline at the current zoom, moved by a
        CSS transform, so that a pan is composited and never redraws the polygons (a zoom redraws them once).
      */}
      <div
        className="jp-GpuMem-tlLayer"
        style={{
          left: pct(LEFT / WIDTH),
          top: pct(TOP / HEIGHT),
          width: pct(PLOT_W / WIDTH),
          height: pct(PLOT_H / HEIGHT)
        }}
      >
        <svg
          className="jp-GpuMem-tlDrawn"
          viewBox={`0 0 ${end} ${geometry.height}`}
          preserveAspectRatio="none"
          style={{ width: pct(end / span), transform: `translateX(${pct(-lo / end)})` }}
          onClick={onClick}
          onPointerOver={onOver}
          onPointerOut={onOut}
          onFocus={onOver}
          onBlur={onOut}
          onKeyDown={onKeyDown}
        >
          {drawn}
          {props.highlighted.map(i =>
            geometry.bands[i] ? (
              <polygon key={`h${i}`} className="jp-GpuMem-tlHighlight" points={geometry.bands[i].points} />
            ) : null
          )}
          {selectedShape !== null && (
            <polygon
              className="jp-GpuMem-tlSelected"
              points={selectedShape.points}
              data-selected={selectedShape.index}
            />
          )}
        </svg>
      </div>
      <svg className="jp-GpuMem-tlOverlay" viewBox={`0 0 ${WIDTH} ${HEIGHT}`} width="100%" aria-hidden="true">
        {peakShown && (
          <g className="jp-GpuMem-tlPeak" data-at={peak.at} data-x={px.toFixed(1)} data-y={py.toFixed(1)}>
            <line className="jp-GpuMem-tlPeakLine" x1={px} x2={px} y1={py} y2={bottom} />
            <polygon points={`${px},${py - 5} ${px + 5},${py} ${px},${py + 5} ${px - 5},${py}`} />
            {peakSpot && (
              <text
                className="jp-GpuMem-chartMarkerLabel"
                x={peakSpot.x}
                y={peakSpot.y}
                textAnchor={peakSpot.anchor}
              >
                {peakLabel}
              </text>
            )}
          </g>
        )}
      </svg>
      {hover !== null && hoverBand !== undefined && (
        <div
          className="jp-GpuMem-tlTooltip"
          role="tooltip"
          style={{
            left: Math.max(0, Math.min(hover.x + 12, (wrapRef.current?.clientWidth ?? 600) - 260)),
            top: hover.y + 14
          }}
        >
          <div className="jp-GpuMem-tlTooltipSize">
            {trans.__(
              '%1 · %2',
              formatBytes(hoverBand.size, 'auto'),
              categoryName(hoverBand.category, trans)
            )}
          </div>
          <div>{sourceText(payload, hoverBand.stack, trans)}</div>
          <div className="jp-GpuMem-tlMuted">
            {hoverBand.end === null
              ? trans.__('allocated at event %1, alive at the end', formatCount(hoverBand.start))
              : trans.__(
                  'allocated at event %1, freed at %2',
                  formatCount(hoverBand.start),
                  formatCount(hoverBand.end)
                )}
          </div>
        </div>
      )}
      {zoomedIn && (
        <button type="button" className="jp-GpuMem-tlReset jp-mod-styled" onClick={() => show([0, end])}>
          {trans.__('Reset zoom')}
        </button>
      )}
    </div>
  );
}
