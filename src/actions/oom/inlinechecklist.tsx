/**
 * The OOM checklist in the cell output, under the traceback (the MIME renderer shows this for
 * `application/vnd.gpumem.oom.v1+json`): the same checklist as the panel's, wired to the notebook that holds
 * the output.
 *
 * - Ticks belong to this error (its occurrence key), shared with the panel's checklist of the same error and
 *   kept across page reloads; another error starts unticked.
 * - A clear or restart started here says how it went right under its button: the panel's report can be far
 *   away, or closed.
 * - A checklist of an earlier kernel process (its occurrence names another PID or start time than the
 *   notebook's kernel now) says so above its steps: its figures describe a process that is gone.
 */
import * as React from 'react';

import { formatTimeOfDay } from '../../ui/format';
import { downloadBlob, fileBlob } from '../../outputs/timeline/view';
import type { Trans } from '../../ui/i18n';
import type { IInlineHost } from '../../tokens';
import { OomChecklistView } from './checklist';
import { checklistMarkdown } from './text';
import { occurrenceKey } from '../ticks';
import type { IOomPayload } from '../../wire/protocol';

/** START_TOLERANCE: psutil's create_time of one process is stable to the clock tick; more is another process. */
const START_TOLERANCE = 0.01;

/**
 * True when `payload` was built in another kernel process than `kernel` (the notebook's now); false when it
 * is the same, or unknown (an output saved by an older kernel, or the notebook not connected yet).
 */
export function fromEarlierKernel(
  payload: IOomPayload,
  kernel: { pid: number; createTime: number | null } | null
): boolean {
  const occurrence = payload.occurrence;
  if (occurrence === undefined || kernel === null) {
    return false;
  }
  if (occurrence.kernel_pid !== kernel.pid) {
    return true;
  }
  const a = occurrence.kernel_start;
  const b = kernel.createTime;
  return a !== null && b !== null && Math.abs(a - b) > START_TOLERANCE;
}

export interface IInlineOomChecklistProps {
  readonly payload: IOomPayload;
  readonly trans: Trans;
  /** The actions plugin (null: advice and code only). */
  readonly host: IInlineHost | null;
  /** The output's node: names the notebook the buttons act on. */
  readonly node: HTMLElement;
}

export function InlineOomChecklist(props: IInlineOomChecklistProps): JSX.Element {
  const { payload, trans, host, node } = props;
  const key = occurrenceKey(payload);
  const inNotebook = host !== null && host.pathOf(node) !== null;
  const ticks = host !== null && inNotebook ? host.ticks.ticks(key) : null;
  const label = (kernelId: string): string | null => host?.labelKernel(kernelId) ?? null;
  const earlier = host !== null && inNotebook && fromEarlierKernel(payload, host.kernelOf(node));
  const checklist = (
    <OomChecklistView
      payload={payload}
      trans={trans}
      ticks={ticks}
      onTick={(id, ticked) => host?.ticks.set(key, id, ticked)}
      onAction={host !== null && inNotebook ? step => host.run(node, step, key) : null}
      busy={host?.busy(node) ?? false}
      kernelLabel={host !== null ? label : undefined}
      feedback={host !== null && inNotebook ? step => host.feedback(node, key, step.id) : undefined}
      onCopyMarkdown={
        host !== null
          ? () => host.copy(checklistMarkdown(payload, ticks ?? new Set(), trans, label))
          : undefined
      }
      onExportTimeline={
        host?.exportTimeline && inNotebook
          ? async (id, format) => {
              const file = await host.exportTimeline!(node, id, format);
              downloadBlob(fileBlob(file), file.filename);
            }
          : undefined
      }
    />
  );
  if (!earlier) {
    return checklist;
  }
  const when = payload.occurrence?.time;
  return (
    <div className="jp-GpuMem-inlineOom jp-mod-history" data-history="previous-run">
      <p className="jp-GpuMem-historyNote" role="note">
        <span className="jp-GpuMem-historyTag">{trans.__('from an earlier kernel run')}</span>{' '}
        {when !== undefined
          ? trans.__(
              'This error happened at %1 in a kernel process that has ended since (PID %2): its figures no longer apply, and the buttons act on the kernel running now.',
              formatTimeOfDay(when),
              payload.occurrence?.kernel_pid ?? '?'
            )
          : trans.__(
              'This error happened in a kernel process that has ended since: its figures no longer apply, and the buttons act on the kernel running now.'
            )}
      </p>
      {checklist}
    </div>
  );
}
