/**
 * Progress and report of "Restart and free": what the restart freed on each GPU (NVML's figure for the old
 * kernel's PID before, and now), and the old kernel's children that outlived it, each with "End".
 *
 * Only children of the old kernel that are still the same processes (PID and start time match) are listed,
 * so "End" can never hit an unrelated process that reused a PID.
 */
import * as React from 'react';

import { formatBytes, formatDuration, type SizeUnit } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { IRestartReport, RestartPhase } from './restart';
import type { IRestartRun } from '../../tokens';

/** The progress line of a running restart; `gpu` false: the kernel sees no GPU, so no driver is waited for. */
export function restartPhaseText(phase: RestartPhase, trans: Trans, gpu = true): string {
  switch (phase) {
    case 'confirming':
      return trans.__('Waiting for confirmation…');
    case 'recording':
      return trans.__('Noting the kernel’s GPU memory and child processes…');
    case 'restarting':
      return trans.__('Restarting the kernel…');
    case 'waiting':
      return gpu
        ? trans.__('Waiting for the GPU driver to release the old kernel…')
        : trans.__('Waiting for the new kernel…');
    case 'checking':
      return trans.__('Checking the old kernel’s child processes…');
    case 'done':
      return trans.__('Done.');
  }
}

/** The report's headline. */
export function restartHeadline(report: IRestartReport, unit: SizeUnit, trans: Trans): string {
  switch (report.outcome) {
    case 'freed':
      return trans.__('Restarted: freed %1 of GPU memory.', formatBytes(report.totalFreed, unit));
    case 'no-gpu':
      return trans.__('Restarted: no GPU memory to free (no NVIDIA GPU visible).');
    case 'nothing-held':
      return trans.__('Restarted: the old kernel held no GPU memory, so there was none to free.');
    case 'timeout':
      return trans.__(
        'Restarted, but after %1 the GPU driver still lists the old kernel (PID %2).',
        formatDuration(report.timeoutMs / 1000),
        report.oldPid ?? '?'
      );
    case 'unknown':
      return trans.__(
        'Restarted. The panel was not connected to the old kernel, so it cannot tell what was freed.'
      );
  }
}

export interface IRestartReportProps {
  readonly run: IRestartRun;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  /** False when the panel's state says no GPU (its progress names no GPU driver); default true. */
  readonly gpu?: boolean;
  readonly onEnd: (pid: number) => void;
}

function Report(props: {
  run: IRestartRun;
  report: IRestartReport;
  unit: SizeUnit;
  trans: Trans;
  onEnd: (pid: number) => void;
}): JSX.Element {
  const { run, report, unit, trans } = props;
  return (
    <>
      <p className={`jp-GpuMem-restartHeadline jp-GpuMem-restart-${report.outcome}`}>
        {restartHeadline(report, unit, trans)}
      </p>
      {report.devices.length > 0 && (
        <table className="jp-GpuMem-restartDevices">
          <thead>
            <tr>
              <th>{trans.__('Device')}</th>
              <th className="jp-GpuMem-num">{trans.__('Old kernel')}</th>
              <th className="jp-GpuMem-num">{trans.__('Now')}</th>
              <th className="jp-GpuMem-num">{trans.__('Freed')}</th>
            </tr>
          </thead>
          <tbody>
            {report.devices.map(d => (
              <tr
                key={d.label}
                title={trans.__(
                  'Device used: %1 → %2',
                  formatBytes(d.deviceUsedBefore, unit),
                  formatBytes(d.deviceUsedAfter, unit)
                )}
              >
                <td title={d.name ?? undefined}>{d.label}</td>
                <td className="jp-GpuMem-num">{formatBytes(d.before, unit)}</td>
                <td className="jp-GpuMem-num">{formatBytes(d.after, unit)}</td>
                <td className="jp-GpuMem-num">{formatBytes(d.freed, unit)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <p className="jp-GpuMem-muted">
        {[
          report.oldPid !== null ? trans.__('Old kernel: PID %1.', report.oldPid) : null,
          report.newPid !== null
            ? trans.__('New kernel: PID %1.', report.newPid)
            : trans.__('The new kernel has not reported yet.'),
          trans.__('Took %1.', formatDuration(report.waitedMs / 1000)),
          report.clearedOutputs ? trans.__('Outputs cleared.') : null
        ]
          .filter(Boolean)
          .join(' ')}
      </p>
      {report.oldKernelAlive !== null && (
        <p className="jp-GpuMem-restartOldKernel">
          {report.oldKernelAlive
            ? trans.__('The old kernel process (PID %1) is still running.', report.oldPid ?? '?')
            : trans.__(
                'The old kernel process has exited; the driver has not yet released its memory. Check again in the panel in a moment.'
              )}
        </p>
      )}
      {run.note !== null && <p className="jp-GpuMem-restartNote">{run.note}</p>}
      {report.outcome === 'no-gpu' && report.noGpuReason !== null && (
        <p className="jp-GpuMem-muted">{report.noGpuReason}</p>
      )}
      {report.leftovers.length > 0 && (
        <div className="jp-GpuMem-leftovers">
          <h4>{trans.__('Child processes of the old kernel still running')}</h4>
          <ul>
            {report.leftovers.map(l => (
              <li key={l.pid} data-pid={l.pid}>
                <span className="jp-GpuMem-leftoverWhat">
                  {trans.__(
                    'PID %1 · %2 · GPU %3',
                    l.pid,
                    l.name ?? trans.__('unknown'),
                    formatBytes(l.gpuUsed, unit)
                  )}
                </span>
                {l.ended ? (
                  <span className="jp-GpuMem-muted"> {trans.__('ended')}</span>
                ) : (
                  <button
                    type="button"
                    className="jp-mod-styled jp-mod-warn jp-GpuMem-end"
                    title={trans.__('Send SIGTERM (then SIGKILL) to this process')}
                    onClick={() => props.onEnd(l.pid)}
                  >
                    {trans.__('End')}
                  </button>
                )}
                {l.refused !== undefined && <span className="jp-GpuMem-bad"> {l.refused}</span>}
              </li>
            ))}
          </ul>
        </div>
      )}
      {report.leftovers.length === 0 && report.childrenBefore > 0 && report.childrenProblem === null && (
        <p className="jp-GpuMem-muted">
          {trans._n(
            'The old kernel’s child process ended with it.',
            'All %1 child processes of the old kernel ended with it.',
            report.childrenBefore,
            report.childrenBefore
          )}
        </p>
      )}
      {report.childrenProblem !== null && (
        <p className="jp-GpuMem-bad">
          {trans.__('Could not check the old kernel’s child processes: %1', report.childrenProblem)}
        </p>
      )}
    </>
  );
}

/** `<div class="jp-GpuMem-restartReport" data-phase="...">`. */
export function RestartReport(props: IRestartReportProps): JSX.Element {
  const { run, unit, trans } = props;
  return (
    <div className="jp-GpuMem-restartReport" data-phase={run.phase} role="status">
      {run.phase === 'failed' ? (
        <p className="jp-GpuMem-bad">{trans.__('Restart and free failed: %1', run.error ?? '')}</p>
      ) : run.report !== null ? (
        <Report run={run} report={run.report} unit={unit} trans={trans} onEnd={props.onEnd} />
      ) : (
        <p className="jp-GpuMem-restartProgress">{restartPhaseText(run.phase, trans, props.gpu ?? true)}</p>
      )}
    </div>
  );
}
