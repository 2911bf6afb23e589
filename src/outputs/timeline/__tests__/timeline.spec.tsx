/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * The memory timeline output: its geometry (bands stacked as memory_viz stacks them), the rendered view
 * (peak, table, tooltip, stack, keyboard), escaping, an invalid payload, the downloads and their failures,
 * with payloads made by makepayload.ts (checked against the schema with Ajv, as the kernel's are).
 */
import '../../../__tests__/domshim';

import { act } from 'react';

import { harness, HOSTILE, type IHarness, mutate } from '../../../__tests__/analysisfixtures';
import { kernelRule } from '../../../wire/__tests__/schemaajv';
import type { ITimelineFile } from '../../../tokens';
import { type ITimelinePayload, TIMELINE_MIME, timelinePayloadProblem } from '../../../wire/analysispayload';
import { bottomAt, timelineGeometry } from '../geometry';
import { clampRange, eventTicks, LEFT, PLOT_H, PLOT_W, zoomed } from '../plot';
import { csvField, shownCsv } from '../text';
import { makePayload, maximumPayload } from './makepayload';

function tiny(): ITimelinePayload {
  // A (100 B, events 0..3) under B (50 B, events 1..6) under C (30 B, events 2..): A's free drops B and C.
  return {
    ...makePayload({ layers: 1, smallPerLayer: 0, reserved: false }),
    baseline: 0,
    end: 8,
    bands: [
      { size: 100, category: 'parameter', start: 0, end: 3, stack: 0 },
      { size: 50, category: 'activation', start: 1, end: 6, stack: 0 },
      { size: 30, category: 'gradient', start: 2, end: null, stack: 0 }
    ],
    small: [],
    reserved: null,
    peak: { bytes: 180, at: 2, reserved: null },
    alive_at_peak: [
      { size: 100, count: 1, category: 'parameter', stack: 0, rest: false },
      { size: 50, count: 1, category: 'activation', stack: 0, rest: false },
      { size: 30, count: 1, category: 'gradient', stack: 0, rest: false }
    ]
  };
}

/** After the next animation frame (the view applies pans and zooms once per frame). */
function nextFrame(): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, 50));
}

/** A blob's text (jsdom's Blob has no text()). */
function textOf(blob: Blob): Promise<string> {
  return new Promise(resolve => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.readAsText(blob);
  });
}

/** The polygon's points as [x, y] pairs. */
function pairs(points: string): Array<[number, number]> {
  return points.split(' ').map(p => p.split(',').map(Number) as [number, number]);
}

describe('the fixtures', () => {
  it.each([
    ['default', makePayload()],
    [
      'recorded, failed, in a file',
      makePayload({ source: 'recorded', failed: true, inCells: false, baseline: 1 << 20 })
    ],
    ['maximum', maximumPayload()]
  ])('%s fits the schema as the kernel must write it', (_, payload) => {
    expect(kernelRule('timeline.schema.json', payload)).toBe(true);
    expect(timelinePayloadProblem(payload)).toBeNull();
  });

  it('the maximum payload is at the limits, and its table sums to the peak', () => {
    const p = maximumPayload();
    expect(p.bands.length).toBeGreaterThan(3990);
    expect(p.bands.length).toBeLessThanOrEqual(4000);
    expect(p.small.length).toBeGreaterThan(3990);
    expect(p.alive_at_peak.length).toBe(201);
    expect(p.alive_at_peak[200].rest).toBe(true);
    expect(p.alive_at_peak.reduce((s, h) => s + h.size, 0)).toBe(p.peak.bytes);
  });
});

describe('geometry', () => {
  it('stacks each band on what is alive, and drops it when a band below is freed', () => {
    const g = timelineGeometry(tiny(), 100);
    const [a, b, c] = g.bands;
    expect(a.steps).toEqual([{ x: 0, bottom: 0 }]);
    expect(b.steps).toEqual([
      { x: 1, bottom: 100 },
      { x: 3, bottom: 0 }
    ]);
    expect(c.steps).toEqual([
      { x: 2, bottom: 150 },
      { x: 3, bottom: 50 },
      { x: 6, bottom: 0 }
    ]);
    expect(bottomAt(b, 2)).toBe(100);
    expect(bottomAt(b, 3)).toBe(0);
    expect(bottomAt(b, 6)).toBeNull();
    expect(c.end).toBe(8);
    // In plot units: B's bottom edge lies higher (smaller y) before A's free than after it.
    const ys = (x: number): number[] =>
      pairs(b.points)
        .filter(([px]) => px === x)
        .map(([, y]) => y);
    const before = Math.max(...ys(1));
    const after = Math.max(...ys(6));
    expect(before).toBeLessThan(after);
    expect(after).toBeCloseTo(100, 5); // on the x axis
    expect(g.top).toBe(180);
  });

  it('puts the small areas on top of the bands and keeps the peak total', () => {
    const p = makePayload({ layers: 4, smallPerLayer: 2, baseline: 1000 });
    const g = timelineGeometry(p, 100);
    expect(Math.max(...g.totals.map(t => t[1]))).toBe(p.peak.bytes);
    const atPeak = g.totals.filter(t => t[0] <= p.peak.at).pop();
    expect(atPeak?.[1]).toBe(p.peak.bytes);
    expect(g.small.map(s => s.category)).toEqual(['activation']);
    expect(g.baseline).not.toBeNull();
    expect(g.reserved).not.toBeNull();
  });

  it('computes the geometry of the maximum payload and reports the time', () => {
    const p = maximumPayload();
    const t0 = performance.now();
    const g = timelineGeometry(p, PLOT_H);
    const ms = performance.now() - t0;
    expect(g.bands).toHaveLength(p.bands.length);
    console.log(
      `timeline geometry of ${p.bands.length} bands and ${p.small.length} small points: ${ms.toFixed(1)} ms`
    );
  });

  it('zooms around a point and pans within the timeline', () => {
    expect(zoomed([0, 1000], 0.5, 500, 1000)).toEqual([250, 750]);
    expect(zoomed([0, 1000], 0.5, 0, 1000)).toEqual([0, 500]);
    expect(zoomed([250, 750], 4, 500, 1000)).toEqual([0, 1000]);
    expect(clampRange(-50, 100, 1000)).toEqual([0, 100]);
    expect(clampRange(950, 100, 1000)).toEqual([900, 1000]);
    expect(eventTicks(0, 1000)).toEqual([0, 200, 400, 600, 800, 1000]);
    expect(eventTicks(3, 7)).toEqual([3, 4, 5, 6, 7]);
  });
});

describe('csv', () => {
  it('quotes and defuses fields', () => {
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField('say "x"')).toBe('"say ""x"""');
    expect(csvField('=1+2')).toBe("'=1+2");
    expect(csvField(-5)).toBe('-5');
    expect(csvField(null)).toBe('');
  });

  it('has one row per band, the small steps, and the peak', () => {
    const p = makePayload({ layers: 2, smallPerLayer: 1 });
    const lines = shownCsv(p).trim().split('\r\n');
    expect(lines[0]).toBe('kind,size_bytes,category,start_event,end_event,source,function,file,line');
    expect(lines.filter(l => l.startsWith('band,'))).toHaveLength(p.bands.length);
    expect(lines.filter(l => l.startsWith('small,'))).toHaveLength(
      p.small.filter(s => s.bytes.activation > 0).length
    );
    expect(lines[lines.length - 1]).toBe(`peak,${p.peak.bytes},,${p.peak.at},,,,,`);
  });
});

describe('the view', () => {
  let h: IHarness;
  let exported: Array<{ id: string; format: string }>;
  let saved: Array<{ blob: Blob; name: string }>;
  let answer: () => Promise<ITimelineFile>;

  beforeEach(() => {
    exported = [];
    saved = [];
    answer = () => Promise.reject(new Error('unset'));
    h = harness(TIMELINE_MIME, {
      exportTimeline: (id, format) => {
        exported.push({ id, format });
        return answer();
      },
      save: (blob, name) => void saved.push({ blob, name })
    });
  });
  afterEach(() => h.dispose());

  async function click(element: Element | null): Promise<void> {
    expect(element).not.toBeNull();
    await act(async () => {
      element!.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    });
  }

  it('says recorded or predicted, the title and the device', async () => {
    await h.render(makePayload({ source: 'recorded' }));
    expect(h.node.querySelector('.jp-GpuMem-richTitle')?.textContent).toBe('Memory timeline · In [5]');
    expect(h.node.querySelector('.jp-GpuMem-richBadge')?.textContent).toBe('recorded');
    expect(h.node.querySelector('.jp-GpuMem-richFacts')?.textContent).toContain(
      'NVIDIA H100 80GB HBM3 (cuda:0)'
    );
    await h.render(makePayload());
    expect(h.node.querySelector('.jp-GpuMem-richBadge')?.textContent).toBe('predicted');
  });

  it('draws one band per allocation, coloured by category, with a legend', async () => {
    const p = makePayload({ layers: 3 });
    await h.render(p);
    const bands = h.node.querySelectorAll('polygon.jp-GpuMem-tlBand');
    expect(bands).toHaveLength(p.bands.length);
    expect(bands[0].getAttribute('class')).toContain('jp-GpuMem-tl-parameter');
    expect([...h.node.querySelectorAll('[data-category]')].map(e => e.getAttribute('data-category'))).toEqual(
      ['parameter', 'gradient', 'optimizer_state', 'activation', 'input', 'other']
    );
    expect(h.node.querySelector('[data-small="activation"]')).not.toBeNull();
    expect(h.node.querySelector('.jp-GpuMem-tlReserved')).not.toBeNull();
  });

  it('marks the peak at peak.at with its value', async () => {
    const p = makePayload({ layers: 5 });
    await h.render(p);
    const peak = h.node.querySelector('.jp-GpuMem-tlPeak');
    expect(peak?.getAttribute('data-at')).toBe(String(p.peak.at));
    const g = timelineGeometry(p, PLOT_H);
    expect(Number(peak?.getAttribute('data-x'))).toBeCloseTo(LEFT + (p.peak.at / g.end) * PLOT_W, 1);
    expect(peak?.querySelector('text')?.textContent).toMatch(/^peak \d+(\.\d+)? MiB$/);
  });

  it('lists what is alive at the peak, largest first, summing to the peak', async () => {
    const p = maximumPayload();
    await h.render(p);
    const rows = [...h.node.querySelectorAll('.jp-GpuMem-tlTable tbody tr')];
    expect(rows).toHaveLength(201);
    const sizes = rows.map(r => Number(r.getAttribute('data-size')));
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(p.peak.bytes);
    expect(sizes.slice(0, 200)).toEqual([...sizes.slice(0, 200)].sort((a, b) => b - a));
    expect(rows[200].textContent).toContain('the rest');
    expect(h.node.querySelector('.jp-GpuMem-tlTable tfoot')?.textContent).toContain('100.0%');
    const first = rows[0].querySelectorAll('td');
    expect(first[4].textContent).toMatch(/^In \[\d+\], line \d+, in \S+$/);
  });

  it('shows a tooltip on hover and the full stack on click, your frames first', async () => {
    const p = makePayload({ layers: 3 });
    await h.render(p);
    const band = h.node.querySelector('[data-band="4"]') as SVGElement;
    await act(async () => {
      band.dispatchEvent(new MouseEvent('pointerover', { bubbles: true, clientX: 10, clientY: 10 }));
    });
    const tip = h.node.querySelector('.jp-GpuMem-tlTooltip');
    expect(tip?.textContent).toContain('activations');
    expect(tip?.textContent).toContain('In [4], line 10, in forward');
    await click(band);
    const stack = h.node.querySelector('.jp-GpuMem-tlStack');
    expect(stack?.querySelector('.jp-GpuMem-richSectionTitle')?.textContent).toMatch(
      /of activations, allocated at event 4, freed at/
    );
    expect([...stack!.querySelectorAll('li.jp-GpuMem-tlFrame-user')].map(li => li.textContent)).toEqual([
      'In [4], line 10, in forward',
      'In [9], line 1, in <module>'
    ]);
    expect(stack?.querySelector('summary')?.textContent).toBe('2 library frames');
    expect(h.node.querySelector('.jp-GpuMem-tlSelected')?.getAttribute('data-selected')).toBe('4');
  });

  it('selects with the keyboard: Enter on a band or a row, arrows move between bands', async () => {
    await h.render(makePayload({ layers: 3 }));
    const first = h.node.querySelector('[data-band="0"]') as SVGElement;
    expect(first.getAttribute('tabindex')).toBe('0');
    expect(first.getAttribute('role')).toBe('button');
    expect(first.getAttribute('aria-label')).toMatch(/of parameters, In \[3\], line 4, in __init__$/);
    await act(async () => {
      first.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowRight', bubbles: true }));
    });
    const second = h.node.querySelector('[data-band="1"]') as SVGElement;
    expect(second.getAttribute('tabindex')).toBe('0');
    expect(first.getAttribute('tabindex')).toBe('-1');
    await act(async () => {
      second.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    });
    expect(h.node.querySelector('.jp-GpuMem-tlSelected')?.getAttribute('data-selected')).toBe('1');
    const row = h.node.querySelector('.jp-GpuMem-tlTable tbody tr') as HTMLElement;
    expect(row.tabIndex).toBe(0);
    await act(async () => {
      row.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
    });
    expect(row.getAttribute('aria-selected')).toBe('true');
    expect(h.node.querySelector('.jp-GpuMem-tlStack')?.textContent).toContain('alive at the peak');
    expect(h.node.querySelectorAll('.jp-GpuMem-tlHighlight').length).toBeGreaterThan(0);
  });

  it('zooms with the wheel, pans with a drag, and resets', async () => {
    // jsdom's requestAnimationFrame never fires here: frames as timers.
    const raf = jest
      .spyOn(window, 'requestAnimationFrame')
      .mockImplementation(cb => window.setTimeout(() => cb(performance.now()), 0));
    const p = makePayload({ layers: 10 });
    await h.render(p);
    const end = timelineGeometry(p, PLOT_H).end;
    const plot = h.node.querySelector('.jp-GpuMem-tlPlot') as HTMLElement;
    const axes = h.node.querySelector('svg.jp-GpuMem-tlSvg') as SVGElement;
    const range = (): number[] => [
      Number(axes.getAttribute('data-lo')),
      Number(axes.getAttribute('data-hi'))
    ];
    expect(range()).toEqual([0, end]);
    expect(h.node.querySelector('.jp-GpuMem-tlReset')).toBeNull();
    // jsdom lays nothing out: one CSS pixel is one SVG unit, and the plot starts at LEFT.
    await act(async () => {
      plot.dispatchEvent(
        new WheelEvent('wheel', { deltaY: -300, clientX: LEFT + PLOT_W / 2, bubbles: true })
      );
      // The zoom applies at the next frame (a timer here): wait for it, as after the drag below.
      await nextFrame();
    });
    const [lo, hi] = range();
    expect(hi - lo).toBeCloseTo(end / Math.E, 0);
    expect((lo + hi) / 2).toBeCloseTo(end / 2, 0);
    const drawn = h.node.querySelector('svg.jp-GpuMem-tlDrawn') as SVGElement;
    expect(drawn.style.transform).toMatch(/^translateX\(-\d+\.\d+%\)$/);
    await act(async () => {
      plot.dispatchEvent(new MouseEvent('pointerdown', { clientX: 300, button: 0, bubbles: true }));
      plot.dispatchEvent(new MouseEvent('pointermove', { clientX: 300 + PLOT_W / 4, bubbles: true }));
      plot.dispatchEvent(new MouseEvent('pointerup', { clientX: 300 + PLOT_W / 4, bubbles: true }));
      await nextFrame();
    });
    const [lo2, hi2] = range();
    expect(hi2 - lo2).toBeCloseTo(hi - lo, 0);
    expect(lo2).toBeCloseTo(lo - (hi - lo) / 4, 0);
    await act(async () => {
      h.node.querySelector('.jp-GpuMem-tlReset')?.dispatchEvent(new MouseEvent('click', { bubbles: true }));
      await nextFrame();
    });
    expect(range()).toEqual([0, end]);
    raf.mockRestore();
  });

  it('renders file names and kernel strings as text, never HTML', async () => {
    const p = makePayload({ layers: 2, inCells: false, userFile: HOSTILE, notes: [HOSTILE], failed: true });
    p.title = HOSTILE;
    await h.render(p);
    await click(h.node.querySelector('[data-band="3"]'));
    expect(h.node.querySelector('img')).toBeNull();
    expect(h.node.querySelector('.jp-GpuMem-tlStack')?.textContent).toContain(`${HOSTILE}:`);
    expect(h.node.querySelector('.jp-GpuMem-tlNote')?.textContent).toBe(HOSTILE);
    expect(h.node.querySelector('.jp-GpuMem-richTitle')?.textContent).toContain(HOSTILE);
  });

  it('says which allocation failed, and the notes one line each', async () => {
    await h.render(makePayload({ failed: true, notes: ['a', 'b'] }));
    expect(h.node.querySelector('.jp-GpuMem-tlFailed')?.textContent).toMatch(
      /^The allocation that failed: 20\.0 GiB \(free on device: 3\.00 GiB\) — In \[5\], line 6, in <module>$/
    );
    expect([...h.node.querySelectorAll('.jp-GpuMem-tlNote')].map(n => n.textContent)).toEqual(['a', 'b']);
  });

  it('shows one line naming the field for a payload that does not fit', async () => {
    await h.render(mutate(makePayload(), 'bands.0.size', -1));
    const line = h.node.querySelector('.jp-GpuMem-invalid');
    expect(line?.textContent).toMatch(/does not match its schema \(timeline\.bands\[0\]\.size: .*\)$/);
    expect(h.node.querySelector('svg')).toBeNull();
    await h.render({ version: 1 });
    expect(h.node.querySelectorAll('.jp-GpuMem-invalid')).toHaveLength(1);
  });

  it('downloads the kernel file', async () => {
    const text = 'kind,size\nband,1\n';
    answer = () =>
      Promise.resolve({
        id: 'tl-0123456789abcdef',
        format: 'csv',
        filename: 'gpumem-timeline-tl-0123456789abcdef.csv',
        media_type: 'text/csv',
        data: btoa(text),
        bytes: text.length
      });
    await h.render(makePayload());
    await click(h.node.querySelector('[data-format="csv"]'));
    expect(exported).toEqual([{ id: 'tl-0123456789abcdef', format: 'csv' }]);
    expect(saved.map(s => s.name)).toEqual(['gpumem-timeline-tl-0123456789abcdef.csv']);
    expect(saved[0].blob.size).toBe(text.length);
    expect(saved[0].blob.type).toBe('text/csv');
    expect(h.node.querySelector('.jp-GpuMem-tlExportProblem')).toBeNull();
  });

  it('says in one line when the kernel no longer holds the timeline, and offers the CSV of what is shown', async () => {
    answer = () =>
      Promise.reject(
        new Error('this kernel no longer holds timeline tl-0123456789abcdef (it restarted)\nmore')
      );
    const p = makePayload();
    await h.render(p);
    await click(h.node.querySelector('[data-format="snapshot"]'));
    expect(exported).toEqual([{ id: p.id, format: 'snapshot' }]);
    expect(saved).toEqual([]);
    const problem = h.node.querySelector('.jp-GpuMem-tlExportProblem');
    expect(problem?.textContent).toBe(
      'this kernel no longer holds timeline tl-0123456789abcdef (it restarted)'
    );
    await click(h.node.querySelector('.jp-GpuMem-tlDownloadShown'));
    expect(saved.map(s => s.name)).toEqual(['gpumem-timeline-tl-0123456789abcdef-shown.csv']);
    expect(await textOf(saved[0].blob)).toBe(shownCsv(p));
  });

  it('without a host, says there is no kernel connection', async () => {
    h.dispose();
    h = harness(TIMELINE_MIME, { save: (blob, name) => void saved.push({ blob, name }) });
    await h.render(makePayload());
    await click(h.node.querySelector('[data-format="csv"]'));
    expect(h.node.querySelector('.jp-GpuMem-tlExportProblem')?.textContent).toBe(
      'No kernel connection here: open the notebook in JupyterLab'
    );
    expect(h.node.querySelector('.jp-GpuMem-tlDownloadShown')).not.toBeNull();
  });

  it('renders the maximum payload once and reports the time', async () => {
    const p = maximumPayload();
    const t0 = performance.now();
    await h.render(p);
    const ms = performance.now() - t0;
    expect(h.node.querySelectorAll('polygon.jp-GpuMem-tlBand')).toHaveLength(p.bands.length);
    console.log(`first render of the maximum payload in jsdom: ${ms.toFixed(0)} ms`);
  });
});
