/**
 * Reads the server extension's `GET /gpumem/kernels` for the idle GPU holders list (idleholders.ts).
 */
import { ServerConnection } from '@jupyterlab/services';

import { type IdleHoldersProblem, type IServerKernels, parseServerKernels } from './idleholders';
import { requestAPI } from '../server/request';

/** GET /gpumem/kernels with the page's credentials; a 404 means the server extension is not enabled. */
export async function fetchServerKernels(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IServerKernels | IdleHoldersProblem> {
  const response = await requestAPI('kernels', {}, settings);
  if (response.status === 404) {
    return 'no-extension';
  }
  if (!response.ok) {
    return 'failed';
  }
  return parseServerKernels(await response.json()) ?? 'failed';
}
