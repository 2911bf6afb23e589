/**
 * The OOM checklist: what failed, what the kernel found, and the steps from cheapest to most drastic, each
 * with a tick box and — where the kernel named one — a button that does it.
 *
 * The same component renders in the panel and inline in the cell output (the MIME renderer), so a user who
 * scrolls back to the failed cell finds the same buttons. Every string comes from the kernel and is rendered
 * as React text (escaped), never as HTML.
 */
import * as React from 'react';

import type { Trans } from '../../ui/i18n';
import { diagnosisLines, stepActionLabel } from './text';
import type { IOomPayload, IOomStep } from '../../wire/protocol';

export interface IOomChecklistProps {
  readonly payload: IOomPayload;
  readonly trans: Trans;
  /** Ticked step ids; null hides the tick boxes (nowhere to remember them). */
  readonly ticks: ReadonlySet<string> | null;
  readonly onTick?: (stepId: string, ticked: boolean) => void;
  /** Runs a step's action; null shows no action buttons (advice and code only). */
  readonly onAction: ((step: IOomStep) => void) | null;
  /** Clear or restart is under way: their buttons are disabled. */
  readonly busy?: boolean;
  /** "notebook: a.ipynb" for a `shutdown-kernel` step's kernel (null: not a kernel of this server). */
  readonly kernelLabel?: (kernelId: string) => string | null;
  readonly onCopyMarkdown?: () => void;
  readonly onResetTicks?: () => void;
  readonly onDismiss?: () => void;
}

function StepItem(props: { step: IOomStep; index: number; checklist: IOomChecklistProps }): JSX.Element {
  const { step, index, checklist } = props;
  const { trans, ticks } = checklist;
  const ticked = ticks?.has(step.id) ?? false;
  const label = stepActionLabel(step, trans);
  const where =
    step.action === 'shutdown-kernel' && step.kernel_id !== null
      ? (checklist.kernelLabel?.(step.kernel_id) ?? null)
      : null;
  const disabled =
    (checklist.busy === true &&
      (step.action === 'clear' ||
        step.action === 'restart' ||
        step.action === 'insert-env-cell-and-restart')) ||
    (step.action === 'shutdown-kernel' && where === null && checklist.kernelLabel !== undefined);
  const titleId = `jp-GpuMem-step-${step.id}-${index}`;
  return (
    <li
      className={`jp-GpuMem-oomStep${ticked ? ' jp-mod-ticked' : ''}`}
      data-step-id={step.id}
      data-action={step.action ?? ''}
    >
      <div className="jp-GpuMem-oomStepHead">
        {ticks !== null && (
          <input
            type="checkbox"
            className="jp-GpuMem-oomTick"
            checked={ticked}
            aria-labelledby={titleId}
            title={trans.__('Mark as tried')}
            onChange={event => checklist.onTick?.(step.id, event.currentTarget.checked)}
          />
        )}
        <span className="jp-GpuMem-oomStepTitle" id={titleId}>
          {step.title}
        </span>
      </div>
      {step.detail !== '' && <p className="jp-GpuMem-oomStepDetail">{step.detail}</p>}
      {where !== null && <p className="jp-GpuMem-oomStepWhere">{where}</p>}
      {step.code !== null && (
        <details className="jp-GpuMem-oomCode">
          <summary>{trans.__('Show the code')}</summary>
          <pre>
            <code>{step.code}</code>
          </pre>
        </details>
      )}
      {label !== null && checklist.onAction !== null && (
        <button
          type="button"
          className={`jp-mod-styled jp-GpuMem-oomAction${
            step.action === 'shutdown-kernel' || step.action === 'insert-env-cell-and-restart'
              ? ' jp-mod-warn'
              : ''
          }`}
          disabled={disabled}
          onClick={() => checklist.onAction?.(step)}
        >
          {label}
        </button>
      )}
    </li>
  );
}

/** `<div class="jp-GpuMem-oomChecklist">`. */
export function OomChecklist(props: IOomChecklistProps): JSX.Element {
  const { payload, trans } = props;
  const findings = diagnosisLines(payload, trans);
  return (
    <div className="jp-GpuMem-oomChecklist" data-format={payload.info.format}>
      <div className="jp-GpuMem-oomSummary">
        {payload.summary.map((line, i) => (
          <p key={i} className={i === 0 ? 'jp-GpuMem-oomHeadline' : undefined}>
            {line}
          </p>
        ))}
      </div>
      {findings.length > 0 && (
        <ul className="jp-GpuMem-oomDiagnosis" aria-label={trans.__('Diagnosis')}>
          {findings.map((line, i) => (
            <li key={i}>{line}</li>
          ))}
        </ul>
      )}
      <h4 className="jp-GpuMem-oomStepsTitle">{trans.__('Checklist (cheapest first)')}</h4>
      <ol className="jp-GpuMem-oomSteps">
        {payload.steps.map((step, i) => (
          <StepItem key={`${step.id}#${i}`} step={step} index={i} checklist={props} />
        ))}
      </ol>
      {(props.onCopyMarkdown || props.onResetTicks || props.onDismiss) && (
        <div className="jp-GpuMem-oomFooter">
          {props.onCopyMarkdown && (
            <button
              type="button"
              className="jp-mod-styled jp-GpuMem-oomCopy"
              title={trans.__('Copy the checklist with its diagnosis as Markdown')}
              onClick={props.onCopyMarkdown}
            >
              {trans.__('Copy as Markdown')}
            </button>
          )}
          {props.onResetTicks && props.ticks !== null && props.ticks.size > 0 && (
            <button type="button" className="jp-mod-styled jp-GpuMem-oomReset" onClick={props.onResetTicks}>
              {trans.__('Untick all')}
            </button>
          )}
          {props.onDismiss && (
            <button type="button" className="jp-mod-styled jp-GpuMem-oomDismiss" onClick={props.onDismiss}>
              {trans.__('Dismiss')}
            </button>
          )}
        </div>
      )}
    </div>
  );
}
