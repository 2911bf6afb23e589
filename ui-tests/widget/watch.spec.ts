/**
 * `%gpumem watch` where our labextension is not installed: a JupyterLab and a Notebook 7 whose environment holds
 * only ipywidgets and anywidget in the front end (scripts/test.sh builds it), as on a JupyterHub image, a cluster
 * node, or VS Code and Colab, which render the same widgets. The kernel is the test environment's Python, where
 * jupyterlab-gpumem is installed: the widget's front end comes from the kernel's package through anywidget.
 *
 * This machine has no NVIDIA GPU: the kernel's NVML is the tests' driver test double (tests/fake_nvml.py),
 * installed by the first cell; the busy cell raises its figures so the chart moves. The widget, the kernel, the
 * sampler thread and the messages are real.
 */
/* eslint-disable jupyter/galata-prefer-menu-helper --
   plain Playwright: these servers are driven through their own DOM, as in notebook7/. */
import * as fs from 'fs';
import * as path from 'path';
import { expect, type Locator, type Page, test } from '@playwright/test';
import { putNotebook, runCellByKeys } from '../tests/notebooks';

const BASE = process.env.GPUMEM_WIDGET_URL ?? 'http://localhost:8892';
const TESTS_DIR = path.resolve(__dirname, '..', '..', 'tests');
const DOCS_DIR = path.resolve(__dirname, '..', '..', 'docs', 'watch');
const BUSY_SECONDS = 10;

const SETUP = [
  '%load_ext gpumem_kernel',
  'import os, sys',
  `sys.path.insert(0, ${JSON.stringify(TESTS_DIR)})`,
  'from fake_nvml import FakeGpu, GiB, install_in_running_kernel',
  'gpu = FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-5b1c2e7a-93d4-4f0e-a8b6-2c71d9e4f310", total=80 * GiB,',
  '              used=31 * GiB, cc=(8, 0), util=(64, 38), processes=[(os.getpid(), 21 * GiB), (4242, 9 * GiB)])',
  'install_in_running_kernel([gpu])'
].join('\n');

/** A training-like cell: busy for BUSY_SECONDS while this kernel's memory grows half a GiB a second. */
const BUSY = [
  'import time',
  'start = time.time()',
  `while time.time() - start < ${BUSY_SECONDS}:`,
  '    time.sleep(0.5)',
  '    gpu.used += GiB // 4',
  '    gpu.processes[0] = (gpu.processes[0][0], gpu.processes[0][1] + GiB // 4)'
].join('\n');

async function waitDone(page: Page, index: number): Promise<void> {
  await expect(page.locator('.jp-Notebook .jp-Cell').nth(index).locator('.jp-InputPrompt')).toHaveText(
    /\[\d+\]/,
    { timeout: 60000 }
  );
}

/** Run the busy cell and collect the watch's sample numbers seen while it runs. */
async function updatesDuringBusyCell(page: Page, watch: Locator, index: number): Promise<Set<string>> {
  const prompt = page.locator('.jp-Notebook .jp-Cell').nth(index).locator('.jp-InputPrompt');
  await runCellByKeys(page, index);
  await expect(prompt).toHaveText(/\[\*\]/);
  const seen = new Set<string>();
  while (/\[\*\]/.test((await prompt.textContent()) ?? '')) {
    seen.add((await watch.getAttribute('data-seq')) ?? '');
    await page.waitForTimeout(200);
  }
  await waitDone(page, index);
  return seen;
}

async function notOurLabextension(page: Page): Promise<void> {
  const config = JSON.parse((await page.locator('#jupyter-config-data').textContent()) ?? '{}');
  const names = (config.federated_extensions ?? []).map((e: { name: string }) => e.name);
  expect(names).toContain('anywidget');
  expect(names).not.toContain('jupyterlab-gpumem');
}

async function shoot(locator: Locator, name: string, testInfo: { outputPath: (n: string) => string }) {
  // GPUMEM_DOCS_SCREENSHOTS=1 writes the README's pictures; otherwise they stay with the test's results.
  const target = process.env.GPUMEM_DOCS_SCREENSHOTS ? path.join(DOCS_DIR, name) : testInfo.outputPath(name);
  fs.mkdirSync(path.dirname(target), { recursive: true });
  await locator.screenshot({ path: target });
}

test('JupyterLab without our labextension: %gpumem watch stays live through a busy cell', async ({
  page,
  request
}, testInfo) => {
  const name = `watch-lab-${Date.now()}.ipynb`;
  expect(await putNotebook(request, BASE, name, [SETUP, '%gpumem watch', BUSY, '%gpumem watch stop'])).toBe(
    true
  );
  await page.goto(`${BASE}/lab/tree/${name}?reset`); // no notebook of an earlier run restored beside it
  await expect(page.locator('.jp-Notebook .jp-Cell')).toHaveCount(4, { timeout: 60000 });
  await notOurLabextension(page);
  await expect(page.locator('.jp-GpuMem-statusItem')).toHaveCount(0);

  await runCellByKeys(page, 0);
  await waitDone(page, 0);
  await runCellByKeys(page, 1);
  const watch = page.locator('.jp-GpuMem-watch');
  await expect(watch).toHaveAttribute('data-state', 'live', { timeout: 60000 });
  await expect(watch.locator('.jp-GpuMem-watchTitle')).toContainText('cuda:0 · NVIDIA A100-SXM4-80GB');
  await waitDone(page, 1);

  const seen = await updatesDuringBusyCell(page, watch, 2);
  expect(seen.size).toBeGreaterThanOrEqual(8);
  await expect(watch.locator('.jp-GpuMem-watchNumbers')).toContainText('peak since watch');
  await expect(watch.locator('.jp-GpuMem-watchHost')).toContainText('Host: kernel');
  await shoot(watch, 'watch-light.png', testInfo);

  await page.locator('.lm-MenuBar-item', { hasText: 'Settings' }).click();
  await page.locator('.lm-Menu-item', { hasText: /^Theme$/ }).hover();
  await page.getByRole('menuitem', { name: 'JupyterLab Dark', exact: true }).click();
  await expect(page.locator('body')).toHaveAttribute('data-jp-theme-light', 'false');
  await shoot(watch, 'watch-dark.png', testInfo);
  await page.locator('.lm-MenuBar-item', { hasText: 'Settings' }).click();
  await page.locator('.lm-Menu-item', { hasText: /^Theme$/ }).hover();
  await page.getByRole('menuitem', { name: 'JupyterLab Light', exact: true }).click();

  await runCellByKeys(page, 3);
  await expect(watch).toHaveAttribute('data-state', 'stopped');
  await expect(watch.locator('.jp-GpuMem-watchStatus')).toHaveText(
    'stopped: run %gpumem watch to watch again'
  );
});

test('Notebook 7 without our labextension: the compact watch stays live through a busy cell', async ({
  page,
  request
}) => {
  const name = `watch-nb7-${Date.now()}.ipynb`;
  expect(await putNotebook(request, BASE, name, [SETUP, '%gpumem watch --compact', BUSY])).toBe(true);
  await page.goto(`${BASE}/notebooks/${name}`);
  await expect(page.locator('.jp-Notebook .jp-Cell')).toHaveCount(3, { timeout: 60000 });
  await notOurLabextension(page);

  await runCellByKeys(page, 0);
  await waitDone(page, 0);
  await runCellByKeys(page, 1);
  const watch = page.locator('.jp-GpuMem-watch');
  await expect(watch).toHaveClass(/jp-GpuMem-watch-compact/, { timeout: 60000 });
  await expect(watch).toHaveAttribute('data-state', 'live');
  await waitDone(page, 1);

  const seen = await updatesDuringBusyCell(page, watch, 2);
  expect(seen.size).toBeGreaterThanOrEqual(8);
});
