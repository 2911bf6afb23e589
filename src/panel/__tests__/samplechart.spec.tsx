/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * The panel's chart of recent samples: a legend of the series that have data, labels drawn at the theme's font
 * size whatever the sidebar's width, "Open full size", and the full-size chart in the main area, live.
 */
import '../../__tests__/domshim';

import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { OPEN_SAMPLE_CHART_COMMAND } from '../../commandids';
import { deviceKey } from '../../channel/sample';
import { INITIAL_STATE } from '../../channel/state';
import { LABEL_FONT_SIZE } from '../../ui/chartlabels';
import { untranslated } from '../../ui/i18n';
import { DEFAULT_SETTINGS } from '../../settings';
import type { IGpuMemModel } from '../../tokens';
import type { ISample } from '../../wire/protocol';
import { type ISampleChartProps, SampleChart, sampleChartFrame } from '../samplechart';
import { LiveSampleChart } from '../livesamplechart';
import * as fx from '../../__tests__/fixtures';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

let host: HTMLElement;
let root: Root;

beforeEach(() => {
  host = document.createElement('div');
  document.body.appendChild(host);
  root = createRoot(host);
});

afterEach(() => {
  act(() => root.unmount());
  host.remove();
});

const PROPS: Omit<ISampleChartProps, 'samples'> = {
  deviceKey: deviceKey(fx.device0()),
  windowSeconds: 600,
  warnThreshold: 85,
  unit: 'GiB',
  trans: untranslated,
  caption: 'cuda:0'
};

function samples(n: number, withTorch = true): ISample[] {
  return Array.from({ length: n }, (_, i) => {
    const s = fx.sample(i + 1, 1700000000 + i);
    if (withTorch) {
      return s;
    }
    return { ...s, gpu: { ...s.gpu, devices: s.gpu.devices.map(d => ({ ...d, allocator: null })) } };
  });
}

function legend(node: ParentNode): string[] {
  return [...node.querySelectorAll('.jp-GpuMem-chartLegendItem')].map(li => li.textContent ?? '');
}

describe('the sample chart', () => {
  it('lists only the series that have data in its legend', () => {
    act(() => root.render(<SampleChart samples={samples(3)} {...PROPS} />));
    expect(legend(host)).toEqual(['device used', 'reserved', 'allocated', 'peak allocated']);
    // A kernel that has not imported torch: NVML's figure only, no allocator lines to list.
    act(() => root.render(<SampleChart samples={samples(3, false)} {...PROPS} />));
    expect(legend(host)).toEqual(['device used']);
    expect(host.querySelectorAll('polyline.jp-GpuMem-line-reserved')).toHaveLength(0);
  });

  it('sizes its drawing so that labels come out at the font size, whatever the width', () => {
    for (const [width, fontPx] of [
      [240, 11],
      [320, 11],
      [900, 13]
    ]) {
      const frame = sampleChartFrame(width, 160, fontPx);
      // the SVG is drawn `width` px wide: one user unit is width / frame.width px
      expect((LABEL_FONT_SIZE * width) / frame.width).toBeCloseTo(fontPx, 5);
      expect((frame.height * width) / frame.width).toBeCloseTo(160, 5);
    }
  });

  it('offers "Open full size" in the sidebar through the command linker, not in the main area', () => {
    act(() => root.render(<SampleChart samples={samples(3)} {...PROPS} />));
    const open = host.querySelector<HTMLButtonElement>('button.jp-GpuMem-openFull');
    expect(open?.textContent).toBe('Open full size');
    expect(open?.dataset.commandlinkerCommand).toBe(OPEN_SAMPLE_CHART_COMMAND);
    act(() => root.render(<SampleChart full samples={samples(3)} {...PROPS} />));
    expect(host.querySelector('button.jp-GpuMem-openFull')).toBeNull();
    expect(host.querySelector('button.jp-GpuMem-downloadCsv')).not.toBeNull();
  });
});

/** A model whose samples the test sets, and tells its views with `changed`. */
function liveModel(): IGpuMemModel & { history: ISample[]; latest: ISample | null } {
  return {
    state: { ...INITIAL_STATE, name: 'live' },
    latest: null,
    history: [],
    settings: { ...DEFAULT_SETTINGS },
    changed: new Signal<unknown, void>({})
  } as unknown as IGpuMemModel & { history: ISample[]; latest: ISample | null };
}

describe('the full-size chart', () => {
  it('follows the samples as they come, with no "Open full size" of its own', () => {
    const model = liveModel();
    const draw = (): void => act(() => root.render(<LiveSampleChart model={model} trans={untranslated} />));
    draw();
    expect(host.querySelector('.jp-GpuMem-sampleChart svg')).toBeNull();
    const first = samples(3);
    model.history = first;
    model.latest = first[2];
    draw();
    expect(host.querySelector('.jp-GpuMem-sampleChart svg')).not.toBeNull();
    expect(host.querySelector('.jp-GpuMem-chartCaption')?.textContent).toBe('Last 10 min · cuda:0');
    expect(host.querySelector('.jp-GpuMem-sampleChartBox.jp-mod-full')).not.toBeNull();
    expect(host.querySelector('button.jp-GpuMem-openFull')).toBeNull();
    const before = host.querySelector('polyline.jp-GpuMem-line-used')?.getAttribute('points');
    const more = samples(6);
    more[5].gpu.devices[0].used = (more[5].gpu.devices[0].used ?? 0) / 2;
    model.history = more;
    model.latest = more[5];
    draw();
    expect(host.querySelector('polyline.jp-GpuMem-line-used')?.getAttribute('points')).not.toBe(before);
  });

  it('says why there is no chart without a GPU, or without a kernel', () => {
    const model = liveModel();
    model.latest = fx.noGpuSample();
    act(() => root.render(<LiveSampleChart model={model} trans={untranslated} />));
    expect(host.textContent).toContain('No NVIDIA GPU visible to this kernel');
    const none = { ...model, state: { ...INITIAL_STATE, name: 'no-kernel' as const }, latest: null };
    act(() => root.render(<LiveSampleChart model={none} trans={untranslated} />));
    expect(host.querySelector('.jp-GpuMem-sampleChartNone')?.textContent).not.toBe('');
  });
});
