/**
 * A GPU's title, as the panel and the output-area watch both write it (a pure module: the watch's bundle has no
 * React).
 */
import { formatBytes, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import type { IDevice } from '../wire/protocol';

/** "cuda:0 · NVIDIA GeForce RTX 4080 SUPER · 16.0 GiB"; a hidden device says so instead of cuda:N. */
export function deviceTitle(device: IDevice, unit: SizeUnit, trans: Trans): string {
  const where =
    device.cuda_index !== null
      ? `cuda:${device.cuda_index}`
      : trans.__('not visible to this kernel (NVML %1)', device.nvml_index);
  const parts = [where, device.name ?? trans.__('unknown GPU')];
  if (device.total !== null) {
    parts.push(formatBytes(device.total, unit, 'short'));
  }
  if (device.mig) {
    parts.push('MIG');
  }
  return parts.join(' · ');
}
