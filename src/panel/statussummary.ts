/**
 * What the status-bar item says, computed from the model (kept apart from the widget so it is unit-tested).
 *
 * The status bar has room for one number: the memory in use on the device this kernel uses most (cuda:0
 * when it uses none yet), coloured by the warning and critical thresholds.
 */
import { formatBytes, formatBytesPair, formatPercent, percentOf } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { kernelTotal, primaryDevice } from '../channel/sample';
import { type UsageLevel, usageLevel } from '../settings';
import { describeState } from '../channel/state';
import type { IGpuMemModel } from '../tokens';

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
    return {
      visible: !hidden,
      text: trans.__('GPU: none'),
      title: `${trans.__(
        'No NVIDIA GPU visible to this kernel: %1',
        sample.gpu.reason ?? trans.__('NVML lists no device')
      )}\n${open}`,
      level: 'ok',
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
