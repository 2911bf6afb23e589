/**
 * The panel's action part: the "Clear GPU memory" and "Restart and free" buttons, their reports, and the
 * checklist of the last CUDA out-of-memory error of the notebook the panel follows.
 *
 * The buttons are disabled while either runs (a second press would queue a second request behind a busy
 * kernel); while the kernel runs a cell, a clear says "queued: kernel busy" until its turn comes.
 *
 * A report or checklist of an earlier kernel run (the kernel restarted, died or was replaced since) is not
 * shown as current: its figures and buttons were about a process that is gone. It shrinks to one line marked
 * "from an earlier kernel run", with what it said behind a disclosure and no action buttons.
 */
import * as React from 'react';

import { LinkedOomChecklist } from './oom/linked';
import { ClearReport } from './clear/report';
import { clearHeadline } from './clear/text';
import { stepFeedback } from './feedback';
import { formatTimeOfDay, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { type OomFamily, oomFamily } from './oom/detect';
import { checklistMarkdown, familyTitle } from './oom/text';
import { RestartReport, restartHeadline } from './restart/report';
import type { IGpuMemActions, IKernelRunTag, IOomOutputs, ISessionActions } from '../tokens';

export interface IActionsSectionProps {
  readonly actions: ISessionActions;
  readonly manager: IGpuMemActions;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  readonly onCopy: (text: string) => void;
  /** Where the full OOM checklists are, which the panel's short checklist links to (absent: the full one shows here). */
  readonly oomOutputs?: IOomOutputs | null;
}

function Dismiss(props: { trans: Trans; onClick: () => void }): JSX.Element {
  return (
    <button
      type="button"
      className="jp-GpuMem-dismiss"
      title={props.trans.__('Dismiss')}
      aria-label={props.trans.__('Dismiss')}
      onClick={props.onClick}
    >
      ×
    </button>
  );
}

/** True for a report or checklist of an earlier kernel run than the session's current one. */
export function isHistory(actions: ISessionActions, run: IKernelRunTag): boolean {
  return run.kernelRun < actions.kernelRun;
}

/** The label of a card of an earlier kernel run. */
function HistoryTag(props: { trans: Trans }): JSX.Element {
  return <span className="jp-GpuMem-historyTag">{props.trans.__('from an earlier kernel run')}</span>;
}

/** The run's family: the kernel's (its checklist), else what the browser recognised in the error. */
function family(run: NonNullable<ISessionActions['oomRun']>): OomFamily | null {
  return run.payload?.info.family ?? oomFamily(run.error.ename, run.error.evalue);
}

/** One OOM card of an earlier kernel run: what failed, why nothing here applies now, no buttons. */
function OomHistory(props: IActionsSectionProps): JSX.Element | null {
  const { actions, trans } = props;
  const run = actions.oomRun;
  if (run === null) {
    return null;
  }
  const headline =
    run.payload?.summary[0] ?? (run.error.evalue !== '' ? `${run.error.ename}: ${run.error.evalue}` : null);
  const when = run.payload?.occurrence?.time;
  return (
    <section
      className="jp-GpuMem-oom jp-mod-history"
      data-phase={run.phase}
      data-history="previous-run"
      aria-label={trans.__('%1, from an earlier kernel run', familyTitle(family(run), trans))}
    >
      <div className="jp-GpuMem-sectionHead">
        <h3>
          {familyTitle(family(run), trans)} <HistoryTag trans={trans} />
        </h3>
        <Dismiss trans={trans} onClick={() => actions.dismissOom()} />
      </div>
      {headline !== null && <p className="jp-GpuMem-historyLine">{headline}</p>}
      <p className="jp-GpuMem-muted">
        {when !== undefined
          ? trans.__(
              'This error happened at %1 in a kernel process that has ended since; its figures and steps no longer apply. Run the cell again to see whether it still runs out of memory.',
              formatTimeOfDay(when)
            )
          : trans.__(
              'This error happened in a kernel process that has ended since; its figures and steps no longer apply. Run the cell again to see whether it still runs out of memory.'
            )}
      </p>
    </section>
  );
}

function OomSection(props: IActionsSectionProps): JSX.Element | null {
  const { actions, manager, trans } = props;
  const run = actions.oomRun;
  if (run === null) {
    return null;
  }
  if (isHistory(actions, run)) {
    return <OomHistory {...props} />;
  }
  let body: JSX.Element;
  if (run.phase === 'ready' && run.payload !== null) {
    const payload = run.payload;
    const key = actions.oomKey;
    const label = (kernelId: string): string | null => manager.labelKernel(kernelId);
    body = (
      <LinkedOomChecklist
        widgetId={actions.widgetId}
        outputs={props.oomOutputs ?? null}
        payload={payload}
        trans={trans}
        ticks={actions.ticks}
        onTick={(id, ticked) => actions.setTick(id, ticked)}
        onAction={step => void actions.runStep(step)}
        busy={actions.busy}
        kernelLabel={label}
        feedback={key === null ? undefined : step => stepFeedback(actions, key, step.id, props.unit, trans)}
        onCopyMarkdown={() => props.onCopy(checklistMarkdown(payload, actions.ticks, trans, label))}
        onResetTicks={() => actions.resetTicks()}
      />
    );
  } else if (run.phase === 'failed') {
    body = (
      <>
        {run.error.evalue !== '' && (
          <p className="jp-GpuMem-oomError">{`${run.error.ename}: ${run.error.evalue}`}</p>
        )}
        <p className="jp-GpuMem-bad">{trans.__('No checklist: %1', run.problem ?? '')}</p>
      </>
    );
  } else {
    body = (
      <p className="jp-GpuMem-muted">
        {run.phase === 'waiting'
          ? trans.__('Waiting for the failed cell to finish…')
          : trans.__('Building the checklist…')}
      </p>
    );
  }
  return (
    <section className="jp-GpuMem-oom" data-phase={run.phase} aria-live="polite">
      <div className="jp-GpuMem-sectionHead">
        <h3>{familyTitle(family(run), trans)}</h3>
        <Dismiss trans={trans} onClick={() => actions.dismissOom()} />
      </div>
      {body}
    </section>
  );
}

/** A clear or restart report of an earlier kernel run: its headline, the report behind a disclosure. */
function ReportHistory(props: {
  kind: 'clear' | 'restart';
  title: string;
  headline: string | null;
  trans: Trans;
  onDismiss: () => void;
  children: React.ReactNode;
}): JSX.Element {
  const { trans } = props;
  return (
    <section
      className={`jp-GpuMem-${props.kind} jp-mod-history`}
      data-phase="history"
      data-history="previous-run"
    >
      <div className="jp-GpuMem-sectionHead">
        <h3>
          {props.title} <HistoryTag trans={trans} />
        </h3>
        <Dismiss trans={trans} onClick={props.onDismiss} />
      </div>
      {props.headline !== null && <p className="jp-GpuMem-historyLine">{props.headline}</p>}
      <details className="jp-GpuMem-historyDetails">
        <summary>{trans.__('What it reported then')}</summary>
        {props.children}
      </details>
    </section>
  );
}

/** `<section class="jp-GpuMem-actionsSection">`. */
export function ActionsSection(props: IActionsSectionProps): JSX.Element {
  const { actions, unit, trans } = props;
  const clear = actions.clearRun;
  const restart = actions.restartRun;
  // A restart under way started in the previous run; it is current until it ends.
  const restartIsHistory = restart !== null && !actions.restarting && isHistory(actions, restart);
  return (
    <section className="jp-GpuMem-actionsSection">
      <div className="jp-GpuMem-actionBar">
        <button
          type="button"
          className="jp-mod-styled jp-GpuMem-clearButton"
          disabled={actions.busy}
          title={trans.__(
            'Drop what pins GPU memory (the last traceback, cached outputs), collect garbage and empty PyTorch’s cache. Your variables stay.'
          )}
          onClick={() => void actions.clear()}
        >
          {trans.__('Clear GPU memory')}
        </button>
        <button
          type="button"
          className="jp-mod-styled jp-mod-warn jp-GpuMem-restartButton"
          disabled={actions.busy}
          title={trans.__(
            'Restart the kernel, wait until the GPU driver releases it, and report what was freed'
          )}
          onClick={() => void actions.restartAndFree()}
        >
          {trans.__('Restart and free')}
        </button>
      </div>
      <OomSection {...props} />
      {clear !== null && isHistory(actions, clear) && (
        <ReportHistory
          kind="clear"
          title={trans.__('Clear GPU memory')}
          headline={
            clear.report !== null
              ? clearHeadline(clear.report, unit, trans)
              : clear.phase === 'failed'
                ? trans.__('Clearing failed: %1', clear.error ?? '')
                : trans.__('The kernel ended before clearing finished.')
          }
          trans={trans}
          onDismiss={() => actions.dismissReport('clear')}
        >
          {clear.report !== null && <ClearReport report={clear.report} unit={unit} trans={trans} />}
        </ReportHistory>
      )}
      {clear !== null && !isHistory(actions, clear) && (
        <section className="jp-GpuMem-clear" data-phase={clear.phase}>
          <div className="jp-GpuMem-sectionHead">
            <h3>{trans.__('Clear GPU memory')}</h3>
            {clear.phase !== 'running' && (
              <Dismiss trans={trans} onClick={() => actions.dismissReport('clear')} />
            )}
          </div>
          {clear.phase === 'running' && (
            <p className="jp-GpuMem-actionStatus" role="status">
              {actions.kernelBusy ? trans.__('queued: kernel busy') : trans.__('Clearing…')}
            </p>
          )}
          {clear.phase === 'failed' && (
            <p className="jp-GpuMem-bad">{trans.__('Clearing failed: %1', clear.error ?? '')}</p>
          )}
          {clear.report !== null && <ClearReport report={clear.report} unit={unit} trans={trans} />}
        </section>
      )}
      {restart !== null && restartIsHistory && (
        <ReportHistory
          kind="restart"
          title={trans.__('Restart and free')}
          headline={
            restart.report !== null
              ? restartHeadline(restart.report, unit, trans)
              : trans.__('Restart failed: %1', restart.error ?? '')
          }
          trans={trans}
          onDismiss={() => actions.dismissReport('restart')}
        >
          <RestartReport
            run={restart}
            unit={unit}
            trans={trans}
            onEnd={pid => void actions.endLeftover(pid)}
          />
        </ReportHistory>
      )}
      {restart !== null && !restartIsHistory && (
        <section className="jp-GpuMem-restart" data-phase={restart.phase}>
          <div className="jp-GpuMem-sectionHead">
            <h3>
              {restart.clearOutputs
                ? trans.__('Restart, clear outputs and free')
                : trans.__('Restart and free')}
            </h3>
            {!actions.restarting && (
              <Dismiss trans={trans} onClick={() => actions.dismissReport('restart')} />
            )}
          </div>
          <RestartReport
            run={restart}
            unit={unit}
            trans={trans}
            onEnd={pid => void actions.endLeftover(pid)}
          />
        </section>
      )}
    </section>
  );
}
