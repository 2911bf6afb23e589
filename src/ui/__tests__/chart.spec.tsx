/**
 * The shared chart: what the timeline needs (fixed ranges, gaps, a threshold with only a tooltip, tick
 * anchors) and what the outputs need (axes from the data, byte ticks in one unit).
 */
import * as React from 'react';
import { act } from 'react';
import { createRoot } from 'react-dom/client';

import { Chart } from '../chart';
import { byteAxis, linearTicks, log2Ticks } from '../chartscales';
import { type IChartProps, SIDEBAR_FRAME } from '../charttypes';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const GIB = 1024 ** 3;

function render(props: IChartProps): HTMLElement {
  const node = document.createElement('div');
  act(() => createRoot(node).render(<Chart {...props} />));
  return node;
}

const base: IChartProps = {
  caption: 'caption',
  ariaLabel: 'chart',
  x: { label: 'x', format: v => String(v) },
  left: { label: 'y', format: v => String(v) },
  series: []
};

describe('Chart', () => {
  it('breaks a line where a value is missing, and draws no dots when asked not to', () => {
    const node = render({
      ...base,
      series: [
        {
          id: 'used',
          label: 'used',
          colorClass: 'c',
          axis: 'left',
          dots: false,
          points: [
            { x: 1, y: 1 },
            { x: 2, y: 2 },
            { x: 3, y: null },
            { x: 4, y: 1 }
          ]
        }
      ]
    });
    const lines = [...node.querySelectorAll('polyline[data-series="used"]')];
    expect(lines.map(l => l.getAttribute('points')?.split(' ').length)).toEqual([2, 2]); // one point doubled
    expect(node.querySelectorAll('circle.jp-GpuMem-chartDot')).toHaveLength(0);
  });

  it('keeps fixed ranges, draws values beyond them at the edge, and anchors tick labels', () => {
    const node = render({
      ...base,
      frame: SIDEBAR_FRAME,
      x: {
        format: String,
        domain: [100, 200],
        ticks: (lo, hi) => [
          { value: lo, label: 'start', anchor: 'start' },
          { value: hi, label: 'now', anchor: 'end' }
        ]
      },
      left: {
        format: String,
        domain: [0, 10],
        ticks: (lo, hi) => [lo, hi].map(v => ({ value: v, label: `${v}` }))
      },
      series: [
        {
          id: 's',
          label: 's',
          colorClass: 'c',
          axis: 'left',
          points: [
            { x: 50, y: 20 },
            { x: 200, y: 5 }
          ]
        }
      ]
    });
    // plot: x from 46 to 294, y from 6 (10) to 112 (0)
    expect(node.querySelector('polyline')?.getAttribute('points')).toBe('46.0,6.0 294.0,59.0');
    const labels = [...node.querySelectorAll('text.jp-GpuMem-chartAxis')].map(t => [
      t.textContent,
      t.getAttribute('text-anchor')
    ]);
    expect(labels).toEqual([
      ['0', 'end'],
      ['10', 'end'],
      ['start', 'start'],
      ['now', 'end']
    ]);
    expect(node.querySelectorAll('.jp-GpuMem-chartAxisLabel')).toHaveLength(0);
  });

  it('shows a quiet rule as a line with a tooltip only', () => {
    const node = render({
      ...base,
      rules: [
        { id: 'warn', y: 5, axis: 'left', label: 'warning threshold', className: 'w', quiet: true },
        { id: 'limit', y: 8, axis: 'left', label: 'limit', className: 'l' }
      ]
    });
    const warn = node.querySelector('[data-rule="warn"]');
    expect(warn?.querySelector('line')).not.toBeNull();
    expect(warn?.querySelector('text')).toBeNull();
    expect(warn?.querySelector('title')?.textContent).toBe('warning threshold');
    const legend = [...node.querySelectorAll('.jp-GpuMem-chartLegendItem')].map(li => li.textContent);
    expect(legend).toEqual(['limit']);
  });
});

describe('axes', () => {
  it('labels byte ticks in the unit of the largest value', () => {
    const ticks = byteAxis('memory').ticks?.(0, 10 * GIB) ?? [];
    expect(ticks.map(t => t.label)).toEqual(['0', '2.5 GiB', '5.0 GiB', '7.5 GiB', '10.0 GiB']);
    expect(byteAxis('memory').format(300 * 1024 ** 2)).toBe('300.0 MiB');
  });

  it('steps round numbers and powers of two', () => {
    expect(linearTicks(100)).toEqual([0, 25, 50, 75, 100]);
    expect(log2Ticks(3, 70)).toEqual([4, 8, 16, 32, 64]);
  });
});
