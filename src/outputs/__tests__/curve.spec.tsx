/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * The x axis of the analysis chart: batch sizes are whole numbers, so its ticks are whole numbers at their own
 * places, each label once, with the maximum pick on a tick of its own.
 */
import '../../__tests__/domshim';

import { batchSizeTicks } from '../kit';
import { ANALYSIS_MIME } from '../renderers';
import { fixture, harness, type IHarness, type Json, mutate } from '../../__tests__/analysisfixtures';

let h: IHarness;

afterEach(() => h?.dispose());

/** The x ticks the chart drew: the tick line's x and its label ('' where the label gave way). */
function xTicks(node: HTMLElement): Array<{ x: number; label: string }> {
  return [...node.querySelectorAll('.jp-GpuMem-analysisChart svg line.jp-GpuMem-chartTick')].map(line => ({
    x: Number(line.getAttribute('x1')),
    label: line.parentElement?.querySelector('text')?.textContent ?? ''
  }));
}

/** An analysis of batch sizes 1 to 8 (a linear axis), whose maximum is `maximum`. */
function smallCurve(maximum: number): Json {
  let data = fixture('analysis_accum');
  const point = (data.curve as Json[])[0];
  const curve = [1, 2, 4, 6, 8].map(b => ({ ...point, batch_size: b, peak_bytes: 5e8 + b * 1e8 }));
  data = mutate(data, 'curve', curve);
  data = mutate(data, 'recommendations.maximum', maximum);
  data = mutate(data, 'recommendations.recommended', Math.max(1, maximum - 2));
  data = mutate(data, 'recommendations.safe', 1);
  return mutate(data, 'recommendations.current.batch_size', 2);
}

describe('batchSizeTicks', () => {
  it('puts whole batch sizes on a linear axis, never 2.5 labelled "3"', () => {
    const ticks = batchSizeTicks(0, 8 * 1.04, false);
    expect(ticks.map(t => t.value)).toEqual([0, 2, 4, 6, 8]);
    expect(ticks.map(t => t.label)).toEqual(['0', '2', '4', '6', '8']);
  });

  it('prints "1" once on the axis of a single batch size', () => {
    const labels = batchSizeTicks(0, 1.04, false, [1]).map(t => t.label);
    expect(labels).toEqual([...new Set(labels)]);
    expect(labels.filter(l => l === '1')).toHaveLength(1);
  });

  it('gives the maximum a tick of its own and drops the regular ticks beside it', () => {
    const ticks = batchSizeTicks(0, 8 * 1.04, false, [7]);
    expect(ticks[0]).toEqual({ value: 7, label: '7' });
    expect(ticks.map(t => t.value).sort((a, b) => a - b)).toEqual([0, 2, 4, 7]);
  });

  it('puts powers of two from 1 on a log axis, with the maximum among them', () => {
    const ticks = batchSizeTicks(0.7, 300, true, [231]);
    for (const t of ticks) {
      expect(Number.isInteger(t.value)).toBe(true);
      expect(t.value).toBeGreaterThanOrEqual(1);
    }
    expect(ticks.map(t => t.label)).toContain('231');
    expect(ticks.map(t => t.label)).not.toContain('256');
  });
});

describe('the analysis chart', () => {
  it.each([7, 8, 5])('draws integer x ticks, each once, the maximum (%i) on its tick', async maximum => {
    h = harness(ANALYSIS_MIME);
    await h.render(smallCurve(maximum));
    const ticks = xTicks(h.node);
    const labels = ticks.map(t => t.label).filter(l => l !== '');
    expect(labels.length).toBeGreaterThanOrEqual(3);
    expect(labels.every(l => /^\d+$/.test(l))).toBe(true);
    expect(labels).toEqual([...new Set(labels)]);
    const marker = h.node.querySelector('.jp-GpuMem-chartMarker[data-kind="maximum"]');
    const onTick = ticks.find(t => t.label === String(maximum));
    expect(onTick).toBeDefined();
    expect(Number(marker?.getAttribute('data-x'))).toBeCloseTo(onTick?.x ?? NaN, 1);
  });

  it('labels the maximum of a real analysis on a log axis', async () => {
    h = harness(ANALYSIS_MIME);
    await h.render(fixture('analysis_accum'));
    const labels = xTicks(h.node).map(t => t.label);
    expect(labels).toContain('231');
    expect(labels.filter(l => l !== '').every(l => /^[\d,]+$/.test(l))).toBe(true);
  });
});
