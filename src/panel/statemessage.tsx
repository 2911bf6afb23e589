/**
 * The blank-state message: what the panel says when it cannot show live numbers, and what the user can do.
 *
 * Commands to run (install, load, upgrade) are shown as code with a Copy button, because the fix is always
 * "run this in the notebook" and retyping `%pip install jupyterlab-gpumem` is where typos happen.
 */
import * as React from 'react';

import { CopyButton } from '../ui/copybutton';
import type { Trans } from '../ui/i18n';
import { describeState, type IBridgeState } from '../channel/state';

export interface IStateMessageProps {
  readonly state: IBridgeState;
  readonly trans: Trans;
  /** Copy text to the clipboard (the button says "Copied" once it returned or its promise resolved). */
  readonly onCopy: (text: string) => void | Promise<void>;
  readonly onRetry: () => void;
  readonly onLoadNow: () => void;
}

/** Renders `<div class="jp-GpuMem-state" data-state="...">` with the state's message and actions. */
export function StateMessage(props: IStateMessageProps): JSX.Element {
  const { state, trans } = props;
  const message = describeState(state, trans);
  const canRetry = state.name === 'error' || state.name === 'not-installed' || state.name === 'stale';
  return (
    <div className="jp-GpuMem-state" data-state={state.name} role="status">
      <p className="jp-GpuMem-stateText">{message.text}</p>
      {state.name === 'not-installed' && state.detail !== null && (
        <p className="jp-GpuMem-stateDetail">{state.detail}</p>
      )}
      {message.command !== null && (
        <div className="jp-GpuMem-command">
          <code>{message.command}</code>
          <CopyButton
            className="jp-GpuMem-copy"
            title={trans.__('Copy to the clipboard')}
            label={trans.__('Copy')}
            copy={() => props.onCopy(message.command ?? '')}
            trans={trans}
          />
        </div>
      )}
      {(canRetry || state.name === 'autoload-off') && (
        <div className="jp-GpuMem-actions">
          {state.name === 'autoload-off' && (
            <button
              type="button"
              className="jp-mod-styled jp-mod-accept"
              title={trans.__('Load gpumem_kernel in this kernel now')}
              onClick={props.onLoadNow}
            >
              {trans.__('Load now')}
            </button>
          )}
          {canRetry && (
            <button
              type="button"
              className="jp-mod-styled"
              title={trans.__('Connect to the kernel again')}
              onClick={props.onRetry}
            >
              {trans.__('Retry')}
            </button>
          )}
        </div>
      )}
    </div>
  );
}
