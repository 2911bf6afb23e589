/**
 * "After the failing cell's reply": when a follow-up request may be sent to a kernel that just raised.
 *
 * ipykernel aborts every request queued behind a failing cell (stop_on_error) — and it decides so after it
 * has sent that cell's `execute_reply`. It publishes `status: idle` for the cell only once the whole request
 * is handled, so that is the moment a follow-up (the `last_oom()` call) is safe: this module resolves on the
 * IOPub `idle` whose parent is the failing request.
 */
import type { ISignal } from '@lumino/signaling';

import { type IIopubLike, parentIdOf } from './oom/detect';

/** How waiting ended. */
export type IdleOutcome = 'idle' | 'timeout' | 'cancelled';

/**
 * Resolve when IOPub reports `idle` for the request `parentId`; 'timeout' after `timeoutMs`, 'cancelled'
 * when `cancel` resolves first (the kernel restarted or the notebook closed).
 */
export function afterIdle(
  iopub: ISignal<unknown, IIopubLike>,
  parentId: string,
  timeoutMs: number,
  cancel?: Promise<unknown>
): Promise<IdleOutcome> {
  return new Promise<IdleOutcome>(resolve => {
    let done = false;
    const finish = (outcome: IdleOutcome): void => {
      if (done) {
        return;
      }
      done = true;
      clearTimeout(timer);
      iopub.disconnect(onMessage);
      resolve(outcome);
    };
    const onMessage = (_: unknown, msg: IIopubLike): void => {
      if (
        msg.header.msg_type === 'status' &&
        parentIdOf(msg) === parentId &&
        (msg.content as { execution_state?: unknown } | null)?.execution_state === 'idle'
      ) {
        finish('idle');
      }
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    iopub.connect(onMessage);
    void cancel?.then(() => finish('cancelled'));
  });
}
