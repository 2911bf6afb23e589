/**
 * The `jupyterlab-gpumem:mime` plugin: registers the renderers of the gpumem cell outputs (mime.tsx) with the
 * rendermime registry. A plugin rather than a `mimeExtension` because the renderers need the inline host
 * (`IInlineHost`: run a checklist step, tick it, insert code, export a timeline), which only a plugin can be
 * given; without it (the actions plugins disabled) they render with no buttons that would do nothing.
 */
import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';

import { gpumemOutputFactories, RENDERER_RANK } from './mime';
import { IInlineHost } from '../tokens';

export const outputsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-gpumem:mime',
  description:
    'Renders the OOM checklist, the clear report and the analysis, autobatch, benchmark and timeline outputs of %gpumem.',
  autoStart: true,
  requires: [IRenderMimeRegistry],
  optional: [IInlineHost],
  activate: (_app: JupyterFrontEnd, rendermime: IRenderMimeRegistry, host: IInlineHost | null): void => {
    for (const factory of gpumemOutputFactories(host)) {
      rendermime.addFactory(factory, RENDERER_RANK);
    }
  }
};
