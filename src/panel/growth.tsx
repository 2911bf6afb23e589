/**
 * Memory that keeps growing, from the kernel's `growth` messages: while a cell runs, the trend the kernel claims
 * ("allocated grows 30 MiB/min on cuda:0 in this cell; full in ~14 min"); after a cell that leaves memory higher
 * run after run, its notice ("Cell [12] leaves +512 MiB allocated on cuda:0 after each run (3 runs); at this rate
 * the GPU is full after 7 more runs"), the holders that grew and the fix, until dismissed or replaced.
 *
 * The kernel decides (gpumem_kernel/growth); this only words its figures. Every string from the kernel is
 * rendered as React text (escaped).
 */
import * as React from 'react';

import { formatBytes, formatDuration, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import type { IGrowingHolder, IRerunGrowth, IRunningGrowth } from '../wire/protocol';
import type { IGrowthState } from '../tokens';

export interface IGrowthSectionProps {
  readonly growth: IGrowthState;
  readonly unit: SizeUnit;
  readonly trans: Trans;
}

function signed(bytes: number, unit: SizeUnit): string {
  return `${bytes < 0 ? '-' : '+'}${formatBytes(Math.abs(bytes), unit)}`;
}

/** "allocated grows 30 MiB/min on cuda:0 in this cell; full in ~14 min". */
export function runningText(trend: IRunningGrowth, unit: SizeUnit, trans: Trans): string {
  const rate = formatBytes(trend.rate, unit);
  const grows = trans.__('allocated grows %1/min on %2 in this cell', rate, trend.device);
  return trend.full_in === null ? grows : trans.__('%1; full in ~%2', grows, formatDuration(trend.full_in));
}

/**
 * "Cell [12] leaves +512 MiB allocated on cuda:0 after each run (3 runs); at this rate the GPU is full after 7 more
 * runs". A notice on device "host" counts the kernel's resident memory (RSS), not an allocator's bytes:
 * "Cell [5] grows this kernel's RSS by +16 MiB each run (3 runs); at this rate host memory is full after 9 more runs".
 */
export function rerunText(notice: IRerunGrowth, unit: SizeUnit, trans: Trans): string {
  const step = signed(notice.step, unit);
  const host = notice.device === 'host';
  let leaves: string;
  if (host) {
    leaves =
      notice.cell === null
        ? trans.__("This cell grows this kernel's RSS by %1 each run (%2 runs)", step, notice.runs)
        : trans.__(
            "Cell [%1] grows this kernel's RSS by %2 each run (%3 runs)",
            notice.cell,
            step,
            notice.runs
          );
  } else {
    leaves =
      notice.cell === null
        ? trans.__(
            'This cell leaves %1 allocated on %2 after each run (%3 runs)',
            step,
            notice.device,
            notice.runs
          )
        : trans.__(
            'Cell [%1] leaves %2 allocated on %3 after each run (%4 runs)',
            notice.cell,
            step,
            notice.device,
            notice.runs
          );
  }
  if (notice.runs_left === null) {
    return leaves;
  }
  const full = host ? hostFullText(notice.runs_left, trans) : gpuFullText(notice.runs_left, trans);
  return `${leaves}; ${full}`;
}

function gpuFullText(runsLeft: number, trans: Trans): string {
  return runsLeft === 0
    ? trans.__('at this rate the GPU is full at the next run')
    : trans._n(
        'at this rate the GPU is full after %1 more run',
        'at this rate the GPU is full after %1 more runs',
        runsLeft,
        runsLeft
      );
}

function hostFullText(runsLeft: number, trans: Trans): string {
  return runsLeft === 0
    ? trans.__('at this rate host memory is full at the next run')
    : trans._n(
        'at this rate host memory is full after %1 more run',
        'at this rate host memory is full after %1 more runs',
        runsLeft,
        runsLeft
      );
}

/** "`losses` +1 tensor, +4 B (now list of 4 tensors with grad history)". */
export function holderText(holder: IGrowingHolder, unit: SizeUnit, trans: Trans): string {
  const more =
    holder.tensors > 0 ? trans._n('+%1 tensor', '+%1 tensors', holder.tensors, holder.tensors) + ', ' : '';
  return trans.__('%1 %2%3 (now %4)', holder.name, more, signed(holder.bytes, unit), holder.description);
}

function Rerun(props: {
  notice: IRerunGrowth;
  unit: SizeUnit;
  trans: Trans;
  onDismiss: () => void;
}): JSX.Element {
  const { notice, unit, trans } = props;
  return (
    <section className="jp-GpuMem-growth" data-pattern={notice.pattern ?? 'none'} role="status">
      <h3>{rerunText(notice, unit, trans)}</h3>
      {notice.holders.length > 0 && (
        <>
          <p className="jp-GpuMem-muted">{trans.__('Grew since the last run:')}</p>
          <ul className="jp-GpuMem-growthHolders">
            {notice.holders.map(holder => (
              <li key={holder.name}>{holderText(holder, unit, trans)}</li>
            ))}
          </ul>
        </>
      )}
      {notice.fix !== null && <p className="jp-GpuMem-growthFix">{trans.__('Fix: %1', notice.fix)}</p>}
      <button type="button" className="jp-mod-styled jp-GpuMem-growthDismiss" onClick={props.onDismiss}>
        {trans.__('Dismiss')}
      </button>
    </section>
  );
}

/** The running cell's trend and the newest re-run notice; nothing when there is neither. */
export function GrowthSection(props: IGrowthSectionProps): JSX.Element | null {
  const { growth, unit, trans } = props;
  const [dismissed, setDismissed] = React.useState<number | null>(null);
  const notice = growth.rerun !== null && growth.rerunTime !== dismissed ? growth.rerun : null;
  if (growth.running === null && notice === null) {
    return null;
  }
  return (
    <>
      {growth.running !== null && (
        <p className="jp-GpuMem-growthRunning" role="status">
          {runningText(growth.running, unit, trans)}
        </p>
      )}
      {notice !== null && (
        <Rerun notice={notice} unit={unit} trans={trans} onDismiss={() => setDismissed(growth.rerunTime)} />
      )}
    </>
  );
}
