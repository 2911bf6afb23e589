/**
 * The one way the browser calls the server extension's REST API (gpumem_kernel/server, under `/gpumem/`): the
 * page's base URL and credentials, the response given back whatever its status. Callers decide what a status
 * means (404: the server extension is not enabled).
 */
import { ServerConnection } from '@jupyterlab/services';

/** The server extension's URL namespace. */
export const API_NAMESPACE = 'gpumem';

/**
 * Call `endPoint` (relative to /gpumem/, e.g. `kernels` or `kernels/<id>/exit`) with `init`; resolves with
 * the response, rejects only when the server cannot be reached.
 */
export function requestAPI(
  endPoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<Response> {
  return ServerConnection.makeRequest(`${settings.baseUrl}${API_NAMESPACE}/${endPoint}`, init, settings);
}
