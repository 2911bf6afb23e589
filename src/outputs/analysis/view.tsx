/**
 * The `%gpumem analyze` output (`application/vnd.gpumem.analysis.v1+json`): the memory of one training step by
 * category, a stacked bar against the device limit, predicted peak against batch size with the three picks,
 * recommendation cards, the error bound and notes, "Copy as YAML" and "Insert code" for gradient accumulation.
 *
 * The meaning of every figure follows gpumem_kernel/analysis/render.py (the text/plain and text/html fallbacks).
 *
 * This file holds the top-level component (header, facts, error bound, notes and actions); its sections live
 * beside it: cards.tsx, advice.tsx (what makes it fit, with `--advise`), stack.tsx, curve.tsx, breakdown.tsx,
 * evaluation.tsx and llm.tsx (the language-model facts and the longest sequence).
 */
import * as React from 'react';

import { AdviceTable } from './advice';
import { BreakdownTable, DistributedTable } from './breakdown';
import { Cards } from './cards';
import { CurveChart } from './curve';
import { EvaluationLine } from './evaluation';
import { engineLabel, size } from './figures';
import { LanguageModelTable, SequenceTable } from './llm';
import { StackedBar } from './stack';
import { configYaml, type CopyText, CopyYamlButton, RichBadge, TextList } from '../kit';
import { roundingText } from '../picks';
import type { IAnalysisPayload } from '../../wire/analysispayload';
import { formatCount, formatSeconds } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

function title(payload: IAnalysisPayload, trans: Trans): string {
  const device = payload.device;
  switch (device.source) {
    case 'nvml':
      return trans.__('Memory analysis · %1: %2', payload.settings.device ?? 'GPU 0', device.name ?? '?');
    case 'target':
    case 'memory':
      return trans.__('Memory analysis · planning for %1', device.name ?? '?');
    case 'none':
      return trans.__('Memory analysis · no GPU (pass --target or --memory for batch sizes)');
  }
}

/**
 * The payload's `accumulation_code`, written by the kernel: the gradient-accumulation loop at the recommended
 * pick, or null when none is needed (and for outputs saved before the kernel wrote it).
 */
export function accumulationCode(payload: IAnalysisPayload): string | null {
  const value = (payload as { accumulation_code?: unknown }).accumulation_code;
  return typeof value === 'string' ? value : null;
}

export interface IAnalysisViewProps {
  readonly payload: IAnalysisPayload;
  readonly trans: Trans;
  readonly copy: CopyText;
  /** Inserts a code cell below the output; null hides "Insert code". */
  readonly insertCell: ((code: string) => void) | null;
}

/** "AMP bf16", "AMP bf16 (your step's autocast)" when the user's own step entered it, or "AMP off". */
function ampFact(settings: IAnalysisPayload['settings'], trans: Trans): string {
  if (!settings.amp) {
    return trans.__('AMP off');
  }
  const step = settings.step_autocast;
  return step
    ? trans.__("AMP %1 (your step's autocast, %2)", settings.amp, step.device_type)
    : trans.__('AMP %1', settings.amp);
}

/** `<div class="jp-GpuMem-analysis">`. */
export function AnalysisView(props: IAnalysisViewProps): JSX.Element {
  const { payload, trans } = props;
  const settings = payload.settings;
  const yaml = configYaml(payload);
  const code = accumulationCode(payload);
  const insertCell = props.insertCell;
  const bound = payload.error_bound;
  const facts = [
    trans.__(
      '%1 parameters (%2 trainable)',
      formatCount(payload.model.parameter_count),
      formatCount(payload.model.trainable_parameter_count)
    ),
    trans.__('batch %1', settings.batch_size),
    settings.optimizer,
    ampFact(settings, trans),
    trans.__('input %1', settings.input),
    trans.__(
      'largest layer %1 (%2)',
      payload.model.largest_layer.name,
      size(payload.model.largest_layer.bytes)
    )
  ];
  if (settings.grad_accum > 1) {
    facts.push(trans.__('accumulation %1', settings.grad_accum));
  }
  if (settings.checkpointing) {
    facts.push(trans.__('gradient checkpointing'));
  }
  facts.push(
    trans.__(
      'picks rounded: %1',
      roundingText(payload.recommendations.rounding, settings.round_source, trans)
    )
  );
  if (settings.world_size > 1) {
    facts.push(trans.__('%1 ranks (%2)', settings.world_size, settings.strategy ?? 'ddp'));
  }
  return (
    <div className="jp-GpuMem-analysis">
      <div className="jp-GpuMem-richHeader">
        <span className="jp-GpuMem-richTitle">{title(payload, trans)}</span>
        <RichBadge kind={payload.engine} title={trans.__('which engine produced the figures')}>
          {engineLabel(payload.engine, trans)}
        </RichBadge>
        <RichBadge kind="bound" title={bound.statement}>
          {trans.__('±%1%', Math.round(bound.relative * 100))}
        </RichBadge>
      </div>
      <div className="jp-GpuMem-richFacts">
        <span className="jp-GpuMem-modelName">{payload.model.name}</span>
        {facts.map((fact, i) => (
          <span key={i} className="jp-GpuMem-richFact">
            {fact}
          </span>
        ))}
        <span className="jp-GpuMem-richFact">{formatSeconds(payload.elapsed_seconds)}</span>
      </div>
      <Cards payload={payload} trans={trans} />
      <AdviceTable payload={payload} copy={props.copy} trans={trans} />
      <StackedBar payload={payload} trans={trans} />
      <CurveChart payload={payload} trans={trans} />
      <SequenceTable payload={payload} trans={trans} />
      <BreakdownTable payload={payload} trans={trans} />
      <LanguageModelTable payload={payload} trans={trans} />
      <DistributedTable payload={payload} trans={trans} />
      <EvaluationLine payload={payload} trans={trans} />
      <p className="jp-GpuMem-errorBound">
        <span className="jp-GpuMem-richSectionTitle">{trans.__('Error bound')}</span> {bound.statement}
      </p>
      {payload.recommendations.note && (
        <p className="jp-GpuMem-richNote jp-GpuMem-recommendationNote">{payload.recommendations.note}</p>
      )}
      <TextList className="jp-GpuMem-richNotes" title={trans.__('Notes')} items={payload.notes} />
      <div className="jp-GpuMem-richActions">
        <CopyYamlButton yaml={yaml} copy={props.copy} trans={trans} />
        {insertCell !== null && code !== null && (
          <button
            type="button"
            className="jp-GpuMem-insertCode jp-mod-styled"
            data-code={code}
            title={trans.__('Insert a cell with a gradient-accumulation loop at the recommended batch')}
            onClick={() => insertCell(code)}
          >
            {trans.__('Insert code')}
          </button>
        )}
      </div>
    </div>
  );
}
