/**
 * Pieces shared by the analysis, autobatch and benchmark outputs: the "Copy as YAML" button, badges, cards,
 * and small number formatters.
 */
import * as React from 'react';

import type { Trans } from '../ui/i18n';

/** Copies text to the system clipboard (the renderer factory may inject JupyterLab's). */
export type CopyText = (text: string) => void | Promise<void>;

/** The browser clipboard, with the textarea fallback for pages without the async clipboard API. */
export async function copyToClipboard(text: string): Promise<void> {
  const clipboard = typeof navigator !== 'undefined' ? navigator.clipboard : undefined;
  if (clipboard && typeof clipboard.writeText === 'function') {
    await clipboard.writeText(text);
    return;
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.appendChild(area);
  area.select();
  try {
    if (typeof document.execCommand !== 'function' || !document.execCommand('copy')) {
      throw new Error('copy refused');
    }
  } finally {
    document.body.removeChild(area);
  }
}

/** A whole number with digit grouping ("34,666"). */
export function formatCount(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** Milliseconds with one decimal, or "n/a". */
export function formatMs(ms: number | null): string {
  return ms === null ? 'n/a' : ms >= 100 ? ms.toFixed(0) : ms.toFixed(1);
}

/** Seconds: "4.7 s". */
export function formatSeconds(s: number): string {
  return s >= 100 ? `${s.toFixed(0)} s` : `${s.toFixed(1)} s`;
}

export interface ICopyYamlProps {
  /** The YAML; null disables the button (nothing to copy). */
  readonly yaml: string | null;
  readonly copy: CopyText;
  readonly trans: Trans;
  readonly title?: string;
}

/** "Copy as YAML", with the text on `data-yaml` and behind a "Show YAML" disclosure. */
export function CopyYamlButton(props: ICopyYamlProps): JSX.Element {
  const { yaml, trans } = props;
  const [state, setState] = React.useState<'idle' | 'copied' | 'failed'>('idle');
  React.useEffect(() => {
    if (state === 'idle') {
      return;
    }
    const timer = setTimeout(() => setState('idle'), 2000);
    return () => clearTimeout(timer);
  }, [state]);
  const onClick = (): void => {
    if (yaml === null) {
      return;
    }
    Promise.resolve()
      .then(() => props.copy(yaml))
      .then(
        () => setState('copied'),
        () => setState('failed')
      );
  };
  const label =
    state === 'copied'
      ? trans.__('Copied')
      : state === 'failed'
        ? trans.__('Copy failed')
        : trans.__('Copy as YAML');
  return (
    <span className="jp-GpuMem-copyYamlWrap">
      <button
        type="button"
        className="jp-GpuMem-copyYaml jp-mod-styled"
        data-yaml={yaml ?? undefined}
        disabled={yaml === null}
        title={
          props.title ?? trans.__('Copy the configuration in the seeds’ config shape (data.*, training.*)')
        }
        onClick={onClick}
      >
        {label}
      </button>
      {yaml !== null && (
        <details className="jp-GpuMem-yamlDetails">
          <summary>{trans.__('Show YAML')}</summary>
          <pre className="jp-GpuMem-yaml">{yaml}</pre>
        </details>
      )}
    </span>
  );
}

/** A small label: "simulated", "interrupted", "traced", … */
export function RichBadge(props: { kind: string; children: React.ReactNode; title?: string }): JSX.Element {
  return (
    <span className={`jp-GpuMem-richBadge jp-GpuMem-richBadge-${props.kind}`} title={props.title}>
      {props.children}
    </span>
  );
}

export interface ICardProps {
  readonly kind: string;
  readonly title: string;
  readonly value: string;
  readonly detail?: React.ReactNode;
  readonly extra?: React.ReactNode;
  readonly className?: string;
}

/** A recommendation card: a title, a big value and one line of detail. */
export function Card(props: ICardProps): JSX.Element {
  return (
    <div
      className={`jp-GpuMem-card jp-GpuMem-card-${props.kind}${props.className ? ` ${props.className}` : ''}`}
      data-card={props.kind}
    >
      <div className="jp-GpuMem-cardTitle">{props.title}</div>
      <div className="jp-GpuMem-cardValue">{props.value}</div>
      {props.detail !== undefined && <div className="jp-GpuMem-cardDetail">{props.detail}</div>}
      {props.extra}
    </div>
  );
}

/** A bulleted list of kernel strings (notes, diagnostics); nothing when empty. */
export function TextList(props: {
  className: string;
  title?: string;
  items: ReadonlyArray<string>;
}): JSX.Element | null {
  if (props.items.length === 0) {
    return null;
  }
  return (
    <div className={props.className}>
      {props.title && <div className="jp-GpuMem-richSectionTitle">{props.title}</div>}
      <ul>
        {props.items.map((item, i) => (
          <li key={i}>{item}</li>
        ))}
      </ul>
    </div>
  );
}
