/**
 * The chart's geometry: no two labels overlap, and a marker that marks a series sits on its line, for the
 * real analysis and benchmark outputs and for a crowded chart. The outputs: src/__tests__/fixtures, and here
 * `%gpumem analyze model --batch 2048 --input 3x224x224 --target "RTX 4080 Super" --amp bf16 --optimizer adamw`
 * on the small conv net of ui-tests/tests/analysis.spec.ts (analyze(...).to_payload()), as the kernel sends it
 * now (analysis_b2048.json) and as an older kernel sent it (analysis_b2048_issue.json, from the kernel of commit
 * 00a2331: the curve sampled from 256 to 4096, so that the "256" label sat on the device-limit label and the
 * safe pick, 128, floated left of the line).
 *
 * Label boxes are the chart's own estimate (labelBox); the Galata test ui-tests/tests/looks.spec.ts checks
 * the same property on the boxes a real browser lays out.
 */
import '../../__tests__/domshim';

import * as fs from 'fs';
import * as path from 'path';
import * as React from 'react';
import { act } from 'react';
import { createRoot } from 'react-dom/client';

import {
  ANALYSIS_FIXTURES,
  BENCHMARK_FIXTURES,
  fixture,
  harness,
  type IHarness,
  type Json
} from '../../__tests__/analysisfixtures';
import { ANALYSIS_MIME, BENCHMARK_MIME } from '../../outputs/renderers';
import { Chart } from '../chart';
import { intersects, labelBox, placeLabels, type TextAnchor } from '../chartlabels';
import { valueOnSeries } from '../chartlines';
import type { IBox, IChartProps } from '../charttypes';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

function local(name: string): Json {
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'fixtures', `${name}.json`), 'utf8')) as Json;
}

interface ILabel {
  readonly text: string;
  readonly box: IBox;
}

/** Every label drawn in the plots under `node` (not the rotated axis titles, which sit in the margins). */
function labels(svg: Element): ILabel[] {
  return [...svg.querySelectorAll('text:not(.jp-GpuMem-chartAxisLabel)')].map(t => {
    const text = t.textContent ?? '';
    const spot = {
      x: Number(t.getAttribute('x')),
      y: Number(t.getAttribute('y')),
      anchor: (t.getAttribute('text-anchor') ?? 'start') as TextAnchor
    };
    return { text, box: labelBox(spot, text) };
  });
}

/** The pairs of labels that overlap, as "a × b". */
function overlaps(svg: Element): string[] {
  const all = labels(svg);
  const out: string[] = [];
  all.forEach((a, i) =>
    all.slice(i + 1).forEach(b => {
      if (intersects(a.box, b.box)) {
        out.push(`${a.text} × ${b.text}`);
      }
    })
  );
  return out;
}

/** The y of the polylines of `series` at x (null where none passes). */
function lineYAt(svg: Element, series: string, x: number): number | null {
  for (const line of svg.querySelectorAll(`polyline[data-series="${series}"]`)) {
    const points = (line.getAttribute('points') ?? '')
      .split(' ')
      .map(p => p.split(',').map(Number) as [number, number]);
    for (let i = 1; i < points.length; i++) {
      const [[x0, y0], [x1, y1]] = [points[i - 1], points[i]];
      if (x >= Math.min(x0, x1) && x <= Math.max(x0, x1)) {
        return x1 === x0 ? y1 : y0 + ((x - x0) / (x1 - x0)) * (y1 - y0);
      }
    }
  }
  return null;
}

/** For each marker that marks a series: its centre's y against the line's y there. */
function markersOnLines(svg: Element): Array<{ kind: string; y: number; line: number | null }> {
  return [...svg.querySelectorAll('g.jp-GpuMem-chartMarker[data-series]')].map(g => ({
    kind: g.getAttribute('data-kind') ?? '',
    y: Number(g.getAttribute('data-y')),
    line: lineYAt(svg, g.getAttribute('data-series') ?? '', Number(g.getAttribute('data-x')))
  }));
}

const CASES: Array<[string, string, () => Json]> = [
  ...ANALYSIS_FIXTURES.map((name): [string, string, () => Json] => [
    name,
    ANALYSIS_MIME,
    () => fixture(name)
  ]),
  ['analysis_b2048', ANALYSIS_MIME, () => local('analysis_b2048')],
  ...BENCHMARK_FIXTURES.map((name): [string, string, () => Json] => [
    name,
    BENCHMARK_MIME,
    () => fixture(name)
  ])
];

describe('the charts of the outputs', () => {
  let h: IHarness | null = null;
  afterEach(() => {
    h?.dispose();
    h = null;
  });

  async function chartOf(mime: string, data: Json): Promise<Element> {
    h = harness(mime);
    await h.render(data);
    const svg = h.node.querySelector('svg.jp-GpuMem-chartSvg');
    expect(svg).not.toBeNull();
    return svg as Element;
  }

  it.each(CASES)('%s: no two labels overlap', async (_name, mime, data) => {
    const svg = await chartOf(mime, data());
    expect(labels(svg).length).toBeGreaterThan(4);
    expect(overlaps(svg)).toEqual([]);
  });

  it.each(CASES)('%s: every marker of a series sits on its line', async (_name, mime, data) => {
    const payload = data();
    const svg = await chartOf(mime, payload);
    // The analysis' picks (safe, recommended, maximum) mark the predicted-peak curve.
    const recs = payload.recommendations as Record<string, unknown> | undefined;
    const picks = ['safe', 'recommended', 'maximum'].filter(k => typeof recs?.[k] === 'number');
    expect(markersOnLines(svg).map(m => m.kind)).toEqual(mime === ANALYSIS_MIME ? picks : []);
    for (const m of markersOnLines(svg)) {
      expect(m.line).not.toBeNull();
      expect(Math.abs((m.line as number) - m.y)).toBeLessThanOrEqual(0.1);
    }
  });

  it.each([
    ['as the kernel sends it now', (): Json => local('analysis_b2048')],
    ['as the issue saw it', (): Json => local('analysis_b2048_issue')]
  ])('at --batch 2048 (%s), labels the recommended pick and the device limit apart', async (_when, data) => {
    const svg = await chartOf(ANALYSIS_MIME, data());
    const all = labels(svg);
    const limit = all.find(l => l.text.startsWith('device limit'));
    const recommended = all.find(l => l.text === '256');
    expect(limit).toBeDefined();
    expect(recommended).toBeDefined();
    expect(intersects(limit?.box as IBox, recommended?.box as IBox)).toBe(false);
    expect(overlaps(svg)).toEqual([]);
  });

  it('draws a pick left of the curve on the curve, extended to it', async () => {
    const svg = await chartOf(ANALYSIS_MIME, local('analysis_b2048_issue'));
    const safe = markersOnLines(svg).find(m => m.kind === 'safe');
    expect(safe?.line).not.toBeNull();
    expect(Math.abs((safe?.line as number) - (safe?.y as number))).toBeLessThanOrEqual(0.1);
    expect(svg.querySelector('polyline[data-series="peak"][data-extension]')).not.toBeNull();
  });
});

describe('a crowded chart', () => {
  function render(props: IChartProps): Element {
    const node = document.createElement('div');
    act(() => createRoot(node).render(<Chart {...props} />));
    return node.querySelector('svg') as Element;
  }

  const GIB = 1024 ** 3;
  const curve = [8, 16, 32, 64, 96, 128, 160, 192, 256, 512, 1024, 2048].map(x => ({
    x,
    y: 0.3 * GIB + x * 0.03 * GIB
  }));
  const props: IChartProps = {
    caption: 'crowded',
    ariaLabel: 'crowded',
    x: { label: 'batch size', format: String, log: true },
    left: { label: 'memory', format: v => `${(v / GIB).toFixed(1)} GiB` },
    series: [
      { id: 'peak', label: 'peak', colorClass: 'c0', axis: 'left', points: curve, linearBetweenPoints: true },
      {
        id: 'other',
        label: 'other',
        colorClass: 'c1',
        axis: 'left',
        points: curve.map(p => ({ x: p.x, y: p.y * 0.9 }))
      }
    ],
    rules: [
      { id: 'limit', y: 16 * GIB, axis: 'left', label: 'device limit 16.00 GiB', className: 'l' },
      { id: 'target', y: 15.5 * GIB, axis: 'left', label: 'memory target 95%', className: 't' },
      { id: 'warn', y: 15.8 * GIB, axis: 'left', label: 'warning', className: 'w' }
    ],
    markers: [4, 24, 100, 120, 140, 150, 170, 300, 480, 500, 520, 3000].map((x, i) => ({
      id: `m${i}`,
      kind: i % 2 ? 'even' : 'odd',
      x,
      y: 0,
      axis: 'left' as const,
      shape: 'circle' as const,
      label: `marker ${x}`,
      short: String(x),
      series: i % 3 ? 'peak' : 'other'
    }))
  };

  it('places its labels without overlaps, leaving out what does not fit', () => {
    const svg = render(props);
    expect(overlaps(svg)).toEqual([]);
    const shown = labels(svg).map(l => l.text);
    expect(shown).toContain('device limit 16.00 GiB');
    expect(shown.filter(t => /^\d+$/.test(t) && Number(t) > 3).length).toBeGreaterThanOrEqual(6);
  });

  it('puts every marker on its line, extending the line to markers beyond its ends', () => {
    const svg = render(props);
    const on = markersOnLines(svg);
    expect(on).toHaveLength(12);
    for (const m of on) {
      expect(m.line).not.toBeNull();
      expect(Math.abs((m.line as number) - m.y)).toBeLessThanOrEqual(0.1);
    }
    expect(svg.querySelectorAll('polyline[data-extension]')).toHaveLength(2); // x = 4 and x = 3000
  });
});

describe('placeLabels', () => {
  const bounds: IBox = { x0: 0, y0: 0, x1: 100, y1: 100 };

  it('takes the first free spot, then leaves a label out when every spot is taken', () => {
    const taken: IBox[] = [];
    const spots = [
      { x: 10, y: 20, anchor: 'start' as const },
      { x: 10, y: 60, anchor: 'start' as const }
    ];
    const placed = placeLabels(
      [
        { text: 'first', spots },
        { text: 'second', spots },
        { text: 'third', spots }
      ],
      bounds,
      taken
    );
    expect(placed).toEqual([spots[0], spots[1], null]);
    expect(taken).toHaveLength(2);
  });

  it('keeps labels inside the bounds and off the obstacles while it can', () => {
    const obstacle: IBox = { x0: 0, y0: 10, x1: 100, y1: 25 };
    const spots = [
      { x: 95, y: 50, anchor: 'start' as const }, // sticks out on the right
      { x: 10, y: 20, anchor: 'start' as const }, // on the obstacle
      { x: 10, y: 60, anchor: 'start' as const }
    ];
    expect(placeLabels([{ text: 'label', spots }], bounds, [], [obstacle])).toEqual([spots[2]]);
    // With no spot off the obstacles, overlapping an obstacle beats leaving the label out.
    expect(placeLabels([{ text: 'label', spots: spots.slice(0, 2) }], bounds, [], [obstacle])).toEqual([
      spots[1]
    ]);
  });
});

describe('valueOnSeries', () => {
  const series = {
    id: 's',
    label: 's',
    colorClass: 'c',
    axis: 'left' as const,
    points: [
      { x: 2, y: 10 },
      { x: 8, y: 40 },
      { x: 16, y: null },
      { x: 32, y: 100 }
    ]
  };

  it('interpolates as the line is drawn: linear in x, or in log2 x on a log axis', () => {
    expect(valueOnSeries(series, 4, false)).toBeCloseTo(20);
    expect(valueOnSeries(series, 4, true)).toBeCloseTo(25); // halfway between 2 and 8 in log2
    expect(valueOnSeries({ ...series, linearBetweenPoints: true }, 4, true)).toBeCloseTo(20);
  });

  it('extends the end segments beyond the data, and bridges gaps', () => {
    expect(valueOnSeries(series, 1, false)).toBeCloseTo(5);
    expect(valueOnSeries(series, 64, false)).toBeCloseTo(100 + 32 * (60 / 24));
    expect(valueOnSeries(series, 20, false)).toBeCloseTo(40 + 12 * (60 / 24));
    expect(valueOnSeries({ ...series, points: [] }, 4, false)).toBeNull();
    expect(valueOnSeries({ ...series, points: [{ x: 3, y: 7 }] }, 4, false)).toBe(7);
  });
});
