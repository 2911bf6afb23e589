/**
 * What the panel and the checklists say after errors, restarts and kernel death, in a real browser against a
 * real JupyterLab and a real ipykernel (CPU-only torch: the OOMs are real torch.OutOfMemoryError instances
 * with PyTorch 2.x's messages, raised by hand).
 *
 * - Ticks belong to one OOM occurrence: after a restart, a new and different OOM starts unticked (inline and
 *   in the panel), and a page reload keeps the ticks of the OOM still shown.
 * - Cards of an earlier kernel run are marked as history after restart-and-free, Kernel > Restart and a
 *   `kill -9` of the kernel process; the panel says the kernel died and that the server restarted it.
 * - "Clear GPU memory" and "Restart and free" started from the inline checklist answer under their button;
 *   "Copy as Markdown" says "Copied".
 *
 * The first test also takes the screenshot series of the path OOM → clear → restart → new OOM: with
 * GPUMEM_UPDATE_DOCS=1 into docs/lifecycle/ (overwritten; the README links them), else into the test's
 * output folder, so a plain run leaves the tree untouched.
 */
import * as path from 'path';
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { Locator } from '@playwright/test';
import { openNew, openPanel, resultOf } from './notebooks';

/** PyTorch 2.x's message for a 2 GiB request (the first OOM). */
const FIRST_OOM =
  'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB is free. ' +
  'Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the allocated memory 13.90 GiB is ' +
  'allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated.';

/** Another, different OOM (a 512 MiB request) for after the restart. */
const SECOND_OOM =
  'CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 15.70 GiB of which 96.00 MiB is ' +
  'free. Including non-PyTorch memory, this process has 15.58 GiB memory in use. Of the allocated memory 14.80 GiB ' +
  'is allocated by PyTorch, and 310.00 MiB is reserved by PyTorch but unallocated.';

const raising = (message: string): string =>
  `import torch\nraise torch.OutOfMemoryError(${JSON.stringify(message)})`;

const DOCS = path.resolve(__dirname, '..', '..', 'docs', 'lifecycle');

// Restarts need the kernels API unmocked (galata answers POST /api/kernels/* itself otherwise).
test.use({ kernels: null, viewport: { width: 1120, height: 720 } });

async function command(
  page: IJupyterLabPageFixture,
  id: string,
  args: Record<string, string> = {}
): Promise<void> {
  await page.evaluate(
    async ({ commandId, commandArgs }) => {
      await window.jupyterapp.commands.execute(commandId, commandArgs);
    },
    { commandId: id, commandArgs: args }
  );
}

/** Start a command that opens a dialog: its promise ends with the dialog, which the test answers. */
async function startCommand(page: IJupyterLabPageFixture, id: string): Promise<void> {
  await page.evaluate(commandId => {
    window.jupyterapp.commands.execute(commandId).catch(() => undefined);
  }, id);
}

/** The GPU Memory panel, opened and following the kernel live. */
async function livePanel(page: IJupyterLabPageFixture): Promise<Locator> {
  await openPanel(page);
  return page.locator('#jp-GpuMem-panel');
}

/** The inline checklist in the output of cell `index`. */
function inlineChecklist(page: IJupyterLabPageFixture, index = 0): Locator {
  return page
    .locator('.jp-Cell')
    .nth(index)
    .locator('.jp-OutputArea .jp-GpuMem-output .jp-GpuMem-oomChecklist');
}

const step = (scope: Locator, id: string): Locator =>
  scope.locator(`.jp-GpuMem-oomStep[data-step-id="${id}"]`);

/** One stage of the screenshot series. */
async function shoot(
  page: IJupyterLabPageFixture,
  name: string,
  testInfo: { outputPath(name: string): string }
) {
  const file = process.env.GPUMEM_UPDATE_DOCS ? path.join(DOCS, name) : testInfo.outputPath(name);
  await page.screenshot({ path: file });
}

/** What the state database holds for the ticks, as the page would read it back after a reload. */
async function storedTicks(page: IJupyterLabPageFixture): Promise<string> {
  return page.evaluate(async () => {
    const node = document.getElementById('jupyter-config-data');
    const config = JSON.parse(node?.textContent ?? '{}') as { workspace?: string };
    const workspace = await window.jupyterapp.serviceManager.workspaces.fetch(config.workspace ?? 'default');
    return JSON.stringify(workspace.data['jupyterlab-gpumem:oom-ticks'] ?? null);
  });
}

test('OOM → clear → restart → new OOM: ticks per error, answers under the button, history marked', async ({
  page,
  context,
  tmpPath
}, testInfo) => {
  // Two OOMs, a clear, a restart and a reload: 1.5 min and more on a loaded 2-core machine (it ran past the
  // config's 2 min there, 3 times in 5).
  test.setTimeout(300000);
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  const file = `${tmpPath}/lifecycle.ipynb`;
  await openNew(page, file, [raising(FIRST_OOM)]);
  await page.sidebar.close('left');
  const panel = await livePanel(page);
  await command(page, 'notebook:run-all-cells');

  // 1. The OOM: the checklist inline under the traceback and in the panel.
  const first = inlineChecklist(page);
  await expect(first.locator('.jp-GpuMem-oomHeadline')).toContainText('tried to allocate 2.00 GiB');
  const card = panel.locator('.jp-GpuMem-oom');
  await expect(card.locator('.jp-GpuMem-oomChecklist')).toBeVisible();
  await expect(card).not.toHaveClass(/jp-mod-history/);
  await step(first, 'clear').scrollIntoViewIfNeeded();
  await expect(page.locator('.Toastify__toast').filter({ hasText: 'CUDA out of memory' })).toBeVisible();
  await shoot(page, '01-oom.png', testInfo);
  await command(page, 'apputils:dismiss-notification'); // no id: all of them
  await expect(page.locator('.Toastify__toast')).toHaveCount(0);

  // 2. "Clear GPU memory" from the inline checklist: its result right under the button, and in the panel.
  await step(first, 'clear').locator('.jp-GpuMem-oomAction').click();
  const cleared = step(first, 'clear').locator('.jp-GpuMem-stepFeedback');
  await expect(cleared).toHaveAttribute('data-phase', 'done');
  await expect(cleared).toContainText(
    'There was no GPU memory to free: CUDA is not initialised in this kernel.'
  );
  await expect(cleared).toHaveAttribute('role', 'status');
  await expect(cleared).toBeInViewport();
  await expect(step(first, 'clear').locator('.jp-GpuMem-oomTick')).toBeChecked();
  await expect(step(card, 'clear').locator('.jp-GpuMem-stepFeedback')).toContainText(
    'There was no GPU memory'
  );
  await expect(panel.locator('.jp-GpuMem-clear .jp-GpuMem-clearReport')).toBeAttached();
  // "Copy as Markdown" says it copied.
  const copy = page.locator('.jp-Cell').first().locator('.jp-GpuMem-output .jp-GpuMem-oomCopy');
  await copy.click();
  await expect(copy).toHaveText('Copied');
  await expect(copy.locator('xpath=..').locator('[role="status"]')).toHaveText('Copied to the clipboard');
  await expect
    .poll(() => page.evaluate(() => navigator.clipboard.readText()))
    .toContain('[x] **Clear GPU memory**');
  await expect(copy).toHaveText('Copy as Markdown'); // only for a moment
  await cleared.scrollIntoViewIfNeeded();
  await shoot(page, '02-clear.png', testInfo);

  // 3. "Restart and free" from the inline checklist: the step says how it went; the panel marks the old
  //    run's OOM card and clear report as history, and says the kernel was restarted.
  await step(first, 'restart').locator('.jp-GpuMem-oomAction').click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Restart and free GPU memory?');
  await dialog.getByRole('button', { name: 'Restart' }).click();
  const restarted = step(first, 'restart').locator('.jp-GpuMem-stepFeedback');
  await expect(restarted).toContainText('Restarted: no GPU memory to free', { timeout: 60000 });
  await expect(restarted).toBeInViewport();
  await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live');
  await expect(panel.locator('.jp-GpuMem-kernelEnd')).toContainText('The kernel was restarted at');
  const oldCard = panel.locator('.jp-GpuMem-oom.jp-mod-history');
  await expect(oldCard).toContainText('from an earlier kernel run');
  await expect(oldCard).toContainText('tried to allocate 2.00 GiB');
  await expect(oldCard.locator('button.jp-GpuMem-oomAction')).toHaveCount(0);
  await expect(panel.locator('.jp-GpuMem-clear.jp-mod-history')).toContainText('from an earlier kernel run');
  // The old output stays in the notebook, saying which kernel process it was about.
  await expect(page.locator('.jp-GpuMem-inlineOom.jp-mod-history .jp-GpuMem-historyNote')).toContainText(
    'in a kernel process that has ended since'
  );
  await shoot(page, '03-restart.png', testInfo);

  // 4. A new, different OOM in the new kernel: nothing ticked, inline or in the panel.
  // Set through the model: galata's setCell types the ~300 characters one by one (seconds on a loaded machine).
  await page.evaluate(source => {
    const notebook = (window.jupyterapp.shell.currentWidget as NotebookPanel).content;
    notebook.widgets[0].model.sharedModel.setSource(source);
  }, raising(SECOND_OOM));
  await command(page, 'notebook:run-all-cells');
  const second = inlineChecklist(page);
  await expect(second.locator('.jp-GpuMem-oomHeadline')).toContainText('tried to allocate 512.00 MiB');
  await expect(page.locator('.jp-GpuMem-inlineOom.jp-mod-history')).toHaveCount(0);
  await expect(card.locator('.jp-GpuMem-oomHeadline')).toContainText('tried to allocate 512.00 MiB');
  await expect(card).not.toHaveClass(/jp-mod-history/);
  await expect(second.locator('.jp-GpuMem-oomTick').first()).toBeVisible();
  await expect(second.locator('.jp-GpuMem-oomTick:checked')).toHaveCount(0);
  await expect(second.locator('.jp-GpuMem-oomStep.jp-mod-ticked')).toHaveCount(0);
  await expect(card.locator('.jp-GpuMem-oomTick:checked')).toHaveCount(0);
  await expect(step(second, 'clear').locator('.jp-GpuMem-stepFeedback')).toHaveCount(0);
  await step(second, 'clear').scrollIntoViewIfNeeded();
  await expect(page.locator('.Toastify__toast').filter({ hasText: 'CUDA out of memory' })).toBeVisible();
  await command(page, 'apputils:dismiss-notification');
  await expect(page.locator('.Toastify__toast')).toHaveCount(0);
  await shoot(page, '04-new-oom.png', testInfo);

  // A tick is shared by the panel and the cell output of the same error, and a reload keeps it.
  await step(second, 'clear').locator('.jp-GpuMem-oomTick').check();
  await expect(step(card, 'clear').locator('.jp-GpuMem-oomTick')).toBeChecked();
  await page.notebook.save();
  const id = await second.getAttribute('data-occurrence');
  expect(id).toMatch(/^[0-9a-f]{32}$/);
  await expect.poll(() => storedTicks(page)).toContain(`oom:${id}`);
  // Galata's reload waits for the Launcher to be the active tab; the restored layout has the notebook active.
  await page.reload({ waitForIsReady: false });
  await expect(page.locator('#jupyterlab-splash')).toHaveCount(0);
  await command(page, 'docmanager:open', { path: file }); // restored with the layout, or opened now
  const reloaded = inlineChecklist(page);
  await expect(reloaded.locator('.jp-GpuMem-oomHeadline')).toContainText('tried to allocate 512.00 MiB');
  await expect(step(reloaded, 'clear').locator('.jp-GpuMem-oomTick')).toBeChecked();
  await expect(step(reloaded, 'restart').locator('.jp-GpuMem-oomTick')).not.toBeChecked();
});

test('Kernel > Restart and kill -9: the panel marks the old run and says the kernel died', async ({
  page,
  tmpPath
}) => {
  test.setTimeout(240000); // two restarts: up to 1.2 min on a loaded 2-core machine, more than half the config's 2 min
  await openNew(page, `${tmpPath}/killed.ipynb`, ['import os\nos.getpid()', raising(FIRST_OOM)]);
  const panel = await livePanel(page);
  const pidOutput = resultOf(page, 0); // the PID only, never a warning written beside it
  const card = panel.locator('.jp-GpuMem-oom');

  // An OOM, then JupyterLab's own Kernel > Restart.
  await command(page, 'notebook:run-all-cells');
  await expect(card.locator('.jp-GpuMem-oomChecklist')).toBeVisible();
  await startCommand(page, 'notebook:restart-kernel');
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Restart Kernel?');
  await dialog.getByRole('button', { name: 'Confirm Kernel Restart' }).click();
  await expect(card).toHaveClass(/jp-mod-history/);
  await expect(card).toContainText('from an earlier kernel run');
  await expect(card.locator('.jp-GpuMem-oomChecklist')).toHaveCount(0);
  await expect(panel.locator('.jp-GpuMem-kernelEnd')).toContainText('The kernel was restarted at');
  await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live');

  // The same OOM in the new run is current again; then the kernel process is killed.
  await command(page, 'notebook:run-all-cells');
  await expect(card).not.toHaveClass(/jp-mod-history/);
  await expect(card.locator('.jp-GpuMem-oomChecklist')).toBeVisible();
  await expect(pidOutput).toHaveText(/^\s*\d+\s*$/);
  const pid = Number((await pidOutput.innerText()).trim());
  expect(pid).toBeGreaterThan(1);
  process.kill(pid, 'SIGKILL');

  // JupyterLab's own dialog, then the panel: the old run's card is history and the panel says the kernel
  // died and that the server restarted it.
  await expect(dialog).toContainText('appears to have died', { timeout: 30000 });
  await dialog.getByRole('button', { name: 'Ok' }).click();
  await expect(card).toHaveClass(/jp-mod-history/);
  await expect(card.locator('button')).toHaveCount(1); // Dismiss only
  await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live', { timeout: 30000 });
  await expect(panel.locator('.jp-GpuMem-badge')).toHaveText('live');
  const end = panel.locator('.jp-GpuMem-kernelEnd');
  await expect(end).toHaveAttribute('data-cause', 'died');
  await expect(end).toHaveAttribute('data-restarted-by-server', 'yes');
  await expect(end).toContainText('The kernel died at');
  await expect(end).toContainText('the server restarted it');
});
