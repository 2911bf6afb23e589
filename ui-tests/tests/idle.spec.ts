/**
 * Idle GPU holders in a real browser. The list comes from the server extension's /gpumem/kernels: the request
 * goes to the real endpoint (with the page's credentials) and this machine has no NVIDIA driver, so the test
 * adds to the real answer what NVML would say for the other notebook's kernel (3 GiB, idle 45 min). The
 * kernels, their sessions and "Shut down kernel" are real.
 */
import { expect, test } from '@jupyterlab/galata';
import { openNew } from './notebooks';

test.use({ viewport: { width: 1400, height: 900 } });

const GiB = 2 ** 30;

test('an idle kernel holding GPU memory is listed and can be shut down', async ({ page, tmpPath }) => {
  await openNew(page, `${tmpPath}/other.ipynb`);
  await page.notebook.setCell(0, 'code', 'x = 1');
  await page.notebook.run();
  const otherKernel = await page.evaluate(async (notebook: string) => {
    const sessions = window.jupyterapp.serviceManager.sessions;
    await sessions.refreshRunning();
    return [...sessions.running()].find(s => s.path === notebook)?.kernel?.id ?? null;
  }, `${tmpPath}/other.ipynb`);
  expect(otherKernel).not.toBeNull();

  const listed: boolean[] = [];
  await page.route(/\/gpumem\/kernels/, async route => {
    const response = await route.fetch();
    expect(response.status()).toBe(200); // the server extension is enabled and answers the page
    const body = await response.json();
    const kernels = body.kernels as Array<{ id: string; gpu_bytes: number; idle_seconds: number }>;
    const other = kernels.find(k => k.id === otherKernel);
    listed.push(other !== undefined);
    if (other !== undefined) {
      other.gpu_bytes = 3 * GiB;
      other.idle_seconds = 45 * 60;
    }
    await route.fulfill({ response, json: body });
  });

  await openNew(page, `${tmpPath}/gpu.ipynb`);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  const panel = page.locator('#jp-GpuMem-panel');
  const holder = panel.locator(`.jp-GpuMem-idleKernel[data-kernel-id="${otherKernel}"]`);
  await expect(holder).toBeVisible();
  expect(listed).toContain(true); // the real server listed the kernel
  await expect(panel.locator('.jp-GpuMem-idleTitle')).toHaveText(
    '1 kernel holds GPU memory, idle for more than 30 min'
  );
  await expect(holder).toContainText(`notebook: ${tmpPath}/other.ipynb`);
  await expect(holder).toContainText('3.00 GiB on the GPU · idle 45 min');

  await holder.locator('.jp-GpuMem-shutdown').click();
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('Shut down kernel?');
  await dialog.getByRole('button', { name: 'Shut Down' }).click();

  await expect(holder).toHaveCount(0); // read again at once: the real server no longer lists it
  // The server's list of kernels, read until it has caught up (a loaded machine ends a kernel slowly).
  await expect
    .poll(() =>
      page.evaluate(async (id: string | null) => {
        const kernels = window.jupyterapp.serviceManager.kernels;
        await kernels.refreshRunning();
        return [...kernels.running()].some(k => k.id === id);
      }, otherKernel)
    )
    .toBe(false);
});
