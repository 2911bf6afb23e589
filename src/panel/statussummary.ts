/**
 * What the status-bar item says, computed from the model (kept apart from the widget so it is unit-tested).
 *
 * The status bar has room for one number: the memory in use on the device this kernel uses most (cuda:0
 * when it uses none yet), coloured by the warning and critical thresholds. Without a GPU the number is the
 * kernel's resident memory against what bounds it: the container's memory limit, or the machine's memory.
 */
import { formatBytes, formatBytesPair, formatPercent, percentOf } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { kernelTotal, primaryDevice } from '../channel/sample';
import { type UsageLevel, usageLevel } from '../settings';
import { describeState } from '../channel/state';
import type { IGpuMemModel } from '../tokens';
import type { IHostMemory } from '../wire/protocol';

export interface IStatusSummary {
  /** False when there is nothing to say (no notebook/console, or the setting hides the item). */
  readonly visible: boolean;
  readonly text: string;
  /** The tooltip. */
  readonly title: string;
  readonly level: UsageLevel;
  /** The numbers are from a kernel that stopped answering. */
  readonly stale: boolean;
}

export function statusSummary(model: IGpuMemModel, trans: Trans): IStatusSummary {
  const { state, settings } = model;
  const hidden = !settings.showStatusBar || state.name === 'no-kernel';
  const showsData = state.name === 'live' || state.name === 'stale' || state.name === 'error';
  const sample = showsData ? model.latest : null;
  const open = trans.__('Click to open the GPU Memory panel');
  if (sample === null) {
    return {
      visible: !hidden,
      text: state.name === 'waiting' ? trans.__('GPU: …') : trans.__('GPU: –'),
      title: `${describeState(state, trans).text}\n${open}`,
      level: 'ok',
      stale: false
    };
  }
  const device = sample.gpu.available ? primaryDevice(sample) : null;
  if (device === null) {
    const ram = hostRam(sample.host);
    const unit = settings.units;
    const lines = [
      trans.__(
        'No NVIDIA GPU visible to this kernel: %1',
        sample.gpu.reason ?? trans.__('NVML lists no device')
      ),
      ram.bound === 'container'
        ? trans.__(
            "Kernel RSS %1 of the container's %2 memory limit",
            formatBytes(ram.rss, unit),
            formatBytes(ram.of, unit)
          )
        : trans.__("Kernel RSS %1 of the machine's %2", formatBytes(ram.rss, unit), formatBytes(ram.of, unit))
    ];
    if (state.name !== 'live') {
      lines.push(describeState(state, trans).text);
    }
    lines.push(open);
    return {
      visible: !hidden,
      text: trans.__('GPU: none · RAM %1', formatBytesPair(ram.rss, ram.of, unit, 'short')),
      title: lines.join('\n'),
      level: usageLevel(percentOf(ram.rss, ram.of), settings),
      stale: state.name !== 'live'
    };
  }
  const unit = settings.units;
  const where = device.cuda_index !== null ? `cuda:${device.cuda_index}` : `NVML ${device.nvml_index}`;
  const lines = [
    `${where} · ${device.name ?? trans.__('unknown GPU')}`,
    trans.__(
      'Used %1 (%2)',
      formatBytesPair(device.used, device.total, unit),
      formatPercent(device.used, device.total)
    ),
    trans.__('This kernel: %1', formatBytes(kernelTotal(device), unit))
  ];
  if (state.name !== 'live') {
    lines.push(describeState(state, trans).text);
  }
  lines.push(open);
  return {
    visible: !hidden,
    text: trans.__('GPU %1', formatBytesPair(device.used, device.total, unit, 'short')),
    title: lines.join('\n'),
    level: usageLevel(percentOf(device.used, device.total), settings),
    stale: state.name !== 'live'
  };
}

/** The kernel's resident memory and what bounds it: the container's limit, or the machine's memory. */
export interface IHostRam {
  readonly rss: number;
  readonly of: number;
  readonly bound: 'container' | 'machine';
}

/** A container limit above the machine's memory does not bind: the machine's memory bounds the kernel then. */
export function hostRam(host: IHostMemory): IHostRam {
  const limit = host.container_limit;
  return limit !== null && limit > 0 && (host.total <= 0 || limit < host.total)
    ? { rss: host.rss, of: limit, bound: 'container' }
    : { rss: host.rss, of: host.total, bound: 'machine' };
}
