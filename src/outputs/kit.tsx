/**
 * Pieces shared by the analysis, autobatch and benchmark outputs: the "Copy as YAML" button, badges, cards,
 * the ticks of a batch-size axis. Their numbers are formatted by ui/format.ts.
 */
import * as React from 'react';

import type { IChartTick } from '../ui/charttypes';
import { formatCount } from '../ui/format';
import type { Trans } from '../ui/i18n';

/** Copies text to the system clipboard (the renderer factory may inject JupyterLab's). */
export type CopyText = (text: string) => void | Promise<void>;

/** What a copy button says: its label, or "Copied" / "Copy failed" for two seconds after a click. */
export type CopyState = 'idle' | 'copied' | 'failed';

/** A copy button's state and its click: `copy(text)`, then "copied" or "failed" for two seconds. */
export function useCopyFeedback(copy: CopyText): [CopyState, (text: string) => void] {
  const [state, setState] = React.useState<CopyState>('idle');
  React.useEffect(() => {
    if (state === 'idle') {
      return;
    }
    const timer = setTimeout(() => setState('idle'), 2000);
    return () => clearTimeout(timer);
  }, [state]);
  const run = (text: string): void => {
    Promise.resolve()
      .then(() => copy(text))
      .then(
        () => setState('copied'),
        () => setState('failed')
      );
  };
  return [state, run];
}

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
  const [state, copyText] = useCopyFeedback(props.copy);
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
    if (text !== null) {
      copyText(text);
    }
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

/** Integer tick steps: batch sizes are whole numbers, so a tick at 2.5 would be labelled "3" off its place. */
const BATCH_STEPS = [1, 2, 5];

/** The smallest round integer step (1, 2, 5, 10, 20, …) that gives at most `count` steps up to `hi`. */
function integerStep(hi: number, count: number): number {
  for (let magnitude = 1; ; magnitude *= 10) {
    const step = BATCH_STEPS.map(m => m * magnitude).find(s => hi / s <= count);
    if (step !== undefined) {
      return step;
    }
  }
}

/**
 * The x ticks of a batch-size axis between `lo` and `hi`: whole batch sizes at their own positions (round
 * integer steps from 0 on a linear axis, powers of two from 1 on a log axis), each label once, and every
 * value of `exact` (the maximum pick) a tick of its own, listed first so that its label is the one kept when
 * labels would overlap; the regular ticks within half a step of it (or at half a step) go.
 */
export function batchSizeTicks(
  lo: number,
  hi: number,
  log: boolean,
  exact: ReadonlyArray<number> = [],
  count = 5
): IChartTick[] {
  const position = log ? Math.log2 : (v: number): number => v;
  let values: number[] = [];
  let halfStep: number;
  if (log) {
    const first = Math.max(0, Math.ceil(Math.log2(Math.max(lo, 1))));
    const last = Math.floor(Math.log2(Math.max(hi, 1)));
    const stride = Math.max(1, Math.ceil((last - first + 1) / count));
    for (let e = first; e <= last; e += stride) {
      values.push(2 ** e);
    }
    halfStep = stride / 2;
  } else {
    const step = integerStep(hi, count);
    for (let v = 0; v <= hi; v += step) {
      values.push(v);
    }
    halfStep = step / 2;
  }
  const kept = exact.filter(v => Number.isInteger(v) && v >= Math.max(lo, 0) && v <= hi);
  values = values.filter(v => kept.every(k => v === k || Math.abs(position(v) - position(k)) > halfStep));
  const ticks = new Map<string, IChartTick>();
  for (const value of [...kept, ...values]) {
    const label = formatCount(value);
    if (!ticks.has(label)) {
      ticks.set(label, { value, label });
    }
  }
  return [...ticks.values()];
}
