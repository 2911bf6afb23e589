/**
 * The timeline's downloads: ask the notebook's kernel for a file of a full history it keeps
 * (`timeline_export`), and say in one line why not when it cannot: no kernel connected, a kernel package too
 * old to export, a kernel that no longer holds that timeline (it restarted), no answer in time.
 */
import type { ITimelineFile, TimelineExportFormat } from '../tokens';
import type { Trans } from '../ui/i18n';
import type { IBridgeView } from '../tokens';

/** A kernel busy with a cell answers on a subshell; without one the request waits behind the cell. */
export const EXPORT_TIMEOUT_MS = 60000;

/** The file, or a rejection with an Error of one line. */
export async function exportTimelineFile(
  bridge: IBridgeView | null,
  id: string,
  format: TimelineExportFormat,
  trans: Trans
): Promise<ITimelineFile> {
  const hello = bridge?.hello ?? null;
  if (bridge === null || hello === null) {
    throw new Error(
      trans.__(
        'No kernel is connected to this notebook; the full history was kept by the kernel that made this output'
      )
    );
  }
  if (!hello.capabilities.includes('timeline')) {
    throw new Error(
      trans.__(
        "This kernel's gpumem_kernel %1 cannot export timelines: upgrade it in the kernel's environment",
        hello.version
      )
    );
  }
  try {
    return await bridge.request('timeline_export', { id, format }, EXPORT_TIMEOUT_MS);
  } catch (error) {
    const code = error instanceof Error ? (error as Error & { code?: unknown }).code : undefined;
    const message = error instanceof Error ? error.message : String(error);
    let line: string;
    switch (code) {
      case 'disconnected':
        line = trans.__(
          'The kernel restarted or disconnected; the full history was kept by the kernel that made this output'
        );
        break;
      case 'timeout':
        line = trans.__(
          'The kernel did not answer within %1 s (a running cell may hold it)',
          EXPORT_TIMEOUT_MS / 1000
        );
        break;
      default:
        line = message; // the kernel's own line, e.g. "this kernel no longer holds timeline tl-…; re-run the cell"
    }
    throw new Error(line.split('\n')[0]);
  }
}
