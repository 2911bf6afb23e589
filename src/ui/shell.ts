/**
 * Showing a side panel in JupyterLab's shell and in Notebook 7's.
 */
import type { JupyterFrontEnd } from '@jupyterlab/application';

/**
 * Activate the side panel `id` and leave it open. JupyterLab's shell focuses a side panel that is already open;
 * Notebook 7's closes it (its `activateById` toggles). There, the second call opens it again, in the same
 * task (nothing is painted in between). In JupyterLab this is exactly one `activateById`.
 */
export function activateSidePanel(shell: JupyterFrontEnd.IShell, id: string): void {
  const visible = (): boolean => {
    for (const area of ['right', 'left']) {
      for (const widget of shell.widgets(area)) {
        if (widget.id === id) {
          return widget.isVisible;
        }
      }
    }
    return false;
  };
  const before = visible();
  shell.activateById(id);
  if (before && !visible()) {
    shell.activateById(id);
  }
}
