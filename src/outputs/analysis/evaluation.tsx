/** The evaluation line of the analysis output (`--eval-batch N`). */
import * as React from 'react';

import { size } from './figures';
import type { IAnalysisPayload } from '../../wire/analysispayload';
import type { Trans } from '../../ui/i18n';

/**
 * The evaluation step (`--eval-batch N`), one line as the text report words it: "Evaluation at batch N: X
 * allocated, Y footprint; largest evaluation batch M", then the guides' rule of thumb. Null without one (and for
 * outputs saved before the kernel wrote it).
 */
export function evaluationText(payload: IAnalysisPayload, trans: Trans): [string, string] | null {
  const ev = payload.evaluation;
  if (!ev) {
    return null;
  }
  const largest = ev.max_batch === null ? trans.__('n/a (no device limit)') : String(ev.max_batch);
  return [
    trans.__(
      'Evaluation at batch %1: %2 allocated, %3 footprint; largest evaluation batch %4',
      ev.batch,
      size(ev.peak_allocated_bytes),
      size(ev.peak_bytes),
      largest
    ),
    trans.__(
      "the guides' rule of thumb: an evaluation batch at most 1.3 × the training batch (%1 for %2) unless measured",
      ev.rule_of_thumb_batch,
      ev.training_batch
    )
  ];
}

export function EvaluationLine(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
  const text = evaluationText(props.payload, props.trans);
  const ev = props.payload.evaluation;
  if (text === null || !ev) {
    return null;
  }
  return (
    <p className="jp-GpuMem-evaluation" title={ev.note}>
      <span className="jp-GpuMem-richSectionTitle">{text[0]}</span>{' '}
      <span className="jp-GpuMem-richNote">({text[1]})</span>
    </p>
  );
}
