/**
 * The GPU Memory panel against a real JupyterLab, a real ipykernel and Debian's Chromium.
 * This machine has no NVIDIA GPU, so the panel must show the no-GPU state while the host part,
 * the status-bar item and the live updates keep working.
 */
import { expect, galata, test } from '@jupyterlab/galata';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { Page } from '@playwright/test';
import { openNew, openPanel as openLivePanel } from './notebooks';

async function openPanel(page: Page): Promise<void> {
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  await expect(page.locator('#jp-GpuMem-panel')).toBeVisible();
}

async function currentSeq(page: Page): Promise<number> {
  const seq = await page.locator('#jp-GpuMem-panel .jp-GpuMem-updated').getAttribute('data-seq');
  return Number(seq);
}

test.describe('GPU Memory panel', () => {
  test('shows the no-GPU state, host memory and the status-bar item', async ({ page, tmpPath }) => {
    // A notebook written with the python3 kernelspec: galata's createNew accepts the kernel dialog's first
    // choice, which can be the server's 256 MiB memory-cgroup kernel (oomkiller.spec.ts's), seen once here.
    await openNew(page, `${tmpPath}/nogpu.ipynb`);
    await openPanel(page);
    const panel = page.locator('#jp-GpuMem-panel');
    // The kernel starts after the panel opens: on a loaded machine that takes longer than expect's default.
    await expect(panel.locator('.jp-GpuMem-nogpu')).toContainText('No NVIDIA GPU visible to this kernel', {
      timeout: 60000
    });
    await expect(panel.locator('.jp-GpuMem-host')).toContainText('Host memory');
    await expect(page.locator('.jp-GpuMem-statusItem')).toBeVisible();
    await expect(panel.locator('.jp-GpuMem-updated')).toHaveAttribute('data-seq', /\d+/);
  });

  test('keeps updating while a cell is busy', async ({ page, tmpPath }, testInfo) => {
    // The cell stays busy until the test says stop (a file beside the notebook), however slow the machine:
    // a fixed sleep could end inside the observation window. The 300 s bound only guards a lost test. The
    // notebook is written, not typed: the editor's auto-indent would garble a typed loop.
    await openNew(page, `${tmpPath}/busy.ipynb`, [
      [
        'import pathlib, time',
        'print("started", flush=True)',
        'deadline = time.monotonic() + 300',
        'while not pathlib.Path("busy.stop").exists() and time.monotonic() < deadline:',
        '    time.sleep(0.1)',
        'print("stopped")'
      ].join('\n')
    ]);
    await openPanel(page);
    const panel = page.locator('#jp-GpuMem-panel');
    await expect(panel.locator('.jp-GpuMem-updated')).toHaveAttribute('data-seq', /\d+/);

    // Start the cell and go on while it runs. The command is started in the page and not awaited there: it
    // resolves when the cell ends, which this test brings about, so no promise of ours outlives the test
    // (galata's runCell would wait for the cell and fail at teardown under load). No click either: with the
    // panel open, the notebook toolbar can overlap the first cell and intercept a click on a loaded machine.
    await page.evaluate(() => {
      const current = window.jupyterapp.shell.currentWidget as unknown as {
        content: { activeCellIndex: number };
      };
      current.content.activeCellIndex = 0;
      void window.jupyterapp.commands.execute('notebook:run-cell');
    });
    // The cell runs once its first line has printed. Not the status bar's "Busy": it stayed at "Idle" for 20 s
    // once on a loaded machine while the cell ran (the kernel log shows its execute_request running until the
    // kernel was shut down); an IOPub status of another request, e.g. one on the control channel, can do that.
    const prompt = page.locator('.jp-Notebook .jp-InputPrompt').first();
    const output = page.locator('.jp-Notebook .jp-Cell').first().locator('.jp-OutputArea');
    await expect(prompt).toContainText('[*]', { timeout: 30000 });
    await expect(output).toContainText('started', { timeout: 60000 });

    // Three samples more while the cell runs (waited for, not slept for: a loaded machine samples late), and
    // the cell still running afterwards, so every one of them arrived mid-cell (it ends only when told).
    const start = await currentSeq(page);
    await expect
      .poll(() => currentSeq(page), { message: `data-seq from ${start} while busy`, timeout: 60000 })
      .toBeGreaterThanOrEqual(start + 3);
    await expect(prompt).toContainText('[*]');
    await expect(output).not.toContainText('stopped');

    await panel.screenshot({
      path: testInfo.outputPath('panel-busy.png'),
      mask: [panel.locator('.jp-GpuMem-updated'), panel.locator('.jp-GpuMem-host')]
    });
    await page.contents.uploadContent('', 'text', `${tmpPath}/busy.stop`);
    await expect(output).toContainText('stopped', { timeout: 30000 });
  });
  test('names a cell whose re-runs keep growing memory, with the holder and the fix', async ({
    page,
    tmpPath
  }) => {
    // CPU tensors stand in for CUDA ones through the holders' test switch, as in tests/growth/test_growth_kernel.py:
    // each run keeps a loss with its autograd graph (a 1024 x 1024 activation, 4 MiB).
    const setup = [
      'import torch, gpumem_kernel.heldby.collect as _collect, gpumem_kernel.heldby.hook as _hook',
      "_on_cpu = ((lambda tensor: tensor.device.type == 'cpu'), 0)",
      '_collect.cuda_in_use = _hook.cuda_in_use = lambda: _on_cpu',
      'model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))',
      'x = torch.randn(1024, 256)',
      'losses = []'
    ].join('\n');
    await openNew(page, `${tmpPath}/growth.ipynb`, [setup, 'losses.append(model(x).sum())']);
    await openLivePanel(page);
    // Run by command, not by clicking: with the panel open, the toolbar can overlap a cell and take the click.
    for (const index of [0, 1, 1, 1, 1]) {
      await page.evaluate(async at => {
        (window.jupyterapp.shell.currentWidget as NotebookPanel).content.activeCellIndex = at;
        await window.jupyterapp.commands.execute('notebook:run-cell');
      }, index);
    }
    const notice = page.locator('#jp-GpuMem-panel .jp-GpuMem-growth');
    await expect(notice.locator('h3')).toContainText(
      /leaves \+4(\.\d+)? MiB allocated on cpu after each run \([34] runs\)/
    );
    await expect(notice).toContainText('losses +1 tensor');
    await expect(notice.locator('.jp-GpuMem-growthFix')).toContainText('loss.item()');
    // All of the cell's outputs: the note need not be the last (a stream can come after it).
    const output = page.locator('.jp-Notebook .jp-Cell').nth(1).locator('.jp-OutputArea');
    await expect(output).toContainText('`losses` +1 tensor');
  });
});

void galata;
