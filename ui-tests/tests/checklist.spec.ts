/**
 * The checklist follows its own diagnosis, in a real JupyterLab with a real ipykernel: a real
 * `torch.OutOfMemoryError` with PyTorch's own message of a fragmented GPU (tests/oom/messages/
 * v2_fragmentation.txt: 9.35 GiB reserved but unallocated) puts "expandable segments" first, folds the steps
 * that cannot help (no other process holds memory), shows the full checklist once — under the traceback —
 * and the panel's brief checklist links to it.
 */
import { expect, test } from '@jupyterlab/galata';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { openNew, openPanel, runFirstCell, stepIds } from './notebooks';

/** PyTorch 2.4+'s message, verbatim from tests/oom/messages/v2_fragmentation.txt. */
const FRAGMENTATION =
  'CUDA out of memory. Tried to allocate 22.78 GiB. GPU 0 has a total capacity of 31.47 GiB of which 12.73 GiB is ' +
  'free. Including non-PyTorch memory, this process has 18.73 GiB memory in use. Of the allocated memory 9.08 GiB ' +
  'is allocated by PyTorch, and 9.35 GiB is reserved by PyTorch but unallocated. If reserved but unallocated ' +
  'memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See ' +
  'documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)';

/** Enough cells below the failing one that scrolling to the last hides its output. */
const FILLER = Array.from(
  { length: 30 },
  (_, i) =>
    `# cell ${i + 2}: below the error\n` + Array.from({ length: 8 }, (__, j) => `x${j} = ${j}`).join('\n')
);

test('the checklist puts its diagnosis first, folds what cannot help, and the panel links to it', async ({
  page,
  tmpPath
}, testInfo) => {
  await openNew(page, `${tmpPath}/fragmentation.ipynb`, [
    `import torch\nraise torch.OutOfMemoryError(${JSON.stringify(FRAGMENTATION)})`,
    ...FILLER
  ]);
  await openPanel(page);
  await runFirstCell(page);

  // Inline, under the traceback: the full checklist, in the kernel's order.
  const cell = page.locator('.jp-Notebook .jp-Cell').first();
  const inline = cell.locator('.jp-GpuMem-output .jp-GpuMem-oomChecklist');
  await expect(inline).toBeVisible();
  await expect(inline).toHaveAttribute('data-brief', 'no');
  await expect(inline.locator('.jp-GpuMem-oomStepsTitle')).toHaveText(
    'Checklist (likely cause first, then cheapest)'
  );
  await expect(inline.locator('.jp-GpuMem-oomDiagnosis')).toContainText(
    'Likely cause: fragmentation, 9.35 GiB reserved but unallocated'
  );
  const shown = inline.locator(':scope > ol.jp-GpuMem-oomSteps > .jp-GpuMem-oomStep');
  expect((await stepIds(shown)).slice(0, 3)).toEqual(['expandable-segments', 'clear', 'restart']);
  await expect(shown.first().locator('.jp-GpuMem-oomStepTitle')).toHaveText(
    'Turn on expandable segments (restarts the kernel)'
  );

  // The steps that cannot help: folded (closed), still there to open, each with why.
  const fold = inline.locator('details.jp-GpuMem-oomFolded');
  await expect(fold.locator('summary')).toHaveText(/^Not applicable here \(\d+\)$/);
  await expect(fold).not.toHaveAttribute('open', /.*/);
  const others = fold.locator('.jp-GpuMem-oomStep[data-step-id="other-processes"]');
  await expect(others).toBeHidden();
  expect(await stepIds(shown)).not.toContain('other-processes');
  await fold.locator('summary').click();
  await expect(others).toBeVisible();
  await expect(others.locator('.jp-GpuMem-oomStepReason')).toHaveText(
    "Not applicable: PyTorch's message lists no other process on this GPU."
  );
  await page.screenshot({ path: testInfo.outputPath('checklist-inline.png') });

  // The panel: the diagnosis and the first steps, in the same order, and a link — not a second full list.
  const panel = page.locator('#jp-GpuMem-panel .jp-GpuMem-oom .jp-GpuMem-oomChecklist');
  await expect(panel).toHaveAttribute('data-brief', 'yes');
  await expect
    .poll(() => stepIds(panel.locator('.jp-GpuMem-oomStep')))
    .toEqual(['expandable-segments', 'clear', 'restart']);
  await expect(panel.locator('.jp-GpuMem-oomFolded')).toHaveCount(0);

  // Scroll the notebook to its end: the failing cell's output leaves the view.
  await page.evaluate(async () => {
    const notebook = (window.jupyterapp.shell.currentWidget as NotebookPanel).content;
    const last = notebook.widgets.length - 1;
    notebook.activeCellIndex = last;
    await notebook.scrollToItem(last, 'end');
  });
  await expect(inline).not.toBeInViewport();

  // "Open the full checklist" brings it back into view, selects its cell and focuses it.
  await panel.getByRole('button', { name: 'Open the full checklist' }).click();
  await expect(inline).toBeInViewport();
  await expect(inline).toBeFocused();
  await expect(cell).toHaveClass(/\bjp-mod-active\b/);
  await page.screenshot({ path: testInfo.outputPath('checklist-revealed.png') });
});
