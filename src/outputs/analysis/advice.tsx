/**
 * "What makes it fit" (`%gpumem analyze … --advise`): the payload's `advice`, the analysed step again with each
 * lever the kernel can model, one row per lever or combination. A compact table (lever, peak, the largest batch or
 * sequence, whether the analysed batch then fits, what the lever costs), the recommended row marked with the
 * kernel's reason, and under each row the whole command that runs it, as text to copy.
 *
 * Everything here is the kernel's data: it is rendered as text (React escapes it), never as markup.
 */
import * as React from 'react';

import { statusText } from './cards';
import { size } from './figures';
import { type CopyText, useCopyFeedback } from '../kit';
import type { IAnalysisPayload } from '../../wire/analysispayload';
import { NOT_MEASURED } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

export type IAdvice = NonNullable<IAnalysisPayload['advice']>;
export type IAdviceRow = IAdvice['rows'][number];
type AdviceStatus = IAdvice['status'];

/**
 * The "Fits?" word of a row: `fits` decides, `status` only says how (fits or tight when it does, unknown without a
 * device limit), so a row whose peak is over the limit never reads as fitting.
 */
export function rowFit(row: IAdviceRow): AdviceStatus {
  if (row.fits) {
    return row.status === 'tight' ? 'tight' : 'fits';
  }
  return row.status === 'unknown' ? 'unknown' : 'will-not-fit';
}

/** The payload's advice, or null without `--advise` (and for outputs saved before the kernel wrote it). */
export function adviceOf(payload: IAnalysisPayload): IAdvice | null {
  return payload.advice ?? null;
}

/** The header of the "largest" column: batch, sequence, or both when the rows mix them. */
function maximumHeader(rows: readonly IAdviceRow[], trans: Trans): string {
  const kinds = new Set(rows.map(row => row.maximum_of));
  if (kinds.size === 1 && kinds.has('sequence')) {
    return trans.__('Max sequence');
  }
  return kinds.has('sequence') ? trans.__('Max batch / sequence') : trans.__('Max batch');
}

/** One row's largest batch or sequence; the kind is spelled out when the rows mix them. */
function maximumText(row: IAdviceRow, mixed: boolean, trans: Trans): string {
  if (row.maximum === null) {
    return NOT_MEASURED;
  }
  if (!mixed) {
    return String(row.maximum);
  }
  return row.maximum_of === 'sequence'
    ? trans.__('sequence %1', row.maximum)
    : trans.__('batch %1', row.maximum);
}

/** "Copy", then "Copied" or "Copy failed" for two seconds. */
function CopyCommand(props: { command: string; copy: CopyText; trans: Trans }): JSX.Element {
  const { command, trans } = props;
  const [state, copyText] = useCopyFeedback(props.copy);
  const onClick = (): void => copyText(command);
  const label =
    state === 'copied' ? trans.__('Copied') : state === 'failed' ? trans.__('Copy failed') : trans.__('Copy');
  return (
    <button
      type="button"
      className="jp-GpuMem-adviceCopy jp-mod-styled"
      title={trans.__('Copy this command')}
      onClick={onClick}
    >
      {label}
    </button>
  );
}

interface IAdviceRowProps {
  readonly row: IAdviceRow;
  readonly index: number;
  readonly recommended: boolean;
  readonly mixed: boolean;
  readonly copy: CopyText;
  readonly trans: Trans;
}

/** A lever's figures, then its command on a line of its own beneath them. */
function AdviceRows(props: IAdviceRowProps): JSX.Element {
  const { row, recommended, trans } = props;
  const marked = recommended ? ' jp-GpuMem-adviceRecommended' : '';
  return (
    <>
      <tr
        className={`jp-GpuMem-adviceRow${marked}`}
        data-key={row.key}
        data-index={props.index}
        data-recommended={recommended ? 'true' : undefined}
      >
        <td className="jp-GpuMem-adviceLever">
          {row.lever}
          {recommended && (
            <>
              {' '}
              <span
                className="jp-GpuMem-richBadge jp-GpuMem-adviceBadge"
                title={trans.__('the row the analysis recommends')}
              >
                {trans.__('recommended')}
              </span>
            </>
          )}
          {row.note && <div className="jp-GpuMem-richNote jp-GpuMem-adviceNote">{row.note}</div>}
        </td>
        <td className="jp-GpuMem-num" data-column="peak">
          {size(row.peak_bytes)}
          {row.per_rank && (
            <span
              className="jp-GpuMem-advicePerRank"
              title={trans.__('one GPU of several: the figures are per rank')}
            >
              {' '}
              {trans.__('per GPU')}
            </span>
          )}
        </td>
        <td className="jp-GpuMem-num" data-column="maximum">
          {maximumText(row, props.mixed, trans)}
        </td>
        <td data-column="fits" data-status={row.status}>
          <span className={`jp-GpuMem-statusWord jp-GpuMem-status-${rowFit(row)}`}>
            {statusText(rowFit(row), trans)}
          </span>
        </td>
        <td className="jp-GpuMem-adviceCost" data-column="cost" data-cost-kind={row.cost_kind}>
          {row.cost}
        </td>
      </tr>
      <tr className={`jp-GpuMem-adviceCommandRow${marked}`} data-key={row.key}>
        <td colSpan={5}>
          <code className="jp-GpuMem-adviceCommand" title={trans.__('adds: %1', row.flags)}>
            {row.command}
          </code>{' '}
          <CopyCommand command={row.command} copy={props.copy} trans={trans} />
        </td>
      </tr>
    </>
  );
}

export function AdviceTable(props: {
  payload: IAnalysisPayload;
  copy: CopyText;
  trans: Trans;
}): JSX.Element | null {
  const { trans } = props;
  const advice = adviceOf(props.payload);
  if (advice === null) {
    return null;
  }
  const rows = advice.rows;
  const pick = advice.recommended;
  const chosen = pick !== null && pick < rows.length ? rows[pick] : null;
  const mixed = new Set(rows.map(row => row.maximum_of)).size > 1;
  const analysed = trans.__('as analysed: %1, %2', size(advice.peak_bytes), statusText(advice.status, trans));
  return (
    <section className="jp-GpuMem-advice">
      <table className="jp-GpuMem-richTable jp-GpuMem-adviceTable">
        <caption>
          {trans.__('What makes it fit')}{' '}
          <span className="jp-GpuMem-richNote jp-GpuMem-adviceAnalysed">
            ({advice.target === null ? analysed : trans.__('%1; on %2', analysed, advice.target)})
          </span>
        </caption>
        <thead>
          <tr>
            <th>{trans.__('Lever')}</th>
            <th className="jp-GpuMem-num">{trans.__('Peak')}</th>
            <th className="jp-GpuMem-num">{maximumHeader(rows, trans)}</th>
            <th>{trans.__('Fits?')}</th>
            <th>{trans.__('Cost')}</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((row, i) => (
            <AdviceRows
              key={`${i}-${row.key}`}
              row={row}
              index={i}
              recommended={row === chosen}
              mixed={mixed}
              copy={props.copy}
              trans={trans}
            />
          ))}
        </tbody>
      </table>
      {rows.length === 0 && (
        <p className="jp-GpuMem-richNote jp-GpuMem-adviceEmpty">
          {trans.__('No lever the analysis can model applies to this step.')}
        </p>
      )}
      {chosen !== null && (
        <p className="jp-GpuMem-adviceReason">
          <span className="jp-GpuMem-richSectionTitle">{trans.__('Recommended: %1.', chosen.lever)}</span>{' '}
          {advice.reason}
        </p>
      )}
      {chosen === null && advice.reason && (
        <p className="jp-GpuMem-richNote jp-GpuMem-adviceReason">{advice.reason}</p>
      )}
    </section>
  );
}
