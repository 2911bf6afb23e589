/**
 * "Held by" in a device's section of the panel: which of the user's variables hold this GPU's memory after the last
 * cell (the kernel's `holders` message, gpumem_kernel/heldby): the largest holders with their bytes on this device
 * and what they are ("losses: list of 40 tensors with grad history", "shared with `opt`"), what IPython holds, and
 * the remainder no variable reaches; or the kernel's note when the walk was skipped (over its per-cell budget).
 *
 * The kernel sends names, sizes and descriptions only; they are rendered as React text. Nothing is shown for a
 * device the message does not name, nor before a cell has ended with CUDA in use.
 */
import * as React from 'react';

import { formatBytes, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import type { IDevice, IHolderLine, IHoldersDevice, IHoldersMessage } from '../wire/protocol';

/** The message's part for `device` (torch's cuda:N), or null. */
export function holdersOf(message: IHoldersMessage | null, device: IDevice): IHoldersDevice | null {
  if (message === null || device.cuda_index === null) {
    return null;
  }
  return message.devices.find(d => d.device === `cuda:${device.cuda_index}`) ?? null;
}

/** "list of 40 tensors with grad history; shared with `opt`, `model`". */
export function holderDetail(entry: IHolderLine, trans: Trans): string {
  if (entry.shared_with.length === 0) {
    return entry.description;
  }
  const names = entry.shared_with.map(name => `\`${name}\``).join(', ');
  return trans.__('%1; shared with %2', entry.description, names);
}

interface IRow {
  readonly key: string;
  readonly label: string;
  readonly detail: string;
  readonly bytes: number | null;
  readonly source: string;
}

function rows(holders: IHoldersDevice, trans: Trans): IRow[] {
  const found: IRow[] = holders.entries.map(entry => ({
    key: `${entry.source}:${entry.name}`,
    label: entry.name,
    detail: holderDetail(entry, trans),
    bytes: entry.bytes,
    source: entry.source
  }));
  if (holders.more > 0) {
    found.push({
      key: 'more',
      label: trans.__('(%1 more)', holders.more),
      detail: trans.__('`%gpumem holders` lists them all'),
      bytes: holders.more_bytes,
      source: 'more'
    });
  }
  if (holders.unreachable !== null && holders.unreachable > 0) {
    found.push({
      key: 'unreachable',
      label: trans.__('not reachable from your variables'),
      detail: trans.__("autograd graphs of tensors you kept, closures, a library's caches"),
      bytes: holders.unreachable,
      source: 'unreachable'
    });
  }
  return found;
}

export interface IHeldByProps {
  readonly message: IHoldersMessage | null;
  readonly device: IDevice;
  readonly unit: SizeUnit;
  readonly trans: Trans;
}

/** `<table class="jp-GpuMem-heldBy">` for one device, or the skip note; null when there is nothing to say. */
export function HeldBy(props: IHeldByProps): JSX.Element | null {
  const { message, device, unit, trans } = props;
  if (message === null || device.cuda_index === null) {
    return null;
  }
  const title =
    message.cell === null ? trans.__('Held by') : trans.__('Held by (after cell [%1])', message.cell);
  if (message.skipped) {
    // the walk covers every device at once: its skip is every device's (those this kernel uses)
    return device.allocator === null ? null : (
      <p className="jp-GpuMem-heldBySkipped jp-GpuMem-muted" title={title}>
        {`${title}: ${message.note ?? trans.__('skipped: over the time budget')}`}
      </p>
    );
  }
  const holders = holdersOf(message, device);
  const found = holders === null ? [] : rows(holders, trans);
  if (holders === null || found.length === 0) {
    return null;
  }
  const notes = [message.history_hint, message.note].filter((n): n is string => n !== null);
  return (
    <>
      <table className="jp-GpuMem-processes jp-GpuMem-heldBy" data-cell={message.cell ?? ''}>
        <thead>
          <tr>
            <th>{title}</th>
            <th className="jp-GpuMem-num">{trans.__('Memory')}</th>
          </tr>
        </thead>
        <tbody>
          {found.map(row => (
            <tr key={row.key} data-holder={row.label} data-source={row.source}>
              <td>
                <div className="jp-GpuMem-procLabel jp-GpuMem-ellipsis" title={row.label}>
                  {row.label}
                </div>
                <div className="jp-GpuMem-procMeta" title={row.detail}>
                  {row.detail}
                </div>
              </td>
              <td className="jp-GpuMem-num">{formatBytes(row.bytes, unit)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {notes.map((note, i) => (
        <p key={i} className="jp-GpuMem-heldByNote jp-GpuMem-muted">
          {note}
        </p>
      ))}
    </>
  );
}
