/**
 * Host (CPU) memory: the kernel's resident memory, its child processes (DataLoader workers, each a copy of
 * the dataset if it is not shared), the machine's free memory and the container's limit.
 *
 * GPU trouble often starts as host trouble (pinned memory, workers × dataset copies, a container killed by
 * its cgroup limit), so these numbers sit in the same panel.
 *
 * Each fact is a row of its own (a `div` around its dt/dd pair): the value takes the width its label leaves,
 * so that "21.6 / 23.5 GiB available" stays on one line at the sidebar's default width.
 */
import * as React from 'react';

import { formatBytes, formatBytesPair, formatPercent, percentOf } from '../ui/format';
import type { Trans } from '../ui/i18n';
import type { IHostMemory } from '../wire/protocol';
import { type IGpuMemSettings, usageLevel } from '../settings';
import { Fact } from './device';

export interface IHostSectionProps {
  readonly host: IHostMemory;
  readonly settings: IGpuMemSettings;
  readonly trans: Trans;
}

/** `<section class="jp-GpuMem-host">` titled "Host memory". */
export function HostSection(props: IHostSectionProps): JSX.Element {
  const { host, settings, trans } = props;
  const unit = settings.units;
  const used = host.total - host.available;
  const limit = host.container_limit;
  const containerLevel = limit !== null ? usageLevel(percentOf(host.container_usage, limit), settings) : 'ok';
  return (
    <section className="jp-GpuMem-host">
      <h3>{trans.__('Host memory')}</h3>
      <dl className="jp-GpuMem-facts">
        <Fact label={trans.__('Kernel RSS')}>{formatBytes(host.rss, unit)}</Fact>
        <Fact
          label={trans.__('DataLoader workers')}
          labelTitle={trans.__('Child processes of the kernel, such as DataLoader workers')}
        >
          {host.children.count > 0
            ? trans._n(
                '%1 process, %2 RSS',
                '%1 processes, %2 RSS',
                host.children.count,
                formatBytes(host.children.rss, unit)
              )
            : trans.__('none')}
        </Fact>
        <Fact label={trans.__('System')} title={trans.__('%1 in use', formatPercent(used, host.total))}>
          {trans.__('%1 available', formatBytesPair(host.available, host.total, unit, 'short'))}
        </Fact>
        {limit !== null && (
          <Fact
            label={trans.__('Container limit')}
            className={containerLevel !== 'ok' ? `jp-GpuMem-level-${containerLevel}` : undefined}
          >
            {host.container_usage !== null
              ? trans.__(
                  '%1 (%2)',
                  formatBytesPair(host.container_usage, limit, unit),
                  formatPercent(host.container_usage, limit)
                )
              : formatBytes(limit, unit)}
          </Fact>
        )}
      </dl>
    </section>
  );
}
