/**
 * What the MIME renderer shows for one gpumem output: the checklist or the clear report, after checking the
 * payload against its schema — or, for a payload this version cannot read (an output saved by another
 * version of the kernel package), one line saying so instead of a broken view.
 *
 * Kept apart from the renderer widget (mime.tsx) so it is tested without loading JupyterLab.
 */
import * as React from 'react';

import { ClearReport } from '../actions/clear/report';
import type { Trans } from '../ui/i18n';
import type { IInlineHost } from '../tokens';
import { InlineOomChecklist } from '../actions/oom/inlinechecklist';
import {
  CLEAR_MIME,
  clearPayloadProblem,
  type IClearPayload,
  type IOomPayload,
  oomPayloadProblem
} from '../wire/protocol';

export interface IGpuMemOutputViewProps {
  readonly mimeType: string;
  readonly data: unknown;
  readonly trans: Trans;
  /** The actions plugin (null: advice and code only). */
  readonly host: IInlineHost | null;
  /** The output's node: names the notebook the buttons act on. */
  readonly node: HTMLElement;
}

/** One line for a payload that does not fit (the problem in full in its tooltip). */
export function InvalidOutput(props: { trans: Trans; problem: string }): JSX.Element {
  return (
    <div className="jp-GpuMem-invalid" title={props.problem}>
      {props.trans.__(
        'This gpumem output cannot be shown by this version of the extension (%1).',
        props.problem
      )}
    </div>
  );
}

export function GpuMemOutputView(props: IGpuMemOutputViewProps): JSX.Element {
  const { data, trans, host, node } = props;
  if (props.mimeType === CLEAR_MIME) {
    const problem = clearPayloadProblem(data);
    return problem !== null ? (
      <InvalidOutput trans={trans} problem={problem} />
    ) : (
      <ClearReport report={data as IClearPayload} unit="auto" trans={trans} />
    );
  }
  const problem = oomPayloadProblem(data);
  if (problem !== null) {
    return <InvalidOutput trans={trans} problem={problem} />;
  }
  return <InlineOomChecklist payload={data as IOomPayload} trans={trans} host={host} node={node} />;
}
