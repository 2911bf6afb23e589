/**
 * The panel's action part: the "Clear GPU memory" and "Restart and free" buttons, their reports, and the
 * checklist of the last CUDA out-of-memory error of the notebook the panel follows.
 *
 * The buttons are disabled while either runs (a second press would queue a second request behind a busy
 * kernel); while the kernel runs a cell, a clear says "queued: kernel busy" until its turn comes.
 */
import * as React from 'react';

import { OomChecklist } from './oom/checklist';
import { ClearReport } from './clear/report';
import type { SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { checklistMarkdown } from './oom/text';
import { RestartReport } from './restart/report';
import type { IGpuMemActions, ISessionActions } from '../tokens';

export interface IActionsSectionProps {
  readonly actions: ISessionActions;
  readonly manager: IGpuMemActions;
  readonly unit: SizeUnit;
  readonly trans: Trans;
  readonly onCopy: (text: string) => void;
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

function OomSection(props: IActionsSectionProps): JSX.Element | null {
  const { actions, manager, trans } = props;
  const run = actions.oomRun;
  if (run === null) {
    return null;
  }
  let body: JSX.Element;
  if (run.phase === 'ready' && run.payload !== null) {
    const payload = run.payload;
    const label = (kernelId: string): string | null => manager.labelKernel(kernelId);
    body = (
      <OomChecklist
        payload={payload}
        trans={trans}
        ticks={actions.ticks}
        onTick={(id, ticked) => actions.setTick(id, ticked)}
        onAction={step => void actions.runStep(step)}
        busy={actions.busy}
        kernelLabel={label}
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
        <h3>{trans.__('CUDA out of memory')}</h3>
        <Dismiss trans={trans} onClick={() => actions.dismissOom()} />
      </div>
      {body}
    </section>
  );
}

/** `<section class="jp-GpuMem-actionsSection">`. */
export function ActionsSection(props: IActionsSectionProps): JSX.Element {
  const { actions, unit, trans } = props;
  const clear = actions.clearRun;
  const restart = actions.restartRun;
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
      {clear !== null && (
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
      {restart !== null && (
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
