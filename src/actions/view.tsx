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
 *
 * The newest card is open; the older ones fold into one "Earlier (N)" list, so that the panel's live figures
 * stay in view — except the checklist of an OOM still open (current, unresolved), which is what the user is
 * working through. A checklist whose cell later ran without error is marked resolved and folds.
 *
 * "Restart and free" is a plain button while there is nothing to free; it turns red (warn) only when this
 * kernel holds GPU memory or an OOM checklist is open.
 */
import * as React from 'react';

import { LinkedOomChecklist } from './oom/linked';
import { ClearReport } from './clear/report';
import { clearFreedText, clearHeadline } from './clear/text';
import { stepFeedback } from './feedback';
import { formatTimeOfDay, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { type OomFamily, oomFamily } from './oom/detect';
import { checklistMarkdown, familyLabel, familyTitle, withoutFamily } from './oom/text';
import { RestartReport, restartHeadline } from './restart/report';
import type {
  ActionCard,
  IGpuMemActions,
  IKernelRunTag,
  IOomOutputs,
  IOomRun,
  ISessionActions
} from '../tokens';

export interface IActionsSectionProps {
  readonly actions: ISessionActions;
  readonly manager: IGpuMemActions;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  readonly onCopy: (text: string) => void;
  /** Where the full OOM checklists are, which the panel's short checklist links to (absent: the full one shows here). */
  readonly oomOutputs?: IOomOutputs | null;
  /** False when the panel's state says the kernel sees no GPU (no driver is waited for); default true. */
  readonly gpu?: boolean;
  /** True when this kernel holds GPU memory (NVML lists it): restarting frees something. */
  readonly holdsGpu?: boolean;
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

/** The card's title: the family, with what the checklist knows of it ("CUDA out of memory (PyTorch's allocator)"). */
function oomTitle(run: IOomRun, trans: Trans): string {
  return run.payload !== null ? familyLabel(run.payload, trans) : familyTitle(family(run), trans);
}

/** True while an OOM card asks for action: of the current kernel run and not resolved. */
export function oomOpen(actions: ISessionActions): boolean {
  const run = actions.oomRun;
  return run !== null && !isHistory(actions, run) && (run.resolved ?? null) === null;
}

/**
 * "Resolved: In [7] ran without error after Clear GPU memory (freed 128 MiB)." — what the user tried is the
 * steps ticked (the clear with what it freed) and a restart since the error; without any, when it ran.
 */
export function resolvedText(
  actions: ISessionActions,
  run: IOomRun,
  unit: SizeUnit,
  trans: Trans
): string | null {
  const resolved = run.resolved ?? null;
  if (resolved === null) {
    return null;
  }
  const tick = actions.clearTick ?? null;
  const tried = (run.payload?.steps ?? [])
    .filter(step => actions.ticks.has(step.id))
    .map(step =>
      tick !== null && tick.stepId === step.id
        ? `${step.title} (${clearFreedText(tick.report, unit, trans)})`
        : step.title
    );
  if (
    isHistory(actions, run) &&
    !(run.payload?.steps ?? []).some(s => s.action === 'restart' && actions.ticks.has(s.id))
  ) {
    tried.push(trans.__('a kernel restart'));
  }
  const cell =
    resolved.executionCount !== null ? trans.__('In [%1]', resolved.executionCount) : trans.__('The cell');
  return tried.length > 0
    ? trans.__('Resolved: %1 ran without error after %2.', cell, tried.join(', '))
    : trans.__('Resolved: %1 ran without error at %2.', cell, formatTimeOfDay(resolved.time / 1000));
}

/** The resolved line of a card and its content folded behind "Show the checklist" (null: not resolved). */
function ResolvedFold(props: { text: string | null; label: string; children: React.ReactNode }): JSX.Element {
  if (props.text === null) {
    return <>{props.children}</>;
  }
  return (
    <>
      <p className="jp-GpuMem-oomResolved" role="status">
        {props.text}
      </p>
      <details className="jp-GpuMem-cardFold">
        <summary>{props.label}</summary>
        {props.children}
      </details>
    </>
  );
}

/** One OOM card of an earlier kernel run: what failed, why nothing here applies now, no buttons. */
function OomHistory(props: IActionsSectionProps): JSX.Element | null {
  const { actions, trans } = props;
  const run = actions.oomRun;
  if (run === null) {
    return null;
  }
  const summary = run.payload?.summary[0];
  const headline =
    summary !== undefined
      ? withoutFamily(summary, run.payload?.info.backend ?? null)
      : run.error.evalue !== ''
        ? `${run.error.ename}: ${run.error.evalue}`
        : null;
  const when = run.payload?.occurrence?.time;
  const resolved = resolvedText(actions, run, props.unit, trans);
  return (
    <section
      className="jp-GpuMem-oom jp-mod-history"
      data-phase={run.phase}
      data-history="previous-run"
      data-resolved={resolved !== null ? 'yes' : 'no'}
      aria-label={trans.__('%1, from an earlier kernel run', familyTitle(family(run), trans))}
    >
      <div className="jp-GpuMem-sectionHead">
        <h3>
          {familyTitle(family(run), trans)} <HistoryTag trans={trans} />
        </h3>
        <Dismiss trans={trans} onClick={() => actions.dismissOom()} />
      </div>
      {resolved !== null && (
        <p className="jp-GpuMem-oomResolved" role="status">
          {resolved}
        </p>
      )}
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
        headed={true}
        tracebackDropped={(actions.clearTick?.report.traceback_frames ?? 0) > 0}
        widgetId={actions.widgetId}
        outputs={props.oomOutputs ?? null}
        payload={payload}
        trans={trans}
        ticks={actions.ticks}
        onTick={(id, ticked) => actions.setTick(id, ticked)}
        onAction={step => void actions.runStep(step)}
        busy={actions.busy}
        kernelLabel={label}
        feedback={
          key === null
            ? undefined
            : step => stepFeedback(actions, key, step.id, props.unit, trans, props.gpu ?? true)
        }
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
  const resolved = resolvedText(actions, run, props.unit, trans);
  return (
    <section
      className={resolved !== null ? 'jp-GpuMem-oom jp-mod-resolved' : 'jp-GpuMem-oom'}
      data-phase={run.phase}
      data-resolved={resolved !== null ? 'yes' : 'no'}
      aria-live="polite"
    >
      <div className="jp-GpuMem-sectionHead">
        <h3>{oomTitle(run, trans)}</h3>
        <Dismiss trans={trans} onClick={() => actions.dismissOom()} />
      </div>
      <ResolvedFold text={resolved} label={trans.__('Show the checklist')}>
        {body}
      </ResolvedFold>
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

/** The buttons: "Clear GPU memory" and "Restart and free" (red only when there is something to free). */
export function ActionBar(props: IActionsSectionProps): JSX.Element {
  const { actions, trans } = props;
  const gpu = props.gpu ?? true;
  const loud = (props.holdsGpu ?? false) || oomOpen(actions);
  return (
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
        className={`jp-mod-styled${loud ? ' jp-mod-warn' : ''} jp-GpuMem-restartButton`}
        data-loud={loud ? 'yes' : 'no'}
        disabled={actions.busy}
        title={
          gpu
            ? trans.__('Restart the kernel, wait until the GPU driver releases it, and report what was freed')
            : trans.__('Restart the kernel: all variables are lost')
        }
        onClick={() => void actions.restartAndFree()}
      >
        {trans.__('Restart and free')}
      </button>
    </div>
  );
}

function ClearCard(props: IActionsSectionProps): JSX.Element | null {
  const { actions, unit, trans } = props;
  const clear = actions.clearRun;
  if (clear === null) {
    return null;
  }
  if (isHistory(actions, clear)) {
    return (
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
    );
  }
  return (
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
  );
}

function RestartCard(props: IActionsSectionProps): JSX.Element | null {
  const { actions, unit, trans } = props;
  const restart = actions.restartRun;
  if (restart === null) {
    return null;
  }
  const report = (
    <RestartReport
      run={restart}
      unit={unit}
      trans={trans}
      gpu={props.gpu ?? true}
      onEnd={pid => void actions.endLeftover(pid)}
    />
  );
  // A restart under way started in the previous run; it is current until it ends.
  if (!actions.restarting && isHistory(actions, restart)) {
    return (
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
        {report}
      </ReportHistory>
    );
  }
  return (
    <section className="jp-GpuMem-restart" data-phase={restart.phase}>
      <div className="jp-GpuMem-sectionHead">
        <h3>
          {restart.clearOutputs ? trans.__('Restart, clear outputs and free') : trans.__('Restart and free')}
        </h3>
        {!actions.restarting && <Dismiss trans={trans} onClick={() => actions.dismissReport('restart')} />}
      </div>
      {report}
    </section>
  );
}

/** The panel's fixed order of cards, for actions that do not say which came last. */
const CARD_ORDER: ReadonlyArray<ActionCard> = ['oom', 'clear', 'restart'];

/**
 * The cards there are, newest first: `open` (the newest, and an OOM checklist still open) and `earlier` (the
 * rest, folded into one list).
 */
export function cardLayout(actions: ISessionActions): { open: ActionCard[]; earlier: ActionCard[] } {
  const present = (card: ActionCard): boolean =>
    card === 'oom'
      ? actions.oomRun !== null
      : card === 'clear'
        ? actions.clearRun !== null
        : actions.restartRun !== null;
  const cards = (actions.cards ?? CARD_ORDER).filter(present);
  const pinned = oomOpen(actions);
  const open = cards.filter((card, i) => i === 0 || (card === 'oom' && pinned));
  return { open, earlier: cards.filter(card => !open.includes(card)) };
}

/** The cards of the session: the newest open, the older ones folded under "Earlier (N)". */
export function ActionCards(props: IActionsSectionProps): JSX.Element | null {
  const { actions, trans } = props;
  const { open, earlier } = cardLayout(actions);
  if (open.length === 0) {
    return null;
  }
  const card = (kind: ActionCard): JSX.Element => {
    switch (kind) {
      case 'oom':
        return <OomSection key="oom" {...props} />;
      case 'clear':
        return <ClearCard key="clear" {...props} />;
      case 'restart':
        return <RestartCard key="restart" {...props} />;
    }
  };
  return (
    <div className="jp-GpuMem-cards">
      {open.map(card)}
      {earlier.length > 0 && (
        <details className="jp-GpuMem-earlier">
          <summary>{trans.__('Earlier (%1)', earlier.length)}</summary>
          {earlier.map(card)}
        </details>
      )}
    </div>
  );
}

/** `<section class="jp-GpuMem-actionsSection">`: the buttons and the cards together. */
export function ActionsSection(props: IActionsSectionProps): JSX.Element {
  return (
    <section className="jp-GpuMem-actionsSection">
      <ActionBar {...props} />
      <ActionCards {...props} />
    </section>
  );
}
