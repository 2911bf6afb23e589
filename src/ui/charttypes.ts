/**
 * What a chart is drawn from: its series, markers, horizontal rules and axes, the frame it is drawn in (with the
 * outputs' and the sidebar's frames), and the props of `Chart` (chart.tsx).
 */

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

/** A rectangle in SVG user units. */
export interface IBox {
  readonly x0: number;
  readonly y0: number;
  readonly x1: number;
  readonly y1: number;
}
