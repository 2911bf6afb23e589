/**
 * The panel sample chart's "Download CSV": the samples the panel holds, one row per sample and device, in the
 * columns of the kernel's memory log (`%gpumem log`, gpumem_kernel/log/csvlog.py; tests/log checks that both
 * name the same columns). A figure that was not measured is an empty cell; power and energy are NVML's
 * milliwatts and millijoules written as watts and joules with three decimals.
 */
import type { IDevice, ISample } from '../wire/protocol';

export const CSV_COLUMNS: ReadonlyArray<string> = [
  'time_iso',
  'time_epoch',
  'device',
  'used_bytes',
  'total_bytes',
  'allocated_bytes',
  'reserved_bytes',
  'peak_allocated_bytes',
  'util_gpu_percent',
  'util_mem_percent',
  'host_rss_bytes',
  'power_watts',
  'power_limit_watts',
  'energy_joules'
];

function cell(value: number | null | undefined): string {
  return value === null || value === undefined ? '' : String(value);
}

/** Milli-units as units with three decimals, exactly: 250125 → "250.125" (the kernel log's `_milli`). */
function milli(value: number | null | undefined): string {
  if (value === null || value === undefined) {
    return '';
  }
  const whole = Math.round(value);
  return `${Math.floor(whole / 1000)}.${String(whole % 1000).padStart(3, '0')}`;
}

/** `cuda:N` as the kernel's torch numbers it, else `nvml:N`. */
function deviceLabel(device: IDevice): string {
  return device.cuda_index !== null ? `cuda:${device.cuda_index}` : `nvml:${device.nvml_index}`;
}

/** The rows of one sample: one per device, or one with an empty device when there is none. */
export function sampleRows(sample: ISample): string[][] {
  const ms = Math.round(sample.time * 1000);
  const head = [new Date(ms).toISOString(), (ms / 1000).toFixed(3)];
  const rss = cell(sample.host.rss);
  if (sample.gpu.devices.length === 0) {
    return [[...head, '', '', '', '', '', '', '', '', rss, '', '', '']];
  }
  return sample.gpu.devices.map(device => [
    ...head,
    deviceLabel(device),
    cell(device.used),
    cell(device.total),
    cell(device.allocator?.allocated),
    cell(device.allocator?.reserved),
    cell(device.allocator?.peak_allocated),
    cell(device.util_gpu),
    cell(device.util_mem),
    rss,
    milli(device.power_mw),
    milli(device.power_limit_mw),
    milli(device.energy_mj)
  ]);
}

/** The CSV text of the samples, oldest first, with the header line. No cell needs quoting. */
export function samplesCsv(samples: ReadonlyArray<ISample>): string {
  const lines = [CSV_COLUMNS.join(',')];
  for (const sample of samples) {
    for (const row of sampleRows(sample)) {
      lines.push(row.join(','));
    }
  }
  return lines.join('\n') + '\n';
}

/** The file name: `gpumem-<first sample's UTC time>.csv`. */
export function csvFilename(samples: ReadonlyArray<ISample>): string {
  const first = samples.length > 0 ? new Date(Math.round(samples[0].time * 1000)) : new Date();
  return `gpumem-${first.toISOString().slice(0, 19).replace(/:/g, '-')}.csv`;
}

/** Save the samples as a CSV file through a temporary link to a Blob. */
export function downloadSamplesCsv(samples: ReadonlyArray<ISample>): void {
  const url = URL.createObjectURL(new Blob([samplesCsv(samples)], { type: 'text/csv' }));
  const link = document.createElement('a');
  link.href = url;
  link.download = csvFilename(samples);
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
