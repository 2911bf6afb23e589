/**
 * A Copy button that says it copied: its label reads "Copied" for a moment (or "Copy failed"), and a
 * polite live region announces the same to screen readers — a click that changes nothing visible reads
 * as a click that did nothing.
 */
import * as React from 'react';

import type { Trans } from './i18n';

/** How long the button says "Copied". */
export const COPIED_MS = 2000;

export interface ICopyButtonProps {
  /**
   * Copies to the clipboard (what, it decides at click time); may return a promise. A throw or a rejected
   * promise reads "Copy failed".
   */
  readonly copy: () => unknown;
  readonly label: string;
  readonly trans: Trans;
  readonly className?: string;
  readonly title?: string;
  readonly disabled?: boolean;
}

type CopyState = 'idle' | 'copied' | 'failed';

/** `<button>` plus its `<span role="status">`, kept together in `.jp-GpuMem-copyWrap`. */
export function CopyButton(props: ICopyButtonProps): JSX.Element {
  const { trans } = props;
  const [state, setState] = React.useState<CopyState>('idle');
  React.useEffect(() => {
    if (state === 'idle') {
      return;
    }
    const timer = setTimeout(() => setState('idle'), COPIED_MS);
    return () => clearTimeout(timer);
  }, [state]);
  const onClick = (): void => {
    let done: unknown;
    try {
      done = props.copy(); // at once: the clipboard needs the click's user activation
    } catch {
      setState('failed');
      return;
    }
    if (typeof (done as { then?: unknown } | null)?.then === 'function') {
      (done as PromiseLike<unknown>).then(
        () => setState('copied'),
        () => setState('failed')
      );
    } else {
      setState('copied'); // copied synchronously (JupyterLab's Clipboard.copyToSystem)
    }
  };
  const said =
    state === 'copied' ? trans.__('Copied') : state === 'failed' ? trans.__('Copy failed') : props.label;
  return (
    <span className="jp-GpuMem-copyWrap">
      <button
        type="button"
        className={`jp-mod-styled ${props.className ?? ''}`.trim()}
        data-copy-state={state}
        title={props.title}
        disabled={props.disabled}
        onClick={onClick}
      >
        {said}
      </button>
      <span className="jp-GpuMem-copyStatus" role="status" aria-live="polite">
        {state === 'copied'
          ? trans.__('Copied to the clipboard')
          : state === 'failed'
            ? trans.__('Could not copy to the clipboard')
            : ''}
      </span>
    </span>
  );
}
