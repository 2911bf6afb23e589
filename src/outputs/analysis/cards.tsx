/**
 * The recommendation cards of the analysis output: the maximum, recommended and safe batch sizes, the current
 * batch's status, gradient accumulation and the learning-rate scaling.
 */
import * as React from 'react';

import { size } from './figures';
import { Card, RichBadge } from '../kit';
import { analysisPickCaption } from '../picks';
import type { CurrentStatus, IAnalysisPayload } from '../../wire/analysispayload';
import { NOT_MEASURED } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

/** A status as the cards and the fit advice word it. */
export function statusText(status: CurrentStatus, trans: Trans): string {
  switch (status) {
    case 'fits':
      return trans.__('fits');
    case 'tight':
      return trans.__('tight');
    case 'will-not-fit':
      return trans.__('will not fit');
    case 'unknown':
      return trans.__('unknown (no device limit)');
  }
}

/** The accumulation line, as the text report words it. */
export function accumulationText(payload: IAnalysisPayload, trans: Trans): string {
  const recs = payload.recommendations;
  const acc = recs.accumulation;
  const pick = recs.recommended;
  const target = acc.target_effective_batch;
  if (!pick || acc.recommended === null) {
    return trans.__('n/a (no recommendation)');
  }
  if (acc.explicit_target && pick >= target) {
    return trans.__('not needed: batch %1 reaches the target effective batch', target);
  }
  if (acc.recommended === 1) {
    return trans.__('not needed: %1 reaches the effective batch %2', pick, target);
  }
  // past the checks above the pick is below any explicit target: it is the micro-batch itself
  return trans.__(
    '%1 steps of %2 → effective batch %3 (target %4)',
    acc.recommended,
    pick,
    acc.recommended * pick,
    target
  );
}

export function Cards(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element {
  const { payload, trans } = props;
  const recs = payload.recommendations;
  const limit = payload.device.limit_bytes;
  const current = recs.current;
  const value = (n: number | null): string => (n === null ? NOT_MEASURED : String(n));
  return (
    <div className="jp-GpuMem-cards">
      <Card
        kind="maximum"
        title={trans.__('Maximum')}
        value={value(recs.maximum)}
        detail={
          recs.maximum === null
            ? recs.note || trans.__('no device limit')
            : recs.maximum === 0
              ? recs.note || trans.__('even batch 1 does not fit')
              : trans.__('largest batch whose peak fits %1', size(limit))
        }
        extra={
          recs.extrapolated ? (
            <RichBadge kind="extrapolated">{trans.__('extrapolated')}</RichBadge>
          ) : undefined
        }
        className={recs.extrapolated ? 'jp-mod-extrapolated' : undefined}
      />
      <Card
        kind="recommended"
        title={trans.__('Recommended')}
        value={value(recs.recommended)}
        detail={pickDetail(trans.__('balanced'), analysisPickCaption(payload, 'recommended', trans))}
      />
      <Card
        kind="safe"
        title={trans.__('Safe')}
        value={value(recs.safe)}
        detail={pickDetail(trans.__('conservative'), analysisPickCaption(payload, 'safe', trans))}
      />
      <Card
        kind="current"
        title={trans.__('Current batch')}
        value={String(current.batch_size)}
        className={`jp-GpuMem-status-${current.status}`}
        detail={
          <>
            <span className={`jp-GpuMem-statusWord jp-GpuMem-status-${current.status}`}>
              {statusText(current.status, trans)}
            </span>
            {current.fraction_of_limit !== null &&
              ` · ${trans.__('%1% of the usable memory', (current.fraction_of_limit * 100).toFixed(1))}`}
          </>
        }
      />
      <Card
        kind="accumulation"
        title={trans.__('Gradient accumulation')}
        value={recs.accumulation.recommended === null ? NOT_MEASURED : `×${recs.accumulation.recommended}`}
        detail={accumulationText(payload, trans)}
      />
      <Card
        kind="lr"
        title={trans.__('Learning rate')}
        value={lrValue(payload)}
        detail={
          <>
            {recs.lr.linear !== null && recs.lr.linear !== 1 && (
              <span className="jp-GpuMem-lrRules">{trans.__('square-root / linear rule')} · </span>
            )}
            {recs.lr.hint}
          </>
        }
      />
    </div>
  );
}

/** "balanced · 50% of the maximum 507; aim 60%, rounded down to a power of two". */
function pickDetail(kind: string, caption: string | null): string {
  return caption === null ? kind : `${kind} · ${caption}`;
}

function lrValue(payload: IAnalysisPayload): string {
  const lr = payload.recommendations.lr;
  if (lr.linear === null || lr.sqrt === null) {
    return NOT_MEASURED;
  }
  if (lr.linear === 1) {
    return '×1';
  }
  return `×${lr.sqrt.toPrecision(3)} / ×${lr.linear.toPrecision(3)}`;
}
