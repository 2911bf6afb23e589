/**
 * A kernel ended by the out-of-memory killer, for real, as a user sees it: the notebook's kernel is the
 * kernelspec `gpumem-limited-256m` that jupyter_server_test_config.py registers, whose kernel joins a memory
 * cgroup limited to 256 MiB (tests/server/cgroup_kernel.py); a cell allocates 1 GiB, the kernel's OOM killer
 * ends the kernel, the server restarts it, the server extension judges the death (POST /gpumem/kernels/<id>/exit)
 * and the browser shows the host checklist in the GPU Memory panel and a notification.
 *
 * Skipped where the server has no such kernelspec (this machine lets no one create a memory cgroup, or a server
 * started without that config is reused).
 */
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { notebookJson, resultOf } from './notebooks';

const LIMITED_KERNEL = 'gpumem-limited-256m';

// The kernel's death and the server's restart are real: keep the kernels API unmocked.
test.use({ kernels: null });

async function command(page: IJupyterLabPageFixture, id: string): Promise<void> {
  await page.evaluate(async commandId => {
    await window.jupyterapp.commands.execute(commandId);
  }, id);
}

test('a cell over the memory cgroup limit: the OOM killer is named, with the host checklist and a notification', async ({
  page,
  request,
  tmpPath
}, testInfo) => {
  const specs = await request.get('/api/kernelspecs');
  expect(specs.ok()).toBe(true);
  const { default: defaultKernel, kernelspecs } = (await specs.json()) as {
    default: string;
    kernelspecs: Record<string, unknown>;
  };
  expect(defaultKernel).toBe('python3'); // the limited kernel is never the default
  test.skip(
    !(LIMITED_KERNEL in kernelspecs),
    `the server has no ${LIMITED_KERNEL} kernelspec: jupyter_server_test_config.py could create no memory cgroup ` +
      'on this machine (or a server started without that config was reused)'
  );

  const notebook = notebookJson(['import os\nos.getpid()', 'x = bytearray(1024 * 1024**2)']);
  notebook.metadata = {
    kernelspec: { name: LIMITED_KERNEL, display_name: 'Python 3 (256 MiB memory cgroup)', language: 'python' }
  };
  const file = `${tmpPath}/oomkiller.ipynb`;
  await page.contents.uploadContent(JSON.stringify(notebook), 'text', file);
  await page.notebook.openByPath(file);
  await page.notebook.activate('oomkiller.ipynb');
  await expect
    .poll(
      () =>
        page.evaluate(() => {
          const widget = window.jupyterapp.shell.currentWidget as unknown as {
            sessionContext?: { session?: { kernel?: { name: string } | null } | null };
          } | null;
          return widget?.sessionContext?.session?.kernel?.name ?? null;
        }),
      { timeout: 60000 }
    )
    .toBe(LIMITED_KERNEL);

  // The panel, live on the limited kernel (its hello arrived: the browser knows the process that will die).
  await command(page, 'gpumem:open-panel');
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible({ timeout: 60000 });

  // Run both cells; the command's promise ends with a cell that never ends normally, so the page does not wait.
  await page.evaluate(() => {
    window.jupyterapp.commands.execute('notebook:run-all-cells').catch(() => undefined);
  });
  const pidOutput = resultOf(page, 0); // the PID only, never a warning written beside it
  await expect(pidOutput).toHaveText(/^\s*\d+\s*$/, { timeout: 60000 });
  const pid = Number((await pidOutput.innerText()).trim());
  expect(pid).toBeGreaterThan(1);

  // JupyterLab's own dialog: the kernel died and is being restarted by the server.
  const dialog = page.locator('.jp-Dialog');
  await expect(dialog).toContainText('appears to have died', { timeout: 60000 });
  await dialog.getByRole('button', { name: 'Ok' }).click();
  await expect(dialog).toHaveCount(0);

  // The notification names the OOM killer and the notebook.
  const toast = page
    .locator('.Toastify__toast')
    .filter({ hasText: 'The out-of-memory killer ended the kernel of oomkiller.ipynb' });
  await expect(toast).toBeVisible({ timeout: 30000 });
  await expect(toast.getByRole('button', { name: 'Open checklist' })).toBeVisible();

  // The panel: the host checklist card, live (for the restarted kernel), naming the killed process and the limit.
  const card = panel.locator('.jp-GpuMem-oom');
  await expect(card.locator('h3')).toHaveText('Host memory (RAM) out of memory, not the GPU', {
    timeout: 30000
  });
  await expect(card).not.toHaveClass(/jp-mod-history/);
  const checklist = card.locator('.jp-GpuMem-oomChecklist');
  await expect(checklist).toHaveAttribute('data-family', 'host');
  const headline = checklist.locator('.jp-GpuMem-oomHeadline');
  await expect(headline).toContainText(`The out-of-memory killer ended the kernel process ${pid}`);
  await expect(headline).toContainText('256.00 MiB');
  await expect(checklist.locator('.jp-GpuMem-oomStep[data-step-id="host-memory"]')).toContainText(
    'Check host memory and DataLoader workers'
  );
  await page.screenshot({ path: testInfo.outputPath('oomkiller.png') });

  // The restarted kernel runs in the panel again.
  await expect(panel.locator('.jp-GpuMem-root')).toHaveAttribute('data-state', 'live', { timeout: 60000 });
});
