/**
 * The memory timeline output (`application/vnd.gpumem.timeline.v1+json`): what was alive over a recorded cell
 * or a predicted training step. The header says which (recorded / predicted), with the title and device; the
 * chart stacks every allocation as a band (plot.tsx); the table lists what was alive at the peak, largest
 * first; a band or a row selected shows its full stack (your frames first, library frames folded); the
 * downloads ask the kernel for the full history (PyTorch's snapshot pickle, a CSV), or build a CSV of what is
 * shown when the kernel no longer has it. Everything from the kernel is React text.
 */
import * as React from 'react';

import { RichBadge } from '../kit';
import type { ITimelineFile, TimelineExportFormat } from '../../tokens';
import { formatBytes, formatCount, formatPercent } from '../../ui/format';
import type { Trans } from '../../ui/i18n';
import type { ITimelineHolder, ITimelinePayload, ITimelineStack } from '../../wire/analysispayload';
import { aliveAt, CATEGORIES, timelineGeometry } from './geometry';
import { PLOT_H, TimelinePlot } from './plot';
import { categoryName, frameText, shownCsv, sourceText, stackAt } from './text';

/** Asks the kernel for a file of the full history; rejects with an Error of one line. */
export type ExportTimeline = (format: TimelineExportFormat) => Promise<ITimelineFile>;

/** Saves a file in the browser (a download). */
export type SaveFile = (blob: Blob, filename: string) => void;

/** The browser's download: a temporary link to an object URL. */
export function downloadBlob(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const link = document.createElement('a');
  link.href = url;
  link.download = filename;
  link.style.display = 'none';
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** The file's bytes from its base64. */
export function fileBlob(file: ITimelineFile): Blob {
  const binary = atob(file.data);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) {
    bytes[i] = binary.charCodeAt(i);
  }
  return new Blob([bytes], { type: file.media_type });
}

/** Holders largest first, "the rest" last. */
export function sortedHolders(holders: ReadonlyArray<ITimelineHolder>): ITimelineHolder[] {
  return [...holders].sort((a, b) => Number(a.rest) - Number(b.rest) || b.size - a.size);
}

/** The bands a table row stands for: same category and stack, alive at the peak (at most 200 drawn). */
export function bandsOfHolder(payload: ITimelinePayload, holder: ITimelineHolder): number[] {
  if (holder.rest) {
    return [];
  }
  const out: number[] = [];
  payload.bands.forEach((band, i) => {
    if (
      out.length < 200 &&
      band.category === holder.category &&
      band.stack === holder.stack &&
      aliveAt(band, payload.peak.at)
    ) {
      out.push(i);
    }
  });
  return out;
}

type Selection =
  { readonly kind: 'band'; readonly index: number } | { readonly kind: 'row'; readonly index: number };

export interface ITimelineViewProps {
  readonly payload: ITimelinePayload;
  readonly trans: Trans;
  readonly exportFile: ExportTimeline;
  readonly save: SaveFile;
}

function StackFrames(props: { stack: ITimelineStack | null; trans: Trans }): JSX.Element {
  const { stack, trans } = props;
  if (stack === null || stack.frames.length === 0) {
    return (
      <div className="jp-GpuMem-tlMuted">{trans.__('No frames were recorded for this allocation.')}</div>
    );
  }
  const user = stack.frames.filter(f => f.user);
  const library = stack.frames.filter(f => !f.user);
  return (
    <>
      {user.length > 0 ? (
        <ol className="jp-GpuMem-tlFrames">
          {user.map((frame, i) => (
            <li key={i} className="jp-GpuMem-tlFrame-user">
              {frameText(frame, trans)}
            </li>
          ))}
        </ol>
      ) : (
        <div className="jp-GpuMem-tlMuted">{trans.__('No frame of your code.')}</div>
      )}
      {library.length > 0 && (
        <details className="jp-GpuMem-tlLibrary">
          <summary>
            {trans._n('%1 library frame', '%1 library frames', library.length, library.length)}
          </summary>
          <ol className="jp-GpuMem-tlFrames">
            {library.map((frame, i) => (
              <li key={i}>{frameText(frame, trans)}</li>
            ))}
          </ol>
        </details>
      )}
    </>
  );
}

function Selected(props: {
  payload: ITimelinePayload;
  selection: Selection;
  holders: ReadonlyArray<ITimelineHolder>;
  trans: Trans;
}): JSX.Element | null {
  const { payload, selection, trans } = props;
  let title: string;
  let stack: number | null;
  if (selection.kind === 'band') {
    const band = payload.bands[selection.index];
    if (band === undefined) {
      return null;
    }
    stack = band.stack;
    title =
      band.end === null
        ? trans.__(
            '%1 of %2, allocated at event %3, alive at the end',
            formatBytes(band.size, 'auto'),
            categoryName(band.category, trans),
            formatCount(band.start)
          )
        : trans.__(
            '%1 of %2, allocated at event %3, freed at %4',
            formatBytes(band.size, 'auto'),
            categoryName(band.category, trans),
            formatCount(band.start),
            formatCount(band.end)
          );
  } else {
    const holder = props.holders[selection.index];
    if (holder === undefined) {
      return null;
    }
    stack = holder.stack;
    title = holder.rest
      ? trans.__('%1 in smaller groups', formatBytes(holder.size, 'auto'))
      : trans._n(
          '%2 of %3 alive at the peak, %1 allocation',
          '%2 of %3 alive at the peak, %1 allocations',
          holder.count,
          formatBytes(holder.size, 'auto'),
          categoryName(holder.category, trans)
        );
  }
  return (
    <section className="jp-GpuMem-tlStack" aria-live="polite" data-stack={stack ?? ''}>
      <div className="jp-GpuMem-richSectionTitle">{title}</div>
      <StackFrames stack={stackAt(payload, stack)} trans={trans} />
    </section>
  );
}

function Downloads(props: ITimelineViewProps): JSX.Element {
  const { payload, trans } = props;
  const [busy, setBusy] = React.useState<TimelineExportFormat | null>(null);
  const [problem, setProblem] = React.useState<string | null>(null);
  const download = (format: TimelineExportFormat): void => {
    setBusy(format);
    setProblem(null);
    props
      .exportFile(format)
      .then(file => props.save(fileBlob(file), file.filename))
      .catch((error: unknown) => {
        const line = (error instanceof Error ? error.message : String(error)).split('\n')[0];
        setProblem(line || trans.__('the kernel did not answer'));
      })
      .finally(() => setBusy(null));
  };
  const shown = (): void =>
    props.save(
      new Blob([shownCsv(payload)], { type: 'text/csv' }),
      `gpumem-timeline-${payload.id}-shown.csv`
    );
  return (
    <div className="jp-GpuMem-richActions jp-GpuMem-tlDownloads">
      <button
        type="button"
        className="jp-GpuMem-tlDownload jp-mod-styled"
        data-format="snapshot"
        disabled={busy !== null}
        title={trans.__('For pytorch.org/memory_viz')}
        onClick={() => download('snapshot')}
      >
        {busy === 'snapshot' ? trans.__('Preparing…') : trans.__('Download snapshot (.pickle)')}
      </button>
      <button
        type="button"
        className="jp-GpuMem-tlDownload jp-mod-styled"
        data-format="csv"
        disabled={busy !== null}
        title={trans.__('One row per allocation')}
        onClick={() => download('csv')}
      >
        {busy === 'csv' ? trans.__('Preparing…') : trans.__('Download CSV')}
      </button>
      {problem !== null && (
        <>
          <span className="jp-GpuMem-tlExportProblem" role="status">
            {problem}
          </span>
          <button type="button" className="jp-GpuMem-tlDownloadShown jp-mod-styled" onClick={shown}>
            {trans.__('Download CSV of what is shown')}
          </button>
        </>
      )}
    </div>
  );
}

export function TimelineView(props: ITimelineViewProps): JSX.Element {
  const { payload, trans } = props;
  const geometry = React.useMemo(() => timelineGeometry(payload, PLOT_H), [payload]);
  const holders = React.useMemo(() => sortedHolders(payload.alive_at_peak), [payload]);
  const [selection, setSelection] = React.useState<Selection | null>(null);
  React.useEffect(() => setSelection(null), [payload]);
  const highlighted = React.useMemo(
    () =>
      selection?.kind === 'row' && holders[selection.index]
        ? bandsOfHolder(payload, holders[selection.index])
        : [],
    [selection, holders, payload]
  );
  const onSelectBand = React.useCallback((index: number) => setSelection({ kind: 'band', index }), []);
  const device = payload.device;
  const deviceText =
    device.name === null
      ? trans.__('device unknown')
      : device.index === null
        ? device.name
        : trans.__('%1 (cuda:%2)', device.name, device.index);
  const used = new Set([
    ...payload.bands.map(b => b.category),
    ...CATEGORIES.filter(c => payload.small.some(p => p.bytes[c] > 0))
  ]);
  const total = holders.reduce((sum, h) => sum + h.size, 0);
  const count = holders.reduce((sum, h) => sum + h.count, 0);
  const failed = payload.failed;
  return (
    <div className="jp-GpuMem-timeline">
      <div className="jp-GpuMem-richHeader">
        <span className="jp-GpuMem-richTitle">{trans.__('Memory timeline · %1', payload.title)}</span>
        {payload.source === 'recorded' ? (
          <RichBadge kind="measured" title={trans.__("PyTorch's CUDA allocator history of this run")}>
            {trans.__('recorded')}
          </RichBadge>
        ) : (
          <RichBadge
            kind="traced"
            title={trans.__('the traced step through a model of the allocator; no GPU used')}
          >
            {trans.__('predicted')}
          </RichBadge>
        )}
      </div>
      <div className="jp-GpuMem-richFacts">
        <span>{deviceText}</span>
        {device.total !== null && <span>{trans.__('%1 total', formatBytes(device.total, 'auto'))}</span>}
        <span>
          {trans.__(
            'peak %1 at event %2',
            formatBytes(payload.peak.bytes, 'auto'),
            formatCount(payload.peak.at)
          )}
        </span>
        {payload.peak.reserved !== null && (
          <span>{trans.__('reserved then %1', formatBytes(payload.peak.reserved, 'auto'))}</span>
        )}
        <span>
          {trans._n('%1 event', '%1 events', payload.events_total, formatCount(payload.events_total))}
        </span>
        {payload.events_dropped > 0 && (
          <span className="jp-GpuMem-tlWarn">
            {trans.__('%1 events lost by the recording', formatCount(payload.events_dropped))}
          </span>
        )}
      </div>
      {failed !== null && (
        <div className="jp-GpuMem-tlFailed" role="alert">
          {trans.__(
            'The allocation that failed: %1 (free on device: %2)',
            formatBytes(failed.size, 'auto'),
            formatBytes(failed.device_free, 'auto')
          )}
          {failed.stack !== null && ` — ${sourceText(payload, failed.stack, trans)}`}
        </div>
      )}
      <figure className="jp-GpuMem-chart jp-GpuMem-tlChart">
        <TimelinePlot
          payload={payload}
          geometry={geometry}
          trans={trans}
          selected={selection?.kind === 'band' ? selection.index : null}
          highlighted={highlighted}
          onSelect={onSelectBand}
        />
        <ul className="jp-GpuMem-chartLegend">
          {CATEGORIES.filter(c => used.has(c)).map(c => (
            <li key={c} className="jp-GpuMem-chartLegendItem" data-category={c}>
              <span className={`jp-GpuMem-stackSwatch jp-GpuMem-tl-${c}`} />
              <span>{categoryName(c, trans)}</span>
            </li>
          ))}
          {payload.baseline > 0 && (
            <li className="jp-GpuMem-chartLegendItem">
              <span className="jp-GpuMem-stackSwatch jp-GpuMem-tlBaseline" />
              <span>{trans.__('allocated before (%1)', formatBytes(payload.baseline, 'auto'))}</span>
            </li>
          )}
          {geometry.reserved !== null && (
            <li className="jp-GpuMem-chartLegendItem">
              <span className="jp-GpuMem-chartSwatch jp-GpuMem-tlReservedSwatch" />
              <span>{trans.__('reserved')}</span>
            </li>
          )}
          <li className="jp-GpuMem-chartLegendItem jp-GpuMem-tlMuted">
            {payload.min_band_bytes > 0
              ? trans.__(
                  'allocations under %1 summed per category (paler, on top); wheel zooms, drag pans',
                  formatBytes(payload.min_band_bytes, 'auto')
                )
              : trans.__('wheel zooms, drag pans')}
          </li>
        </ul>
      </figure>
      {selection !== null && (
        <Selected payload={payload} selection={selection} holders={holders} trans={trans} />
      )}
      <table className="jp-GpuMem-tlTable" aria-label={trans.__('Alive at the peak')}>
        <caption className="jp-GpuMem-richSectionTitle">
          {trans.__('Alive at the peak (event %1)', formatCount(payload.peak.at))}
        </caption>
        <thead>
          <tr>
            <th>{trans.__('Size')}</th>
            <th>{trans.__('Share')}</th>
            <th>{trans.__('Count')}</th>
            <th>{trans.__('Category')}</th>
            <th>{trans.__('Allocated at')}</th>
          </tr>
        </thead>
        <tbody>
          {holders.map((h, i) => {
            const chosen = selection?.kind === 'row' && selection.index === i;
            const where = h.rest
              ? trans.__('the rest (smaller groups)')
              : sourceText(payload, h.stack, trans);
            return (
              <tr
                key={i}
                tabIndex={0}
                data-size={h.size}
                aria-selected={chosen}
                className={chosen ? 'jp-mod-selected' : undefined}
                onClick={() => setSelection({ kind: 'row', index: i })}
                onKeyDown={event => {
                  if (event.key === 'Enter' || event.key === ' ') {
                    event.preventDefault();
                    setSelection({ kind: 'row', index: i });
                  }
                }}
              >
                <td>{formatBytes(h.size, 'auto')}</td>
                <td>{formatPercent(h.size, payload.peak.bytes)}</td>
                <td>{formatCount(h.count)}</td>
                <td>
                  <span className={`jp-GpuMem-stackSwatch jp-GpuMem-tl-${h.category}`} />
                  {categoryName(h.category, trans)}
                </td>
                <td className="jp-GpuMem-tlWhere">{where}</td>
              </tr>
            );
          })}
        </tbody>
        <tfoot>
          <tr>
            <td>{formatBytes(total, 'auto')}</td>
            <td>{formatPercent(total, payload.peak.bytes)}</td>
            <td>{formatCount(count)}</td>
            <td colSpan={2}>{trans.__('total at the peak')}</td>
          </tr>
        </tfoot>
      </table>
      <Downloads {...props} />
      {payload.notes.map((note, i) => (
        <div key={i} className="jp-GpuMem-tlNote jp-GpuMem-tlMuted">
          {note}
        </div>
      ))}
    </div>
  );
}
