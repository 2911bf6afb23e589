/**
 * The `%gpumem autobatch` output (`application/vnd.gpumem.autobatch.v1+json`): the largest batch that ran full
 * training steps, the recommended batch below it, every trial, and "Copy as YAML".
 */
import * as React from 'react';

import { Card, configYaml, type CopyText, CopyYamlButton, RichBadge, TextList } from '../kit';
import { belowCaption, roundingText } from '../picks';
import type { IAutobatchPayload, TrialPhase } from '../../wire/analysispayload';
import { formatBytes, formatSeconds, NOT_MEASURED } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

function phaseLabel(phase: TrialPhase, trans: Trans): string {
  switch (phase) {
    case 'start':
      return trans.__('start');
    case 'predicted':
      return trans.__('predicted');
    case 'grow':
      return trans.__('grow');
    case 'shrink':
      return trans.__('shrink');
    case 'slope':
      return trans.__('slope');
    case 'secant':
      return trans.__('secant');
    case 'edge':
      return trans.__('edge');
    case 'bisect':
      return trans.__('bisect');
    case 'scan':
      return trans.__('scan');
  }
}

function startText(payload: IAutobatchPayload, trans: Trans): string {
  switch (payload.start_source) {
    case 'analysis':
      return trans.__('started at %1, the analysis prediction', payload.start_batch);
    case 'start_batch':
      return trans.__('started at %1, as asked', payload.start_batch);
    case 'default':
      return trans.__('started at %1 (default)', payload.start_batch);
  }
}

/** "38% below the maximum 26; margin 10%, rounded down to a power of two" (nothing ran: why there is none). */
export function recommendedDetail(payload: IAutobatchPayload, trans: Trans): string {
  if (payload.maximum === 0) {
    return trans.__('none: not even batch 1 ran');
  }
  return belowCaption(payload.recommended, payload.maximum, payload.margin, payload.rounding, trans);
}

export interface IAutobatchViewProps {
  readonly payload: IAutobatchPayload;
  readonly trans: Trans;
  readonly copy: CopyText;
}

/** `<div class="jp-GpuMem-autobatch">`. */
export function AutobatchView(props: IAutobatchViewProps): JSX.Element {
  const { payload, trans } = props;
  const simulated = payload.engine === 'simulated';
  const maximum = payload.at_least ? trans.__('≥ %1', payload.maximum) : String(payload.maximum);
  return (
    <div className="jp-GpuMem-autobatch">
      <div className="jp-GpuMem-richHeader">
        <span className="jp-GpuMem-richTitle">{trans.__('Auto batch size · %1', payload.device)}</span>
        {simulated && (
          <RichBadge
            kind="simulated"
            title={trans.__('a CPU run under a cap on tracked tensor bytes, not a GPU')}
          >
            {trans.__('simulated')}
          </RichBadge>
        )}
        {payload.interrupted && <RichBadge kind="interrupted">{trans.__('interrupted')}</RichBadge>}
      </div>
      <div className="jp-GpuMem-richFacts">
        <span className="jp-GpuMem-modelName">{payload.model_name}</span>
        <span className="jp-GpuMem-richFact">{payload.optimizer}</span>
        <span className="jp-GpuMem-richFact">
          {payload.amp ? trans.__('AMP %1', payload.amp) : trans.__('AMP off')}
        </span>
        <span className="jp-GpuMem-richFact">
          {trans._n('%1 step per trial', '%1 steps per trial', payload.steps, payload.steps)}
        </span>
        <span className="jp-GpuMem-richFact">{startText(payload, trans)}</span>
        <span className="jp-GpuMem-richFact">
          {trans.__('rounded: %1', roundingText(payload.rounding, payload.round_source, trans))}
        </span>
        {payload.limit_bytes !== null && (
          <span className="jp-GpuMem-richFact">
            {trans.__('limit %1', formatBytes(payload.limit_bytes, 'auto'))}
          </span>
        )}
      </div>
      <div className="jp-GpuMem-cards">
        <Card
          kind="maximum"
          title={trans.__('Maximum')}
          value={maximum}
          detail={
            payload.maximum === 0
              ? trans.__('not even batch 1 fits')
              : payload.at_least
                ? trans.__('the search stopped before finding the limit')
                : trans.__('largest batch that ran full training steps')
          }
        />
        <Card
          kind="recommended"
          title={trans.__('Recommended')}
          value={String(payload.recommended)}
          detail={recommendedDetail(payload, trans)}
        />
        <Card
          kind="margin"
          title={trans.__('Margin')}
          value={`${Math.round(payload.margin * 100)}%`}
          detail={trans.__('for fragmentation and data variance')}
        />
        <Card
          kind="trials"
          title={trans.__('Trials')}
          value={String(payload.n_trials)}
          detail={trans.__('in %1', formatSeconds(payload.seconds))}
        />
        {payload.predicted !== null && (
          <Card
            kind="predicted"
            title={trans.__('Predicted')}
            value={String(payload.predicted)}
            detail={trans.__('by the analysis, before any trial')}
          />
        )}
      </div>
      <table className="jp-GpuMem-richTable jp-GpuMem-trials">
        <caption>{trans.__('Trials')}</caption>
        <thead>
          <tr>
            <th className="jp-GpuMem-num">#</th>
            <th className="jp-GpuMem-num">{trans.__('Batch')}</th>
            <th>{trans.__('Phase')}</th>
            <th>{trans.__('Result')}</th>
            <th className="jp-GpuMem-num">{trans.__('Peak')}</th>
            <th className="jp-GpuMem-num">{trans.__('Reserved')}</th>
            <th className="jp-GpuMem-num">{trans.__('Seconds')}</th>
            <th>{trans.__('Error')}</th>
          </tr>
        </thead>
        <tbody>
          {payload.trials.map((trial, i) => (
            <tr
              key={i}
              className={trial.ok ? 'jp-GpuMem-trial-ok' : 'jp-GpuMem-trial-oom'}
              data-batch={trial.batch}
              data-ok={trial.ok ? 'true' : 'false'}
            >
              <td className="jp-GpuMem-num">{i + 1}</td>
              <td className="jp-GpuMem-num">{trial.batch}</td>
              <td>{phaseLabel(trial.phase, trans)}</td>
              <td>
                <span
                  className={`jp-GpuMem-statusWord jp-GpuMem-status-${trial.ok ? 'fits' : 'will-not-fit'}`}
                >
                  {trial.ok ? trans.__('ok') : trans.__('OOM')}
                </span>
              </td>
              <td className="jp-GpuMem-num">{formatBytes(trial.peak_bytes, 'auto')}</td>
              <td className="jp-GpuMem-num">{formatBytes(trial.reserved_bytes, 'auto')}</td>
              <td className="jp-GpuMem-num">{trial.seconds.toFixed(2)}</td>
              <td className="jp-GpuMem-richNote">{trial.error ?? ''}</td>
            </tr>
          ))}
          {payload.trials.length === 0 && (
            <tr>
              <td colSpan={8} className="jp-GpuMem-muted">
                {NOT_MEASURED}
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <TextList className="jp-GpuMem-richNotes" title={trans.__('Notes')} items={payload.notes} />
      <div className="jp-GpuMem-richActions">
        <CopyYamlButton yaml={configYaml(payload)} copy={props.copy} trans={trans} />
      </div>
    </div>
  );
}
