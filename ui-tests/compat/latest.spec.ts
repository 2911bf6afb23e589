/**
 * The prebuilt extension (built against JupyterLab 4.4.10, our minimum) in the newest JupyterLab 4.
 * Plain Playwright, not Galata: Galata's fixtures are tied to one JupyterLab version. The server is started
 * by scripts/test.sh from a separate environment holding that JupyterLab and the wheel a user would install.
 */
import { expect, test } from '@playwright/test';
import { putNotebook, runCellByKeys } from '../tests/notebooks';

const BASE = process.env.GPUMEM_COMPAT_URL ?? 'http://localhost:8890';

test('panel goes live, shows the no-GPU state and keeps updating in the newest JupyterLab', async ({
  page,
  request
}) => {
  const stamp = Date.now();
  const name = `compat-${stamp}.ipynb`;
  const stop = `compat-${stamp}.stop`;
  // The cell stays busy until the test writes `stop` beside the notebook (a fixed sleep could end inside the
  // observation window on a loaded machine); the 300 s bound only guards a lost test.
  const busy = [
    'import pathlib, time',
    'deadline = time.monotonic() + 300',
    `while not pathlib.Path(${JSON.stringify(stop)}).exists() and time.monotonic() < deadline:`,
    '    time.sleep(0.1)',
    'print("stopped")'
  ].join('\n');
  expect(await putNotebook(request, BASE, name, [busy])).toBeTruthy();

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
  await runCellByKeys(page, 0); // presses again if a keypress went nowhere
  const prompt = page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-InputPrompt');
  await expect(prompt).toContainText('*', { timeout: 15000 }); // the cell is running
  const before = await seq();
  await expect.poll(seq, { timeout: 60000 }).toBeGreaterThanOrEqual(before + 2);
  await expect(prompt).toContainText('*'); // still running: those samples arrived mid-cell

  const put = await request.put(`${BASE}/api/contents/${stop}`, {
    data: { type: 'file', format: 'text', content: '' }
  });
  expect(put.ok()).toBe(true);
  await expect(prompt).toHaveText(/\[\d+\]/, { timeout: 60000 });
});
