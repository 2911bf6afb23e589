/**
 * The OOM checklist: what failed, what the kernel found, and the steps in the kernel's order (the diagnosed
 * cause's steps first, then from cheapest to most drastic), each with a tick box and — where the kernel named
 * one — a button that does it. The steps the kernel found cannot help here are folded under "Not applicable
 * here (N)", each with why, so they can still be opened. The order and the fold are the kernel's
 * (gpumem_kernel/oom/order.py order_steps): this view only splits the steps where the payload says.
 *
 * In full (inline, under the traceback) or brief (the panel: the diagnosis, the first steps and a link that
 * opens the full one in the notebook, see ./linked.tsx).
 *
 * The same component renders in the panel and inline in the cell output (the MIME renderer), so a user who
 * scrolls back to the failed cell finds the same buttons. A step whose change the fit advice computed for the
 * model that failed shows its figure ("gradient checkpointing: peak 31.2 GiB → fits at batch 8") above its
 * detail. Every string comes from the kernel and is rendered as React text (escaped), never as HTML.
 */
import * as React from 'react';

import { OomAlive } from './alive';
import { CopyButton } from '../../ui/copybutton';
import type { IStepFeedback } from '../feedback';
import type { TimelineExportFormat } from '../../tokens';
import type { Trans } from '../../ui/i18n';
import {
  diagnosisLines,
  familyLabel,
  splitSteps,
  stepActionLabel,
  stepsHeading,
  withoutFamily
} from './text';
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
  /** What the clear or restart a step started says, shown under that step's button (null: nothing). */
  readonly feedback?: (step: IOomStep) => IStepFeedback | null;
  /** Copies the checklist as Markdown; the button says "Copied" once it returned (or its promise resolved). */
  readonly onCopyMarkdown?: () => unknown;
  readonly onResetTicks?: () => void;
  readonly onDismiss?: () => void;
  /** Brief: show only this many of the steps that may help, and a link to the full checklist (`onOpenFull`). */
  readonly brief?: number;
  /** Opens the full checklist (brief only). */
  readonly onOpenFull?: () => void;
  /**
   * The card around it names the family already (the panel's heading): no family line. Either way the summary's
   * first line goes on from the family named above it, so "CUDA out of memory" is said once.
   */
  readonly headed?: boolean;
  /** A clear has dropped the failed call's traceback since: the diagnosis says so instead of "keeps … alive". */
  readonly tracebackDropped?: boolean;
  /** Downloads the full timeline of "What was alive" (the OOM capture); absent: no download buttons. */
  readonly onExportTimeline?: (id: string, format: TimelineExportFormat) => Promise<unknown>;
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
  const feedback = checklist.feedback?.(step) ?? null;
  const figure = step.figure ?? null;
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
      {(step.not_applicable ?? null) !== null && (
        <p className="jp-GpuMem-oomStepReason">{trans.__('Not applicable: %1', step.not_applicable ?? '')}</p>
      )}
      {figure !== null && (
        <p
          className="jp-GpuMem-oomStepDetail jp-GpuMem-oomStepFigure"
          data-fits={figure.fits ? 'yes' : 'no'}
          title={trans.__('What %gpumem analyze --advise computed for this model with this change')}
        >
          {figure.text}
        </p>
      )}
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
      {feedback !== null && (
        <p className="jp-GpuMem-stepFeedback" data-phase={feedback.phase} role="status" aria-live="polite">
          {feedback.text}
        </p>
      )}
    </li>
  );
}

/** `<div class="jp-GpuMem-oomChecklist">`. */
export function OomChecklistView(props: IOomChecklistProps): JSX.Element {
  const { payload, trans } = props;
  const findings = diagnosisLines(payload, trans, props.tracebackDropped ?? false);
  const { apply, folded } = splitSteps(payload);
  const brief = props.brief !== undefined && props.onOpenFull !== undefined;
  const shown = brief ? apply.slice(0, props.brief) : apply;
  const more = payload.steps.length - shown.length;
  return (
    <div
      className="jp-GpuMem-oomChecklist"
      data-format={payload.info.format}
      data-family={payload.info.family ?? ''}
      data-occurrence={payload.occurrence?.id ?? ''}
      data-brief={brief ? 'yes' : 'no'}
      tabIndex={-1}
    >
      <div className="jp-GpuMem-oomSummary">
        {props.headed !== true && <p className="jp-GpuMem-oomFamily">{familyLabel(payload, trans)}</p>}
        {payload.summary.map((line, i) => (
          <p key={i} className={i === 0 ? 'jp-GpuMem-oomHeadline' : undefined}>
            {i === 0 ? withoutFamily(line, payload.info.backend) : line}
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
      {!brief && payload.alive !== undefined && (
        <OomAlive alive={payload.alive} trans={trans} onExport={props.onExportTimeline} />
      )}
      <h4 className="jp-GpuMem-oomStepsTitle">{stepsHeading(payload, trans)}</h4>
      <ol className="jp-GpuMem-oomSteps">
        {shown.map((step, i) => (
          <StepItem key={`${step.id}#${i}`} step={step} index={i} checklist={props} />
        ))}
      </ol>
      {brief && more > 0 && (
        <p className="jp-GpuMem-oomMore">
          <button
            type="button"
            className="jp-mod-styled jp-mod-accept jp-GpuMem-oomOpenFull"
            title={trans.__('Scroll the notebook to the full checklist under the traceback')}
            onClick={props.onOpenFull}
          >
            {trans.__('Open the full checklist')}
          </button>{' '}
          <span className="jp-GpuMem-muted">
            {trans._n('%1 more step, under the traceback', '%1 more steps, under the traceback', more, more)}
          </span>
        </p>
      )}
      {!brief && folded.length > 0 && (
        <details className="jp-GpuMem-oomFolded">
          <summary>{trans.__('Not applicable here (%1)', folded.length)}</summary>
          <ol className="jp-GpuMem-oomSteps" start={apply.length + 1}>
            {folded.map((step, i) => (
              <StepItem
                key={`${step.id}#${apply.length + i}`}
                step={step}
                index={apply.length + i}
                checklist={props}
              />
            ))}
          </ol>
        </details>
      )}
      {(props.onCopyMarkdown || props.onResetTicks || props.onDismiss) && (
        <div className="jp-GpuMem-oomFooter">
          {props.onCopyMarkdown && (
            <CopyButton
              className="jp-GpuMem-oomCopy"
              title={trans.__('Copy the checklist with its diagnosis as Markdown')}
              label={trans.__('Copy as Markdown')}
              copy={props.onCopyMarkdown}
              trans={trans}
            />
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
