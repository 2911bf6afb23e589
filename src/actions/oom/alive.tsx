/**
 * "What was alive" in the OOM checklist: what the kernel's OOM capture (the setting "oomTimeline") found on the
 * device when the allocation failed — the largest groups of live blocks with their category and the line that
 * allocated them ("In [N], line L" for a notebook cell, else file:line), and the allocation that failed — plus
 * the full timeline's downloads when the kernel still holds it.
 *
 * Every string comes from the kernel and is rendered as React text (escaped), never as HTML.
 */
import * as React from 'react';

import { categoryName, frameText } from '../../outputs/timeline/text';
import { formatBytes } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { TimelineExportFormat } from '../../tokens';
import type { IOomPayload } from '../../wire/protocol';

export type IOomAlive = NonNullable<IOomPayload['alive']>;
type AliveSource = IOomAlive['holders'][number]['source'];

/** Where a block was allocated, in the timeline view's words ("In [5], line 3, in step", "train.py:42, in
 * forward"), marked when no frame is the user's own; or that no line was recorded. */
export function aliveSourceText(source: AliveSource, trans: Trans): string {
  if (source === null) {
    return trans.__('no line recorded');
  }
  const text = frameText(source, trans);
  return source.user ? text : trans.__('%1 (no line of yours)', text);
}

export interface IOomAliveProps {
  readonly alive: IOomAlive;
  readonly trans: Trans;
  /** Downloads the full timeline the kernel keeps (null or absent: no download buttons). */
  readonly onExport?: ((id: string, format: TimelineExportFormat) => Promise<unknown>) | null;
}

/** `<section class="jp-GpuMem-oomAlive">`. */
export function OomAlive(props: IOomAliveProps): JSX.Element {
  const { alive, trans, onExport } = props;
  const [problem, setProblem] = React.useState<string | null>(null);
  const id = alive.timeline_id;
  const download = (format: TimelineExportFormat): void => {
    if (id === null || !onExport) {
      return;
    }
    setProblem(null);
    onExport(id, format).catch((error: unknown) =>
      setProblem(error instanceof Error ? error.message : String(error))
    );
  };
  const device = alive.device !== null ? `cuda:${alive.device}` : trans.__('the GPU');
  return (
    <section className="jp-GpuMem-oomAlive" aria-label={trans.__('What was alive')}>
      <h4 className="jp-GpuMem-oomAliveTitle">{trans.__('What was alive')}</h4>
      <p className="jp-GpuMem-oomAliveTotal">
        {alive.blocks === 1
          ? trans.__(
              '%1 in 1 block on %2 when the allocation failed',
              formatBytes(alive.allocated, 'auto'),
              device
            )
          : trans.__(
              '%1 in %2 blocks on %3 when the allocation failed',
              formatBytes(alive.allocated, 'auto'),
              alive.blocks,
              device
            )}
      </p>
      {alive.holders.length > 0 && (
        <table className="jp-GpuMem-oomAliveTable">
          <thead>
            <tr>
              <th scope="col">{trans.__('Size')}</th>
              <th scope="col">{trans.__('Category')}</th>
              <th scope="col">{trans.__('Allocated at')}</th>
            </tr>
          </thead>
          <tbody>
            {alive.holders.map((holder, i) => (
              <tr key={i} data-category={holder.category}>
                <td>
                  {formatBytes(holder.size, 'auto')}
                  {holder.count > 1 ? ` ×${holder.count}` : ''}
                </td>
                <td>{categoryName(holder.category, trans)}</td>
                <td className="jp-GpuMem-oomAliveSource">{aliveSourceText(holder.source, trans)}</td>
              </tr>
            ))}
            {alive.rest !== null && (
              <tr className="jp-GpuMem-oomAliveRest">
                <td>{formatBytes(alive.rest.size, 'auto')}</td>
                <td colSpan={2}>
                  {trans._n(
                    'the rest (%1 block)',
                    'the rest (%1 blocks)',
                    alive.rest.count,
                    alive.rest.count
                  )}
                </td>
              </tr>
            )}
          </tbody>
        </table>
      )}
      {alive.failed !== null && (
        <p className="jp-GpuMem-oomAliveFailed">
          {trans.__(
            'Failed: %1 at %2',
            formatBytes(alive.failed.size, 'auto'),
            aliveSourceText(alive.failed.source, trans)
          )}
        </p>
      )}
      {alive.notes.length > 0 && (
        <ul className="jp-GpuMem-oomAliveNotes jp-GpuMem-muted">
          {alive.notes.map((note, i) => (
            <li key={i}>{note}</li>
          ))}
        </ul>
      )}
      {id !== null && onExport && (
        <p className="jp-GpuMem-oomAliveExport">
          <button
            type="button"
            className="jp-mod-styled jp-GpuMem-oomAliveSnapshot"
            title={trans.__(
              "The full timeline as PyTorch's memory snapshot (pytorch.org/memory_viz opens it)"
            )}
            onClick={() => download('snapshot')}
          >
            {trans.__('Download the timeline (snapshot)')}
          </button>{' '}
          <button
            type="button"
            className="jp-mod-styled jp-GpuMem-oomAliveCsv"
            onClick={() => download('csv')}
          >
            {trans.__('CSV')}
          </button>
        </p>
      )}
      {problem !== null && (
        <p className="jp-GpuMem-bad" role="status">
          {problem}
        </p>
      )}
    </section>
  );
}
