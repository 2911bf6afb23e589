/**
 * Device rendering in a real browser. This machine has no NVIDIA driver, so the kernel's NVML is the
 * tests' test double (tests/fake_nvml.py); everything else is real: the other notebook's kernel is a
 * real process whose command line names its kernel id, the panel maps it to the notebook through the
 * sessions API, and the status bar reads the same samples.
 */
import * as path from 'path';
import { expect, test } from '@jupyterlab/galata';
import { openNew } from './notebooks';

const TESTS_DIR = path.resolve(__dirname, '..', '..', 'tests');

test.use({ viewport: { width: 1400, height: 900 } });

test('devices, holders, threshold warning and escaping', async ({ page, tmpPath }, testInfo) => {
  // A second notebook whose kernel will "hold" GPU memory.
  await openNew(page, `${tmpPath}/other.ipynb`);
  await page.notebook.setCell(0, 'code', 'import os\nopen("other.pid", "w").write(str(os.getpid()))');
  await page.notebook.run();

  await openNew(page, `${tmpPath}/gpu.ipynb`);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible();

  const code = [
    'import os, sys',
    `sys.path.insert(0, ${JSON.stringify(TESTS_DIR)})`,
    'from fake_nvml import FakeGpu, GiB, install_in_running_kernel',
    'other = int(open("other.pid").read())',
    'install_in_running_kernel([',
    '    FakeGpu(name="NVIDIA GeForce RTX 4080 SUPER", uuid="GPU-11111111-2222-3333-4444-555555555555",',
    '            total=16 * GiB, used=15 * GiB,',
    '            processes=[(os.getpid(), 3 * GiB), (other, 10 * GiB), (4194301, 1 * GiB)]),',
    '    FakeGpu(name=\'<img src=x onerror="window.__gpumemXss=1">\', uuid="GPU-99999999-2222-3333-4444-555555555555",',
    '            total=24 * GiB, used=1 * GiB),',
    '])'
  ].join('\n');
  await page.notebook.setCell(0, 'code', code);
  await page.notebook.run();

  const devices = panel.locator('.jp-GpuMem-device');
  await expect(devices).toHaveCount(2);
  const first = devices.nth(0);
  await expect(first.locator('.jp-GpuMem-deviceTitle')).toContainText('cuda:0');
  await expect(first.locator('.jp-GpuMem-deviceTitle')).toContainText('RTX 4080 SUPER');
  await expect(first.locator('.jp-GpuMem-warning')).toBeVisible();
  await expect(first.locator('.jp-GpuMem-bar .jp-GpuMem-seg').first()).toBeVisible();

  const holders = first.locator('.jp-GpuMem-processes');
  await expect(holders).toContainText('this kernel');
  await expect(holders).toContainText(`notebook: ${tmpPath}/other.ipynb`);
  await expect(holders).toContainText('external');

  // A hostile device name is shown as text, never parsed as HTML.
  await expect(devices.nth(1).locator('.jp-GpuMem-deviceTitle')).toContainText('<img src=x');
  expect(await panel.locator('img[src="x"]').count()).toBe(0);
  expect(await page.evaluate(() => (window as { __gpumemXss?: number }).__gpumemXss)).toBeUndefined();

  const item = page.locator('.jp-GpuMem-statusItem');
  await expect(item).toContainText('15.0 / 16.0 GiB');

  // The README's picture is hero.spec.ts's; this one stays in the test's output.
  await page.screenshot({ path: testInfo.outputPath('panel.png') });
});
