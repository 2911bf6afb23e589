/**
 * The prebuilt extension (built against JupyterLab 4.4.10, our minimum) in the newest JupyterLab 4.
 * Plain Playwright, not Galata: Galata's fixtures are tied to one JupyterLab version. The server is started
 * by scripts/test.sh from a separate environment holding that JupyterLab and the wheel a user would install.
 */
import { expect, test } from '@playwright/test';
import { putNotebook } from '../tests/notebooks';

const BASE = process.env.GPUMEM_COMPAT_URL ?? 'http://localhost:8890';

test('panel goes live, shows the no-GPU state and keeps updating in the newest JupyterLab', async ({
  page,
  request
}) => {
  const name = `compat-${Date.now()}.ipynb`;
  expect(await putNotebook(request, BASE, name, ['import time\ntime.sleep(8)'])).toBeTruthy();

  await page.goto(`${BASE}/lab/tree/${name}?reset`); // a fresh workspace: only this notebook open
  // No window.jupyterapp outside Galata: open the panel the way a user does, from the status-bar item.
  const item = page.locator('.jp-GpuMem-statusItem');
  await expect(item).toBeVisible({ timeout: 60000 });
  await item.click();
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible({ timeout: 60000 });
  await expect(panel.locator('.jp-GpuMem-nogpu')).toContainText('No NVIDIA GPU visible to this kernel');
  await expect(panel.locator('.jp-GpuMem-host')).toContainText('Host memory');

  const seq = async () => Number(await panel.locator('.jp-GpuMem-updated').getAttribute('data-seq'));
  await page.locator('.jp-Notebook').click();
  await page.keyboard.press('Shift+Enter');
  const prompt = page.locator('.jp-InputArea-prompt').first();
  await expect(prompt).toContainText('*', { timeout: 15000 }); // the cell is running
  const before = await seq();
  await page.waitForTimeout(4000);
  expect(await seq()).toBeGreaterThanOrEqual(before + 2);
  await expect(prompt).toContainText('*'); // still running: those samples arrived mid-cell
});
