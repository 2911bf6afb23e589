/**
 * The one line a checklist step shows under its button while its action runs and once it ended: "Clearing…",
 * "Freed 1.20 GiB of GPU memory.", "Restarted: …". The full report stays in the panel; this line answers
 * where the user clicked — the inline checklist under a traceback is often far from the panel's report.
 *
 * Only the clear or restart that this very step started (its origin, `stepOrigin(key, stepId)`) shows here,
 * so the same step of another error, or the panel's own buttons, never borrow it. A clear started elsewhere (the
 * panel's button, `%gpumem clear` in a cell) that ticked the step says so, with what it freed.
 */
import { clearFreedText, clearHeadline } from './clear/text';
import { formatTimeOfDay, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { restartHeadline, restartPhaseText } from './restart/report';
import { stepOrigin } from './ticks';
import type { ISessionActions } from '../tokens';
import type { IStepFeedback } from '../types';

// Declared with the public interfaces' types (tokens.ts's IInlineHost returns it).
export type { IStepFeedback } from '../types';

/**
 * The feedback of step `stepId` of occurrence `key`, or null when that step started nothing (shown) and no
 * clear ticked it. `gpu`: false when the kernel sees no GPU (a restart then waits for no driver).
 */
export function stepFeedback(
  actions: ISessionActions,
  key: string,
  stepId: string,
  unit: SizeUnit,
  trans: Trans,
  gpu = true
): IStepFeedback | null {
  const origin = stepOrigin(key, stepId);
  const clear = actions.clearRun;
  const restart = actions.restartRun;
  if (clear !== null && clear.origin === origin) {
    if (clear.kernelRun < actions.kernelRun) {
      const then =
        clear.report !== null
          ? clearHeadline(clear.report, unit, trans)
          : trans.__('Clearing did not finish: %1', clear.error ?? trans.__('the kernel ended'));
      return { phase: 'history', text: trans.__('In an earlier kernel run: %1', then) };
    }
    switch (clear.phase) {
      case 'running':
        return {
          phase: 'running',
          text: actions.kernelBusy
            ? trans.__('Queued: the kernel is busy running a cell; clearing starts when it ends…')
            : trans.__('Clearing…')
        };
      case 'done':
        return clear.report === null
          ? null
          : {
              phase: 'done',
              text: `${clearHeadline(clear.report, unit, trans)} ${trans.__('The full report is in the GPU Memory panel.')}`
            };
      case 'failed':
        return { phase: 'failed', text: trans.__('Clearing failed: %1', clear.error ?? '') };
    }
  }
  if (restart !== null && restart.origin === origin) {
    switch (restart.phase) {
      case 'failed':
        return { phase: 'failed', text: trans.__('Restart failed: %1', restart.error ?? '') };
      case 'done':
        return restart.report === null
          ? null
          : { phase: 'done', text: restartHeadline(restart.report, unit, trans) };
      default:
        return { phase: 'running', text: restartPhaseText(restart.phase, trans, gpu) };
    }
  }
  const tick = actions.clearTick ?? null;
  if (tick !== null && tick.key === key && tick.stepId === stepId) {
    return {
      phase: 'done',
      text: trans.__(
        'Done by the clear at %1: %2.',
        formatTimeOfDay(tick.time / 1000),
        clearFreedText(tick.report, unit, trans)
      )
    };
  }
  return null;
}
