/**
 * The panel's OOM checklist: brief, linking to the full one under the traceback.
 *
 * The full checklist appears once: in the cell output right under the traceback, where a user who reads the
 * error already is (and where it stays, saved with the notebook, after the panel moved on to another
 * notebook or the kernel restarted). The panel shows the summary, the diagnosis and the first PANEL_STEPS
 * steps with their buttons, and "Open the full checklist", which scrolls the notebook to that output. When
 * the notebook holds no such output (outputs cleared, a checklist built from the error's text because the
 * handler did not see it, an output saved by a kernel without occurrence ids, a console), or the output has
 * gone by the time the link is used, the panel shows the full checklist itself.
 */
import * as React from 'react';

import { type IOomChecklistProps, OomChecklistView } from './checklist';
import type { IOomOutputs } from '../../tokens';

/** How many of the steps that may help the panel shows (the diagnosis's cause's come first). */
export const PANEL_STEPS = 3;

export interface ILinkedOomChecklistProps extends IOomChecklistProps {
  /** The notebook the panel follows (null: a console, which has no output to link to). */
  readonly widgetId: string | null;
  /** Where the outputs are (the `IOomOutputs` token; absent or null: the full checklist shows here). */
  readonly outputs?: IOomOutputs | null;
}

export function LinkedOomChecklist(props: ILinkedOomChecklistProps): JSX.Element {
  const { widgetId, outputs: given, ...checklist } = props;
  const outputs = given ?? null;
  const occurrence = checklist.payload.occurrence?.id ?? null;
  // The occurrence the user asked to see here in full, because its output had gone.
  const [inPanel, setInPanel] = React.useState<string | null>(null);
  const linked =
    outputs !== null &&
    widgetId !== null &&
    occurrence !== null &&
    inPanel !== occurrence &&
    outputs.has(widgetId, occurrence);
  if (!linked) {
    return <OomChecklistView {...checklist} />;
  }
  const open = (): void => {
    void outputs.reveal(widgetId, occurrence).then(shown => {
      if (!shown) {
        setInPanel(occurrence);
      }
    });
  };
  return <OomChecklistView {...checklist} brief={PANEL_STEPS} onOpenFull={open} />;
}
