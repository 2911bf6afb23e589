/**
 * The prebuilt extension in Jupyter Notebook 7: 7.4.7, the release that runs on JupyterLab 4.4.10, our minimum, and
 * 7.6.5, the newest (on JupyterLab 4.6.6; GPUMEM_NB7_URL names its server). Plain Playwright, not Galata (Galata
 * drives JupyterLab only). scripts/test.sh starts each server from a separate environment holding Notebook 7 and the
 * wheel a user would install; the kernel is the test environment's Python (CPU-only torch, gpumem_kernel),
 * registered there as `python3`.
 */
/* eslint-disable jupyter/galata-prefer-menu-helper --
   Galata's page helpers drive JupyterLab only; Notebook 7 is driven through its own DOM here. */
import { expect, test } from '@playwright/test';
import { putNotebook, runCellByKeys, stderrText } from '../tests/notebooks';

const BASE = process.env.GPUMEM_NB7_URL ?? 'http://localhost:8891';

/** PyTorch 2.x's message, raised by hand: this machine has no GPU (as in tests/oom.spec.ts). */
const OOM_MESSAGE =
  'CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB is free. ' +
  'Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the allocated memory 13.90 GiB is ' +
  'allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated.';

const SOURCES = [
  `import torch\nraise torch.OutOfMemoryError(${JSON.stringify(OOM_MESSAGE)})`,
  'from torch import nn\nmodel = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))',
  '%gpumem analyze model --batch 8 --input 16 --target "RTX 4080 Super"'
];

test('Notebook 7: panel, header item, OOM checklist and notification, analysis output', async ({
  page,
  request
}, testInfo) => {
  const name = `nb7-${Date.now()}.ipynb`;
  expect(await putNotebook(request, BASE, name, SOURCES)).toBeTruthy();

  await page.goto(`${BASE}/notebooks/${name}`);
  await expect(page.locator('.jp-Notebook .jp-Cell')).toHaveCount(SOURCES.length, { timeout: 60000 });

  // No status bar in Notebook 7: the item sits in the header, and the View menu lists the panel.
  const item = page.locator('#top-panel .jp-GpuMem-statusItem');
  await expect(item).toBeVisible({ timeout: 60000 });
  await page.locator('.lm-MenuBar-item', { hasText: 'View' }).click();
  await page.locator('.lm-Menu-item', { hasText: 'Right Sidebar' }).click();
  await page.locator('.lm-Menu-item', { hasText: 'Show GPU Memory' }).click();

  // The panel in the right sidebar: the kernel side loaded and sends live samples; no GPU here, said so.
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible({ timeout: 60000 });
  await expect(panel.locator('.jp-GpuMem-nogpu')).toContainText('No NVIDIA GPU visible to this kernel');
  await expect(panel.locator('.jp-GpuMem-host')).toContainText('Host memory');
  const seq = async (): Promise<number> =>
    Number(await panel.locator('.jp-GpuMem-updated').getAttribute('data-seq'));
  const first = await seq();
  await expect.poll(seq, { timeout: 10000 }).toBeGreaterThan(first); // live: samples keep coming

  // Closing the sidebar, then the header item opens the panel again.
  await page.locator('.lm-MenuBar-item', { hasText: 'View' }).click();
  await page.locator('.lm-Menu-item', { hasText: 'Right Sidebar' }).click();
  await page.locator('.lm-Menu-item', { hasText: 'Show GPU Memory' }).click();
  await expect(panel).toBeHidden();
  await item.click();
  await expect(panel).toBeVisible();

  // A torch.OutOfMemoryError: the normal traceback, the checklist under it, and the notification.
  await runCellByKeys(page, 0);
  const output = page.locator('.jp-Notebook .jp-Cell').nth(0).locator('.jp-OutputArea');
  // All its stderr outputs together: a traceback can come as more than one output.
  await expect.poll(() => stderrText(output), { timeout: 60000 }).toMatch(/Traceback[\s\S]*OutOfMemoryError/);
  await expect(output.locator('.jp-GpuMem-output .jp-GpuMem-oomChecklist')).toBeVisible();
  const inlineIds = await output
    .locator('.jp-GpuMem-oomStep')
    .evaluateAll(items => items.map(i => i.getAttribute('data-step-id')));
  expect(inlineIds).toEqual(expect.arrayContaining(['clear', 'restart', 'batch-size']));
  const toast = page.locator('.Toastify__toast').filter({ hasText: 'CUDA out of memory' });
  await expect(toast).toBeVisible();
  await toast.getByRole('button', { name: 'Open checklist' }).click();
  await expect(panel.locator('.jp-GpuMem-oom .jp-GpuMem-oomChecklist')).toBeVisible();

  // An inline analysis output: `%gpumem analyze` on a tiny model renders with the rich renderer.
  await runCellByKeys(page, 1);
  await runCellByKeys(page, 2);
  const view = page.locator('.jp-Notebook .jp-Cell').nth(2).locator('.jp-GpuMem-analysis');
  await expect(view).toBeVisible({ timeout: 60000 });
  await expect(view.locator('.jp-GpuMem-breakdown')).toContainText('Parameters');
  await expect(view.locator('.jp-GpuMem-cards')).toContainText('Recommended');

  await page.screenshot({ path: testInfo.outputPath('notebook7.png'), fullPage: false });
});
