/**
 * Pieces shared by the analysis, autobatch and benchmark outputs: the "Copy as YAML" button, badges, cards.
 * Their numbers are formatted by ui/format.ts.
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

/**
 * A payload's `config_yaml`, written by the kernel with PyYAML: the text, null when there is nothing to copy,
 * or undefined when the output was saved by a version that did not write it.
 */
export function configYaml(payload: object): string | null | undefined {
  const value = (payload as { config_yaml?: unknown }).config_yaml;
  return typeof value === 'string' || value === null ? value : undefined;
}

export interface ICopyYamlProps {
  /** The payload's YAML, copied verbatim; null disables the button (nothing to copy), undefined says why. */
  readonly yaml: string | null | undefined;
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
  if (yaml === undefined) {
    return (
      <span className="jp-GpuMem-copyYamlWrap">
        <button
          type="button"
          className="jp-GpuMem-copyYaml jp-mod-styled"
          data-missing="older-output"
          disabled
          title={trans.__(
            'This output was saved by an older version of jupyterlab-gpumem, which did not write the configuration: run the command again to copy it'
          )}
        >
          {trans.__('No YAML in this older output')}
        </button>
      </span>
    );
  }
  const text = yaml;
  const onClick = (): void => {
    if (text === null) {
      return;
    }
    Promise.resolve()
      .then(() => props.copy(text))
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
        data-yaml={text ?? undefined}
        disabled={text === null}
        title={
          props.title ?? trans.__('Copy the configuration in the training-config shape (data.*, training.*)')
        }
        onClick={onClick}
      >
        {label}
      </button>
      {text !== null && (
        <details className="jp-GpuMem-yamlDetails">
          <summary>{trans.__('Show YAML')}</summary>
          <pre className="jp-GpuMem-yaml">{text}</pre>
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
