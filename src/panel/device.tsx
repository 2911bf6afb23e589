/**
 * One GPU: who holds its memory (a stacked bar with a legend), how full it is, its utilisation and power draw,
 * this kernel's PyTorch allocator, and the processes on it.
 *
 * The bar answers "how much am I using and who holds the rest" at a glance; the numbers under it are there
 * to be quoted (allocated vs reserved is the distinction every OOM guide asks about).
 */
import * as React from 'react';

import {
  formatBytes,
  formatBytesPair,
  formatPercent,
  formatPercentValue,
  formatWatts,
  percentOf,
  type SizeUnit
} from '../ui/format';
import type { Trans } from '../ui/i18n';
import {
  ambiguousPids,
  barTotal,
  deviceSegments,
  endableProcess,
  isSelf,
  type ISegment,
  processRelation,
  type SegmentKey,
  segmentLabel
} from '../channel/sample';
import type { IDevice, IGpuProcess } from '../wire/protocol';
import { deviceTitle } from './title';
import { type IGpuMemSettings, usageLevel } from '../settings';

/**
 * "285 W of 320 W (89%)": the draw against the enforced limit; "n/a" with NVML's reason in the tooltip; null
 * (no line) for a kernel too old to send power.
 */
export function powerText(device: IDevice, trans: Trans): string | null {
  const { power_mw: power, power_limit_mw: limit } = device;
  if (power === undefined && device.power_note === undefined) {
    return null;
  }
  if (power === null || power === undefined) {
    return formatWatts(null);
  }
  if (limit === null || limit === undefined) {
    return formatWatts(power);
  }
  return trans.__('%1 of %2 (%3)', formatWatts(power), formatWatts(limit), formatPercent(power, limit, 0));
}

interface IBarProps {
  readonly segments: ReadonlyArray<ISegment>;
  readonly total: number;
  readonly unit: SizeUnit;
  readonly trans: Trans;
}

/** The stacked bar; each segment's tooltip names it with its size and share. */
function UsageBar(props: IBarProps): JSX.Element {
  const { segments, total, unit, trans } = props;
  return (
    <div className="jp-GpuMem-bar" role="img" aria-label={trans.__('GPU memory by holder')}>
      {segments
        .filter(s => s.bytes > 0)
        .map(s => (
          <div
            key={s.key}
            className={`jp-GpuMem-seg jp-GpuMem-seg-${s.key}`}
            style={{ width: `${total > 0 ? (100 * s.bytes) / total : 0}%` }}
            title={`${segmentLabel(s.key, trans)}: ${formatBytes(s.bytes, unit)} (${formatPercent(
              s.bytes,
              total
            )})`}
          />
        ))}
    </div>
  );
}

/** Parts of this kernel that are worth a legend line only when they hold something. */
const HIDE_WHEN_EMPTY: ReadonlyArray<SegmentKey> = ['kernel', 'context', 'notebook', 'uncertain'];

function Legend(props: IBarProps): JSX.Element {
  const { segments, unit, trans } = props;
  const shown = segments.filter(s => s.bytes > 0 || !HIDE_WHEN_EMPTY.includes(s.key));
  return (
    <ul className="jp-GpuMem-legend">
      {shown.map(s => (
        <li key={s.key} className="jp-GpuMem-legendItem">
          <span className={`jp-GpuMem-swatch jp-GpuMem-seg-${s.key}`} />
          <span className="jp-GpuMem-legendLabel">{segmentLabel(s.key, trans)}</span>
          <span className="jp-GpuMem-num">{formatBytes(s.bytes, unit)}</span>
        </li>
      ))}
    </ul>
  );
}

/** "Shut down kernel" for the other kernels of this server in the process list. */
export interface IKernelShutdown {
  /** True for another kernel of this server (not this one, not another server's). */
  can(kernelId: string): boolean;
  /** Shut it down (asks first). */
  run(kernelId: string): void;
}

/** "Shut down kernel" for another kernel of this server (the process list and the idle GPU holders). */
export function ShutDownKernelButton(props: {
  readonly kernelId: string;
  /** Who it is, e.g. "notebook: train.ipynb". */
  readonly label: string;
  readonly shutDown: IKernelShutdown;
  readonly trans: Trans;
}): JSX.Element {
  const { kernelId, label, shutDown, trans } = props;
  return (
    <button
      type="button"
      className="jp-mod-styled jp-mod-warn jp-GpuMem-shutdown"
      title={trans.__('Shut down the kernel of %1 to free its GPU memory', label)}
      onClick={() => shutDown.run(kernelId)}
    >
      {trans.__('Shut down kernel')}
    </button>
  );
}

/** "End" for a process started from this notebook: the kernel ends it only if it is provably its own. */
export interface IProcessEnd {
  /** Ask the kernel to end it (`terminate`); resolves to null when ended, else the kernel's reason. */
  run(ref: { pid: number; create_time: number }): Promise<string | null>;
}

/** "End", a second click to confirm (it stops the user's own run), and after a refusal the kernel's reason. */
function EndProcessButton(props: {
  readonly process: IGpuProcess;
  readonly label: string;
  readonly end: IProcessEnd;
  readonly trans: Trans;
}): JSX.Element | null {
  const { process, end, trans } = props;
  const [state, setState] = React.useState<{ phase: 'idle' | 'confirm' | 'busy'; refused: string | null }>({
    phase: 'idle',
    refused: null
  });
  const ref = endableProcess(process);
  if (ref === null) {
    return null;
  }
  const onClick = (): void => {
    if (state.phase === 'idle') {
      setState({ phase: 'confirm', refused: null });
      return;
    }
    setState({ phase: 'busy', refused: null });
    void end.run(ref).then(
      refused => setState({ phase: 'idle', refused }),
      (error: unknown) => setState({ phase: 'idle', refused: String(error) })
    );
  };
  return (
    <div className="jp-GpuMem-procEnd">
      <button
        type="button"
        className="jp-mod-styled jp-mod-warn jp-GpuMem-end"
        disabled={state.phase === 'busy'}
        title={trans.__('End %1 (PID %2) to free its GPU memory', props.label, ref.pid)}
        onClick={onClick}
      >
        {state.phase === 'idle' ? trans.__('End') : trans.__('End PID %1?', ref.pid)}
      </button>
      {state.refused !== null && <span className="jp-GpuMem-muted"> {state.refused}</span>}
    </div>
  );
}

interface IProcessProps {
  readonly processes: ReadonlyArray<IGpuProcess>;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  readonly labelProcess: (process: IGpuProcess) => string;
  readonly shutDown?: IKernelShutdown | null;
  readonly end?: IProcessEnd | null;
  /** Host PIDs one of which is this kernel (ambiguous), for their rows. */
  readonly ambiguous: ReadonlyArray<number>;
}

/** The second line of a process's row: its PID(s), and its command line or name. */
export function processMeta(process: IGpuProcess, ambiguous: ReadonlyArray<number>, trans: Trans): string {
  const relation = processRelation(process);
  const local = process.local_pid ?? null;
  const what = process.cmdline ?? process.name ?? trans.__('not visible here');
  if (relation === 'ambiguous') {
    return trans.__('this kernel is one of host PIDs %1', ambiguous.join(', '));
  }
  if (local !== null && local !== process.pid) {
    return trans.__('PID %1 (host PID %2) · %3', local, process.pid, what);
  }
  return trans.__('PID %1 · %2', process.pid, what);
}

/** "rank 1/4" for a rank of a distributed run started from this notebook; null for any other process. */
export function rankText(process: IGpuProcess, trans: Trans): string | null {
  const rank = process.rank ?? null;
  return rank === null ? null : trans.__('rank %1/%2', rank.rank, rank.world_size);
}

/** The tooltip of a rank: where it comes from, and its local rank where the launcher set one. */
function rankTitle(process: IGpuProcess, trans: Trans): string | null {
  const rank = process.rank ?? null;
  if (rank === null) {
    return null;
  }
  const local = rank.local_rank === null ? '' : trans.__(', LOCAL_RANK %1', rank.local_rank);
  return trans.__('RANK %1 of WORLD_SIZE %2%3, from its environment', rank.rank, rank.world_size, local);
}

/**
 * The processes on the device, largest first (unknown sizes last), except that the ranks of a run started from
 * this notebook stay together, in rank order, where the largest of them would be: a run is read rank by rank.
 */
export function orderProcesses(processes: ReadonlyArray<IGpuProcess>): IGpuProcess[] {
  const bySize = [...processes].sort((a, b) => (b.used ?? -1) - (a.used ?? -1));
  const ranked = (p: IGpuProcess): boolean => processRelation(p) === 'notebook' && (p.rank ?? null) !== null;
  const ranks = bySize.filter(ranked).sort((a, b) => (a.rank?.rank ?? 0) - (b.rank?.rank ?? 0));
  const first = bySize.findIndex(ranked);
  if (first < 0) {
    return bySize;
  }
  const rest = bySize.filter(p => !ranked(p)); // the first `first` of them are the processes above the run
  return [...rest.slice(0, first), ...ranks, ...rest.slice(first)];
}

/**
 * The processes on the device (orderProcesses). Two lines per process (who, then PID and command) so that the
 * table stays readable in a narrow sidebar.
 */
function ProcessTable(props: IProcessProps): JSX.Element {
  const { unit, trans } = props;
  const processes = orderProcesses(props.processes);
  return (
    <table className="jp-GpuMem-processes">
      <thead>
        <tr>
          <th>{trans.__('Process')}</th>
          <th className="jp-GpuMem-num">{trans.__('Memory')}</th>
        </tr>
      </thead>
      <tbody>
        {processes.map(p => {
          const rank = rankText(p, trans);
          const label = rank === null ? props.labelProcess(p) : `${props.labelProcess(p)} · ${rank}`;
          const meta = processMeta(p, props.ambiguous, trans);
          const relation = processRelation(p);
          const shutDown = props.shutDown ?? null;
          const end = props.end ?? null;
          const kernelId =
            relation === 'other_kernel' &&
            p.kernel_id !== null &&
            shutDown !== null &&
            shutDown.can(p.kernel_id)
              ? p.kernel_id
              : null;
          const rowClass = isSelf(p)
            ? 'jp-GpuMem-thisKernel'
            : relation === 'notebook'
              ? 'jp-GpuMem-notebookProcess'
              : undefined;
          return (
            <tr key={p.pid} className={rowClass} data-relation={relation}>
              <td>
                <div
                  className="jp-GpuMem-procLabel jp-GpuMem-ellipsis"
                  title={[p.note ?? label, rankTitle(p, trans)].filter(t => t !== null).join('\n')}
                >
                  {label}
                </div>
                <div className="jp-GpuMem-procMeta jp-GpuMem-ellipsis" title={p.note ?? meta}>
                  {meta}
                </div>
                {kernelId !== null && shutDown !== null && (
                  <ShutDownKernelButton kernelId={kernelId} label={label} shutDown={shutDown} trans={trans} />
                )}
                {end !== null && <EndProcessButton process={p} label={label} end={end} trans={trans} />}
              </td>
              <td className="jp-GpuMem-num">{formatBytes(p.used, unit)}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

/**
 * One row of a facts list: a label and its value, in a `div` of their own, so that the value takes the width
 * its own label leaves (not the width the longest label of the list leaves) and stays on one line.
 */
export function Fact(props: {
  readonly label: string;
  /** The label's tooltip. */
  readonly labelTitle?: string;
  /** The value's tooltip. */
  readonly title?: string;
  readonly className?: string;
  readonly children: React.ReactNode;
}): JSX.Element {
  return (
    <div className="jp-GpuMem-fact">
      <dt title={props.labelTitle}>{props.label}</dt>
      <dd className={props.className} title={props.title}>
        {props.children}
      </dd>
    </div>
  );
}

export interface IDeviceSectionProps {
  readonly device: IDevice;
  readonly settings: IGpuMemSettings;
  readonly trans: Trans;
  readonly labelProcess: (process: IGpuProcess) => string;
  readonly shutDown?: IKernelShutdown | null;
  /** "End" for the processes started from this notebook (absent: no button). */
  readonly end?: IProcessEnd | null;
  /** What holds this device's memory ("Held by", heldby.tsx), shown above the processes. */
  readonly heldBy?: React.ReactNode;
}

/** `<section class="jp-GpuMem-device">` for one GPU. */
export function DeviceSection(props: IDeviceSectionProps): JSX.Element {
  const { device, settings, trans } = props;
  const unit = settings.units;
  const segments = deviceSegments(device);
  const total = barTotal(device, segments);
  const percent = percentOf(device.used, device.total);
  const level = usageLevel(percent, settings);
  const allocator = device.allocator;
  const power = powerText(device, trans);
  return (
    <section
      className={`jp-GpuMem-device jp-GpuMem-level-${level}`}
      data-nvml-index={device.nvml_index}
      data-cuda-index={device.cuda_index ?? ''}
    >
      <h3 className="jp-GpuMem-deviceTitle" title={device.uuid ?? undefined}>
        {deviceTitle(device, unit, trans)}
      </h3>
      <UsageBar segments={segments} total={total} unit={unit} trans={trans} />
      <div className="jp-GpuMem-used">
        {trans.__(
          'Used %1 (%2)',
          formatBytesPair(device.used, device.total, unit, 'short'),
          formatPercent(device.used, device.total)
        )}
      </div>
      {level !== 'ok' && (
        <div className={`jp-GpuMem-warning jp-GpuMem-level-${level}`} role="alert">
          {trans.__(
            '%1 of this GPU’s memory is in use (warning from %2%)',
            formatPercent(device.used, device.total, 0),
            settings.warnThreshold
          )}
        </div>
      )}
      <Legend segments={segments} total={total} unit={unit} trans={trans} />
      <dl className="jp-GpuMem-facts">
        <Fact label={trans.__('GPU utilisation')}>{formatPercentValue(device.util_gpu)}</Fact>
        <Fact label={trans.__('Memory utilisation')}>{formatPercentValue(device.util_mem)}</Fact>
        {power !== null && (
          <Fact
            label={trans.__('Power')}
            labelTitle={trans.__('Power draw of the whole GPU and its enforced limit (NVML)')}
            title={device.power_note ?? undefined}
          >
            {power}
          </Fact>
        )}
        <Fact label={trans.__('Compute capability')}>
          {device.compute_capability ?? trans.__('n/a')}
          {device.sm_count !== null ? ` · ${trans.__('%1 SMs', device.sm_count)}` : ''}
        </Fact>
      </dl>
      {allocator !== null && (
        <dl className="jp-GpuMem-allocator">
          <Fact label={trans.__('Allocated')}>{formatBytes(allocator.allocated, unit)}</Fact>
          <Fact label={trans.__('Reserved')}>{formatBytes(allocator.reserved, unit)}</Fact>
          <Fact label={trans.__('Peak allocated')}>{formatBytes(allocator.peak_allocated, unit)}</Fact>
          <Fact label={trans.__('Peak reserved')}>{formatBytes(allocator.peak_reserved, unit)}</Fact>
          <Fact
            label={trans.__('OOMs / retries')}
            className={allocator.num_ooms > 0 ? 'jp-GpuMem-bad' : undefined}
          >
            {`${allocator.num_ooms} / ${allocator.num_alloc_retries}`}
          </Fact>
        </dl>
      )}
      {props.heldBy}
      {device.processes.length > 0 && (
        <ProcessTable
          processes={device.processes}
          unit={unit}
          trans={trans}
          labelProcess={props.labelProcess}
          shutDown={props.shutDown}
          end={props.end}
          ambiguous={ambiguousPids(device)}
        />
      )}
    </section>
  );
}
