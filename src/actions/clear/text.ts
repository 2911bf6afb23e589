/**
 * The report of "Clear GPU memory" as words: pure (no React), for the panel's report (report.tsx), the
 * checklist's line under its step, and the output-area watch (src/watch/).
 */
import { formatBytes, type SizeUnit } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { IClearHolder, IClearPayload } from '../../wire/protocol';

/** The bytes a holder keeps on CUDA devices (what "still holds GPU memory" sorts by). */
export function cudaBytes(holder: IClearHolder): number {
  return Object.entries(holder.by_device)
    .filter(([device]) => device.startsWith('cuda'))
    .reduce((sum, [, bytes]) => sum + bytes, 0);
}

/** "Tensor [64, 3, 224, 224] float32" / "Module (3 tensors)". */
export function describeHolder(holder: IClearHolder, trans: Trans): string {
  const parts = [holder.type_name];
  if (holder.shape !== null) {
    parts.push(`[${holder.shape.join(', ')}]`);
  }
  if (holder.dtype !== null) {
    parts.push(holder.dtype);
  }
  if (holder.kind !== 'tensor') {
    parts.push(trans._n('(%1 tensor)', '(%1 tensors)', holder.tensors, holder.tensors));
  }
  return parts.join(' ');
}

/** Why there was no GPU memory to free, when the report lists no CUDA device. */
export function noGpuReason(report: IClearPayload, trans: Trans): string {
  if (!report.torch_imported) {
    return trans.__('torch is not imported in this kernel');
  }
  if (!report.cuda_initialized) {
    return trans.__('CUDA is not initialised in this kernel');
  }
  return trans.__('no CUDA device is in use');
}

/**
 * The report in one sentence, for the line under the checklist step that started the clear: what was freed
 * on the GPU, or why there was nothing to free.
 */
export function clearHeadline(report: IClearPayload, unit: SizeUnit, trans: Trans): string {
  if (report.dry_run) {
    return trans.__('Dry run: nothing was changed.');
  }
  if (report.devices.length === 0) {
    return trans.__('There was no GPU memory to free: %1.', noGpuReason(report, trans));
  }
  const known = report.devices
    .map(d => report.reclaimed[d.device])
    .filter((bytes): bytes is number => typeof bytes === 'number');
  if (known.length === 0) {
    return trans.__('Cleared; the GPU driver did not say how much was freed.');
  }
  const freed = known.reduce((sum, bytes) => sum + bytes, 0);
  return freed > 0
    ? trans.__('Freed %1 of GPU memory.', formatBytes(freed, unit))
    : trans.__('Cleared, but no GPU memory was freed: variables still hold it.');
}

/**
 * What a clear freed: on a GPU, the bytes the driver took back (`reclaimed`); without one (or where the driver
 * did not say), the bytes of what it dropped — the traceback's tensors, cached outputs and deleted variables,
 * each counted by what only it kept alive. Null for a dry run, which frees nothing.
 */
export function clearFreed(report: IClearPayload): { bytes: number; gpu: boolean } | null {
  if (report.dry_run) {
    return null;
  }
  const reclaimed = report.devices
    .map(d => report.reclaimed[d.device])
    .filter((bytes): bytes is number => typeof bytes === 'number');
  if (reclaimed.length > 0) {
    return { bytes: reclaimed.reduce((sum, bytes) => sum + bytes, 0), gpu: true };
  }
  const dropped = [
    ...(report.traceback_freed !== null ? [report.traceback_freed] : []),
    ...report.output_cache,
    ...report.deleted
  ];
  return { bytes: dropped.reduce((sum, holder) => sum + holder.bytes, 0), gpu: false };
}

/** "freed 128 MiB" / "freed 1.20 GiB of GPU memory" / "nothing was freed", for the step a clear ticked. */
export function clearFreedText(report: IClearPayload, unit: SizeUnit, trans: Trans): string {
  const freed = clearFreed(report);
  if (freed === null) {
    return trans.__('a dry run: nothing was changed');
  }
  if (freed.bytes <= 0) {
    return trans.__('nothing was freed');
  }
  return freed.gpu
    ? trans.__('freed %1 of GPU memory', formatBytes(freed.bytes, unit))
    : trans.__('freed %1', formatBytes(freed.bytes, 'auto'));
}
