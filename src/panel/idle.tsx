/**
 * "Idle GPU holders": this server's kernels that hold GPU memory and have been idle longer than the
 * `idleMinutes` setting, each with the process list's "Shut down kernel" button. Nothing is shown while no
 * kernel qualifies, nor when the list cannot be read (the server extension is disabled or absent: README).
 */
import * as React from 'react';

import { formatBytes, formatDuration, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { type IKernelShutdown, ShutDownKernelButton } from './device';
import { idleHolders, type IServerKernel } from './idleholders';

export interface IIdleHoldersProps {
  readonly kernels: ReadonlyArray<IServerKernel>;
  readonly idleMinutes: number;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  readonly shutDown?: IKernelShutdown | null;
}

export function IdleHoldersSection(props: IIdleHoldersProps): JSX.Element | null {
  const { trans, unit } = props;
  const holders = idleHolders(props.kernels, props.idleMinutes);
  if (holders.length === 0) {
    return null;
  }
  const shutDown = props.shutDown ?? null;
  return (
    <section className="jp-GpuMem-idle" aria-label={trans.__('Idle GPU holders')}>
      <h3 className="jp-GpuMem-idleTitle">
        {trans._n('%1 kernel holds GPU memory', '%1 kernels hold GPU memory', holders.length, holders.length)}
        {trans.__(', idle for more than %1 min', props.idleMinutes)}
      </h3>
      <ul className="jp-GpuMem-idleList">
        {holders.map(k => {
          const label =
            k.path !== '' ? trans.__('notebook: %1', k.path) : trans.__('kernel %1', k.id.slice(0, 8));
          return (
            <li key={k.id} className="jp-GpuMem-idleKernel" data-kernel-id={k.id}>
              <div className="jp-GpuMem-procLabel jp-GpuMem-ellipsis" title={label}>
                {label}
              </div>
              <div className="jp-GpuMem-procMeta">
                {trans.__(
                  '%1 on the GPU · idle %2',
                  formatBytes(k.gpu_bytes, unit),
                  formatDuration(k.idle_seconds)
                )}
              </div>
              {shutDown !== null && shutDown.can(k.id) && (
                <ShutDownKernelButton kernelId={k.id} label={label} shutDown={shutDown} trans={trans} />
              )}
            </li>
          );
        })}
      </ul>
    </section>
  );
}
