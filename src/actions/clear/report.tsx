/**
 * The report of "Clear GPU memory": what it reclaimed per device, what it dropped (the last error's
 * traceback, output-cache entries), and what still holds memory — the largest tensors by variable name,
 * which is what the user has to `del` next.
 *
 * Used in the panel and by the MIME renderer for `%gpumem clear` outputs. Kernel strings render as text.
 */
import * as React from 'react';

import { formatBytes, NOT_MEASURED, type SizeUnit } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { IClearDevice, IClearHolder, IClearPayload } from '../../wire/protocol';
import { cudaBytes, describeHolder, noGpuReason } from './text';

/** "4.00 GiB → 1.00 GiB"; with one side not measured (a dry run has no after), the measured one alone. */
function change(before: number | null, after: number | null, unit: SizeUnit): string {
  if (before === null || after === null) {
    return formatBytes(before ?? after, unit);
  }
  return `${formatBytes(before, unit)} → ${formatBytes(after, unit)}`;
}

function byDevice(holder: IClearHolder): string {
  return Object.entries(holder.by_device)
    .map(([device, bytes]) => `${device}: ${formatBytes(bytes, 'auto')}`)
    .join(', ');
}

function DeviceRow(props: {
  device: IClearDevice;
  reclaimed: number | null | undefined;
  unit: SizeUnit;
}): JSX.Element {
  const { device, reclaimed, unit } = props;
  return (
    <tr data-device={device.device}>
      <td title={device.name ?? undefined}>{device.device}</td>
      <td className="jp-GpuMem-num">{change(device.reserved_before, device.reserved_after, unit)}</td>
      <td className="jp-GpuMem-num">{change(device.this_kernel_before, device.this_kernel_after, unit)}</td>
      <td className="jp-GpuMem-num jp-GpuMem-clearReclaimed">
        {reclaimed === null || reclaimed === undefined ? NOT_MEASURED : formatBytes(reclaimed, unit)}
      </td>
    </tr>
  );
}

function HolderList(props: {
  holders: ReadonlyArray<IClearHolder>;
  className: string;
  trans: Trans;
}): JSX.Element {
  const { holders, trans } = props;
  return (
    <table className={`jp-GpuMem-holders ${props.className}`}>
      <thead>
        <tr>
          <th>{trans.__('Name')}</th>
          <th className="jp-GpuMem-num">{trans.__('Bytes')}</th>
        </tr>
      </thead>
      <tbody>
        {holders.map((h, i) => (
          <tr key={`${h.name}#${i}`} title={byDevice(h)}>
            <td>
              <div className="jp-GpuMem-holderName jp-GpuMem-ellipsis">{h.name}</div>
              <div className="jp-GpuMem-procMeta jp-GpuMem-ellipsis">{describeHolder(h, trans)}</div>
            </td>
            <td className="jp-GpuMem-num">{formatBytes(h.bytes, 'auto')}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export interface IClearReportProps {
  readonly report: IClearPayload;
  readonly unit: SizeUnit;
  readonly trans: Trans;
}

/** `<div class="jp-GpuMem-clearReport">`. */
export function ClearReport(props: IClearReportProps): JSX.Element {
  const { report, unit, trans } = props;
  const gpu = report.devices.length > 0;
  const holdersOnGpu = report.holders.some(h => cudaBytes(h) > 0);
  const dropped: string[] = [];
  if (report.traceback_frames > 0 || report.traceback_sources.length > 0) {
    dropped.push(
      trans._n(
        'the last error’s traceback (%1 frame)',
        'the last error’s traceback (%1 frames)',
        report.traceback_frames,
        report.traceback_frames
      ) +
        (report.traceback_freed !== null && report.traceback_freed.bytes > 0
          ? trans.__(', which kept %1 alive', formatBytes(report.traceback_freed.bytes, 'auto'))
          : '')
    );
  }
  if (report.output_cache_entries > 0) {
    dropped.push(
      trans._n(
        '%1 output-cache entry',
        '%1 output-cache entries',
        report.output_cache_entries,
        report.output_cache_entries
      )
    );
  }
  return (
    <div className="jp-GpuMem-clearReport" data-gpu={gpu ? 'yes' : 'no'}>
      {report.dry_run && <p className="jp-GpuMem-clearDryRun">{trans.__('Dry run: nothing was changed.')}</p>}
      {gpu ? (
        <table className="jp-GpuMem-clearDevices">
          <thead>
            <tr>
              <th>{trans.__('Device')}</th>
              <th className="jp-GpuMem-num">{trans.__('Reserved')}</th>
              <th className="jp-GpuMem-num" title={trans.__("NVML's figure for this kernel")}>
                {trans.__('NVML')}
              </th>
              <th className="jp-GpuMem-num">{trans.__('Reclaimed')}</th>
            </tr>
          </thead>
          <tbody>
            {report.devices.map(d => (
              <DeviceRow key={d.device} device={d} reclaimed={report.reclaimed[d.device]} unit={unit} />
            ))}
          </tbody>
        </table>
      ) : (
        <p className="jp-GpuMem-clearNoGpu">
          {trans.__('There was no GPU memory to free: %1.', noGpuReason(report, trans))}
        </p>
      )}
      <p className="jp-GpuMem-clearDropped">
        {dropped.length > 0
          ? trans.__('Dropped: %1.', dropped.join('; '))
          : trans.__('Nothing to drop: no traceback or cached output held tensors.')}
        {report.gc_collected !== null &&
          ` ${trans.__('gc.collect() freed %1 objects.', report.gc_collected)}`}
        {report.emptied_cache && ` ${trans.__('PyTorch’s cache was returned to the driver.')}`}
      </p>
      {report.output_cache.length > 0 && (
        <HolderList holders={report.output_cache} className="jp-GpuMem-outputCache" trans={trans} />
      )}
      {report.deleted.length > 0 && (
        <>
          <h4>{trans.__('Deleted variables')}</h4>
          <HolderList holders={report.deleted} className="jp-GpuMem-deleted" trans={trans} />
        </>
      )}
      {(report.host_rss_before !== null || report.host_rss_after !== null) && (
        <p className="jp-GpuMem-clearHost">
          {trans.__('Kernel RSS %1', change(report.host_rss_before, report.host_rss_after, unit))}
        </p>
      )}
      <h4>
        {holdersOnGpu || gpu ? trans.__('Still holding GPU memory') : trans.__('Still holding memory (host)')}
      </h4>
      {report.holders.length > 0 ? (
        <HolderList holders={report.holders} className="jp-GpuMem-stillHolding" trans={trans} />
      ) : (
        <p className="jp-GpuMem-muted">{trans.__('No variable holds tensors.')}</p>
      )}
      {report.holders_more > 0 && (
        <p className="jp-GpuMem-muted">
          {trans._n('and %1 more', 'and %1 more', report.holders_more, report.holders_more)}
        </p>
      )}
      {report.notes.length > 0 && (
        <ul className="jp-GpuMem-notes">
          {report.notes.map((note, i) => (
            <li key={i}>{note}</li>
          ))}
        </ul>
      )}
    </div>
  );
}
