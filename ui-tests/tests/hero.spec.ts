/**
 * The README's first picture: what a user sees in a realistic session. A training notebook (a small ResNet
 * defined in the notebook, AdamW, a few training steps on the CPU, an inline `%gpumem analyze`), the GPU
 * Memory panel open on the right with live figures and its timeline.
 *
 * This machine has no NVIDIA GPU, so the kernel's NVML is the tests' driver test double (tests/fake_nvml.py),
 * installed by a silent execute that leaves no cell behind. Everything else is real: the kernels, the
 * notebook, the analysis, the other notebook's kernel and how it is attributed, and the panel.
 *
 * GPUMEM_UPDATE_DOCS=1 writes docs/hero.png (the README's image); a plain run writes into the test's output.
 */
import * as path from 'path';
import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { openNew } from './notebooks';

const TESTS_DIR = path.resolve(__dirname, '..', '..', 'tests');

test.use({ viewport: { width: 1400, height: 900 }, theme: 'JupyterLab Light' });

const MODEL = [
  'import torch',
  'from torch import nn',
  'import torch.nn.functional as F',
  '',
  'class Block(nn.Module):',
  '    def __init__(self, c_in, c_out, stride=1):',
  '        super().__init__()',
  '        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)',
  '        self.bn1 = nn.BatchNorm2d(c_out)',
  '        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)',
  '        self.bn2 = nn.BatchNorm2d(c_out)',
  '        self.skip = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(',
  '            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))',
  '',
  '    def forward(self, x):',
  '        out = F.relu(self.bn1(self.conv1(x)))',
  '        return F.relu(self.bn2(self.conv2(out)) + self.skip(x))',
  '',
  'class SmallResNet(nn.Module):',
  '    def __init__(self, num_classes=100, width=64):',
  '        super().__init__()',
  '        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False),',
  '                                  nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(3, 2, 1))',
  '        self.layers = nn.Sequential(Block(width, width), Block(width, 2 * width, 2),',
  '                                    Block(2 * width, 4 * width, 2), Block(4 * width, 8 * width, 2))',
  '        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * width, num_classes))',
  '',
  '    def forward(self, x):',
  '        return self.head(self.layers(self.stem(x)))',
  '',
  'model = SmallResNet()',
  'optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)',
  'print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")'
].join('\n');

const TRAIN = [
  'def train_step(images, labels):',
  '    model.train()',
  '    optimizer.zero_grad(set_to_none=True)',
  '    loss = F.cross_entropy(model(images), labels)',
  '    loss.backward()',
  '    optimizer.step()',
  '    return loss.item()',
  '',
  'for step in range(3):',
  '    images, labels = torch.randn(8, 3, 64, 64), torch.randint(0, 100, (8,))',
  '    print(f"step {step}: loss {train_step(images, labels):.3f}")'
].join('\n');

const ANALYZE = '%gpumem analyze model -b 64 --input 3x224x224 --amp bf16 --optimizer adamw';

/** Run `code` silently (no cell, no output, no execution count) in the current notebook's kernel. */
async function silent(
  page: IJupyterLabPageFixture,
  code: string,
  expressions: Record<string, string> = {}
): Promise<Record<string, string>> {
  const reply = await page.evaluate(
    async ([source, userExpressions]) => {
      const panel = window.jupyterapp.shell.currentWidget as NotebookPanel;
      await panel.sessionContext.ready;
      const kernel = panel.sessionContext.session!.kernel!;
      const msg = await kernel.requestExecute({
        code: source,
        silent: true,
        store_history: false,
        user_expressions: userExpressions
      }).done;
      const content = msg.content as {
        status: string;
        evalue?: string;
        user_expressions?: Record<string, { data?: { 'text/plain'?: string } }>;
      };
      const values: Record<string, string> = {};
      for (const [key, value] of Object.entries(content.user_expressions ?? {})) {
        values[key] = value.data?.['text/plain'] ?? '';
      }
      return { status: content.status, evalue: content.evalue ?? '', values };
    },
    [code, expressions] as [string, Record<string, string>]
  );
  expect(reply.status, reply.evalue).toBe('ok');
  return reply.values;
}

test('hero: a training notebook on an A100 with the panel and an inline analysis', async ({
  page,
  tmpPath
}, testInfo) => {
  // Two kernels, three training steps and an analysis on the CPU: 1.3 to 1.7 min on a loaded 2-core machine,
  // too close to the config's 2 min.
  test.setTimeout(300000);
  // Another notebook whose kernel holds part of the GPU.
  await openNew(page, `${tmpPath}/eval.ipynb`, ['import torch\nmetrics = {"top1": 0.0, "top5": 0.0}']);
  await page.notebook.run();
  const otherPid = Number((await silent(page, '', { pid: '__import__("os").getpid()' })).pid);
  expect(otherPid).toBeGreaterThan(0);

  await openNew(page, `${tmpPath}/train_resnet.ipynb`, [MODEL, TRAIN, ANALYZE]);
  await page.evaluate(async () => {
    await window.jupyterapp.commands.execute('gpumem:open-panel');
  });
  const panel = page.locator('#jp-GpuMem-panel');
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible();

  // The driver test double, installed without a cell: this kernel holds 21 GiB, the other notebook's 9 GiB.
  await silent(
    page,
    [
      'import os as _os, sys as _sys',
      `_sys.path.insert(0, ${JSON.stringify(TESTS_DIR)})`,
      'from fake_nvml import FakeGpu as _FakeGpu, GiB as _GiB, install_in_running_kernel as _install',
      '_install([_FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-5b1c2e7a-93d4-4f0e-a8b6-2c71d9e4f310",',
      '                   total=80 * _GiB, used=31 * _GiB, cc=(8, 0), util=(64, 38),',
      `                   processes=[(_os.getpid(), 21 * _GiB), (${otherPid}, 9 * _GiB)])])`,
      '_sys.path.remove(' + JSON.stringify(TESTS_DIR) + ')',
      'del _os, _sys, _FakeGpu, _GiB, _install'
    ].join('\n')
  );

  const device = panel.locator('.jp-GpuMem-device').first();
  await expect(device.locator('.jp-GpuMem-deviceTitle')).toContainText('A100-SXM4-80GB');
  await expect(device.locator('.jp-GpuMem-processes')).toContainText('this kernel');
  await expect(device.locator('.jp-GpuMem-processes')).toContainText('eval.ipynb');

  // Run the notebook: the training steps on the CPU, then the analysis (traced, for the A100 above).
  await page.notebook.runCell(0, true);
  await page.notebook.runCell(1, true);
  await page.notebook.runCell(2, true);
  const analysis = page.locator('.jp-GpuMem-analysis');
  await expect(analysis).toBeVisible({ timeout: 60000 });
  await expect(analysis.locator('.jp-GpuMem-breakdown')).toContainText('Parameters');
  await expect(analysis.locator('.jp-GpuMem-cards')).toContainText('Recommended');
  // The training cell's own outputs (a warning of another cell would shift a page-wide index).
  const notebook = page.locator('.jp-NotebookPanel:visible .jp-Notebook');
  await expect(notebook.locator('.jp-Cell').nth(1).locator('.jp-OutputArea')).toContainText('step 2: loss');

  // The fake survived the run (still sampled, still live) and the panel's timeline has samples.
  await expect(panel.locator('.jp-GpuMem-root[data-state="live"]')).toBeVisible();
  await expect(device.locator('.jp-GpuMem-deviceTitle')).toContainText('A100-SXM4-80GB');
  await expect(panel.locator('svg.jp-GpuMem-sampleChart, .jp-GpuMem-sampleChart svg').first()).toBeVisible();
  await expect(page.locator('.jp-GpuMem-statusItem')).toContainText('/ 80.0 GiB');

  // No cell shows the test double or a path of this machine.
  await expect(notebook.locator('.jp-Cell')).toHaveCount(3);
  const text = await notebook.innerText();
  expect(text).not.toContain('fake_nvml');
  expect(text).not.toContain(TESTS_DIR);
  expect(text).not.toMatch(/(^|[\s'"(])\/(work|home|tmp|root|usr)\//m);

  // The picture: no file browser, no launcher; the training cell at the top, the analysis below it.
  await page.sidebar.close('left');
  await page.locator('.lm-TabBar-tab:has-text("Launcher") .lm-TabBar-tabCloseIcon').click();
  await page.notebook.activate('train_resnet.ipynb');
  await notebook
    .locator('.jp-Cell')
    .nth(1)
    .evaluate(el => el.scrollIntoView({ block: 'start' }));
  await page.mouse.move(0, 0);
  await expect(analysis.locator('.jp-GpuMem-cards')).toBeInViewport();
  const shot = process.env.GPUMEM_UPDATE_DOCS
    ? path.resolve(__dirname, '..', '..', 'docs', 'hero.png')
    : testInfo.outputPath('hero.png');
  await page.screenshot({ path: shot });
});
