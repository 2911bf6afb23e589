/**
 * The panel's cards have a lifecycle, in a real JupyterLab with a real ipykernel and CPU-only torch: a
 * `%gpumem clear` run in a cell ticks the OOM checklist's clear step with what it freed, the checklist is
 * marked resolved and folds once the failing cell, fixed, runs without error, and after an OOM, a clear and a
 * restart the older cards fold into one "Earlier" list below the live figures. The OOM is raised by hand
 * (this machine has no GPU) with PyTorch 2.x's exact message, from a function whose frame holds a 128 MiB
 * tensor: only the traceback keeps it alive.
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { openNew, openPanel } from './notebooks';

const OOM_MESSAGE =
  'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB is free. ' +
  'Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the allocated memory 13.90 GiB is ' +
  'allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated.';

/** A training step that runs out of memory with a 128 MiB tensor in its frame. */
const FAILING = [
  'import torch',
  'def step():',
  '    held = torch.ones(32, 1024, 1024)  # 128 MiB',
  `    raise torch.OutOfMemoryError(${JSON.stringify(OOM_MESSAGE)})`,
  'step()'
].join('\n');

/** Run cell `index` through the command (clicking a cell can land on the notebook toolbar). */
async function runCell(page: IJupyterLabPageFixture, index: number): Promise<void> {
  await page.evaluate(async i => {
    const notebook = (window.jupyterapp.shell.currentWidget as NotebookPanel).content;
    notebook.activeCellIndex = i;
    await window.jupyterapp.commands.execute('notebook:run-cell');
  }, index);
}

/** Replace the source of cell `index`, as the user editing it would. */
async function setSource(page: IJupyterLabPageFixture, index: number, source: string): Promise<void> {
  await page.evaluate(
    ({ i, s }) => {
      const notebook = (window.jupyterapp.shell.currentWidget as NotebookPanel).content;
      notebook.widgets[i].model.sharedModel.setSource(s);
    },
    { i: index, s: source }
  );
}

test('a clear ticks its step with what it freed; the fixed cell resolves the OOM card, which folds', async ({
  page,
  tmpPath
}, testInfo) => {
  await openNew(page, `${tmpPath}/resolve.ipynb`, [FAILING, '%gpumem clear']);
  await openPanel(page);
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live', { timeout: 60000 });
  // Idle, on a CPU: nothing to free, so "Restart and free" is a plain button.
  const restartButton = panel.locator('.jp-GpuMem-restartButton');
  await expect(restartButton).toBeVisible();
  await expect(restartButton).not.toHaveClass(/jp-mod-warn/);

  await runCell(page, 0);
  const card = panel.locator('.jp-GpuMem-oom');
  const checklist = card.locator('.jp-GpuMem-oomChecklist');
  await expect(checklist).toBeVisible();
  await expect(card).toHaveAttribute('data-resolved', 'no');
  // The family once: the heading names it, the summary goes on from it.
  await expect(card.locator('h3')).toHaveText("CUDA out of memory (PyTorch's allocator)");
  await expect(card.locator('.jp-GpuMem-oomHeadline')).toHaveText(/^On GPU 0: tried to allocate 2\.00 GiB/);
  // An OOM checklist is open: restarting is the drastic step it may come to.
  await expect(restartButton).toHaveClass(/jp-mod-warn/);

  // `%gpumem clear` in a cell: the panel's clear step is ticked with what it freed (the traceback's tensor).
  await runCell(page, 1);
  const clearStep = card.locator('.jp-GpuMem-oomStep[data-step-id="clear"]');
  await expect(clearStep.locator('.jp-GpuMem-oomTick')).toBeChecked({ timeout: 60000 });
  await expect(clearStep.locator('.jp-GpuMem-stepFeedback')).toContainText(/freed 128(\.0+)? MiB/);
  // What the traceback kept alive is gone: the diagnosis says so instead of "keeps … alive".
  await expect(card.locator('.jp-GpuMem-oomDiagnosis')).toContainText('a clear has dropped it since');
  // The same error's checklist under the traceback shares the tick.
  const inline = page
    .locator('.jp-Notebook .jp-Cell')
    .first()
    .locator('.jp-GpuMem-output .jp-GpuMem-oomChecklist');
  await expect(inline.locator('.jp-GpuMem-oomStep[data-step-id="clear"] .jp-GpuMem-oomTick')).toBeChecked();

  // Fix the cell (a smaller step) and run it again: the card says it is resolved, and folds.
  await setSource(page, 0, 'import torch\ndef step():\n    return torch.ones(4, 4).sum().item()\nstep()');
  await runCell(page, 0);
  await expect(card).toHaveAttribute('data-resolved', 'yes', { timeout: 60000 });
  const count = (
    await page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-InputPrompt').innerText()
  ).replace(/\D/g, '');
  await expect(card.locator('.jp-GpuMem-oomResolved')).toHaveText(
    new RegExp(
      `^Resolved: In \\[${count}\\] ran without error after Clear GPU memory \\(freed 128(\\.0+)? MiB\\)\\.$`
    )
  );
  await expect(checklist).toBeHidden();
  await expect(restartButton).not.toHaveClass(/jp-mod-warn/);
  await page.screenshot({ path: testInfo.outputPath('resolved.png') });
  // Still there to read.
  await card.locator('.jp-GpuMem-cardFold > summary').click();
  await expect(checklist).toBeVisible();
});

test.describe('after an OOM, a clear and a restart', () => {
  // Galata's kernel tracking answers the kernel restart POST with 201, which JupyterLab takes for a failure.
  test.use({ kernels: null, viewport: { width: 1280, height: 900 } });

  test('the older cards fold into "Earlier", the live figures stay in view, the dialog names no GPU driver', async ({
    page,
    tmpPath
  }, testInfo) => {
    test.setTimeout(180000); // a restart on a loaded 2-core machine
    await openNew(page, `${tmpPath}/cards.ipynb`, [FAILING]);
    await openPanel(page);
    const panel = page.locator('#jp-GpuMem-panel');
    await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live', { timeout: 60000 });
    await runCell(page, 0);
    await expect(panel.locator('.jp-GpuMem-oom .jp-GpuMem-oomChecklist')).toBeVisible();

    await panel.locator('.jp-GpuMem-actionBar .jp-GpuMem-clearButton').click();
    await expect(panel.locator('.jp-GpuMem-clear')).toHaveAttribute('data-phase', 'done', { timeout: 60000 });
    // The open checklist stays open beside the newer clear report.
    await expect(panel.locator('.jp-GpuMem-oom .jp-GpuMem-oomChecklist')).toBeVisible();

    await panel.locator('.jp-GpuMem-restartButton').click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('Restart the kernel of');
    await expect(dialog).toContainText('All variables will be lost.');
    await expect(dialog).not.toContainText('GPU driver');
    await dialog.getByRole('button', { name: 'Restart' }).click();

    const restart = panel.locator('.jp-GpuMem-restart');
    await expect(restart).toHaveAttribute('data-phase', 'done', { timeout: 90000 });
    await expect(restart).not.toContainText('GPU driver');
    await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live', { timeout: 60000 });
    // The restart report is the newest card; the OOM checklist and the clear report of the old run fold.
    const earlier = panel.locator('details.jp-GpuMem-earlier');
    await expect(earlier.locator('> summary')).toHaveText('Earlier (2)');
    await expect(earlier).not.toHaveAttribute('open', /.*/);
    await expect(earlier.locator('.jp-GpuMem-oom.jp-mod-history')).toBeHidden();
    await expect(earlier.locator('.jp-GpuMem-clear.jp-mod-history')).toBeHidden();
    await expect(restart).toBeVisible();
    // The live figures (no GPU here: the notice and host memory) are in view without scrolling.
    await expect(panel.locator('.jp-GpuMem-nogpu')).toBeInViewport();
    await expect(panel.locator('.jp-GpuMem-host')).toBeInViewport();
    await page.screenshot({ path: testInfo.outputPath('earlier.png') });

    await earlier.locator('> summary').click();
    await expect(earlier.locator('.jp-GpuMem-oom.jp-mod-history')).toBeVisible();
  });
});
