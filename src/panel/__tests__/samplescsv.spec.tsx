import * as React from 'react';
import { act } from 'react';
import { createRoot } from 'react-dom/client';

import { untranslated } from '../../ui/i18n';
import { deviceKey } from '../../channel/sample';
import type { ISample } from '../../wire/protocol';
import { SampleChart } from '../samplechart';
import { CSV_COLUMNS, csvFilename, downloadSamplesCsv, sampleRows, samplesCsv } from '../samplescsv';
import * as fx from '../../__tests__/fixtures';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

function noGpu(time: number): ISample {
  const s = fx.sample(1, time);
  return { ...s, gpu: { ...s.gpu, available: false, reason: 'no NVML', devices: [] } };
}

describe('the samples CSV', () => {
  it('has the kernel log columns and one row per sample and device', () => {
    const samples = [fx.sample(1, 1700000000.1234), fx.sample(2, 1700000001.5)];
    const lines = samplesCsv(samples).split('\n');
    expect(lines[0]).toBe(CSV_COLUMNS.join(','));
    expect(lines).toHaveLength(1 + 2 * 2 + 1); // header, 2 samples × 2 devices, the final newline
    expect(lines[lines.length - 1]).toBe('');
    const d0 = fx.device0();
    const row = lines[1].split(',');
    expect(row).toHaveLength(CSV_COLUMNS.length);
    expect(row.slice(0, 3)).toEqual(['2023-11-14T22:13:20.123Z', '1700000000.123', `cuda:${d0.cuda_index}`]);
    expect(row.slice(3)).toEqual(
      [
        d0.used,
        d0.total,
        d0.allocator?.allocated,
        d0.allocator?.reserved,
        d0.allocator?.peak_allocated,
        d0.util_gpu,
        d0.util_mem,
        3 * fx.GIB
      ]
        .map(v => (v === null || v === undefined ? '' : String(v)))
        .concat(['285.125', '320.000', '123456.789']) // NVML's mW and mJ as watts and joules
    );
  });

  it('leaves what was not measured empty, and a sample without a device is one row', () => {
    const s = fx.sample(1, 1700000000);
    const d = {
      ...fx.device0(),
      cuda_index: null,
      nvml_index: 3,
      allocator: null,
      util_gpu: null,
      used: null,
      energy_mj: null
    };
    expect(sampleRows({ ...s, gpu: { ...s.gpu, devices: [d] } })[0].slice(2, 10)).toEqual([
      'nvml:3',
      '',
      String(d.total),
      '',
      '',
      '',
      '',
      String(d.util_mem)
    ]);
    expect(sampleRows({ ...s, gpu: { ...s.gpu, devices: [d] } })[0].slice(11)).toEqual([
      '285.125',
      '320.000',
      ''
    ]);
    expect(sampleRows(noGpu(1700000000))).toEqual([
      [
        '2023-11-14T22:13:20.000Z',
        '1700000000.000',
        '',
        '',
        '',
        '',
        '',
        '',
        '',
        '',
        String(3 * fx.GIB),
        '',
        '',
        ''
      ]
    ]);
  });

  it('downloads as a text/csv Blob named after the first sample', async () => {
    const created: Blob[] = [];
    const clicked: string[] = [];
    const url = URL as unknown as Record<string, unknown>;
    url.createObjectURL = (blob: Blob) => {
      created.push(blob);
      return 'blob:csv';
    };
    url.revokeObjectURL = () => undefined;
    const click = jest.spyOn(HTMLAnchorElement.prototype, 'click').mockImplementation(function (
      this: HTMLAnchorElement
    ) {
      clicked.push(this.download);
    });
    const samples = [fx.sample(1, 1700000000.5), fx.sample(2, 1700000001.5)];
    jest.useFakeTimers();
    try {
      downloadSamplesCsv(samples);
      jest.runOnlyPendingTimers(); // the object URL's revocation
    } finally {
      jest.useRealTimers();
      click.mockRestore();
    }
    expect(clicked).toEqual(['gpumem-2023-11-14T22-13-20.csv']);
    expect(csvFilename(samples)).toBe(clicked[0]);
    expect(document.querySelectorAll('a[download]')).toHaveLength(0);
    expect(created[0].type).toBe('text/csv');
    const text = await new Promise<string>(resolve => {
      const reader = new FileReader();
      reader.onload = () => resolve(String(reader.result));
      reader.readAsText(created[0]);
    });
    expect(text).toBe(samplesCsv(samples));
  });

  it('is a button under the panel sample chart that hands over the samples it holds', () => {
    const samples = [fx.sample(1, 1700000000), fx.sample(2, 1700000001), fx.sample(3, 1700000002)];
    const got: Array<ReadonlyArray<ISample>> = [];
    const host = document.createElement('div');
    document.body.appendChild(host);
    const root = createRoot(host);
    const props = {
      deviceKey: deviceKey(fx.device0()),
      windowSeconds: 600,
      warnThreshold: 85,
      unit: 'GiB' as const,
      trans: untranslated,
      caption: 'cuda:0',
      downloadCsv: (s: ReadonlyArray<ISample>) => got.push(s)
    };
    act(() => root.render(<SampleChart samples={samples} {...props} />));
    const button = host.querySelector<HTMLButtonElement>('button.jp-GpuMem-downloadCsv');
    expect(button?.textContent).toBe('Download CSV');
    act(() => button?.click());
    expect(got).toEqual([samples]);
    act(() => root.render(<SampleChart samples={samples.slice(0, 1)} {...props} />));
    expect(host.querySelector('button.jp-GpuMem-downloadCsv')).toBeNull(); // "Collecting samples…"
    act(() => root.unmount());
    host.remove();
  });
});
